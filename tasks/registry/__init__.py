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

from tasks.core.settings import REPO_ROOT, Settings
from tasks.core.files import atomic_write_json
from tasks.core.log import log

DATA_VERSION = re.compile(r"^data-v([1-9][0-9]{0,8})$")
MODEL_VERSION = re.compile(r"^model-v([1-9][0-9]{0,8})$")
BATCH_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
SERVED_ARTIFACT = "model.int8.onnx"
# current_data: the data version the next snapshot builds on; prod_model: the champion;
# serving: what the model server loads (moves with prod); models: version -> stage, one of
# candidate (registered), prod, archived (replaced by a newer prod), rolled_back (replaced by a rollback).
EMPTY_STATE: dict[str, Any] = {"current_data": None, "prod_model": None, "serving": None, "models": {}}
DEFAULT_DATASET = "emails"     # the bundled dataset; the snapshot step names the active one


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
    """The project's own commit (lineage); '-dirty' when the checkout has local changes.
    In an image without .git, SLUICE_CODE_COMMIT (set at build time) says it."""
    if os.environ.get("SLUICE_CODE_COMMIT"):
        return os.environ["SLUICE_CODE_COMMIT"]
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
        # Its address is committed (clones and training pods read through it); credentials never
        # are: DVC's S3 client takes them from the AWS_* environment variables.
        remote = {"url": self.remote}
        if self.remote.startswith("s3://") and self.settings.s3_endpoint_url:
            remote["endpointurl"] = self.settings.s3_endpoint_url
        elif "://" not in self.remote:
            Path(self.remote).mkdir(parents=True, exist_ok=True)
        with self._dvc() as repo:
            with repo.config.edit() as conf:
                conf["core"]["remote"] = "storage"
                conf["core"]["analytics"] = False
                conf["core"]["autostage"] = True
                # Hardlinks: adding a partition hashes it once and links it, no second copy on disk.
                # Partitions are immutable (a new one is always a new file), so links are safe.
                conf["cache"]["type"] = "hardlink"
                conf["remote"]["storage"] = remote
        atomic_write_json(self.root / "registry.json", EMPTY_STATE)
        (self.root / "audit.jsonl").touch()
        self.git("add", "-A")
        self.git("commit", "-q", "-m", "registry: initialize")
        log(f"registry initialized at {self.root} (DVC remote {self.remote})")

    def recover(self) -> None:
        """Finish or undo what a killed transaction left: a version whose tag was made (its commit
        point) is completed; anything short of that is discarded. Then re-link tracked data."""
        self._clear_stale_git_locks()
        head = self.git("rev-parse", "HEAD")
        rolled_forward = False
        for tag in self.git("tag", "--no-merged", "HEAD").splitlines():
            commit = self.git("rev-parse", f"{tag}^{{commit}}")
            if self.git("rev-parse", f"{commit}^") == head:
                log(f"registry: completing the interrupted transaction that made {tag}")
                self.git("update-ref", "refs/heads/main", commit, head)
                head, rolled_forward = commit, True
        if not (rolled_forward or self.git("status", "--porcelain")):
            return                              # the common case: the last transaction finished
        if not rolled_forward:
            log("registry: discarding changes of an interrupted transaction")
        self.git("reset", "-q", "--hard", "HEAD")
        self.git("clean", "-q", "-fd")
        with self._dvc() as repo:
            repo.checkout(force=True, allow_missing=True)
        if rolled_forward:
            self._push()

    def _clear_stale_git_locks(self) -> None:
        """A git command killed mid-way leaves its lock file (index.lock, a ref's .lock) behind, and
        every later git command refuses to run. We hold the registry's exclusive lock, so no git
        process of ours is alive: such files are stale."""
        git_dir = self.root / ".git"
        candidates = [git_dir / n for n in ("index.lock", "HEAD.lock", "packed-refs.lock", "config.lock")]
        candidates += list((git_dir / "refs").rglob("*.lock"))
        for lock in candidates:
            if lock.exists():
                log(f"registry: removing {lock.relative_to(self.root)} left by a killed git command")
                lock.unlink()

    def _commit(self, message: str, tag: str | None = None) -> str:
        """One commit of everything staged. For a new version the tag is the commit point: the
        commit is made off-branch, tagged, then the branch moves to it (`recover` completes a
        transaction killed between the tag and the move)."""
        self.git("add", "-A")
        parent = self.git("rev-parse", "HEAD")
        commit = self.git("commit-tree", self.git("write-tree"), "-p", parent, "-m", message)
        if tag:
            self.git("tag", "-a", tag, "-m", message, commit)
        self.git("update-ref", "refs/heads/main", commit, parent)
        return commit

    def _push(self, targets: list[str] | None = None) -> None:
        """Push to the DVC remote: the named outputs, or every output in the workspace. Then, when
        SLUICE_REGISTRY_GIT_REMOTE is set, mirror the branch and the version tags to that git
        remote (after the data: a tag a pod can see always has its data on the DVC remote)."""
        with self._dvc() as repo:
            repo.push(targets=targets)
        if self.settings.registry_git_remote:
            self.git("push", "--quiet", self.settings.registry_git_remote,
                     "refs/heads/main:refs/heads/main", "refs/tags/*:refs/tags/*")

    # ---- state ------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        path = self.root / "registry.json"
        if not path.exists():
            return json.loads(json.dumps(EMPTY_STATE))
        return {**EMPTY_STATE, **json.loads(path.read_text())}

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

    def _audit(self, action: str, who: str | None = None, **fields: Any) -> None:
        entry = {"at": datetime.now(timezone.utc).isoformat(), "who": who or getpass.getuser(), "action": action,
                 **fields}
        with open(self.root / "audit.jsonl", "a") as f:
            f.write(json.dumps(entry, sort_keys=True) + "\n")

    def _write_state(self, state: dict[str, Any]) -> None:
        atomic_write_json(self.root / "registry.json", state)

    # ---- data versions ----------------------------------------------------------
    def snapshot(self, partitions: dict[str, Path], meta: dict[str, Any], dataset: str = DEFAULT_DATASET) -> dict[str, Any]:
        """Add labeled partitions ({batch_id: parquet file}) as a new data version: the current
        version's partitions plus these. Only the new files are hashed and pushed.

        Idempotent: if every batch is already in the current data version, that version is returned.
        """
        if not partitions:
            raise RegistryError("a snapshot needs at least one partition")
        if not BATCH_ID.match(dataset):
            raise RegistryError(f"dataset name {dataset!r} is not a safe name")
        for batch_id in partitions:
            if not BATCH_ID.match(batch_id):
                raise RegistryError(f"batch id {batch_id!r} is not a safe name")
        with self.transaction():
            state = self.state()
            current = state["current_data"]
            parent = self.data_version_info(current) if current else {"partitions": [], "dataset": dataset}
            if parent["dataset"] != dataset:
                raise RegistryError(f"this registry holds dataset {parent['dataset']!r}, not {dataset!r}: "
                                    f"use another SLUICE_HOME for another dataset")
            parts = parent["partitions"]
            have = {p["batch_id"] for p in parts}
            if set(partitions) <= have:
                log(f"registry: {sorted(partitions)} already in {current}; nothing to add")
                self._push()
                return {"data_version": current, "created": False, **self.data_version_info(current)}
            if set(partitions) & have:
                raise RegistryError(f"batches {sorted(set(partitions) & have)} are already in {current}")

            version = self._next_version("data")
            targets = {}
            for batch_id, src in partitions.items():
                rel = Path("data") / dataset / f"{batch_id}.parquet"
                dest = self.root / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.unlink(missing_ok=True)        # never write through a hardlink into the cache
                shutil.copyfile(src, dest)
                targets[batch_id] = rel
            with self._dvc() as repo:
                repo.add([str(self.root / rel) for rel in targets.values()])
            rows = meta.get("rows_by_batch", {})
            new = [{"batch_id": b, "path": str(rel), "md5": _dvc_md5(self.root / f"{rel}.dvc"), "rows": rows.get(b)}
                   for b, rel in targets.items()]
            info = {"version": version, "dataset": dataset, "parent": current, "partitions": [*parts, *new],
                    "created_at": datetime.now(timezone.utc).isoformat(),
                    **{k: v for k, v in meta.items() if k != "rows_by_batch"}}
            info["total_rows"] = sum(p.get("rows") or 0 for p in info["partitions"])
            atomic_write_json(self.root / "data" / "versions" / f"{version}.json", info)
            state["current_data"] = version
            self._write_state(state)
            self._audit("snapshot", data_version=version, previous=current, batches=sorted(partitions))
            commit = self._commit(f"{version}: add partition(s) {', '.join(sorted(partitions))}", tag=version)
            self._push([str(self.root / rel) for rel in targets.values()])   # only what is new
            log(f"registry: {version} tagged at {commit[:10]} with {len(info['partitions'])} partitions, pushed")
            return {"data_version": version, "created": True, "commit": commit, **info}

    def open_data_version(self, version: str, repo_url: str | None = None) -> tuple[Any, dict[str, Any]]:
        """(a DVC filesystem at the version's tag, the version's metadata): read partitions with
        `fs.open(part["path"], "rb")`, one at a time if need be.

        From this registry's workspace and cache by default; with `repo_url` (a git URL or path
        of the registry, as a training pod sees it) DVC clones the tag and streams the
        partitions from the DVC remote: no disk shared with the pipeline.
        """
        from dvc.api import DVCFileSystem

        check_version("data", version)
        fs = DVCFileSystem(repo_url or str(self.root), rev=version)
        try:
            info = json.loads(fs.read_text(f"data/versions/{version}.json"))
        except FileNotFoundError:
            raise RegistryError(f"data version {version} has no metadata in {repo_url or self.root}") from None
        return fs, info

    def read_data_version(self, version: str, repo_url: str | None = None) -> "Any":
        """All partitions of a data version as one DataFrame, read by tag through DVC."""
        import pandas as pd

        fs, info = self.open_data_version(version, repo_url)
        frames = []
        for part in info["partitions"]:
            with fs.open(part["path"], "rb") as f:
                frames.append(pd.read_parquet(f))
        return pd.concat(frames, ignore_index=True)

    def read_model_artifact(self, version: str, artifact: str, repo_url: str | None = None) -> bytes:
        """A registered model's file, read by tag through DVC (from the remote with `repo_url`)."""
        from dvc.api import DVCFileSystem

        check_version("model", version)
        fs = DVCFileSystem(repo_url or str(self.root), rev=version)
        try:
            return fs.read_bytes(f"models/{version}/{artifact}")
        except FileNotFoundError:
            raise RegistryError(f"model version {version} has no {artifact} in {repo_url or self.root}") from None

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
            self._push([str(folder)])
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
            state["serving"] = self._serving_pointer(version)
            self._write_state(state)
            self._audit("promote", model_version=version, previous=previous, reason=reason)
            commit = self._commit(f"promote {version} to prod (was {previous}): {reason}")
            log(f"registry: prod model {previous} -> {version}")
            return {"prod_model": version, "previous": previous, "changed": True, "commit": commit}

    def _serving_pointer(self, version: str | None) -> dict[str, str] | None:
        return {"model_version": version, "artifact": f"models/{version}/{SERVED_ARTIFACT}"} if version else None

    def rollback(self, data_version: str | None, model_version: str | None, reason: str,
                 who: str | None = None) -> dict[str, Any]:
        """Put the current-data pointer, the prod model and the serving pointer back, as one commit.

        Either version may be None (that pointer stays). Both are validated before anything
        changes; versions are never deleted. Running it again is a no-op (`changed: False`).
        """
        if data_version is None and model_version is None:
            raise RegistryError("rollback needs a data version, a model version, or both")
        if data_version is not None:
            check_version("data", data_version)
        if model_version is not None:
            check_version("model", model_version)
        if not reason or not reason.strip():
            raise RegistryError("rollback needs a reason (it goes into the audit log)")
        with self.transaction():
            for kind, version in (("data", data_version), ("model", model_version)):
                if version is not None and version not in self.tags(kind):
                    raise RegistryError(f"cannot roll back to {version}: no such {kind} version "
                                        f"(have: {', '.join(self.tags(kind)) or 'none'})")
            state = self.state()
            before = {"data_version": state["current_data"], "model_version": state["prod_model"]}
            after = {"data_version": data_version or before["data_version"],
                     "model_version": model_version or before["model_version"]}
            if before == after and state["serving"] == self._serving_pointer(after["model_version"]):
                log(f"registry: already at {after}; nothing to roll back")
                return {"changed": False, "from": before, "to": after}
            state["current_data"] = after["data_version"]
            if model_version and model_version != before["model_version"]:
                if before["model_version"]:
                    state["models"][before["model_version"]]["stage"] = "rolled_back"
                state["models"][model_version]["stage"] = "prod"
            state["prod_model"] = after["model_version"]
            state["serving"] = self._serving_pointer(after["model_version"])
            self._write_state(state)
            self._audit("rollback", who=who, reason=reason, **{"from": before, "to": after})
            commit = self._commit(f"rollback to {after['data_version']} / {after['model_version']}: {reason}")
            log(f"registry: rolled back {before} -> {after} ({reason})")
            return {"changed": True, "from": before, "to": after, "commit": commit}


def _dvc_md5(dvc_file: Path) -> str:
    import yaml

    outs = yaml.safe_load(dvc_file.read_text())["outs"]
    return outs[0]["md5"]
