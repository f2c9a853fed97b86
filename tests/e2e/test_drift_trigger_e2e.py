"""The real scheduler: monitor_serving finds a planted shift, its sluice_serving_drift event starts a
nightly_pipeline run (AssetOrTimeSchedule) that carries no conf, and with no batch waiting that run
retrains (train succeeds) on the current data version, the cause from the event's extra in hand.
The run is stopped with the services after train (no gold sets exist here for evaluate)."""

from __future__ import annotations

import pytest

from ops.services import AirflowServices
from tasks.core.files import read_json
from tasks.core.processes import group_alive
from tasks.core.settings import Settings
from tasks.core.wait import wait_until
from tests.monitoring.test_serving_drift import build_world, serve, shifted

pytestmark = [pytest.mark.slow, pytest.mark.paired]


def test_a_drift_event_triggers_a_nightly_run_that_retrains(tmp_path, emails, monkeypatch):
    monkeypatch.setenv("SLUICE_DEMO_FEED", "0")  # no batch will land: the drift-triggered run must train anyway
    settings = Settings.from_env({"SLUICE_HOME": str(tmp_path / "home"), "SLUICE_DEMO_FEED": "0"})
    world = build_world(settings, emails, tmp_path)
    serve(settings, world["version"], shifted(world["rest"].head(600)), world["model"])

    svc = AirflowServices(settings).start()  # the scheduler creates asset-triggered runs (use_job_schedule)
    pgids = dict(svc.pgids)
    try:
        client = svc.client()
        for dag in ("monitor_serving", "nightly_pipeline"):
            client.wait_for_dag(dag)
            client.unpause(dag)
        run = client.trigger("monitor_serving", run_id="drift_e2e")
        assert client.wait_for_run("monitor_serving", run, timeout_s=300) == "success"

        def nightly_runs():
            r = client.request("GET", "/dags/nightly_pipeline/dagRuns").json()["dag_runs"]
            started = [x for x in r if x["run_type"] == "asset_triggered" and x["start_date"]]
            return started or None

        # The event is read once the run it created has started: while that run is still queued (no
        # start_date), Airflow 3's GET /assets/events answers 500 (apache/airflow#71360).
        (nightly,) = wait_until(nightly_runs, timeout_s=120, interval_s=2, what="an asset-triggered nightly run")
        assert nightly["conf"] in ({}, None)

        events = client.request("GET", "/assets/events", params={"source_dag_id": "monitor_serving"}).json()
        assert len(events["asset_events"]) == 1, [(e["source_run_id"], e["timestamp"]) for e in events["asset_events"]]
        (event,) = events["asset_events"]
        assert event["name"] == "sluice_serving_drift" and event["extra"]["event"] == "serving_drift"
        assert event["extra"]["run_id"] == run and "log1p_num_char" in event["extra"]["drifted"][world["version"]]
        assert [r["run_id"] for r in event["created_dagruns"]] == [nightly["dag_run_id"]], event

        def retrained():
            states = {
                t["task_id"]: t["state"] for t in client.task_instances("nightly_pipeline", nightly["dag_run_id"])
            }
            return states if states.get("drift_retrain") in ("success", "failed") else None

        states = wait_until(retrained, timeout_s=300, interval_s=2, what="the nightly run's drift_retrain")
        assert states["ingest"] == "success" and states["drift_retrain"] == "success", states
        assert states.get("no_batch") == "skipped" and states.get("validate_raw") == "skipped", states
        xcom = client.request(
            "GET",
            f"/dags/nightly_pipeline/dagRuns/{nightly['dag_run_id']}/taskInstances/drift_retrain/xcomEntries/result",
        ).json()
        assert world["data_version"] in str(xcom["value"]) and run in str(xcom["value"]), xcom

        def trained():
            states = {
                t["task_id"]: t["state"] for t in client.task_instances("nightly_pipeline", nightly["dag_run_id"])
            }
            return states if states.get("train") in ("success", "failed", "upstream_failed") else None

        states = wait_until(trained, timeout_s=600, interval_s=3, what="the drift-triggered run's train")
        assert states["train"] == "success", states
        record = read_json(settings.layout.run_dir(nightly["dag_run_id"]) / "steps" / "train.json")
        assert record["data_version"] == world["data_version"] and record["rows"] > 0, record
    finally:
        svc.stop()
    assert not any(group_alive(p) for p in pgids.values()), "a service outlived stop()"
