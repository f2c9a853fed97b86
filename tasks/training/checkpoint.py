"""Atomic, checksummed checkpoints: temp file, fsync, rename, sha256 beside it.

A checkpoint whose bytes do not match its checksum (a kill mid-write, a bad disk)
is skipped and the previous good one used. Checkpoints are read as data only
(`torch.load(weights_only=True)`: tensors, numbers, strings, lists, dicts): on
Kubernetes they come from the output bucket, and a checksum only proves the file is
whole, not who wrote it, so one that would build other objects (a pickled
`__reduce__` payload) is refused and skipped like a corrupt one.
"""

from __future__ import annotations

import hashlib
import io
import pickle
import re
from pathlib import Path
from typing import Any, Callable

import torch

from tasks.core.files import atomic_write_bytes
from tasks.core.log import log
from tasks.training.writer import BackgroundWriter

_NAME = re.compile(r"^ckpt-(\d{6})\.pt$")
_DIR = re.compile(r"^ckpt-(\d{6})$")  # a sharded checkpoint's folder (sharded.py)


def save_checkpoint(folder: Path, step: int, state: dict[str, Any], keep: int = 2) -> Path:
    buf = io.BytesIO()
    torch.save(state, buf)
    data = buf.getvalue()
    path = folder / f"ckpt-{step:06d}.pt"
    atomic_write_bytes(path, data)
    atomic_write_bytes(path.with_suffix(".sha256"), hashlib.sha256(data).hexdigest().encode())
    for old in sorted(folder.glob("ckpt-*.pt"))[:-keep]:
        old.unlink(missing_ok=True)
        old.with_suffix(".sha256").unlink(missing_ok=True)
    return path


def load_checkpoint_bytes(data: bytes) -> dict[str, Any]:
    """A checkpoint's state, unpickled as data only: anything else raises pickle.UnpicklingError."""
    return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)


def checkpoint_step(path: Path) -> int | None:
    """The step of a checkpoint file (ckpt-000040.pt) or sharded folder (ckpt-000040/), else None."""
    m = _NAME.match(path.name) or (_DIR.match(path.name) if path.is_dir() else None)
    return int(m.group(1)) if m else None


def load_checkpoint(path: Path) -> dict[str, Any]:
    """A checkpoint's state after its checks: a file's sha256 and data-only unpickling, or a sharded
    folder's marker, checksums and safe metadata (`sharded.read_sharded_state`: its small state only,
    the tensors are loaded into the model later). Raises ValueError naming what is wrong."""
    from tasks.training.sharded import CheckpointRefused, read_sharded_state

    if path.is_dir():
        try:
            return read_sharded_state(path)
        except CheckpointRefused as exc:
            raise ValueError(f"checkpoint {path.name} refused: {exc}") from None
    digest_file = path.with_suffix(".sha256")
    data = path.read_bytes()
    if not digest_file.exists() or digest_file.read_text().strip() != hashlib.sha256(data).hexdigest():
        raise ValueError(f"checkpoint {path.name} fails its checksum")
    try:
        return load_checkpoint_bytes(data)
    except pickle.UnpicklingError as exc:
        why = re.search(r"Unsupported global: GLOBAL \S+|Unsupported operand \d+", str(exc))
        raise ValueError(
            f"checkpoint {path.name} refused: it holds more than tensors and plain values "
            f"({why.group(0) if why else type(exc).__name__}): not loaded"
        ) from None
    except Exception as exc:  # noqa: BLE001 - any unreadable file is refused like a corrupt one
        raise ValueError(f"checkpoint {path.name} is unreadable ({type(exc).__name__}: {exc})") from None


def latest_valid_checkpoint(folder: Path) -> tuple[Path, dict[str, Any]] | None:
    """Newest checkpoint (a file or a sharded folder) that passes its checks (`load_checkpoint`);
    corrupt, partial or refused ones are reported and skipped (None: none left, a fresh start)."""
    if not folder.is_dir():
        return None
    found = [(step, path) for path in folder.iterdir() if (step := checkpoint_step(path)) is not None]
    for _, path in sorted(found, key=lambda sp: (sp[0], sp[1].is_dir()), reverse=True):
        try:
            return path, load_checkpoint(path)
        except ValueError as exc:
            log(f"{exc}: skipped")
    return None


def _cpu_copy(obj: Any) -> Any:
    """A detached CPU copy of a (nested) state, so training can go on changing the original."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        return {k: _cpu_copy(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_cpu_copy(v) for v in obj)
    return obj


class AsyncCheckpointer(BackgroundWriter):
    """Copy the state now (fast), serialize and write it on a background thread (slow), so
    training goes on while the file is written. One write in flight at a time.
    `on_saved(path)` runs on the same thread after each write (publishing it, on a pod)."""

    def __init__(self, folder: Path, keep: int = 2, on_saved: Callable[[Path], None] | None = None):
        super().__init__("checkpoint")
        self.folder, self.keep, self.on_saved = folder, keep, on_saved

    def save(self, step: int, state: dict[str, Any], wait: bool = False) -> None:
        self.wait()
        self._submit(self._write, step, _cpu_copy(state), wait=wait)

    def _write(self, step: int, state: dict[str, Any]) -> None:
        path = save_checkpoint(self.folder, step, state, self.keep)
        if self.on_saved:
            self.on_saved(path)
