"""Deployment settings (environment variables prefixed SLUICE_) and the state layout.

Nothing here touches the disk at import time; `Settings.from_env()` only reads
the environment, and `StateLayout.ensure()` creates folders when a task asks.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_HOME = REPO_ROOT / ".sluice"



class SettingsError(ValueError):
    """An environment setting is malformed."""


@dataclass(frozen=True)
class Settings:
    """Where state lives and how steps run. Read from SLUICE_* variables."""

    home: Path
    dvc_remote: str = ""          # empty: a local folder under SLUICE_HOME; or s3://bucket/prefix
    s3_endpoint_url: str = ""     # an S3-compatible store's endpoint (credentials: AWS_* variables)
    demo_feed: bool = True        # deliver the next demo batch when landing/ is empty
    train_backend: str = "local"  # local: torchrun processes here; kubernetes: pods (tasks/k8s.py)
    train_out_uri: str = ""       # kubernetes: where training pods write (s3://bucket/prefix)
    registry_url: str = ""        # kubernetes: the registry's git URL as the pods reach it
    registry_git_remote: str = "" # a git remote the registry mirrors its branch and tags to

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> "Settings":
        env = os.environ if env is None else env
        home = Path(env.get("SLUICE_HOME") or DEFAULT_HOME).expanduser().resolve()
        feed = env.get("SLUICE_DEMO_FEED", "1")
        if feed not in ("0", "1"):
            raise SettingsError(f"SLUICE_DEMO_FEED must be 0 or 1, got {feed!r}")
        remote = env.get("SLUICE_DVC_REMOTE", "")
        if remote and "://" in remote and not remote.startswith("s3://"):
            raise SettingsError(f"SLUICE_DVC_REMOTE must be a local path or s3://bucket/prefix, got {remote!r}")
        backend = env.get("SLUICE_TRAIN_BACKEND") or "local"
        if backend not in ("local", "kubernetes"):
            raise SettingsError(f"SLUICE_TRAIN_BACKEND must be 'local' or 'kubernetes', got {backend!r}")
        out_uri = env.get("SLUICE_TRAIN_OUT_URI", "")
        if out_uri and "://" not in out_uri:
            raise SettingsError(f"SLUICE_TRAIN_OUT_URI must be a URI the pods can write (s3://...), got {out_uri!r}")
        return cls(home=home, dvc_remote=remote, s3_endpoint_url=env.get("SLUICE_S3_ENDPOINT_URL", ""),
                   demo_feed=feed == "1", train_backend=backend, train_out_uri=out_uri,
                   registry_url=env.get("SLUICE_REGISTRY_URL", ""),
                   registry_git_remote=env.get("SLUICE_REGISTRY_GIT_REMOTE", ""))

    @property
    def layout(self) -> "StateLayout":
        return StateLayout(self.home)


@dataclass(frozen=True)
class StateLayout:
    """The folders under SLUICE_HOME. Nothing in here is ever deleted by the pipeline."""

    home: Path

    @property
    def landing(self) -> Path:          # incoming raw batches, waiting
        return self.home / "landing"

    @property
    def archive(self) -> Path:          # raw batches that made it into a data version
        return self.home / "landing" / "archive"

    @property
    def quarantine(self) -> Path:       # rejected batches with their reports
        return self.home / "quarantine"

    @property
    def gold(self) -> Path:             # gold-labeled dev and test sets (never trained on)
        return self.home / "gold"

    @property
    def registry(self) -> Path:         # git + DVC repository owned by the pipeline
        return self.home / "registry"

    @property
    def dvc_remote(self) -> Path:       # default DVC remote (a local folder)
        return self.home / "dvc-remote"

    @property
    def runs(self) -> Path:
        return self.home / "runs"

    @property
    def airflow_home(self) -> Path:
        return self.home / "airflow"

    def run_dir(self, run_id: str) -> Path:
        return self.runs / safe_run_id(run_id)

    def ensure(self) -> "StateLayout":
        for p in (self.landing, self.archive, self.quarantine, self.gold, self.runs):
            p.mkdir(parents=True, exist_ok=True)
        return self


def safe_run_id(run_id: str) -> str:
    """Airflow run ids hold ':' and '+'; make a folder name that keeps them readable."""
    if not run_id or not run_id.strip():
        raise SettingsError("run id must not be empty")
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", run_id.strip())
    if safe in (".", ".."):
        raise SettingsError(f"run id {run_id!r} is not a usable folder name")
    return safe
