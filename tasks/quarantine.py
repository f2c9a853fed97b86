"""quarantine: move a rejected landing batch, with the report that rejected it, aside.

Nothing is deleted: quarantine/<batch_id>/ holds the original file and
report.json / report.txt naming every failed expectation. The current data
version is untouched. `python -m tasks.quarantine` lists the quarantined batches, one line
each: its id, the gate that stopped it and its first cause. Re-admit with
`python -m tasks.quarantine --readmit BATCH`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tasks.core.context import StepContext
from tasks.core.records import ContractRecord, IngestRecord, QuarantineRecord, failed_gate
from tasks.core.settings import Settings
from tasks.landing.quarantine import listing_line, quarantine_batch, readmit_any
from tasks.runner import step


@step
def quarantine(
    ctx: StepContext,
    ingest: IngestRecord,
    validate_raw: ContractRecord | None = None,
    validate_labeled: ContractRecord | None = None,
) -> QuarantineRecord:
    """The batch goes aside with the report of the contract that failed it."""
    gate, _ = failed_gate(validate_raw=validate_raw, validate_labeled=validate_labeled)
    gate_result: ContractRecord = validate_labeled if gate == "validate_labeled" else validate_raw  # type: ignore[assignment]
    dest = quarantine_batch(
        ctx.settings.layout.ensure(), ctx.run_id, ingest.batch_id, Path(ingest.source), gate, gate_result
    )
    return QuarantineRecord(batch_id=ingest.batch_id, gate=gate, path=str(dest), reason=gate_result.summary)


def main(argv: list[str] | None = None) -> int:
    """With --run-id: the step (the DAG's quarantine task); without: list (one line a batch: its id, the
    gate that stopped it and its first cause), or re-admit a batch."""
    argv = sys.argv[1:] if argv is None else argv
    if any(a == "--run-id" or a.startswith("--run-id=") for a in argv):
        return quarantine.main(argv)
    parser = argparse.ArgumentParser(
        description="List quarantined batches and the batches held out of the data (a rejected model's, "
        "or left out by a rollback), or re-admit one. (With --run-id ID: quarantine that run's rejected batch.)"
    )
    parser.add_argument(
        "--readmit",
        metavar="BATCH_ID",
        help="a quarantined batch: back to landing/ for the next run; a batch a rollback left out: into the "
        "next snapshot with its stored labels",
    )
    args = parser.parse_args(argv)
    settings = Settings.from_env()
    if args.readmit is not None:
        try:
            print(readmit_any(settings, args.readmit))
        except (ValueError, FileNotFoundError, FileExistsError) as exc:
            parser.error(str(exc))  # exit 2, one line
        return 0
    for report in sorted(settings.layout.quarantine.glob("*/report.json")):
        print(listing_line(json.loads(report.read_text())))
    from tasks.registry import Registry
    from tasks.registry.held import listing

    for line in listing(Registry(settings).state()):
        print(f"held\t{line}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
