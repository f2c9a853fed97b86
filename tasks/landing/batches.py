"""The landing folder: waiting batches, their staging as parquet, and the per-batch attempt count.

A batch that keeps crashing a step (not a gate) would stay the oldest waiting file and fail
every night. So each waiting batch counts the runs that took it (landing/.attempts.json, with the
traceback of any ingest crash): a batch taken by MAX_BATCH_ATTEMPTS runs that did not consume it
is quarantined (gate "ingest", report with the runs and tracebacks), and the next waiting batch is
taken. Re-admitting a batch clears its count (tasks/landing/quarantine.py `readmit`).
"""

from __future__ import annotations

import json
import re
import traceback
from pathlib import Path
from typing import Any

from tasks.core.files import atomic_write_json, atomic_write_with
from tasks.core.log import log
from tasks.core.records import IngestRecord
from tasks.core.settings import StateLayout

LANDING_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*\.(csv|parquet)$")
# Runs that may take a batch without consuming it (archived or quarantined) before the next run
# quarantines it. A module constant: a guard against a crash loop, not a tuning knob.
MAX_BATCH_ATTEMPTS = 3
ATTEMPTS_FILE = ".attempts.json"  # in landing/; a dot name is never a batch (LANDING_NAME)
_KEEP_FAILURES = 5  # tracebacks kept per batch


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


# ---- the per-batch attempt counter -------------------------------------------------------


def _attempts_path(layout: StateLayout) -> Path:
    return layout.landing / ATTEMPTS_FILE


def load_attempts(layout: StateLayout) -> dict[str, dict[str, list]]:
    """{landing file name: {"runs": [run ids that took it], "failures": [{run_id, error, traceback}]}}."""
    path = _attempts_path(layout)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        log(f"ignoring unreadable {path}: {type(exc).__name__}: {exc}")
        return {}
    return data if isinstance(data, dict) else {}


def _save_attempts(layout: StateLayout, attempts: dict) -> None:
    atomic_write_json(_attempts_path(layout), attempts)


def forget_batch(layout: StateLayout, name: str) -> None:
    """Drop a landing file's count (a re-admitted batch starts afresh)."""
    attempts = load_attempts(layout)
    if attempts.pop(name, None) is not None:
        _save_attempts(layout, attempts)


def note_run(layout: StateLayout, source: Path, run_id: str) -> list[str]:
    """Record that `run_id` took `source`; returns the earlier runs that took it (this one excluded).
    Entries of files no longer waiting (consumed) are dropped."""
    waiting = {p.name for p in pending_batches(layout)}
    attempts = {k: v for k, v in load_attempts(layout).items() if k in waiting}
    entry = attempts.setdefault(source.name, {"runs": [], "failures": []})
    earlier = [r for r in entry.get("runs", []) if r != run_id]
    entry["runs"] = [*earlier, run_id]
    _save_attempts(layout, attempts)
    return earlier


def note_failure(layout: StateLayout, source: Path, run_id: str, exc: BaseException) -> None:
    attempts = load_attempts(layout)
    entry = attempts.setdefault(source.name, {"runs": [run_id], "failures": []})
    entry["failures"] = [
        *entry.get("failures", []),
        {
            "run_id": run_id,
            "error": f"{type(exc).__name__}: {exc}",
            "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
        },
    ][-_KEEP_FAILURES:]
    _save_attempts(layout, attempts)


def stage(staged: Path, source: Path, found: dict[str, Any]) -> IngestRecord:
    try:
        import pyarrow as pa

        df = read_landing_file(source)
        # The conversion to Arrow is where a parsed file can still fail (a column of mixed objects:
        # ArrowInvalid / ArrowTypeError); it belongs to the data, like a parse error.
        table = pa.Table.from_pandas(df, preserve_index=False)
    except Exception as exc:  # noqa: BLE001 - any parse or typing failure is a data problem, reported by the gate
        log(f"{source.name} is unreadable: {type(exc).__name__}: {exc}")
        return IngestRecord(**found, status="unreadable", error=f"{type(exc).__name__}: {exc}")
    import pyarrow.parquet as pq

    # Writing is not the data's fault (a full disk): it raises, and counts as a crash of this batch.
    atomic_write_with(staged, lambda tmp: pq.write_table(table, tmp))
    log(f"staged {source.name}: {len(df)} rows, {len(df.columns)} columns -> {staged}")
    return IngestRecord(**found, status="staged", staged=str(staged), rows=int(len(df)))
