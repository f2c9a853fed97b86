"""ingest: take the oldest waiting landing batch (or a named one) and stage it as parquet.

A file that cannot be parsed, or parsed but not staged (a column pyarrow cannot type),
is not an error here: the result says `unreadable` with the message, and validate_raw
sends it to quarantine.

A batch taken by MAX_BATCH_ATTEMPTS runs that did not consume it (a step crashed on it) is
quarantined and the next waiting batch is taken (tasks/landing/batches.py);
`python -m tasks.quarantine --readmit BATCH` clears its count.
"""

from __future__ import annotations

from typing import Any

from tasks.core.context import StepContext
from tasks.core.log import log
from tasks.core.records import IngestRecord
from tasks.landing.batches import (
    LANDING_NAME,
    MAX_BATCH_ATTEMPTS,
    note_failure,
    note_run,
    pending_batches,
    stage,
)
from tasks.landing.quarantine import quarantine_crashing_batch
from tasks.runner import step


@step(help={"batch": "landing file name or batch id (default: the oldest waiting)"})
def ingest(ctx: StepContext, *, batch: str | None = None) -> IngestRecord:
    layout = ctx.settings.layout.ensure()
    if ctx.settings.demo_feed:
        from tasks.datasets.demo_feed import DemoFeed

        feed = DemoFeed(layout, ctx.params.demo, ctx.dataset)
        feed.ensure_gold()
        if not pending_batches(layout) and batch is None:
            feed.deliver_next()

    waiting = pending_batches(layout)
    if batch is not None:
        if not LANDING_NAME.match(batch) and not LANDING_NAME.match(batch + ".csv"):
            raise ValueError(f"batch {batch!r} is not a landing file name (letters, digits, . _ -; .csv or .parquet)")
        chosen = [p for p in waiting if p.name == batch or p.stem == batch]
        if not chosen:
            raise FileNotFoundError(
                f"batch {batch!r} is not waiting in {layout.landing} (waiting: {[p.name for p in waiting] or 'none'})"
            )
        source = chosen[0]
        earlier = note_run(layout, source, ctx.run_id)
        if len(earlier) >= MAX_BATCH_ATTEMPTS:
            log(
                f"{source.name} was taken by {len(earlier)} earlier runs without being consumed; "
                f"named explicitly, so it is tried again"
            )
    else:
        source = None
        for candidate in waiting:
            earlier = note_run(layout, candidate, ctx.run_id)
            if len(earlier) < MAX_BATCH_ATTEMPTS:
                source = candidate
                break
            quarantine_crashing_batch(layout, candidate, ctx.run_id)
        if source is None:
            log("no landing batch waiting: nothing to do tonight")
            return IngestRecord(status="no_batch")

    found: dict[str, Any] = {"batch_id": source.stem, "source": str(source), "bytes": source.stat().st_size}
    try:
        return stage(ctx.run_dir / "raw.parquet", source, found)
    except Exception as exc:
        note_failure(layout, source, ctx.run_id, exc)
        raise


if __name__ == "__main__":
    raise SystemExit(ingest.main())
