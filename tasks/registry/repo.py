"""The registry's repository: git + DVC plumbing, the lock, transactions, recovery, the audit log.

Every change runs inside `transaction()`: an exclusive flock (and, with PostgreSQL configured,
an advisory lock there too), then `ensure()` (create the
repository once), then `recover()` (finish or undo what a killed transaction left), then
the caller's work, which ends in one `_commit()`. For a new version the tag is the commit
point (see `_commit` and `recover`).
"""

from __future__ import annotations

import contextlib
import fcntl
import getpass
import io
import json
import os
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

from tasks.core.database import advisory_lock, is_postgres
from tasks.core.errors import RefusedError
from tasks.core.files import atomic_write_json
from tasks.core.log import log
from tasks.core.settings import REPO_ROOT, Settings, redact
from tasks.core.versions import is_data_version, is_model_version, version_number

# current_data: the data version the next snapshot builds on; prod_model: the champion;
# serving: what the model server loads (see models.serving_state; null: nothing yet);
# models: version -> {"stage"}, see models.py for the stages.
EMPTY_STATE: dict[str, Any] = {"current_data": None, "prod_model": None, "serving": None, "models": {}, "held": {}}


REGISTRY_LOCK = "sluice.registry"  # the advisory lock's name (tasks/core/database.py lock_key)


class RegistryError(RefusedError):
    """A registry operation was refused; nothing was changed."""


class MirrorError(RuntimeError):
    """A change was committed, but pushing it to SLUICE_REGISTRY_GIT_REMOTE failed. Not a refusal: a
    retry (or any later transaction) pushes again."""


class RemoteReadError(RuntimeError):
    """Reading the registry through a remote (DVC cloning its git repository, or streaming from its DVC
    remote) failed. Not a refusal: a retry may help. The message is redacted: no URL's password in it."""


@contextlib.contextmanager
def remote_read_errors(what: str, where: object) -> Iterator[None]:
    """DVC's errors while reading `what` through `where`, re-raised as one RemoteReadError whose message
    names the error and its causes with every URL redacted: DVC's own messages (a CloneError's cause) carry
    the URL as given, user and password included; the original is not shown with it (`from None`)."""
    from dvc.exceptions import DvcException

    try:
        yield
        return
    except DvcException as exc:
        said, cause = [], exc
        while cause is not None and len(said) < 3:
            said.append(f"{type(cause).__name__}: {cause}")
            cause = cause.__cause__
        message = redact(f"cannot read {what} through {where}: {'; caused by '.join(said)}")
    raise RemoteReadError(message) from None


class _Unchecked:
    def __repr__(self) -> str:
        return "ANY"


# `expect_*=` of a pointer move: no expectation (a sentinel, since None is a real expectation: "no prod yet").
ANY: Any = _Unchecked()


def check_expected(state: dict[str, Any], action: str, **expected: Any) -> None:
    """Compare-and-set: refuse `action` (RegistryError naming what moved) when a pointer is not what
    the caller read. expected: prod_model=..., current_data=... (ANY: not checked)."""
    names = {"prod_model": "the prod model", "current_data": "the current data version"}
    moved = [
        f"{names[k]} is {state.get(k) or 'none'}, not {v or 'none'}"
        for k, v in expected.items()
        if v is not ANY and state.get(k) != v
    ]
    if moved:
        raise RegistryError(
            f"{action} refused: {' and '.join(moved)} as this run read it; "
            f"the registry moved since (an operator rollback?), so nothing was changed"
        )


def check_version(kind: str, version: str) -> str:
    is_version = is_data_version if kind == "data" else is_model_version
    if not isinstance(version, str) or not is_version(version):
        raise RegistryError(f"{version!r} is not a {kind} version (expected {kind}-v<N>, e.g. {kind}-v3)")
    return version


def code_commit() -> str:
    """The project's own commit (lineage); '-dirty' when the checkout has local changes.
    In an image without .git, SLUICE_CODE_COMMIT (set at build time) says it."""
    if commit := Settings.from_env().code_commit:
        return commit
    try:
        sha = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (subprocess.CalledProcessError, FileNotFoundError):
        return "unknown"


