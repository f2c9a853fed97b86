"""Deployment settings (environment variables prefixed SLUICE_) and the state layout.

`Settings` is the only reader of SLUICE_* variables: every one the code knows is a field (with
the description docs/settings.md is generated from, `python -m ops.settings_doc`), and a SLUICE_*
variable that is none of them is refused, naming the closest field (a typo is never silently
ignored). Build it once per process (`Settings.from_env()` at the entry point) and pass it down.
Nothing here touches the disk at import time; `Settings.from_env()` only reads the environment, and
`StateLayout.ensure()` creates folders when a task asks.
"""

from __future__ import annotations

import difflib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping
from urllib.parse import urlsplit

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_HOME = REPO_ROOT / ".sluice"
PREFIX = "SLUICE_"
HOME_MARKER = ".sluice-home"  # written by StateLayout.ensure(); `python -m ops clean-state` needs it

# user:password@ (or a bare token as the user) right after a URL's scheme
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/\s@]+)@")
# tokens that git hosts accept as the user part of an https URL (GitHub, GitLab)
_TOKEN_USER = re.compile(r"^(gh[pousr]_|github_pat_|glpat-|x-access-token|x-token-auth|oauth2)", re.IGNORECASE)


def redact(url: object) -> str:
    """`url` (or any text holding URLs) with the user and password of every URL replaced by ***:
    use it wherever a URL goes into an error, a log line or a record."""
    return _USERINFO.sub(lambda m: f"{m['scheme']}***@", str(url))


def url_credentials_error(url: str) -> str | None:
    """Why `url` must not be used (it carries a password or a token), or None."""
    if not url or "://" not in url:
        return None
    try:
        parts = urlsplit(url)
        password, user = parts.password, parts.username
    except ValueError:
        return f"is not a valid URL ({redact(url)})"
    if password is not None or (user and _TOKEN_USER.match(user)):
        return (
            f"carries credentials in the URL ({redact(url)}); they would reach error messages, task logs, "
            f"pod arguments and XCom. Give git its credentials with a credential helper "
            f"(git config credential.helper; in Kubernetes from a Secret), and S3 keys as AWS_* from a Secret"
        )
    return None


class SettingsError(ValueError):
    """An environment setting is malformed."""


