"""Atomic file writes and JSON helpers: the one place a file is written safely.

Every write goes to a temp file in the target's folder, is fsynced, then renamed
over the target, so a reader (or a crash) sees the old file or the new one, never
a torn one. `atomic_create_with` is the same write for a file that must never be
replaced (a shared key, a quarantined batch): hard-linked in place instead of renamed.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any, Callable


def atomic_write_with(path: Path, write: Callable[[Path], None]) -> None:
    """Call `write(tmp)` to produce the file at a temp path beside `path`, fsync it, rename it over `path`.

    For writers that want a path rather than bytes (pandas, torch, onnx)."""
    _atomic(path, write, os.replace)


def atomic_create_with(path: Path, write: Callable[[Path], None]) -> None:
    """As `atomic_write_with`, but `path` is never replaced: the finished temp file is hard-linked
    there, and a file already at `path` is a FileExistsError (whoever made it first wins; nothing of
    this write is left). The temp file is created 0o600 and keeps that mode unless `write` changes it."""
    _atomic(path, write, os.link)


def _atomic(path: Path, write: Callable[[Path], None], place: Callable[[str, Path], None]) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(Path(tmp))
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        place(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)  # after os.replace there is nothing left to remove


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write `data` to `path` atomically (temp file, fsync, rename)."""
    atomic_write_with(path, lambda tmp: tmp.write_bytes(data))


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_bytes(path, (json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n").encode())


def atomic_write_parquet(path: Path, df: Any) -> None:
    """DataFrame -> parquet atomically (pandas imported by the caller)."""
    atomic_write_with(path, lambda tmp: df.to_parquet(tmp, index=False))


def read_json(path: Path) -> Any:
    return json.loads(Path(path).read_text())


def json_safe(obj: Any) -> Any:
    """Strict JSON values (as Airflow's XCom demands): NaN and infinities -> None, numpy scalars and
    arrays -> Python, anything else JSON cannot hold (timestamps, paths) -> its str."""
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if hasattr(obj, "tolist") and not isinstance(obj, (str, bytes)):
        obj = obj.tolist()  # numpy scalars and arrays
        if isinstance(obj, list):
            return json_safe(obj)
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    return str(obj)


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def stale_page(page: Path, want: str, source: str, regenerate: str) -> list[str]:
    """Why a generated page differs from what its source gives (empty when it matches): one line naming
    both and the command that regenerates it, then the first differing lines (- page, + source)."""
    import difflib

    have = page.read_text() if page.exists() else ""
    if want == have:
        return []
    diff = difflib.unified_diff(have.splitlines(), want.splitlines(), page.name, "generated", lineterm="", n=0)
    shown = [line for line in diff if not line.startswith(("---", "+++", "@@"))][:20]
    return [
        f"{page} does not match {source} (run `{regenerate}`); first differences (- on the page, + from the source):",
        *shown,
    ]
