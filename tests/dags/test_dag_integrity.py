"""Every DAG file imports cleanly, without heavy libraries, and is wired as intended."""

from pathlib import Path

import pytest

from tests.airflow_helpers import python_json

DAG_FILES = sorted(p.name for p in (Path(__file__).resolve().parents[2] / "dags").glob("*.py"))
HEAVY = ["torch", "snorkel", "great_expectations", "onnxruntime", "onnx", "dvc", "sklearn"]

LOAD = """
import json, sys
from datetime import timedelta
import airflow.timetables.trigger as trigger
from airflow.dag_processing.dagbag import DagBag
from airflow.timetables.base import TimeRestriction
bag = DagBag()


def first_run_after_unpause(timetable, minutes):
    # The first run of a DAG unpaused `minutes` after its latest tick: that tick, or the next?
    cron = getattr(timetable, "timetable", timetable)
    if not isinstance(cron, trigger.CronTriggerTimetable):
        return None
    now = trigger.utcnow
    tick = cron._align_to_prev(trigger.coerce_datetime(now()))
    trigger.utcnow = lambda: tick + timedelta(minutes=minutes)
    try:
        info = cron.next_dagrun_info(  # what an AssetOrTimeSchedule asks of its timetable too
            last_automated_data_interval=None, restriction=TimeRestriction(None, None, catchup=False)
        )
    finally:
        trigger.utcnow = now
    return "past tick" if info.run_after <= tick else "next tick"


out = {"errors": {k: str(v) for k, v in bag.import_errors.items()}, "dags": {}}
for dag_id, dag in bag.dags.items():
    out["dags"][dag_id] = {
        "file": dag.fileloc.rsplit("/", 1)[-1], "tags": sorted(dag.tags), "catchup": dag.catchup,
        "max_active_runs": dag.max_active_runs, "doc": bool(dag.doc_md),
        "params": sorted(dag.params.keys()), "paused_on_creation": dag.is_paused_upon_creation,
        "timetable": type(dag.timetable).__name__,
        "cron": getattr(getattr(dag.timetable, "timetable", dag.timetable), "summary", None),
        "first_run_1_min_after_a_tick": first_run_after_unpause(dag.timetable, 1),
        "schedule_assets": [a.name for a in getattr(getattr(dag.timetable, "asset_condition", None), "objects", [])],
        "tasks": {t.task_id: {"retries": t.retries, "down": sorted(t.downstream_task_ids),
                              "trigger_rule": getattr(t.trigger_rule, "value", t.trigger_rule),
                              "outlets": [type(o).__name__ + ":" + o.name for o in t.outlets]} for t in dag.tasks},
    }
out["heavy"] = sorted(m for m in %r if m in sys.modules)
print(json.dumps(out))
""" % (HEAVY,)


@pytest.fixture(scope="module")
def dagbag(tmp_path_factory):
    from tasks.core.settings import Settings

    settings = Settings.from_env({"SLUICE_HOME": str(tmp_path_factory.mktemp("home"))})
    return python_json(settings, LOAD)


def test_no_import_errors(dagbag):
    assert dagbag["errors"] == {}


def test_every_dag_file_defines_a_dag(dagbag):
    assert sorted({d["file"] for d in dagbag["dags"].values()}) == DAG_FILES


def test_parsing_imports_nothing_heavy(dagbag):
    assert dagbag["heavy"] == []


@pytest.mark.parametrize("dag_id", ["nightly_pipeline", "rollback", "reproduce"])
def test_dag_settings(dagbag, dag_id):
    d = dagbag["dags"][dag_id]
    assert d["tags"] and d["doc"] and d["catchup"] is False and d["max_active_runs"] == 1
    assert all(t["retries"] >= 0 for t in d["tasks"].values())
    work = [k for k in d["tasks"] if k not in ("no_batch", "report", "run_failed")]
    assert all(d["tasks"][k]["retries"] >= 1 for k in work), "every working step retries"


def test_no_cycles(dagbag):
    for dag_id, d in dagbag["dags"].items():
        indeg = {t: 0 for t in d["tasks"]}
        for t in d["tasks"].values():
            for down in t["down"]:
                indeg[down] += 1
        ready, seen = [t for t, n in indeg.items() if n == 0], 0
        while ready:
            t = ready.pop()
            seen += 1
            for down in d["tasks"][t]["down"]:
                indeg[down] -= 1
                if indeg[down] == 0:
                    ready.append(down)
        assert seen == len(d["tasks"]), f"{dag_id} has a cycle"


