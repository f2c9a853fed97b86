"""The metrics store: schema and version, idempotent writes per (run, task), reads by run/layer/day; each
on SQLite and on a real PostgreSQL server (tests/postgres.py; more in test_store_postgres.py)."""

from __future__ import annotations

import sqlite3
from datetime import datetime, timedelta, timezone

import pytest

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