class Settings(BaseSettings):
    """Where state lives and how steps run: one field per SLUICE_<NAME> variable (a SLUICE_*
    variable that is no field is an error, from_env)."""

    # extra="ignore" only for what the constructor would read itself; from_env refuses unknown names
    model_config = SettingsConfigDict(env_prefix=PREFIX, frozen=True, extra="ignore")

    home: Path = Field(DEFAULT_HOME, description="SLUICE_HOME: all state (registry, runs, Airflow's database)")
    params: Path | None = Field(None, description="a params file other than the checkout's params.yaml")
    dvc_remote: str = Field("", description="empty: a local folder under SLUICE_HOME; or s3://bucket/prefix")
    s3_endpoint_url: str = Field("", description="an S3-compatible store's endpoint (credentials: AWS_*)")
    serving_key_file: str = Field(
        "", description="the key replicas sign request ids with (empty: SLUICE_HOME/serving/request_id.key)"
    )
    predlog_uri: str = Field(
        "",
        description="the shared prediction log: empty, a folder under SLUICE_HOME (serving/predlog); or s3://bucket/prefix",
    )
    demo_feed: bool = Field(True, description="deliver the next demo batch when landing/ is empty (0 or 1)")
    train_backend: str = Field(
        "local", description="local: torchrun processes here; kubernetes: pods (tasks/training/kubernetes.py)"
    )
    train_out_uri: str = Field("", description="kubernetes: where training pods write (s3://bucket/prefix)")
    registry_url: str = Field(
        "",
        description="kubernetes: the registry's git URL as the pods reach it (training pods read data versions there; "
        "model-server replicas follow its serving state, read-only)",
    )
    registry_git_remote: str = Field("", description="a git remote the registry mirrors its branch and tags to")
    code_commit: str = Field("", description="the code's commit, set in images that have no .git")
    api_port: int = Field(0, ge=0, le=65535, description="the Airflow API server's port (0: a free one)")
    dist_timeout_s: int = Field(300, ge=1, description="timeout of training collectives, seconds")
    k8s_image: str = Field("", description="kubernetes: the trainer image (empty: sluice-trainer:latest)")
    k8s_namespace: str = Field("", description="kubernetes: the trainers' namespace")
    k8s_config_file: str = Field(
        "", description="kubernetes: the kube config file the operators and the preflight use (empty: in-cluster)"
    )
    k8s_nodes: int | None = Field(None, ge=1, description="kubernetes: nodes (overrides the scaling profile)")
    k8s_gpus_per_node: int | None = Field(None, ge=1, description="kubernetes: GPUs per node (overrides the profile)")
    k8s_socket_ifname: str = Field(
        "",
        pattern=r"^[A-Za-z0-9_.:-]{0,15}$",
        description="kubernetes, more than one node: the pod network's interface for gloo's and NCCL's "
        "sockets (empty: eth0)",
    )
    tuning_storage: str = Field(
        "", description="a tuning study's storage: empty, a journal file under SLUICE_HOME; or postgresql://..."
    )
    database_url: str = Field(
        "",
        description="the metrics store and the labeling queue: empty, SQLite files under SLUICE_HOME "
        "(monitoring/metrics.sqlite, queue/queue.sqlite); or postgresql://user@host:port/db (many hosts; the "
        "registry then also takes an advisory lock there)",
    )

    @field_validator("home", mode="after")
    @classmethod
    def _resolve_home(cls, v: Path) -> Path:
        return v.expanduser().resolve()

    @field_validator("demo_feed", mode="before")
    @classmethod
    def _zero_or_one(cls, v: object) -> object:
        if isinstance(v, str) and v not in ("0", "1"):
            raise ValueError(f"must be 0 or 1, got {v!r}")
        return v

    @field_validator("dvc_remote", "predlog_uri")
    @classmethod
    def _remote(cls, v: str) -> str:
        if v and "://" in v and not v.startswith("s3://"):
            raise ValueError(f"must be a local path or s3://bucket/prefix, got {redact(v)!r}")
        return v

    @field_validator(
        "dvc_remote", "predlog_uri", "registry_url", "registry_git_remote", "s3_endpoint_url", "train_out_uri"
    )
    @classmethod
    def _no_credentials(cls, v: str) -> str:
        why = url_credentials_error(v)
        if why:
            raise ValueError(why)
        return v

    @field_validator("tuning_storage")
    @classmethod
    def _tuning_storage(cls, v: str) -> str:
        if v and not v.startswith(("postgresql://", "postgresql+")):
            raise ValueError(f"must be empty (a journal file) or a postgresql:// URL, got {redact(v)!r}")
        return v

    @field_validator("database_url")
    @classmethod
    def _database_url(cls, v: str) -> str:
        if v and not v.startswith(("postgresql://", "postgres://", "postgresql+psycopg://")):
            raise ValueError(
                f"must be empty (a SQLite file under SLUICE_HOME) or a postgresql:// URL, got {redact(v)!r}"
            )
        return v

    @field_validator("train_backend")
    @classmethod
    def _backend(cls, v: str) -> str:
        if v not in ("local", "kubernetes"):
            raise ValueError(f"must be 'local' or 'kubernetes', got {v!r}")
        return v

    @field_validator("train_out_uri")
    @classmethod
    def _out_uri(cls, v: str) -> str:
        if v and "://" not in v:
            raise ValueError(f"must be a URI the pods can write (s3://...), got {v!r}")
        return v

    @classmethod
    def variables(cls) -> list[str]:
        """The SLUICE_* variables there are (one per field)."""
        return [PREFIX + name.upper() for name in cls.model_fields]

    @classmethod
    def unknown_variables(cls, env: Mapping[str, str]) -> list[str]:
        """Why each SLUICE_* name in `env` that is no setting is refused, naming the closest one."""
        known = [name.upper() for name in cls.model_fields]  # compared without the prefix all share
        out = []
        for name in sorted(k for k in env if k.startswith(PREFIX) and k[len(PREFIX) :].lower() not in cls.model_fields):
            close = difflib.get_close_matches(name[len(PREFIX) :].upper(), known, n=1, cutoff=0.6)
            hint = f"did you mean {PREFIX}{close[0]}?" if close else "the settings are listed in docs/settings.md"
            out.append(f"{name}: not a Sluice setting ({hint})")
        return out

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "Settings":
        """Settings from `env` (default: the process environment); an error names the variable. A
        SLUICE_* variable that is no setting is an error too (a typo would otherwise be ignored).
        Call it once, where the process starts, and pass the object down."""
        env = os.environ if env is None else env
        problems = cls.unknown_variables(env)
        values = {
            k[len(PREFIX) :].lower(): v
            for k, v in env.items()
            if k.startswith(PREFIX) and k[len(PREFIX) :].lower() in cls.model_fields and v != ""
        }
        try:
            # model_validate, not the constructor: only `env` is read (the constructor also reads os.environ)
            settings = cls.model_validate(values)
        except ValidationError as exc:
            problems += [
                f"{PREFIX}{'.'.join(map(str, e['loc'])).upper()}: {e['msg'].removeprefix('Value error, ')}"
                for e in exc.errors()
            ]
        if problems:
            raise SettingsError("; ".join(problems))
        return settings

    def child_env(self) -> dict[str, str]:
        """These settings as SLUICE_* variables, for a child process that must see the same state."""
        out = {}
        for name, value in self.model_dump().items():
            if value is None or value == "":
                continue
            out[PREFIX + name.upper()] = ("1" if value else "0") if isinstance(value, bool) else str(value)
        return out

    @property
    def layout(self) -> "StateLayout":
        return StateLayout(self.home)


