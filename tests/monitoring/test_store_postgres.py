"""The metrics store on a real PostgreSQL server (tests/postgres.py): chosen by SLUICE_DATABASE_URL, written by
several processes at once, and a database that goes away mid-run failing the monitoring write, never the step.
(The round trip on both backends: test_store.py.)"""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from tasks.core.settings import REPO_ROOT, Settings, redact
from tasks.monitoring.store import MetricsStore, StoreUnavailable, store_exists, store_path
from tests.monitoring.steps_for_tests import labeling_work
from tests.monitoring.test_watch import run_step
from tests.postgres import PostgresServer

pytestmark = pytest.mark.postgres

WRITERS, TASKS, ROUNDS = 4, 5, 10

WRITER = """
import sys
from tasks.monitoring.store import Metric, MetricsStore
url, me, tasks, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
store = MetricsStore.open(url)  # every writer opens (and may create) the store at once
for r in range(rounds):
    for t in range(tasks):
        rows = [Metric("algorithm", "loss", float(r), step=s) for s in range(3)]
        store.record_metrics("run-1", f"{me}-task{t}", rows)
    # every writer rewrites the same task too: a replace never doubles its rows
    store.record_metrics("run-1", "shared", [Metric("algorithm", "loss", float(r), subject=me) for _ in range(3)])
print("done")
"""


def test_the_database_url_setting_chooses_postgresql(settings, postgres_url, monkeypatch):
    monkeypatch.setenv("SLUICE_DATABASE_URL", postgres_url)
    pg = Settings.from_env()
    assert store_exists(pg)  # a configured database is a store to read (the Sluice page)
    store = MetricsStore.open(pg)
    assert store.url == postgres_url and store.path is None and store.where == redact(postgres_url)
    store.record_run("run-1", outcome="ok")
    assert MetricsStore.open(pg).run("run-1")["outcome"] == "ok"  # reopening keeps the rows
    assert MetricsStore.open(pg).schema_version() == 1
    assert not store_path(pg).exists()  # no SQLite file under SLUICE_HOME


def test_a_password_in_the_url_never_reaches_a_message():
    store = MetricsStore(url="postgresql://sluice:s3cret@127.0.0.1:1/nowhere")
    assert store.where == "postgresql://***@127.0.0.1:1/nowhere"
    with pytest.raises(StoreUnavailable) as err:
        store.runs()
    assert "s3cret" not in str(err.value) and "postgresql://***@127.0.0.1:1/nowhere" in str(err.value)


def test_concurrent_writers_from_several_processes(postgres_url):
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, postgres_url, f"w{i}", str(TASKS), str(ROUNDS)],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(WRITERS)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0] * WRITERS, [err[-2000:] for _, err in outs]
    store = MetricsStore.open(postgres_url)
    assert [r["run_id"] for r in store.runs()] == ["run-1"]  # one run row, however many touched it
    for i in range(WRITERS):
        for t in range(TASKS):
            rows = store.metrics("run-1", task=f"w{i}-task{t}")
            assert [(r["value"], r["step"]) for r in rows] == [(ROUNDS - 1.0, s) for s in range(3)]
    shared = store.metrics("run-1", task="shared")
    assert len(shared) == 3 and len({r["subject"] for r in shared}) == 1  # one writer's whole replace, no mix
    assert store.schema_version() == 1


def test_the_database_going_away_mid_run_fails_the_monitoring_write_not_the_step(settings, monkeypatch, capsys):
    server = PostgresServer()  # its own server: this test stops it
    try:
        server.start()
        url = server.create_database()
        monkeypatch.setenv("SLUICE_DATABASE_URL", url)
        pg = Settings.from_env()
        run_step(pg, labeling_work, task_id="weak_label_first", seconds="0.1")
        assert [t["task"] for t in MetricsStore.open(pg).tasks("run-1")] == ["weak_label_first"]
        capsys.readouterr()

        stopper = threading.Timer(0.5, server.stop)  # the server goes away while the step runs
        stopper.start()
        _, rec = run_step(pg, labeling_work, seconds="3")
        stopper.join()
        assert rec.rows == 500  # the step itself succeeded
        err = capsys.readouterr().err
        line = next(x for x in err.splitlines() if "monitoring: task weak_label not recorded" in x)
        assert f"StoreUnavailable: the metrics store {redact(url)} cannot be used: OperationalError" in line
        assert "Connection refused" in line or "server closed the connection" in line, line
        assert not store_path(pg).exists()  # no fallback to a SQLite file nobody reads

        server.start()  # back: what was recorded before is there, the lost write is not
        assert [t["task"] for t in MetricsStore.open(pg).tasks("run-1")] == ["weak_label_first"]
    finally:
        server.close()