class RepoBase:
    """The repository under `settings.layout.registry`; the parts (data, models) build on it."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.root = settings.layout.registry
        self.remote = settings.dvc_remote or str(settings.layout.dvc_remote)
        self.lock_path = settings.home / "registry.lock"
        self._in_transaction = False

    # ---- plumbing ---------------------------------------------------------------
    def git(self, *args: str, check: bool = True) -> str:
        proc = subprocess.run(["git", "-C", str(self.root), *args], capture_output=True, text=True)
        if check and proc.returncode != 0:
            # redact: an argument or git's own output may be a URL with a password in it
            raise RegistryError(redact(f"git {' '.join(args)} failed: {proc.stderr.strip() or proc.stdout.strip()}"))
        return proc.stdout.strip()

    def _dvc(self):
        os.environ.setdefault("DVC_NO_ANALYTICS", "1")
        from dvc.repo import Repo

        return Repo(str(self.root))

    @contextlib.contextmanager
    def transaction(self) -> Iterator["RepoBase"]:
        """Exclusive lock, then a clean tree: one writer at a time, whole commits only. With
        SLUICE_DATABASE_URL set (a cluster), the flock is not trusted alone (flock over a network volume
        may lock only this host): PostgreSQL's advisory lock REGISTRY_LOCK is taken too, after it (one order
        everywhere: no deadlock). A database that cannot be reached fails it (DatabaseError) before any change."""
        self.settings.home.mkdir(parents=True, exist_ok=True)
        with open(self.lock_path, "a+") as lock, contextlib.ExitStack() as held:
            fcntl.flock(lock, fcntl.LOCK_EX)
            held.callback(fcntl.flock, lock, fcntl.LOCK_UN)
            if is_postgres(self.settings.database_url):
                # DatabaseError when it cannot be reached: not a refusal (a retry may help); nothing was changed
                held.enter_context(advisory_lock(self.settings.database_url, REGISTRY_LOCK))
            self._in_transaction = True
            try:
                self.ensure()
                self.recover()
                yield self
                # Every pointer commit reaches the git mirror (replicas read the pointers there); after
                # any data push the body made, so a tag the mirror shows has its data on the DVC remote.
                self._mirror()
            finally:
                self._in_transaction = False

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
            with contextlib.redirect_stdout(io.StringIO()):  # keep DVC's banner out of the step's JSON output
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
        log(f"registry initialized at {self.root} (DVC remote {redact(self.remote)})")

    # ---- recovery ---------------------------------------------------------------
    def recover(self) -> None:
        """Finish or undo what a killed transaction left: a version whose tag was made (its commit
        point) is completed; anything short of that is discarded. Then re-link tracked data."""
        self._clear_stale_locks()
        head = self.git("rev-parse", "HEAD")
        rolled_forward = False
        for tag in self.git("tag", "--no-merged", "HEAD").splitlines():
            commit = self.git("rev-parse", f"{tag}^{{commit}}")
            if self.git("rev-parse", f"{commit}^") == head:
                log(f"registry: completing the interrupted transaction that made {tag}")
                self.git("update-ref", "refs/heads/main", commit, head)
                head, rolled_forward = commit, True
        if not (rolled_forward or self.git("status", "--porcelain")):
            return  # the common case: the last transaction finished
        if not rolled_forward:
            log("registry: discarding changes of an interrupted transaction")
        self.git("reset", "-q", "--hard", "HEAD")
        # An untracked .gitignore (one `dvc add` of the killed transaction wrote) hides the file it
        # names from one `git clean`, which then removes the .gitignore: the file shows up untracked.
        # Clean until nothing is left; each pass removes at least one .gitignore, so this ends.
        while self.git("clean", "-nd"):
            self.git("clean", "-q", "-fd")
        with self._dvc() as repo:
            repo.checkout(force=True, allow_missing=True)
        if rolled_forward:
            self._push()

    def _clear_stale_locks(self) -> None:
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
        # DVC's lock on the paths it is working on: a `dvc add` killed while rewriting it leaves it
        # empty or cut short, and every later DVC command fails with RWLockFileCorruptedError. No DVC
        # operation of ours is alive either, so whatever it records is stale.
        for lock in (self.root / ".dvc" / "tmp" / "rwlock", self.root / ".dvc" / "tmp" / "rwlock.lock"):
            if lock.exists():
                log(f"registry: removing {lock.relative_to(self.root)} left by a killed DVC command")
                lock.unlink()

    # ---- commits and the remotes ------------------------------------------------
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
        self._mirror()

    def _mirror(self) -> None:
        """Push the branch and the version tags to SLUICE_REGISTRY_GIT_REMOTE (when set). Called at the
        end of every transaction, so pointer moves (promote, rollback, canary) reach it too."""
        remote = self.settings.registry_git_remote
        if not remote:
            return
        proc = subprocess.run(
            [
                "git",
                "-C",
                str(self.root),
                "push",
                "--quiet",
                remote,
                "refs/heads/main:refs/heads/main",
                "refs/tags/*:refs/tags/*",
            ],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            raise MirrorError(
                redact(
                    f"committed, but the push to the registry mirror {remote} failed (a retry pushes "
                    f"again): {proc.stderr.strip() or proc.stdout.strip()}"
                )
            )

    # ---- state, tags, audit -----------------------------------------------------
    def state(self) -> dict[str, Any]:
        """The pointers. Outside a transaction: the committed ones (`registry.json` at HEAD), never a
        file a writer has changed but not committed (a reader takes no lock). Inside this object's own
        transaction: the working file, which that transaction is building."""
        path = self.root / "registry.json"
        if self._in_transaction:
            if not path.exists():
                return json.loads(json.dumps(EMPTY_STATE))
            return {**EMPTY_STATE, **json.loads(path.read_text())}
        proc = (
            subprocess.run(["git", "-C", str(self.root), "show", "HEAD:registry.json"], capture_output=True, text=True)
            if (self.root / ".git").is_dir()
            else None
        )
        if proc is None or proc.returncode != 0:  # no repository, or no first commit yet
            return json.loads(json.dumps(EMPTY_STATE))
        return {**EMPTY_STATE, **json.loads(proc.stdout)}

    def _write_state(self, state: dict[str, Any]) -> None:
        atomic_write_json(self.root / "registry.json", state)

    def tags(self, kind: str) -> list[str]:
        is_version = is_data_version if kind == "data" else is_model_version
        if not (self.root / ".git").is_dir():
            return []
        names = [t for t in self.git("tag", "--list", f"{kind}-v*").splitlines() if is_version(t)]
        return sorted(names, key=version_number)

    def _next_version(self, kind: str) -> str:
        existing = self.tags(kind)
        return f"{kind}-v{version_number(existing[-1]) + 1 if existing else 1}"

    def record_audit(self, action: str, who: str | None = None, **fields: Any) -> str:
        """One audit line for an action that moves no pointer (e.g. a reproduction's verdict), as
        its own transaction and commit; returns the commit. Nothing else changes."""
        if not action or not str(action).replace("_", "").isalnum():
            raise RegistryError(f"audit action {action!r} must be a word (letters, digits, _)")
        with self.transaction():
            self._audit(action, who=who, **fields)
            subject = fields.get("model_version") or fields.get("data_version")
            return self._commit(f"audit: {action}" + (f" {subject}" if subject else ""))

    def _audit(self, action: str, who: str | None = None, **fields: Any) -> None:
        entry = {
            "at": datetime.now(timezone.utc).isoformat(),
            "who": who or getpass.getuser(),
            "action": action,
            **fields,
        }
        with open(self.root / "audit.jsonl", "a") as f:
            f.write(json.dumps(entry, sort_keys=True) + "\n")
