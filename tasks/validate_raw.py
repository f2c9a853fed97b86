"""validate_raw: the raw-batch contract (the dataset's RAW_CONTRACT: its plug-in folder's raw.json) as a gate.

A landing file cut short (tasks/contracts/truncation.py) is reported as truncated, naming the file and
where it stops: as the cause of an unreadable file (not the parser's error), and, for a CSV cut mid-row that
still parsed, as the first failure before the contract's (whose nulls and types the partial row explains).
"""

from __future__ import annotations

from pathlib import Path

from tasks.contracts.suite import (
    ContractResult,
    Failure,
    load_suite_spec,
    suite_hash,
    validate_frame,
    write_gate_report,
)
from tasks.contracts.truncation import find_truncation
from tasks.core.context import StepContext
from tasks.core.log import log
from tasks.core.records import ContractRecord, IngestRecord
from tasks.runner import step

CUT_SHORT = "a file cut short (an interrupted copy or upload) must not reach labeling: its last rows are cut or lost"


@step
def validate_raw(ctx: StepContext, ingest: IngestRecord) -> ContractRecord:
    import pandas as pd

    suite = ctx.dataset.RAW_CONTRACT
    cut = find_truncation(Path(ingest.source)) if ingest.source else None
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
                    guards=CUT_SHORT
                    if cut
                    else "a file the parser cannot read (bad encoding, truncated, empty) must not reach labeling",
                    observed=f"{cut} (the parser said: {ingest.error})" if cut else ingest.error,
                    expected={"format": "UTF-8 CSV with a header row, or parquet"},
                )
            ],
        )
    else:
        result = validate_frame(pd.read_parquet(ingest.staged), suite)
        if cut:
            complete = Failure(
                expectation="file_is_complete",
                column=None,
                guards=CUT_SHORT,
                observed=cut,
                expected={"ends": "with a whole last row"},
            )
            result.failures.insert(0, complete)  # the first cause: the contract's failures follow from it
            result.evaluated += 1
            result.success = False
    log(result.summary())
    return ContractRecord(**write_gate_report(ctx.run_dir, result))


if __name__ == "__main__":
    raise SystemExit(validate_raw.main())
