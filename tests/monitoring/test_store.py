"""The metrics store: schema and version, idempotent writes per (run, task), reads by run/layer/day; each
on SQLite and on a real PostgreSQL server (tests/postgres.py; more in test_store_postgres.py)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from datetime import datetime, timedelta, timezone

import pytest

from tasks.core.settings import REPO_ROOT
from tasks.monitoring.store import (
    SCHEMA_VERSION,
    Alert,
    CostLine,
    Metric,
    MetricsStore,
    StoreError,
    TaskUsage,
)

T0 = datetime(2026, 11, 30, 22, 0, tzinfo=timezone.utc)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def new_store(request, tmp_path) -> MetricsStore:
    """A new store on each backend: a SQLite file, or a fresh database on the shared PostgreSQL server."""
    if request.param == "sqlite":
        return MetricsStore.open(tmp_path / "m.sqlite")
    return MetricsStore.open(request.getfixturevalue("postgres_url"))


def raw_execute(store: MetricsStore, sql: str) -> None:
    """`sql` run past the store, with the backend's own driver."""
    if store.path is not None:
        with sqlite3.connect(store.path) as db:
            db.execute(sql)
        return
    import psycopg

    with psycopg.connect(store.url) as db:
        db.execute(sql)


def usage(seconds: float = 60.0, cpus: float = 2.0, **kw) -> TaskUsage:
    return TaskUsage(T0, T0 + timedelta(seconds=seconds), seconds, cpus, **kw)


def test_open_creates_versioned_schema_under_sluice_home(settings):
    store = MetricsStore.open(settings)
    assert store.path == settings.home / "monitoring" / "metrics.sqlite"
    assert store.schema_version() == SCHEMA_VERSION
    assert MetricsStore.open(settings.layout).schema_version() == SCHEMA_VERSION  # reopening keeps one row
    with sqlite3.connect(store.path) as db:
        assert db.execute("SELECT COUNT(*) FROM schema_version").fetchone()[0] == 1
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"schema_version", "runs", "tasks", "metrics", "costs", "alerts"} <= tables


def test_a_newer_schema_is_refused(new_store):
    raw_execute(new_store, f"UPDATE schema_version SET version={SCHEMA_VERSION + 1}")
    with pytest.raises(StoreError, match="newer than this code"):
        MetricsStore.open(new_store.path or new_store.url)


def test_rewriting_a_task_replaces_its_rows_and_keeps_other_tasks(new_store):
    store = new_store
    m = [Metric("algorithm", "loss", 0.5, step=10, data_version="data-v1"), Metric("algorithm", "loss", 0.4, step=20)]
    store.record("r1", "train", usage=usage(), metrics=m)
    store.record("r1", "evaluate", metrics=[Metric("business", "roc_auc", 0.8, subject="format=plain")])
    store.record("r1", "train", usage=usage(seconds=30), metrics=m[:1])  # a retry
    assert [(r["name"], r["value"], r["step"]) for r in store.metrics("r1", task="train")] == [("loss", 0.5, 10)]
    assert store.metrics("r1", layer="business")[0]["subject"] == "format=plain"
    assert [t["seconds"] for t in store.tasks("r1")] == [30.0]
    assert [r["run_id"] for r in store.runs()] == ["r1"]


def test_costs_alerts_and_run_summary(new_store):
    store = new_store
    line = CostLine("compute", "cpu", 2.0, "cpu_hour", 0.04, 0.08, "2026-11-30")
    store.record("r1", "train", costs=[line, CostLine("waste", "idle_gpu", 1, "gpu_hour", 2.5, 2.5, "2026-11-30")])
    store.record("r1", "train", alerts=[Alert("loss_spike", "warning", "loss 9 > 3 x median 1", 9.0, 3.0)])
    store.record_run("r1", outcome="deployed model-v2", model_version="model-v2", data_version="data-v2")
    (run,) = store.runs()
    assert run["cost"] == pytest.approx(0.08)  # waste is shown, not billed twice
    assert run["alerts"] == 1 and run["outcome"] == "deployed model-v2" and run["model_version"] == "model-v2"
    assert [c["amount"] for c in store.costs(day="2026-11-30", kind="compute")] == [0.08]
    assert store.days() == ["2026-11-30"]
    assert store.alerts("r1")[0]["rule"] == "loss_spike"
    store.record_alerts("r1", "train", [])  # re-evaluated: no alert now
    assert store.alerts("r1") == []


def test_metric_history_takes_each_runs_last_value(new_store):
    store = new_store
    store.record_metrics("r1", "canary_analysis", [Metric("business", "online_auc", 0.8, subject="challenger")])
    store.record_metrics(
        "r2", "canary_analysis", [Metric("business", "online_auc", v, subject="challenger") for v in (0.7, 0.75)]
    )
    hist = store.metric_history("online_auc", subject="challenger")
    assert [(h["run_id"], h["value"]) for h in hist] == [("r1", 0.8), ("r2", 0.75)]


