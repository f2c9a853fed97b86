"""Where a training run's outputs live: a local folder, or an fsspec URI a pod writes to.

Storage and compute are separate on Kubernetes: a training pod has its own disk, lost
with the pod. The engine always writes into a local working folder (atomic renames
work there) and, when `--out` is a URI (s3://bucket/runs/<run>/train), publishes each
file once it is complete: an object store has no rename, but an upload appears whole
or not at all. On start, the checkpoints already published are fetched back, so a
restarted pod, on any node, resumes where the last one stopped.

A checkpoint is published before its checksum file, so a pod killed between the two
uploads leaves a checkpoint without a checksum, which is skipped on resume.
"""

from __future__ import annotations

from pathlib import Path

from tasks.core.log import log
from tasks.core.settings import Settings

CHECKPOINTS = "checkpoints"
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
        """Remove published checkpoints that the local folder no longer keeps."""
        if not self.uri:
            return
        for remote in self.fs.glob(self._remote(f"{CHECKPOINTS}/ckpt-*")):
            if remote.rsplit("/", 1)[-1] not in keep:
                self.fs.rm_file(remote)

    def fetch(self, name: str) -> bool:
        """Download the published file `name` when the local folder lacks it; True if fetched."""
        target = self.local / name
        if not self.uri or target.exists() or not self.fs.exists(self._remote(name)):
            return False
        part = target.with_name(f".{name}.part")
        self.fs.get_file(self._remote(name), str(part))
        part.replace(target)
        return True

    def fetch_checkpoints(self) -> int:
        """Download the published checkpoints the local folder lacks; returns how many files."""
        if not self.uri:
            return 0
        folder = self.local / CHECKPOINTS
        folder.mkdir(parents=True, exist_ok=True)
        fetched = 0
        for remote in self.fs.glob(self._remote(f"{CHECKPOINTS}/ckpt-*")):
            target = folder / remote.rsplit("/", 1)[-1]
            if not target.exists():
                self.fs.get_file(remote, str(target))
                fetched += 1
        if fetched:
            log(f"fetched {fetched} checkpoint file(s) from {self.uri}")
        return fetched


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
