"""The prediction log: every served (and shadow) prediction and every feedback label, one JSON
line each, in $SLUICE_HOME/serving/predictions.jsonl (paths.prediction_log_file), rotated by size.

The canary analysis and the monitoring read it through `read_log` (the one reader: the log with
its rotated files `predictions.jsonl.1` ... `.N`), so its records are the contract between the
server and its readers:

    {"kind": "prediction", "request_id", "row", "at" (ISO UTC), "ts" (unix s), "variant",
     "model_version", "latency_ms", "score", "shadow" (bool), "endpoint" ("predict" | "infer")}
    {"kind": "feedback", "request_id", "row", "at", "ts", "label" (0 | 1)}
    {"kind": "prediction", ..., "error": "<message>"} (no score): the variant's model failed

Appends are serialized by a lock and flushed per request (no fsync: a crash may lose the last
lines, never tear earlier ones). Rotation renames files, so a reader holding an open file keeps
reading whole lines; a reader skips the torn last line of a log being appended to.
"""

from __future__ import annotations

import json
import os
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable

LOG_NAME = "predictions.jsonl"
Record = dict[str, Any]


def rotated_paths(path: Path, keep: int) -> list[Path]:
    """The log and its rotated files, newest first: path, path.1, ..., path.keep."""
    return [path] + [path.with_name(f"{path.name}.{i}") for i in range(1, keep + 1)]


def now_fields() -> dict[str, Any]:
    ts = time.time()
    return {"at": datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="milliseconds"), "ts": round(ts, 6)}


def prediction_records(
    request_id: str,
    scores: Iterable[float],
    variant: str,
    model_version: str,
    latency_ms: float,
    shadow: bool,
    endpoint: str,
) -> list[dict[str, Any]]:
    """One record per row of a request (pure apart from the clock)."""
    stamp = now_fields()
    return [
        {
            "kind": "prediction",
            "request_id": request_id,
            "row": i,
            **stamp,
            "variant": variant,
            "model_version": model_version,
            "latency_ms": round(latency_ms, 3),
            "score": float(s),
            "shadow": shadow,
            "endpoint": endpoint,
        }
        for i, s in enumerate(scores)
    ]


def error_record(
    request_id: str, variant: str, model_version: str, latency_ms: float, shadow: bool, endpoint: str, error: str
) -> dict[str, Any]:
    """A failed scoring (the model raised): counts against its variant in the canary analysis."""
    return {
        "kind": "prediction",
        "request_id": request_id,
        "row": 0,
        **now_fields(),
        "variant": variant,
        "model_version": model_version,
        "latency_ms": round(latency_ms, 3),
        "shadow": shadow,
        "endpoint": endpoint,
        "error": error[:500],
    }


def feedback_records(request_id: str, labels: list[int]) -> list[dict[str, Any]]:
    stamp = now_fields()
    return [
        {"kind": "feedback", "request_id": request_id, "row": i, **stamp, "label": int(y)} for i, y in enumerate(labels)
    ]


class PredictionLog:
    """Append-only JSON lines with size-based rotation (keeps `keep` rotated files)."""

    def __init__(self, path: Path, max_bytes: int, keep: int):
        self.path = Path(path)
        self.max_bytes = max(int(max_bytes), 1)
        self.keep = keep
        self._lock = threading.Lock()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "a", encoding="utf-8")

    def append(self, records: list[dict[str, Any]]) -> None:
        if not records:
            return
        text = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records)
        with self._lock:
            if self._file.tell() and self._file.tell() + len(text) > self.max_bytes:
                self._rotate()
            self._file.write(text)
            self._file.flush()

    def _rotate(self) -> None:
        self._file.close()
        paths = rotated_paths(self.path, self.keep)
        paths[-1].unlink(missing_ok=True)
        for older, newer in zip(reversed(paths[1:]), reversed(paths[:-1])):
            if newer.exists():
                os.replace(newer, older)
        self._file = open(self.path, "a", encoding="utf-8")

    def close(self) -> None:
        with self._lock:
            self._file.close()


def read_log(path: Path | str, keep: int = 0) -> list[Record]:
    """Every record of the log and its `keep` rotated files, oldest first.

    Missing files are skipped; a line that is not a JSON object (the torn last line of a log
    being appended to) is skipped too."""
    out: list[Record] = []
    for p in reversed(rotated_paths(Path(path), keep)):
        try:
            text = p.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            continue
        for line in text.splitlines():
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(rec, dict):
                out.append(rec)
    return out
