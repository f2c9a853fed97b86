"""The registry: a git + DVC repository under SLUICE_HOME that the pipeline owns.

The DVC data-registry pattern: data partitions and model artifacts are DVC-tracked
(content in the cache and the remote), their small .dvc pointers, metadata and the
pointer file `registry.json` are git-tracked. Every change is one git commit made
under a file lock; versions are immutable git tags (`data-vN`, `model-vN`).

    registry.json                   current_data, prod_model, model stages
    audit.jsonl                     one line per pointer move (who, when, from, to, why)
    data/emails/<batch>.parquet     one partition per batch (DVC-tracked)
    data/versions/data-vN.json      the partitions in that version + lineage
    models/model-vN/                model.pt, model.fp32.onnx, model.int8.onnx (DVC-tracked)
    models/model-vN.json            lineage: data version, code commit, params hash, metrics

A killed transaction leaves an uncommitted working tree; the next one starts by
resetting to the last commit, so readers only ever see whole versions.
"""
from __future__ import annotations

import contextlib
import fcntl
import io
import getpass
import json
import os
import re
import shutil
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

from tasks.settings import REPO_ROOT, Settings
from tasks.stepio import atomic_write_json, log

DATA_VERSION = re.compile(r"^data-v([1-9][0-9]{0,8})$")
MODEL_VERSION = re.compile(r"^model-v([1-9][0-9]{0,8})$")
BATCH_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
STAGES = ("candidate", "canary", "prod", "archived", "rejected")
DATASET = "emails"


class RegistryError(RuntimeError):
    """A registry operation was refused; nothing was changed."""


def check_version(kind: str, version: str) -> str:
    pattern = DATA_VERSION if kind == "data" else MODEL_VERSION
    if not isinstance(version, str) or not pattern.match(version):
        raise RegistryError(f"{version!r} is not a {kind} version (expected {kind}-v<N>, e.g. {kind}-v3)")
    return version


def _version_number(version: str) -> int:
    return int(version.rsplit("-v", 1)[1])


def code_commit() -> str:
    """The project's own commit (lineage); '-dirty' when the checkout has local changes."""
    try:
        sha = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (subprocess.CalledProcessError, FileNotFoundError):
        return "unknown"