@dataclass(frozen=True)
class StateLayout:
    """The folders under SLUICE_HOME. Nothing in here is ever deleted by the pipeline."""

    home: Path

    @property
    def landing(self) -> Path:  # incoming raw batches, waiting
        return self.home / "landing"

    @property
    def archive(self) -> Path:  # raw batches that made it into a data version
        return self.home / "landing" / "archive"

    @property
    def quarantine(self) -> Path:  # rejected batches with their reports
        return self.home / "quarantine"

    @property
    def gold(self) -> Path:  # gold-labeled dev and test sets (never trained on)
        return self.home / "gold"

    @property
    def registry(self) -> Path:  # git + DVC repository owned by the pipeline
        return self.home / "registry"

    @property
    def dvc_remote(self) -> Path:  # default DVC remote (a local folder)
        return self.home / "dvc-remote"

    @property
    def runs(self) -> Path:
        return self.home / "runs"

    @property
    def airflow_home(self) -> Path:
        return self.home / "airflow"

    @property
    def monitoring(self) -> Path:  # the metrics store (metrics.sqlite), kept across runs
        return self.home / "monitoring"

    @property
    def reports(self) -> Path:  # reports that belong to no single run (the daily cost report)
        return self.home / "reports"

    def run_dir(self, run_id: str) -> Path:
        return self.runs / safe_run_id(run_id)

    def ensure(self) -> "StateLayout":
        for p in (self.landing, self.archive, self.quarantine, self.gold, self.runs):
            p.mkdir(parents=True, exist_ok=True)
        # The marker says "this folder is a Sluice home": `python -m ops clean-state` deletes nothing without it.
        marker = self.home / HOME_MARKER
        if not marker.exists():
            marker.write_text("This folder is a Sluice home (SLUICE_HOME): `make clean-state` may delete it.\n")
        return self


def safe_run_id(run_id: str) -> str:
    """A folder name for a run id, readable and one-to-one: an id made only of letters, digits, '.',
    '_' and '-' is its own folder name; any other (Airflow's hold ':' and '+') becomes its readable
    part (each run of other characters -> '_') plus '~' and 12 hex digits of the sha256 of the whole
    id. '~' never occurs in the first kind, so `a:b` and `a+b` (and a literal `a_b`) never share a folder."""
    if not isinstance(run_id, str) or not run_id.strip():
        raise SettingsError("run id must not be empty")
    if run_id in (".", ".."):
        raise SettingsError(f"run id {run_id!r} is not a usable folder name")
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", run_id)
    if readable == run_id:
        return run_id
    import hashlib

    return f"{readable[:120]}~{hashlib.sha256(run_id.encode()).hexdigest()[:12]}"
