"""Where a training run's outputs live: a local folder, or an fsspec URI a pod writes to.

Storage and compute are separate on Kubernetes: a training pod has its own disk, lost
with the pod. The engine always writes into a local working folder (atomic renames
work there) and, when `--out` is a URI (s3://bucket/runs/<run>/train), publishes each
file once it is complete: an object store has no rename, but an upload appears whole
or not at all. On start, the checkpoints already published are fetched back, so a
restarted pod, on any node, resumes where the last one stopped.

A checkpoint is published before the file that marks it complete (a single file's checksum;
a sharded folder's COMPLETE, after every rank's shards), so a pod killed in between leaves a
checkpoint that is skipped on resume.
"""

from __future__ import annotations

import re
from pathlib import Path

from tasks.core.log import log
from tasks.core.settings import Settings

CHECKPOINTS = "checkpoints"
COMPLETE_MARKER = "COMPLETE"  # a sharded checkpoint folder's last file (sharded.py)
_STEP = re.compile(r"^ckpt-(\d{6})")
OUTPUTS = ("model.pt", "train_metrics.json", "metrics.jsonl")  # what a finished run publishes


def is_uri(out: str) -> bool:
    return "://" in out and not out.startswith("file://")


def _filesystem(uri: str, settings: Settings | None = None):
    """An fsspec filesystem and path for `uri`; S3 honours SLUICE_S3_ENDPOINT_URL (MinIO, moto).
    `settings`: the process's (else read from the environment)."""
    import fsspec

    options = {}
    endpoint = (settings if settings is not None else Settings.from_env()).s3_endpoint_url
    if uri.startswith("s3://") and endpoint:
        options["client_kwargs"] = {"endpoint_url": endpoint}
    return fsspec.core.url_to_fs(uri, **options)


class OutputStore:
    """`local`: the folder the engine writes into. With a URI, `publish` copies a file there."""

    def __init__(self, out: str, workdir: Path | None = None, settings: Settings | None = None):
        self.uri = out if is_uri(out) else None
        if self.uri:
            if workdir is None:
                raise ValueError(f"--out {out} is a URI: the engine needs a local --workdir as well")
            self.local = workdir
            self.fs, self.root = _filesystem(self.uri, settings)
        else:
            self.local = Path(out.removeprefix("file://"))
        self.local.mkdir(parents=True, exist_ok=True)

    def _remote(self, rel: str) -> str:
        return f"{self.root.rstrip('/')}/{rel}"

    def publish(self, *paths: Path) -> None:
        """Upload files of the local folder to the same relative place under the URI, in order."""
        if not self.uri:
            return
        for path in paths:
            self.fs.put_file(str(path), self._remote(path.relative_to(self.local).as_posix()))

    def prune_checkpoints(self, keep: set[str]) -> None:
        """Remove the published checkpoints (files, or sharded folders whole) older than every one
        the local folder keeps. Newer ones stay: the other ranks may be publishing the next one."""
        kept = [int(m.group(1)) for name in keep if (m := _STEP.match(name))]
        if not self.uri or not kept:
            return
        for remote in self.fs.glob(self._remote(f"{CHECKPOINTS}/ckpt-*")):
            m = _STEP.match(remote.rsplit("/", 1)[-1])
            if m and int(m.group(1)) < min(kept):
                self.fs.rm(remote, recursive=True)

    def fetch(self, name: str) -> bool:
        """Download the published file `name` when the local folder lacks it; True if fetched."""
        target = self.local / name
        if not self.uri or target.exists() or not self.fs.exists(self._remote(name)):
            return False
        self._get(self._remote(name), target)
        return True

    def fetch_checkpoints(self) -> int:
        """Download the published checkpoint files the local folder lacks; returns how many. A
        sharded folder is fetched only once its COMPLETE is published, and COMPLETE comes last."""
        if not self.uri:
            return 0
        folder = self.local / CHECKPOINTS
        folder.mkdir(parents=True, exist_ok=True)
        fetched = 0
        for remote in self.fs.glob(self._remote(f"{CHECKPOINTS}/ckpt-*")):
            target = folder / remote.rsplit("/", 1)[-1]
            if self.fs.isdir(remote):
                names = {path.rsplit("/", 1)[-1] for path in self.fs.find(remote)}
                if COMPLETE_MARKER not in names:
                    continue  # still being written, or cut off: never resumed from
                target.mkdir(exist_ok=True)
                for name in [*sorted(names - {COMPLETE_MARKER}), COMPLETE_MARKER]:
                    if not (target / name).exists():
                        self._get(f"{remote}/{name}", target / name)
                        fetched += 1
            elif not target.exists():
                self._get(remote, target)
                fetched += 1
        if fetched:
            log(f"fetched {fetched} checkpoint file(s) from {self.uri}")
        return fetched

    def _get(self, remote: str, target: Path) -> None:
        part = target.with_name(f".{target.name}.part")
        self.fs.get_file(remote, str(part))
        part.replace(target)


def fetch_outputs(uri: str, dest: Path, names: tuple[str, ...], settings: Settings | None = None) -> None:
    """Copy a finished run's files from `uri` into `dest` (the pipeline side of a pod's run)."""
    fs, root = _filesystem(uri, settings)
    dest.mkdir(parents=True, exist_ok=True)
    for name in names:
        remote = f"{root.rstrip('/')}/{name}"
        if not fs.exists(remote):
            raise FileNotFoundError(f"training output {name} is missing from {uri}")
        tmp = dest / f".{name}.part"
        fs.get_file(remote, str(tmp))
        tmp.replace(dest / name)