def test_nightly_pipeline_wiring(dagbag):
    t = dagbag["dags"]["nightly_pipeline"]["tasks"]
    for task in t.values():  # run_failed watches every task
        task["down"] = [d for d in task["down"] if d != "run_failed"]
    assert t["ingest"]["down"] == ["drift_retrain", "no_batch", "validate_raw"]
    # a drift-triggered run with no batch trains on the current data version: train after either
    assert t["drift_retrain"]["down"] == ["train"] and t["snapshot"]["down"] == ["train"]
    assert t["train"]["trigger_rule"] == "none_failed_min_one_success"
    assert t["validate_raw"]["down"] == ["quarantine_raw", "weak_label"]
    assert t["validate_labeled"]["down"] == ["quarantine_labeled", "snapshot"]
    # the labeling queue fills beside the data gate: no gate waits for it, the report does
    assert t["weak_label"]["down"] == ["fill_queue", "validate_labeled"] and t["fill_queue"]["down"] == ["report"]
    assert t["evaluate"]["down"] == ["compress", "reject_model_evaluate"]
    assert t["compress"]["down"] == ["register", "reject_model_compress"]
    assert t["register"]["down"] == ["deploy_canary"] and t["deploy_canary"]["down"] == ["canary_analysis"]
    assert t["canary_analysis"]["down"] == ["promote", "rollback_canary"]
    assert t["promote"]["down"] == ["report"] and t["rollback_canary"]["down"] == ["report"]
    assert t["report"]["trigger_rule"] == "all_done" and t["run_failed"]["trigger_rule"] == "one_failed"
    assert t["run_failed"]["down"] == [] and t["report"]["down"] == []
    assert dagbag["dags"]["nightly_pipeline"]["params"] == ["batch", "epochs", "params_overlay"]


def test_rollback_dag(dagbag):
    d = dagbag["dags"]["rollback"]
    assert list(d["tasks"]) == ["rollback_versions"]
    assert d["params"] == ["data_version", "model_version", "reason"]
    assert d["paused_on_creation"] is False  # an emergency rollback must not wait in `queued`


def test_version_steps_emit_assets(dagbag):
    """snapshot and register declare the data and model version Assets (a user's DAG can be scheduled on
    them); the rollback DAG emits through an alias, only for the pointers it moved; no other task emits."""
    nightly = dagbag["dags"]["nightly_pipeline"]["tasks"]
    assert nightly["snapshot"]["outlets"] == ["Asset:sluice_data_version"]
    assert nightly["register"]["outlets"] == ["Asset:sluice_model_version"]
    assert {k for k, t in nightly.items() if t["outlets"]} == {"snapshot", "register"}
    assert dagbag["dags"]["rollback"]["tasks"]["rollback_versions"]["outlets"] == ["AssetAlias:sluice_rollback_moves"]
    monitor = dagbag["dags"]["monitor_serving"]["tasks"]
    assert monitor["monitor"]["outlets"] == ["AssetAlias:sluice_serving_drift_events"]


def test_nightly_is_scheduled_on_its_cron_and_the_serving_drift_asset(dagbag):
    nightly, monitor = dagbag["dags"]["nightly_pipeline"], dagbag["dags"]["monitor_serving"]
    assert nightly["timetable"] == "AssetOrTimeSchedule", nightly["timetable"]
    assert nightly["cron"] == "0 2 * * *" and nightly["schedule_assets"] == ["sluice_serving_drift"], nightly
    assert monitor["timetable"] == "CronTriggerTimetable" and monitor["cron"] == "0 * * * *", monitor
    assert monitor["params"] == ["window_end"] and monitor["max_active_runs"] == 1


def test_an_unpaused_dag_waits_for_its_next_tick(dagbag):
    """Airflow 3.3 runs the tick that just passed when a DAG with run_immediately=False is unpaused within
    max(10% of the cron's gap, 5 min) of it (tasks/core/schedules.py): a nightly unpaused at 03:00 would run
    at once, and an hourly monitor unpaused at :01 would send a drift event no one asked for."""
    cron = {k: d["first_run_1_min_after_a_tick"] for k, d in dagbag["dags"].items() if d["cron"]}
    assert set(cron) == {"nightly_pipeline", "monitor_serving", "daily_cost_report"}, cron
    assert set(cron.values()) == {"next tick"}, cron
