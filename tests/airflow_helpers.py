"""Run Airflow (CLI or Python) in a subprocess with the project's environment.

Airflow reads its configuration once, at import; each test gets its own
SLUICE_HOME/AIRFLOW_HOME, so Airflow never runs inside the pytest process.
"""

from __future__ import annotations

import atexit
import json
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

from ops.airflow_env import airflow_env
from ops.services import AirflowServices, free_port
from tasks.core.settings import REPO_ROOT, Settings

AIRFLOW = str(Path(sys.executable).parent / "airflow")


def env_for(settings: Settings, port: int | None = None) -> dict[str, str]:
    return airflow_env(settings, port or free_port())


def airflow(settings: Settings, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [AIRFLOW, *args], env=env_for(settings), capture_output=True, text=True, timeout=timeout, cwd=REPO_ROOT
    )


def python_json(settings: Settings, code: str, timeout: float = 300):
    """Run `code` (which prints one JSON line last) under the Airflow environment."""
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env=env_for(settings),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO_ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def migrate(settings: Settings) -> None:
    """A migrated Airflow database, with the registry writers' one-slot pool, in the test's own
    AIRFLOW_HOME. ops' own migrate (`airflow db migrate` and `pools set`, about 10 s) runs once per pytest
    process; every later test gets a fresh copy of the database it made (nothing in it names a home)."""
    global _migrated
    db = settings.layout.airflow_home / "airflow.db"
    if _migrated is None:
        AirflowServices(settings).migrate()
        _migrated = Path(tempfile.mkdtemp(prefix="sluice-airflow-db-")) / "airflow.db"
        shutil.copyfile(db, _migrated)
        atexit.register(shutil.rmtree, _migrated.parent, True)
        return
    db.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(_migrated, db)


_migrated: Path | None = None  # the first migrated database of this pytest process (migrate above)


def dags_test(settings: Settings, conf: dict | None = None) -> tuple[str, str, subprocess.CompletedProcess]:
    """`airflow dags test nightly_pipeline` (in-process executor, no scheduler).
    Returns (run_id, dag run state, process)."""
    before = set(_run_ids(settings))
    proc = airflow(settings, "dags", "test", "nightly_pipeline", "-c", json.dumps(conf or {}))
    new = [r for r in _run_ids(settings) if r not in before]
    assert len(new) == 1, f"expected one new run, got {new}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    run_id, state = new[0]
    return run_id, state, proc


def _run_ids(settings: Settings) -> list[tuple[str, str]]:
    db = settings.layout.airflow_home / "airflow.db"
    with sqlite3.connect(db) as con:
        return [
            tuple(r)
            for r in con.execute("SELECT run_id, state FROM dag_run WHERE dag_id='nightly_pipeline' ORDER BY id")
        ]


def task_states(settings: Settings, run_id: str) -> dict[str, str]:
    with sqlite3.connect(settings.layout.airflow_home / "airflow.db") as con:
        return dict(con.execute("SELECT task_id, state FROM task_instance WHERE run_id=?", (run_id,)).fetchall())
