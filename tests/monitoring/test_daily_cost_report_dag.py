"""The daily_cost_report DAG: parses light and scheduled, and runs once through `airflow dags test` on a
store seeded by the real code path (declared steps run through Step.run and the monitoring hook)."""

from __future__ import annotations

import json
import sqlite3
from datetime import datetime, timezone

import pytest

from tasks.core.context import StepContext
from tasks.monitoring.store import MetricsStore
from tests.airflow_helpers import airflow, migrate, python_json
from tests.monitoring.steps_for_tests import labeling_work

PARSE = """
import json, sys
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder="dags/daily_cost_report.py")
dag = bag.dags["daily_cost_report"]
print(json.dumps({"errors": {k: str(v) for k, v in bag.import_errors.items()}, "tasks": [t.task_id for t in dag.tasks],
    "schedule": str(dag.timetable.summary), "catchup": dag.catchup, "params": sorted(dag.params.keys()),
    "retries": [t.retries for t in dag.tasks], "tags": sorted(dag.tags), "doc": bool(dag.doc_md),
    "heavy": sorted(m for m in ("torch", "pandas", "tasks.monitoring.store") if m in sys.modules)}))
"""


def test_the_dag_parses_light_and_is_scheduled_daily(settings):
    d = python_json(settings, PARSE)
    assert d["errors"] == {} and d["tasks"] == ["cost_report"] and d["params"] == ["day"]
    assert d["schedule"] == "30 0 * * *" and d["catchup"] is False and d["retries"] == [1]
    assert d["tags"] == ["cost", "sluice"] and d["doc"] and d["heavy"] == []


@pytest.mark.slow
def test_the_dag_runs_once_and_writes_the_days_report(settings):
    day = datetime.now(timezone.utc).date().isoformat()
    labeling_work.run(StepContext.create("nightly-1", settings), lambda n: None, seconds="0.2")
    before = MetricsStore.open(settings).runs()[0]["cost"]
    migrate(settings)
    proc = airflow(settings, "dags", "test", "daily_cost_report", "-c", json.dumps({"day": day}))
    with sqlite3.connect(settings.layout.airflow_home / "airflow.db") as db:
        (run_id, state), *_ = db.execute("SELECT run_id, state FROM dag_run WHERE dag_id='daily_cost_report'")
    assert state == "success", proc.stdout[-3000:] + proc.stderr[-3000:]
    rep = json.loads((settings.layout.reports / f"cost-{day}.json").read_text())
    storage = sum(c["amount"] for c in MetricsStore.open(settings).costs(f"storage__{day}"))
    assert rep["total"] == pytest.approx(before + storage) and list(rep["runs"])[0] in ("nightly-1", f"storage__{day}")
    assert "daily cost report" in (settings.layout.reports / f"cost-{day}.txt").read_text()
    (task,) = MetricsStore.open(settings).tasks(run_id)  # the report's own task is in the ledger
    assert task["task"] == "cost_report" and task["state"] == "success"
    assert MetricsStore.open(settings).run(run_id)["dag_id"] == "daily_cost_report"