def test_bad_values_are_refused_and_nan_is_missing(new_store):
    with pytest.raises(StoreError, match="layer 'gpu'"):
        Metric("gpu", "util", 1.0)
    with pytest.raises(StoreError, match="seconds must be >= 0"):
        usage(seconds=-1)
    with pytest.raises(StoreError, match="kind 'refund'"):
        CostLine("refund", "x", 1, "u", 1, 1, "2026-11-30")
    store = new_store
    store.record_metrics("r1", "train", [Metric("algorithm", "loss", float("nan"))])
    assert store.metrics("r1")[0]["value"] is None


def test_sqlalchemy_and_the_driver_are_imported_only_when_used(tmp_path):
    """The model server's cold start pays for neither; a SQLite store never imports the PostgreSQL driver."""
    code = (
        "import json, sys\n"
        "import tasks.serving.__main__, tasks.serving.app, tasks.monitoring.store, tasks.registry.repo\n"
        "before = sorted(m for m in ('sqlalchemy', 'psycopg') if m in sys.modules)\n"
        "from tasks.monitoring.store import MetricsStore\n"
        "MetricsStore.open(sys.argv[1]).runs()\n"
        "after = sorted(m for m in ('sqlalchemy', 'psycopg') if m in sys.modules)\n"
        "print(json.dumps([before, after]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "m.sqlite")], cwd=REPO_ROOT, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout) == [[], ["sqlalchemy"]]


# The schema as the store wrote it before it went through SQLAlchemy (raw sqlite3), for the test below.
PRE_SQLALCHEMY_SCHEMA = """
CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    kind TEXT NOT NULL DEFAULT 'pipeline',
    dag_id TEXT,
    first_seen TEXT NOT NULL,
    last_seen TEXT NOT NULL,
    day TEXT NOT NULL,
    outcome TEXT,
    data_version TEXT,
    model_version TEXT
);
CREATE TABLE IF NOT EXISTS tasks (
    run_id TEXT NOT NULL,
    task TEXT NOT NULL,
    started TEXT NOT NULL,
    ended TEXT NOT NULL,
    seconds REAL NOT NULL,
    cpus REAL NOT NULL,
    gpus REAL NOT NULL,
    memory_gb REAL NOT NULL,
    backend TEXT NOT NULL,
    state TEXT NOT NULL,
    day TEXT NOT NULL,
    PRIMARY KEY (run_id, task)
);
CREATE TABLE IF NOT EXISTS metrics (
    id INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL,
    task TEXT NOT NULL,
    layer TEXT NOT NULL,
    name TEXT NOT NULL,
    subject TEXT NOT NULL DEFAULT '',
    value REAL,
    step INTEGER,
    model_version TEXT,
    data_version TEXT,
    ts TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS metrics_run_task ON metrics (run_id, task);
CREATE INDEX IF NOT EXISTS metrics_name ON metrics (name, layer);
CREATE TABLE IF NOT EXISTS costs (
    id INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL,
    task TEXT NOT NULL,
    kind TEXT NOT NULL,
    item TEXT NOT NULL,
    quantity REAL NOT NULL,
    unit TEXT NOT NULL,
    unit_price REAL NOT NULL,
    amount REAL NOT NULL,
    day TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS costs_run_task ON costs (run_id, task);
CREATE INDEX IF NOT EXISTS costs_day ON costs (day);
CREATE TABLE IF NOT EXISTS alerts (
    id INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL,
    task TEXT NOT NULL,
    rule TEXT NOT NULL,
    severity TEXT NOT NULL,
    message TEXT NOT NULL,
    value REAL,
    threshold REAL,
    ts TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS alerts_run_task ON alerts (run_id, task);
"""


def test_a_store_written_before_sqlalchemy_is_read_and_written_as_before(tmp_path):
    path = tmp_path / "m.sqlite"
    with sqlite3.connect(path) as db:
        db.executescript(PRE_SQLALCHEMY_SCHEMA)
        db.execute("INSERT INTO schema_version (version) VALUES (1)")
        db.execute(
            "INSERT INTO runs (run_id, first_seen, last_seen, day) VALUES ('r0', '2026-11-30T22:00:00+00:00', "
            "'2026-11-30T22:00:00+00:00', '2026-11-30')"
        )
        db.execute(
            "INSERT INTO metrics (run_id, task, layer, name, value, ts) VALUES "
            "('r0', 'train', 'algorithm', 'loss', 0.5, '2026-11-30T22:00:00+00:00')"
        )
    store = MetricsStore.open(path)
    assert [(r["run_id"], r["kind"], r["cost"]) for r in store.runs()] == [("r0", "pipeline", 0)]
    store.record("r0", "train", usage=usage(), metrics=[Metric("algorithm", "loss", 0.4)] * 2)
    assert [(m["id"], m["value"], m["subject"]) for m in store.metrics("r0")] == [(1, 0.4, ""), (2, 0.4, "")]
    assert [t["seconds"] for t in store.tasks("r0")] == [60.0]
    with sqlite3.connect(path) as db:  # the tables are the old ones, untouched
        (sql,) = db.execute("SELECT sql FROM sqlite_master WHERE name='metrics'").fetchone()
    assert "id INTEGER PRIMARY KEY" in sql
