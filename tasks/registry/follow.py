"""The registry as a model-server replica on a cluster sees it: read-only, through its git URL.

A replica in a pod has no registry on its disk (SLUICE_HOME is an emptyDir): with SLUICE_REGISTRY_URL
set, it follows the registry there, the same repository the pipeline mirrors to and the trainer pods
clone. Each read of the serving state fetches the remote's branch into a bare repository under
SLUICE_HOME (one shallow fetch: only the newest commit's objects come) and reads registry.json at the
fetched commit; model artifacts are read by version tag through DVC, from the DVC remote the
repository's committed `.dvc/config` names (credentials from the AWS_* environment, as the trainers').

Nothing here writes to the registry: a replica can never move a pointer.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from tasks.core.settings import Settings, redact
from tasks.registry import Registry
from tasks.registry.repo import EMPTY_STATE, RegistryError
from tasks.registry.serving import ServingState

BRANCH = "main"  # the registry's branch (RepoBase._ensure: git init -b main)
FETCHED = "refs/sluice/followed"  # where the fetched branch is kept in the bare repository


class RemoteRegistry:
    """`serving()` and `read_model_artifact()` of the registry at `url`, the two reads a server makes."""

    def __init__(self, settings: Settings, url: str | None = None, timeout_s: float = 60.0):
        self.url = url or settings.registry_url
        if not self.url:
            raise RegistryError("a remote registry needs its git URL (SLUICE_REGISTRY_URL)")
        self.root: Path = settings.home / "registry-followed.git"
        self.timeout_s = timeout_s
        self._registry = Registry(settings)  # its DVC reads only (read_model_artifact with repo_url)

    def _git(self, *args: str) -> str:
        proc = subprocess.run(
            ["git", "-C", str(self.root), *args], capture_output=True, text=True, timeout=self.timeout_s
        )
        if proc.returncode != 0:
            raise RegistryError(redact(f"git {' '.join(args)} failed: {proc.stderr.strip() or proc.stdout.strip()}"))
        return proc.stdout

    def fetch(self) -> str:
        """The remote's branch, fetched (shallow) into the bare repository; returns its commit."""
        if not (self.root / "HEAD").is_file():
            self.root.mkdir(parents=True, exist_ok=True)
            subprocess.run(["git", "init", "-q", "--bare", str(self.root)], check=True, capture_output=True)
        self._git("fetch", "-q", "--no-tags", "--depth=1", self.url, f"+refs/heads/{BRANCH}:{FETCHED}")
        return self._git("rev-parse", FETCHED).strip()

    def state(self) -> dict[str, Any]:
        """The committed pointers at the remote's branch (keys an older registry.json lacks take their empty values)."""
        self.fetch()
        return {**EMPTY_STATE, **json.loads(self._git("show", f"{FETCHED}:registry.json"))}

    def serving(self) -> ServingState:
        return ServingState.of(self.state())

    def read_model_artifact(self, version: str, artifact: str) -> bytes:
        return self._registry.read_model_artifact(version, artifact, repo_url=self.url)
