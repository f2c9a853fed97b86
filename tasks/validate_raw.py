"""validate_raw: the raw-batch contract (data_contracts/raw_batch.json) as a gate."""
from __future__ import annotations

from typing import Any

from tasks.contracts.suite import ContractResult, Failure, load_suite_spec, suite_hash, validate_frame, write_gate_report
from tasks.core.settings import Settings
from tasks.core.files import read_json
from tasks.core.log import log
from tasks.core.steps import record_step, step_cli

def validate_raw(run_id: str, settings: Settings, ingest_result: dict[str, Any]) -> dict[str, Any]:
    import pandas as pd

    from tasks.datasets import load_dataset

    SUITE = load_dataset().RAW_CONTRACT
    run_dir = settings.layout.run_dir(run_id)
    if ingest_result.get("status") == "unreadable":
        result = ContractResult(suite=load_suite_spec(SUITE)["name"], suite_hash=suite_hash(SUITE), success=False,
                                evaluated=1, failures=[
            Failure(expectation="file_is_readable", column=None, guards="a file the parser cannot read "
                    "(bad encoding, truncated, empty) must not reach labeling", observed=ingest_result["error"],
                    expected={"format": "UTF-8 CSV with a header row, or parquet"})])
    else:
        result = validate_frame(pd.read_parquet(ingest_result["staged"]), SUITE)
    log(result.summary())
    return record_step(run_dir, "validate_raw", write_gate_report(run_dir, result))


def main(argv: list[str] | None = None) -> int:
    return step_cli(__doc__, lambda p: None,
                    lambda a, s: validate_raw(a.run_id, s, read_json(s.layout.run_dir(a.run_id) / "steps/ingest.json")),
                    argv)


if __name__ == "__main__":
    raise SystemExit(main())
