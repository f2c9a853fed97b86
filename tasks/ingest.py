"""ingest: take the oldest waiting landing batch (or a named one) and stage it as parquet.

A file that cannot be parsed is not an error here: the result says `unreadable`
with the parser's message, and validate_raw sends it to quarantine.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from tasks.core.files import atomic_write_parquet
from tasks.core.log import log
from tasks.core.records import IngestRecord
from tasks.core.settings import StateLayout
from tasks.core.steps import StepContext, step

LANDING_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*\.(csv|parquet)$")


def pending_batches(layout: StateLayout) -> list[Path]:
    """Waiting landing files, oldest name first (batch names sort in delivery order)."""
    if not layout.landing.is_dir():
        return []
    return sorted(p for p in layout.landing.iterdir() if p.is_file() and LANDING_NAME.match(p.name))


def read_landing_file(path: Path) -> "Any":
    import pandas as pd

    if path.suffix == ".parquet":
        return pd.read_parquet(path)
    return pd.read_csv(path, encoding="utf-8", encoding_errors="strict")


@step(help={"batch": "landing file name or batch id (default: the oldest waiting)"})
def ingest(ctx: StepContext, *, batch: str | None = None) -> IngestRecord:
    layout = ctx.settings.layout.ensure()
    if ctx.settings.demo_feed:
        from tasks.datasets import load_dataset
        from tasks.datasets.demo_feed import DemoFeed

        feed = DemoFeed(layout, ctx.params.demo, load_dataset(ctx.params.dataset.module))
        feed.ensure_gold()
        if not pending_batches(layout) and batch is None:
            feed.deliver_next()

    waiting = pending_batches(layout)
    if batch is not None:
        if not LANDING_NAME.match(batch) and not LANDING_NAME.match(batch + ".csv"):
            raise ValueError(f"batch {batch!r} is not a landing file name (letters, digits, . _ -; .csv or .parquet)")
        chosen = [p for p in waiting if p.name == batch or p.stem == batch]
        if not chosen:
            raise FileNotFoundError(f"batch {batch!r} is not waiting in {layout.landing} "
                                    f"(waiting: {[p.name for p in waiting] or 'none'})")
        source = chosen[0]
    elif waiting:
        source = waiting[0]
    else:
        log("no landing batch waiting: nothing to do tonight")
        return IngestRecord(status="no_batch")

    found: dict[str, Any] = {"batch_id": source.stem, "source": str(source), "bytes": source.stat().st_size}
    try:
        df = read_landing_file(source)
    except Exception as exc:  # noqa: BLE001 - any parse failure is a data problem, reported by the gate
        log(f"{source.name} is unreadable: {type(exc).__name__}: {exc}")
        return IngestRecord(**found, status="unreadable", error=f"{type(exc).__name__}: {exc}")
    staged = ctx.run_dir / "raw.parquet"
    atomic_write_parquet(staged, df)
    log(f"staged {source.name}: {len(df)} rows, {len(df.columns)} columns -> {staged}")
    return IngestRecord(**found, status="staged", staged=str(staged), rows=int(len(df)))


if __name__ == "__main__":
    raise SystemExit(ingest.main())
