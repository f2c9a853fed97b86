"""The shared prediction log: every served (and shadow) prediction with its input, every error and
every feedback label, one JSON line each, in chunks on the object store that every replica writes
and every reader reads (the canary analysis, the business-layer metrics, the daily cost report).

Where: Settings.predlog_uri (SLUICE_PREDLOG_URI): empty, the local folder $SLUICE_HOME/serving/predlog
(paths.prediction_log_root); or s3://bucket/prefix (SLUICE_S3_ENDPOINT_URL for MinIO or moto).

Chunks, keyed by replica: `<replica>/<first ms>-<last ms>-<seq>.jsonl`, each written once, whole
(an object store has no append; a local file is written aside and renamed). A replica buffers its
records and writes them as one chunk every `serving.log_flush_s` seconds or `serving.log_flush_rows`
records, whichever comes first, and on a clean stop. So a replica killed (SIGKILL, OOM, a lost node)
loses at most the records of the last log_flush_s seconds, and never more than log_flush_rows of
them; one stopped by SIGTERM loses nothing. Each chunk ends with a trailer
{"kind": "chunk_end", "replica", "records": N}: a chunk without it, or with another count, was cut
short (a copy interrupted, a disk full), and readers skip it whole with a warning naming it.
Chunks older than `serving.log_retention_h` are deleted by the replicas (any of them, of any replica);
a request id expires after as long (requestid.py), since its prediction is gone from the log then.

The records are the contract between the server and its readers:

    {"kind": "prediction", "request_id", "row", "at" (ISO UTC), "ts" (unix s), "variant",
     "model_version", "latency_ms", "score", "shadow" (bool), "endpoint" ("predict" | "infer"),
     "replica", "input" (the raw row for /v1/predict, the feature vector for OIP infer; not on
     shadow records: the champion's record of the same request and row has it)}
    {"kind": "feedback", "request_id", "row", "at", "ts", "label" (0 | 1), "who" (the sender's name, or
     null), "replica"}: the nightly turns these into gold labels (tasks/labeling/feedback.py)
    {"kind": "prediction", ..., "error": "<message>", "inputs": [every row's input]} (no score):
     the variant's model failed
"""

from __future__ import annotations

import json
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Optional

import numpy as np

from tasks.core.files import atomic_write_bytes
from tasks.core.log import log

Record = dict[str, Any]
CHUNK_SUFFIX = ".jsonl"
TRAILER = "chunk_end"
MAX_BUFFERED_FLUSHES = 20  # a store that refuses writes: records beyond this many chunks are dropped, counted


def now_fields() -> dict[str, Any]:
    ts = time.time()
    return {"at": datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="milliseconds"), "ts": round(ts, 6)}


def prediction_records(
    request_id: str,
    scores: Iterable[Any],
    variant: str,
    model_version: str,
    latency_ms: float,
    shadow: bool,
    endpoint: str,
    inputs: Optional[list[Any]] = None,
) -> list[dict[str, Any]]:
    """One record per row of a request (pure apart from the clock); `inputs`: each row's input."""
    stamp = now_fields()
    out = []
    for i, s in enumerate(scores):
        rec = {
            "kind": "prediction",
            "request_id": request_id,
            "row": i,
            **stamp,
            "variant": variant,
            "model_version": model_version,
            "latency_ms": round(latency_ms, 3),
            "score": float(s) if np.ndim(s) == 0 else [float(v) for v in s],  # K classes: one per class
            "shadow": shadow,
            "endpoint": endpoint,
        }
        if inputs is not None:
            rec["input"] = inputs[i]
        out.append(rec)
    return out


