"""With SLUICE_DATABASE_URL set, registry transactions also take PostgreSQL's advisory lock (tasks/registry/repo.py):
two processes whose flocks cannot see each other (each its own lock file, as flock over a network volume may
lock only one host) still take turns; without the database they overlap (what the lock is for). A database
that cannot be reached fails the transaction before any change."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tasks.core.database import DatabaseError
from tasks.core.settings import REPO_ROOT, Settings
from tasks.core.wait import wait_until
from tasks.registry import Registry

pytestmark = pytest.mark.postgres

HOLD_MAX_S = 90  # the first transaction holds until the second is seen (waiting, or inside), at most this long

# until: "waiter" holds until PostgreSQL shows a session waiting for an advisory lock; a path, until it exists
TRANSACTION = """
import json, os, sys, time
from pathlib import Path
from tasks.core.settings import Settings
from tasks.registry import Registry
out, until, hold_max = Path(sys.argv[1]), sys.argv[2], float(sys.argv[3])

def seen():
    if until == "waiter":
        import psycopg
        with psycopg.connect(os.environ["SLUICE_DATABASE_URL"]) as db:
            q = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
            return db.execute(q).fetchone()[0] > 0
    return until == "" or Path(until).exists()

with Registry(Settings.from_env()).transaction():
    entered = time.time()
    out.with_suffix(".in").write_text("")
    while not (saw := seen()) and time.time() - entered < hold_max:
        time.sleep(0.1)
    left = time.time()
out.write_text(json.dumps([entered, left, saw]))
"""


def _transaction(tmp_path: Path, name: str, until: str, url: str | None) -> tuple[subprocess.Popen, Path]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
    env.update(SLUICE_HOME=str(tmp_path / f"home-{name}"), DVC_NO_ANALYTICS="1", PYTHONPATH=str(REPO_ROOT))
    if url:
        env["SLUICE_DATABASE_URL"] = url
    out = tmp_path / f"{name}.json"
    proc = subprocess.Popen(
        [sys.executable, "-c", TRANSACTION, str(out), until, str(HOLD_MAX_S)],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return proc, out


def _two_transactions(tmp_path: Path, url: str | None) -> tuple[list, list]:
    """Two transactions, each with its own SLUICE_HOME (so its own flock file); the second starts while the
    first holds its locks, which it does until it sees the second waiting for the advisory lock (with a
    database) or inside its own transaction (without)."""
    tmp_path.mkdir()
    until = "waiter" if url else str(tmp_path / "second.in")
    first, first_out = _transaction(tmp_path, "first", until, url)
    wait_until(lambda: first_out.with_suffix(".in").exists() or first.poll() is not None, timeout_s=120, what="first")
    second, second_out = _transaction(tmp_path, "second", "", url)
    for proc in (first, second):
        _, err = proc.communicate(timeout=HOLD_MAX_S + 120)
        assert proc.returncode == 0, err[-2000:]
    return json.loads(first_out.read_text()), json.loads(second_out.read_text())


def test_the_advisory_lock_serializes_registry_transactions_of_two_processes(tmp_path, postgres_url):
    (a_in, a_out, saw_waiter), (b_in, _, _) = _two_transactions(tmp_path / "pg", postgres_url)
    assert saw_waiter, "the second transaction never waited for the advisory lock"
    assert a_in < a_out <= b_in  # it entered only after the first had left


def test_without_the_database_the_two_flocks_do_not_serialize_them(tmp_path):
    (a_in, a_out, saw_second), (b_in, _, _) = _two_transactions(tmp_path / "flock", None)
    assert saw_second and a_in < b_in < a_out  # the control: each process locked only its own file


def test_an_unreachable_database_fails_the_transaction_before_any_change(settings, monkeypatch):
    monkeypatch.setenv("SLUICE_DATABASE_URL", "postgresql://sluice@127.0.0.1:1/nowhere")
    reg = Registry(Settings.from_env())
    t0 = time.monotonic()
    with pytest.raises(DatabaseError, match=r"advisory lock 'sluice.registry' in postgresql://\*\*\*@127.0.0.1:1"):
        with reg.transaction():
            pytest.fail("the body ran without the lock")
    assert time.monotonic() - t0 < 30
    assert not (settings.home / "registry").exists()  # nothing was created or changed