class Registry:
    def __init__(self, settings: Settings):
        self.settings = settings
        self.root = settings.layout.registry
        self.remote = settings.dvc_remote or str(settings.layout.dvc_remote)
        self.lock_path = settings.home / "registry.lock"

    # ---- plumbing ---------------------------------------------------------------
    def git(self, *args: str, check: bool = True) -> str:
        proc = subprocess.run(["git", "-C", str(self.root), *args], capture_output=True, text=True)
        if check and proc.returncode != 0:
            raise RegistryError(f"git {' '.join(args)} failed: {proc.stderr.strip() or proc.stdout.strip()}")
        return proc.stdout.strip()

    def _dvc(self):
        os.environ.setdefault("DVC_NO_ANALYTICS", "1")
        from dvc.repo import Repo

        return Repo(str(self.root))

    @contextlib.contextmanager
    def transaction(self) -> Iterator["Registry"]:
        """Exclusive lock, then a clean tree: one writer at a time, whole commits only."""
        self.settings.home.mkdir(parents=True, exist_ok=True)
        with open(self.lock_path, "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                self.ensure()
                self.recover()
                yield self
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def ensure(self) -> None:
        """Create the repository once (idempotent): git, DVC, remote, identity, first commit."""
        if (self.root / ".git").is_dir() and self.git("rev-parse", "--verify", "-q", "HEAD", check=False):
            return
        os.environ.setdefault("DVC_NO_ANALYTICS", "1")
        from dvc.repo import Repo

        self.root.mkdir(parents=True, exist_ok=True)
        if not (self.root / ".git").is_dir():
            self.git("init", "-q", "-b", "main")
        self.git("config", "user.name", "sluice-pipeline")
        self.git("config", "user.email", "pipeline@sluice.invalid")
        if not (self.root / ".dvc").is_dir():
            with contextlib.redirect_stdout(io.StringIO()):   # keep DVC's banner out of the step's JSON output
                Repo.init(str(self.root))
        # The remote is configured before the first tag (dvc push --all-tags skips earlier ones).
        Path(self.remote).mkdir(parents=True, exist_ok=True) if "://" not in self.remote else None
        with self._dvc() as repo:
            with repo.config.edit() as conf:
                conf["core"]["remote"] = "storage"
                conf["core"]["analytics"] = False
                conf["core"]["autostage"] = True
                conf["remote"]["storage"] = {"url": self.remote}
        atomic_write_json(self.root / "registry.json", {"current_data": None, "prod_model": None, "models": {}})
        (self.root / "audit.jsonl").touch()
        self.git("add", "-A")
        self.git("commit", "-q", "-m", "registry: initialize")
        log(f"registry initialized at {self.root} (DVC remote {self.remote})")

    def recover(self) -> None:
        """Drop whatever a killed transaction left uncommitted; re-link tracked data."""
        if self.git("status", "--porcelain"):
            log("registry: discarding changes of an interrupted transaction")
            self.git("reset", "-q", "--hard", "HEAD")
            self.git("clean", "-q", "-fd")
        with self._dvc() as repo:
            repo.checkout(force=True, allow_missing=True)

    def _commit(self, message: str, tag: str | None = None) -> str:
        self.git("add", "-A")
        self.git("commit", "-q", "-m", message)
        if tag:
            self.git("tag", "-a", tag, "-m", message)
        return self.git("rev-parse", "HEAD")

    def _push(self) -> None:
        with self._dvc() as repo:
            repo.push()

    # ---- state ------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        path = self.root / "registry.json"
        if not path.exists():
            return {"current_data": None, "prod_model": None, "models": {}}
        return json.loads(path.read_text())

    def tags(self, kind: str) -> list[str]:
        pattern = DATA_VERSION if kind == "data" else MODEL_VERSION
        if not (self.root / ".git").is_dir():
            return []
        names = [t for t in self.git("tag", "--list", f"{kind}-v*").splitlines() if pattern.match(t)]
        return sorted(names, key=_version_number)

    def _next_version(self, kind: str) -> str:
        existing = self.tags(kind)
        return f"{kind}-v{_version_number(existing[-1]) + 1 if existing else 1}"

    def data_version_info(self, version: str) -> dict[str, Any]:
        check_version("data", version)
        if version not in self.tags("data"):
            raise RegistryError(f"data version {version} does not exist (have: {self.tags('data') or 'none'})")
        return json.loads(self.git("show", f"{version}:data/versions/{version}.json"))

    def model_version_info(self, version: str) -> dict[str, Any]:
        check_version("model", version)
        if version not in self.tags("model"):
            raise RegistryError(f"model version {version} does not exist (have: {self.tags('model') or 'none'})")
        return json.loads(self.git("show", f"{version}:models/{version}.json"))

    def _audit(self, action: str, **fields: Any) -> None:
        entry = {"at": datetime.now(timezone.utc).isoformat(), "who": getpass.getuser(), "action": action, **fields}
        with open(self.root / "audit.jsonl", "a") as f:
            f.write(json.dumps(entry, sort_keys=True) + "\n")

    def _write_state(self, state: dict[str, Any]) -> None:
        atomic_write_json(self.root / "registry.json", state)

    # ---- data versions ----------------------------------------------------------
    def snapshot(self, batch_id: str, partition: Path, meta: dict[str, Any]) -> dict[str, Any]:
        """Add one labeled partition as a new data version (all earlier partitions + this one).

        Idempotent: a batch already in the current data version returns that version.
        """
        if not BATCH_ID.match(batch_id):
            raise RegistryError(f"batch id {batch_id!r} is not a safe name")
        with self.transaction():
            state = self.state()
            current = state["current_data"]
            parts = self.data_version_info(current)["partitions"] if current else []
            if any(p["batch_id"] == batch_id for p in parts):
                log(f"registry: {batch_id} is already in {current}; nothing to add")
                self._push()
                return {"data_version": current, "created": False, **self.data_version_info(current)}

            version = self._next_version("data")
            rel = Path("data") / DATASET / f"{batch_id}.parquet"
            (self.root / rel.parent).mkdir(parents=True, exist_ok=True)
            shutil.copyfile(partition, self.root / rel)
            with self._dvc() as repo:
                repo.add(str(self.root / rel))
            md5 = _dvc_md5(self.root / f"{rel}.dvc")
            info = {
                "version": version, "dataset": DATASET, "parent": current,
                "partitions": [*parts, {"batch_id": batch_id, "path": str(rel), "md5": md5, "rows": meta.get("rows")}],
                "created_at": datetime.now(timezone.utc).isoformat(), **meta,
            }
            info["total_rows"] = sum(p.get("rows") or 0 for p in info["partitions"])
            atomic_write_json(self.root / "data" / "versions" / f"{version}.json", info)
            state["current_data"] = version
            self._write_state(state)
            self._audit("snapshot", data_version=version, previous=current, batch_id=batch_id)
            commit = self._commit(f"{version}: add partition {batch_id}", tag=version)
            self._push()
            log(f"registry: {version} tagged at {commit[:10]} with {len(info['partitions'])} partitions, pushed")
            return {"data_version": version, "created": True, "commit": commit, **info}

    def read_data_version(self, version: str) -> "Any":
        """All partitions of a data version as one DataFrame, read by tag through DVC
        (from the local cache, or streamed from the remote when it is not cached)."""
        import pandas as pd
        from dvc.api import DVCFileSystem

        info = self.data_version_info(version)
        fs = DVCFileSystem(str(self.root), rev=version)
        frames = []
        for part in info["partitions"]:
            with fs.open(part["path"], "rb") as f:
                frames.append(pd.read_parquet(f))
        return pd.concat(frames, ignore_index=True)

    # ---- model versions ---------------------------------------------------------
    def register_model(self, run_id: str, artifacts: dict[str, Path], lineage: dict[str, Any]) -> dict[str, Any]:
        """New immutable model version (stage: candidate). Idempotent per run id."""
        with self.transaction():
            for existing in self.tags("model"):
                info = self.model_version_info(existing)
                if info.get("run_id") == run_id:
                    log(f"registry: run {run_id} already registered as {existing}")
                    self._push()
                    return {"model_version": existing, "created": False, **info}
            version = self._next_version("model")
            folder = self.root / "models" / version
            folder.mkdir(parents=True, exist_ok=True)
            for name, src in artifacts.items():
                shutil.copyfile(src, folder / name)
            with self._dvc() as repo:
                repo.add(str(folder))
            info = {"version": version, "run_id": run_id, "artifacts": sorted(artifacts),
                    "created_at": datetime.now(timezone.utc).isoformat(), **lineage}
            atomic_write_json(self.root / "models" / f"{version}.json", info)
            state = self.state()
            state["models"][version] = {"stage": "candidate"}
            self._write_state(state)
            self._audit("register", model_version=version, run_id=run_id, data_version=lineage.get("data_version"))
            commit = self._commit(f"{version}: register from run {run_id}", tag=version)
            self._push()
            log(f"registry: {version} registered at {commit[:10]} (candidate)")
            return {"model_version": version, "created": True, "commit": commit, **info}

    def model_path(self, version: str, artifact: str) -> Path:
        check_version("model", version)
        return self.root / "models" / version / artifact

    def promote(self, version: str, reason: str) -> dict[str, Any]:
        """Move the prod pointer to `version`; the previous prod becomes archived. Idempotent."""
        check_version("model", version)
        with self.transaction():
            if version not in self.tags("model"):
                raise RegistryError(f"model version {version} does not exist")
            state = self.state()
            previous = state["prod_model"]
            if previous == version:
                return {"prod_model": version, "previous": previous, "changed": False}
            if previous:
                state["models"][previous]["stage"] = "archived"
            state["models"][version]["stage"] = "prod"
            state["prod_model"] = version
            self._write_state(state)
            self._audit("promote", model_version=version, previous=previous, reason=reason)
            commit = self._commit(f"promote {version} to prod (was {previous}): {reason}")
            log(f"registry: prod model {previous} -> {version}")
            return {"prod_model": version, "previous": previous, "changed": True, "commit": commit}

    def set_stage(self, version: str, stage: str, reason: str) -> None:
        check_version("model", version)
        if stage not in STAGES:
            raise RegistryError(f"stage {stage!r} is not one of {STAGES}")
        with self.transaction():
            state = self.state()
            if state["models"].get(version, {}).get("stage") == stage:
                return
            state["models"].setdefault(version, {})["stage"] = stage
            self._write_state(state)
            self._audit("stage", model_version=version, stage=stage, reason=reason)
            self._commit(f"{version} -> {stage}: {reason}")


def _dvc_md5(dvc_file: Path) -> str:
    import yaml

    outs = yaml.safe_load(dvc_file.read_text())["outs"]
    return outs[0]["md5"]