def error_record(
    request_id: str,
    variant: str,
    model_version: str,
    latency_ms: float,
    shadow: bool,
    endpoint: str,
    error: str,
    inputs: Optional[list[Any]] = None,
) -> dict[str, Any]:
    """A failed scoring (the model raised): counts against its variant in the canary analysis."""
    rec = {
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
    if inputs is not None:
        rec["inputs"] = inputs
    return rec


def feedback_records(request_id: str, labels: list[int], who: Optional[str] = None) -> list[dict[str, Any]]:
    stamp = now_fields()
    return [
        {"kind": "feedback", "request_id": request_id, "row": i, **stamp, "label": int(y), "who": who}
        for i, y in enumerate(labels)
    ]


# ---- the store ----------------------------------------------------------------------------------
class LogStore:
    """Chunks under a root: a local folder (written aside, renamed) or an fsspec URI (s3://...)."""

    def __init__(self, root: str | Path, s3_endpoint_url: str = ""):
        root = str(root)
        self.uri = root
        self.local = "://" not in root or root.startswith("file://")
        if self.local:
            self.root = Path(root.removeprefix("file://"))
            self.fs = None
        else:
            import fsspec

            options: dict[str, Any] = {}
            if root.startswith("s3://") and s3_endpoint_url:
                options["client_kwargs"] = {"endpoint_url": s3_endpoint_url}
            self.fs, self.root = fsspec.core.url_to_fs(root, **options)
            self.root = self.root.rstrip("/")

    def __repr__(self) -> str:
        return f"LogStore({self.uri!r})"

    def put(self, key: str, data: bytes) -> None:
        if self.fs is None:
            atomic_write_bytes(self.root / key, data)  # a hidden temp file (keys() skips it), fsync, rename
        else:
            self.fs.pipe_file(f"{self.root}/{key}", data)

    def keys(self) -> list[str]:
        """Every chunk's key (`<replica>/<name>.jsonl`), sorted."""
        if self.fs is None:
            if not self.root.is_dir():
                return []
            return sorted(
                f"{p.parent.name}/{p.name}" for p in self.root.glob(f"*/*{CHUNK_SUFFIX}") if not p.name.startswith(".")
            )
        self.fs.invalidate_cache()  # s3fs caches listings: other replicas write meanwhile
        try:
            found = self.fs.find(self.root)
        except FileNotFoundError:
            return []
        prefix = self.root + "/"
        return sorted(
            k[len(prefix) :] for k in found if k.startswith(prefix) and k.endswith(CHUNK_SUFFIX) and k.count("/") >= 1
        )

    def get(self, key: str) -> bytes:
        if self.fs is None:
            return (self.root / key).read_bytes()
        return self.fs.cat_file(f"{self.root}/{key}")

    def remove(self, key: str) -> None:
        try:
            if self.fs is None:
                (self.root / key).unlink()
            else:
                self.fs.rm_file(f"{self.root}/{key}")
        except FileNotFoundError:
            pass


def chunk_key(replica: str, first_ts: float, last_ts: float, seq: int) -> str:
    return f"{replica}/{int(first_ts * 1000):013d}-{int(last_ts * 1000) + 1:013d}-{seq:06d}{CHUNK_SUFFIX}"


def chunk_span(key: str) -> tuple[float, float] | None:
    """(first ts, last ts) of a chunk from its key, None for a key that is not a chunk's."""
    name = key.rsplit("/", 1)[-1].removesuffix(CHUNK_SUFFIX)
    parts = name.split("-")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        return None
    return int(parts[0]) / 1000, int(parts[1]) / 1000


def encode_chunk(replica: str, records: list[Record]) -> bytes:
    lines = [json.dumps(r, separators=(",", ":")) for r in records]
    lines.append(json.dumps({"kind": TRAILER, "replica": replica, "records": len(records)}, separators=(",", ":")))
    return ("\n".join(lines) + "\n").encode()


def decode_chunk(data: bytes) -> list[Record] | None:
    """The records of a whole chunk; None when it was cut short (no trailer, or a count that differs)."""
    text = data.decode("utf-8", errors="replace")
    lines = [ln for ln in text.split("\n") if ln.strip()]
    if not lines or not text.endswith("\n"):
        return None
    try:
        trailer = json.loads(lines[-1])
        records = [json.loads(ln) for ln in lines[:-1]]
    except json.JSONDecodeError:
        return None
    if not isinstance(trailer, dict) or trailer.get("kind") != TRAILER or trailer.get("records") != len(records):
        return None
    if not all(isinstance(r, dict) for r in records):
        return None
    return records


# ---- the writer ---------------------------------------------------------------------------------
class PredictionLog:
    """One replica's writer: appends are buffered and written as a chunk every `flush_s` seconds or
    `flush_rows` records (by a thread off the request path), and on close. Chunks older than
    `retention_s` are pruned at start and about every `prune_every_s`."""

    def __init__(
        self,
        store: LogStore,
        replica: str,
        flush_s: float,
        flush_rows: int,
        retention_s: float,
        prune_every_s: float = 600.0,
    ):
        if "/" in replica or not replica:
            raise ValueError(f"replica name must be a non-empty name without '/', got {replica!r}")
        self.store, self.replica = store, replica
        self.flush_s, self.flush_rows, self.retention_s = flush_s, max(int(flush_rows), 1), retention_s
        self.prune_every_s = prune_every_s
        self._buffer: list[Record] = []
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._seq = 0
        self.chunks_written = 0
        self.dropped = 0
        self._last_prune = 0.0
        self._thread = threading.Thread(target=self._run, name="predlog-flusher", daemon=True)
        self._thread.start()

    def append(self, records: list[Record]) -> None:
        if not records:
            return
        for r in records:
            r["replica"] = self.replica
        with self._lock:
            self._buffer.extend(records)
            full = len(self._buffer) >= self.flush_rows
        if full:
            self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.flush_s)
            self._wake.clear()
            if self._stop.is_set():
                break
            self.flush()
            if time.monotonic() - self._last_prune > self.prune_every_s:
                self.prune()

    def flush(self) -> int:
        """Write what is buffered (up to flush_rows records a chunk) now; returns the records written."""
        written = 0
        with self._write_lock:
            while True:
                with self._lock:
                    batch = self._buffer[: self.flush_rows]
                    del self._buffer[: len(batch)]
                if not batch:
                    return written
                key = chunk_key(self.replica, batch[0]["ts"], batch[-1]["ts"], self._seq)
                try:
                    self.store.put(key, encode_chunk(self.replica, batch))
                except Exception as exc:  # noqa: BLE001 - the store refusing must not fail serving
                    with self._lock:
                        self._buffer[:0] = batch
                        over = len(self._buffer) - MAX_BUFFERED_FLUSHES * self.flush_rows
                        if over > 0:
                            del self._buffer[:over]
                            self.dropped += over
                    dropped = f" (dropped {self.dropped} records so far)" if over > 0 else ""
                    log(
                        f"serving: cannot write prediction-log chunk {key} to {self.store.uri}: "
                        f"{type(exc).__name__}: {exc}{dropped}"
                    )
                    return written
                self._seq += 1
                self.chunks_written += 1
                written += len(batch)

    def prune(self) -> int:
        """Delete chunks (of any replica) whose last record is older than the retention; returns how many."""
        self._last_prune = time.monotonic()
        cutoff = time.time() - self.retention_s
        removed = 0
        try:
            for key in self.store.keys():
                span = chunk_span(key)
                if span is not None and span[1] < cutoff:
                    self.store.remove(key)
                    removed += 1
        except Exception as exc:  # noqa: BLE001
            log(f"serving: pruning the prediction log at {self.store.uri} failed: {type(exc).__name__}: {exc}")
        return removed

    def close(self) -> None:
        """Stop the flusher and write what is left (a clean stop loses nothing)."""
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=10)
        self.flush()


# ---- the readers --------------------------------------------------------------------------------
def read_log(store: LogStore, start: float | None = None, skipped: list[str] | None = None) -> list[Record]:
    """Every record of every replica's chunks, ordered by time (`ts`); with `start`, the chunks whose
    records all precede it are not read (the records are not filtered: select_window does that; a
    later chunk is always read, since feedback comes after the prediction it labels).

    A chunk cut short is skipped whole, with a warning naming it; a chunk deleted while listed (the
    retention) is skipped quietly. `skipped`: a list the keys of the chunks cut short are added to."""
    out: list[Record] = []
    for key in store.keys():
        span = chunk_span(key)
        if span is None or (start is not None and span[1] < start):
            continue
        try:
            data = store.get(key)
        except FileNotFoundError:
            continue
        records = decode_chunk(data)
        if records is None:
            log(f"WARNING: prediction-log chunk {store.uri.rstrip('/')}/{key} was cut short: skipped")
            if skipped is not None:
                skipped.append(key)
            continue
        out.extend(records)
    out.sort(key=lambda r: r.get("ts", 0.0))
    return out
