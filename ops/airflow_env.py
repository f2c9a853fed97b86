"""The environment every Airflow process of this project runs with.

One function builds it for `make run`, `make up`, the tests and the benchmarks:
project-local airflow.cfg, AIRFLOW_HOME under SLUICE_HOME, SQLite there unless
AIRFLOW__DATABASE__SQL_ALCHEMY_CONN is already set, secrets generated on first
use into git-ignored files (never committed), API on 127.0.0.1.

AIRFLOW_HOME is made mode 0700; each secret file is written atomically with mode 0600
(temp file, chmod, fsync, rename: a crash leaves no empty secret) and refused on read
when its group or others may read it.
"""

from __future__ import annotations

import json
import os
import secrets
import stat
from pathlib import Path

from tasks.core.files import atomic_write_with
from tasks.core.log import log
from tasks.core.settings import REPO_ROOT, Settings

ADMIN_USER = "admin"


class SecretFileError(PermissionError):
    """A secret file is readable by others than its owner."""


def private_dir(path: Path) -> Path:
    """`path` made (or narrowed to) mode 0700: it holds secrets, the metadata DB and the logs."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    if path.stat().st_mode & 0o077:
        os.chmod(path, 0o700)
    return path


def check_private(path: Path) -> None:
    mode = path.stat().st_mode
    if mode & 0o077:
        raise SecretFileError(
            f"{path} holds a secret but its mode is {stat.S_IMODE(mode):04o} (group or others "
            f"may read it): run `chmod 600 {path}`, or delete it to generate a new one"
        )


def _write_secret(path: Path, text: str) -> None:
    def write(tmp: Path) -> None:
        os.chmod(tmp, 0o600)  # before any byte of the secret is written, and before the rename
        tmp.write_text(text)

    atomic_write_with(path, write)


def _secret_file(path: Path, make) -> str:
    private_dir(path.parent)
    if path.is_symlink():
        raise SecretFileError(f"{path} is a symbolic link: a secret file must be a plain file")
    if path.exists():
        check_private(path)
        text = path.read_text()
        if text.strip():
            return text
        log(f"{path} is empty (an interrupted first write): generating it again")
    _write_secret(path, make())
    check_private(path)
    return path.read_text()


def ensure_secrets(airflow_home: Path) -> dict[str, str]:
    """JWT and session secrets (>= 64 bytes, shared by all parts) and the admin password."""
    jwt = _secret_file(airflow_home / "jwt_secret", lambda: secrets.token_hex(64))
    session = _secret_file(airflow_home / "session_secret", lambda: secrets.token_hex(32))
    passwords = json.loads(
        _secret_file(airflow_home / "passwords.json", lambda: json.dumps({ADMIN_USER: secrets.token_urlsafe(16)}))
    )
    return {"jwt": jwt, "session": session, "password": passwords[ADMIN_USER]}


def airflow_env(settings: Settings, api_port: int, base: dict[str, str] | None = None) -> dict[str, str]:
    home = settings.layout.airflow_home
    sec = ensure_secrets(home)
    env = dict(os.environ if base is None else base)
    env.update(
        {
            "SLUICE_HOME": str(settings.home),
            "AIRFLOW_HOME": str(home),
            "AIRFLOW_CONFIG": str(REPO_ROOT / "airflow.cfg"),
            "AIRFLOW__CORE__DAGS_FOLDER": str(REPO_ROOT / "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO_ROOT / "plugins"),  # the Sluice page (plugins/sluice_page.py)
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "passwords.json"),
            "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(home / "logs"),
            "AIRFLOW__LOGGING__DAG_PROCESSOR_CHILD_PROCESS_LOG_DIRECTORY": str(home / "logs" / "dag_processor"),
            "AIRFLOW__API_AUTH__JWT_SECRET": sec["jwt"],
            "AIRFLOW__API__SECRET_KEY": sec["session"],
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(api_port),
            # Task workers reach the execution API here; without it they try port 8080.
            "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{api_port}",
            "DVC_NO_ANALYTICS": "1",
            "GX_ANALYTICS_ENABLED": "false",
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.setdefault("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", f"sqlite:///{home / 'airflow.db'}")
    # The venv's bin first: Airflow starts some children by running `airflow` from PATH.
    venv_bin = str(Path(os.sys.executable).parent)
    env["PATH"] = venv_bin + os.pathsep + env.get("PATH", "")
    return env
