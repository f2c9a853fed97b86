"""validate_raw: the raw-batch contract (the dataset's RAW_CONTRACT, e.g. data_contracts/raw_batch.json) as a gate."""

from __future__ import annotations

from tasks.contracts.suite import (
    ContractResult,
    Failure,
    load_suite_spec,
    suite_hash,
    validate_frame,
    write_gate_report,
)
from tasks.core.log import log
from tasks.core.records import ContractRecord, IngestRecord
from tasks.core.steps import StepContext, step


@step
def validate_raw(ctx: StepContext, ingest: IngestRecord) -> ContractRecord:
    import pandas as pd

    from tasks.datasets import load_dataset

    suite = load_dataset(ctx.params.dataset.module).RAW_CONTRACT
    if ingest.status == "unreadable":
        result = ContractResult(
            suite=load_suite_spec(suite)["name"],
            suite_hash=suite_hash(suite),
            success=False,
            evaluated=1,
            failures=[
                Failure(
                    expectation="file_is_readable",
                    column=None,
                    guards="a file the parser cannot read (bad encoding, truncated, empty) must not reach labeling",
                    observed=ingest.error,
                    expected={"format": "UTF-8 CSV with a header row, or parquet"},
                )
            ],
        )
    else:
        result = validate_frame(pd.read_parquet(ingest.staged), suite)
    log(result.summary())
    return ContractRecord(**write_gate_report(ctx.run_dir, result))


if __name__ == "__main__":
    raise SystemExit(validate_raw.main())
