"""The real services (api-server, scheduler, dag-processor) on loopback, driven over REST."""

import json
import re

import httpx
import psutil
import pytest

from ops.services import AirflowServices, ServiceError
from tasks.core.processes import group_alive
from tasks.registry import Registry
from tests.e2e import test_ui_sluice_page as ui

pytestmark = [pytest.mark.slow, pytest.mark.paired]
DAG = "nightly_pipeline"


@pytest.fixture(scope="module")
def services(tmp_path_factory):
    from tasks.core.settings import Settings

    settings = Settings.from_env({"SLUICE_HOME": str(tmp_path_factory.mktemp("home"))})
    svc = AirflowServices(settings, nightly_schedule=False).start()
    pgids = dict(svc.pgids)
    yield svc
    svc.stop()
    assert not any(group_alive(p) for p in pgids.values()), "a service outlived stop()"


def _listening(pgids):
    pids = {p.pid for p in psutil.process_iter() if _safe_pgid(p.pid) in set(pgids.values())}
    return [c for c in psutil.net_connections("inet") if c.status == psutil.CONN_LISTEN and c.pid in pids]


def _safe_pgid(pid):
    try:
        import os

        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def test_every_listening_socket_is_loopback(services):
    socks = _listening(services.pgids)
    assert socks, "the api-server should be listening"
    assert all(c.laddr.ip in ("127.0.0.1", "::1") for c in socks), socks


def test_unauthenticated_and_bad_password_are_refused(services):
    r = httpx.post(f"{services.base_url}/api/v2/dags/{DAG}/dagRuns", json={"logical_date": None}, timeout=10)
    assert r.status_code in (401, 403)
    r = httpx.post(f"{services.base_url}/auth/token", json={"username": "admin", "password": "wrong"}, timeout=10)
    assert r.status_code == 401
    client = services.client()
    client.password = "wrong"
    with pytest.raises(ServiceError, match="login refused"):
        client.token()


def test_trigger_with_conf_runs_to_success(services):
    client = services.client()
    client.wait_for_dag(DAG)
    client.unpause(DAG)
    # Params are validated against their JSON schema at trigger time.
    bad = client.request("POST", f"/dags/{DAG}/dagRuns", json={"logical_date": None, "conf": {"epochs": 0}})
    assert bad.status_code == 400, bad.text
    run_id = client.trigger(DAG, {"epochs": 6}, run_id="rest_e2e_1")
    assert (
        client.request(
            "POST", f"/dags/{DAG}/dagRuns", json={"logical_date": None, "dag_run_id": "rest_e2e_1"}
        ).status_code
        == 409
    )
    seen = []
    state = client.wait_for_run(DAG, run_id, timeout_s=600, on_change=lambda t, s: seen.append((t, s)))
    assert state == "success", seen
    assert ("promote", "success") in seen and ("report", "success") in seen

    summary = json.loads((services.settings.layout.run_dir(run_id) / "summary.json").read_text())
    assert summary["outcome"] == "deployed model-v1" and summary["train"]["epochs"] == 6
    reg = Registry(services.settings)
    assert reg.state()["prod_model"] == "model-v1"
    assert reg.model_version_info("model-v1")["run_id"] == run_id
    # Task logs are served by the api-server from the shared log folder (no worker log server).
    log = client.request(
        "GET", f"/dags/{DAG}/dagRuns/{run_id}/taskInstances/train/logs/1", headers={"Accept": "application/json"}
    )
    assert log.status_code == 200 and "trained on" in log.text


def test_a_params_file_the_running_services_do_not_read_is_refused_and_status_tells_each_part(services, tmp_path):
    """`SLUICE_PARAMS=<file> make run` with the services up: they read their own params (every task loads
    them from the services' environment), so the run would silently ignore the file; it is refused naming
    both files, and nothing is triggered. `make status` lists each part alive and healthy, and the
    model server ready, with the Sluice page's URL."""
    import subprocess
    import sys

    from tasks.core.settings import REPO_ROOT

    other = tmp_path / "strict.yaml"
    other.write_text((REPO_ROOT / "params.yaml").read_text().replace("min_roc_auc: 0.", "min_roc_auc: 0.999 #"))
    env = {"PATH": "/usr/bin:/bin", "SLUICE_HOME": str(services.settings.home), "DVC_NO_ANALYTICS": "1"}
    runs_before = services.client().request("GET", f"/dags/{DAG}/dagRuns").json()["total_entries"]
    run = subprocess.run(
        [sys.executable, "-m", "ops", "run"],
        env={**env, "SLUICE_PARAMS": str(other)},
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2, run.stdout + run.stderr
    assert f"the running services read {REPO_ROOT / 'params.yaml'}" in run.stderr
    assert f"this command was given {other}" in run.stderr and "make down" in run.stderr
    assert services.client().request("GET", f"/dags/{DAG}/dagRuns").json()["total_entries"] == runs_before

    status = subprocess.run(
        [sys.executable, "-m", "ops", "status"], env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )
    assert status.returncode == 0, status.stdout + status.stderr
    lines = status.stdout.splitlines()
    for part in ("api-server", "scheduler", "dag-processor", "model-server"):
        assert f"  {part:<13} alive and healthy" in lines, status.stdout
    assert f"Sluice page (runs, versions, canary, alerts, costs): {services.base_url}/sluice/" in lines


def test_rollback_dag_over_rest(services):
    """A second nightly run makes data-v2/model-v2; the rollback DAG puts v1 of both back."""
    client = services.client()
    assert client.wait_for_run(DAG, client.trigger(DAG, {"epochs": 4}, run_id="rest_e2e_2")) == "success"
    reg = Registry(services.settings)
    assert (reg.state()["current_data"], reg.state()["prod_model"]) == ("data-v2", "model-v2")

    client.wait_for_dag("rollback")
    client.unpause("rollback")
    # Malformed versions (path tricks included) are refused at trigger time by the Params schema.
    for bad in ({"data_version": "../../etc", "reason": "x" * 5}, {"model_version": "model-v2", "reason": ""}):
        r = client.request("POST", "/dags/rollback/dagRuns", json={"logical_date": None, "conf": bad})
        assert r.status_code == 400, r.text
    # A well-formed version that does not exist fails the run, naming it; nothing changes.
    missing = client.trigger("rollback", {"model_version": "model-v9", "reason": "typo test"})
    assert client.wait_for_run("rollback", missing, timeout_s=300) == "failed"
    assert reg.state()["prod_model"] == "model-v2"

    run_id = client.trigger(
        "rollback", {"data_version": "data-v1", "model_version": "model-v1", "reason": "batch-0002 labels look wrong"}
    )
    assert client.wait_for_run("rollback", run_id, timeout_s=300) == "success"
    state = reg.state()
    assert (state["current_data"], state["prod_model"]) == ("data-v1", "model-v1")
    assert state["serving"]["champion"]["model_version"] == "model-v1"
    audit = json.loads((reg.root / "audit.jsonl").read_text().splitlines()[-1])
    assert audit["action"] == "rollback" and audit["who"] == "admin"
    assert audit["from"] == {"data_version": "data-v2", "model_version": "model-v2"}
    assert audit["reason"] == "batch-0002 labels look wrong"
    # Twice is harmless.
    again = client.trigger("rollback", {"data_version": "data-v1", "model_version": "model-v1", "reason": "again"})
    assert client.wait_for_run("rollback", again, timeout_s=300) == "success"
    assert json.loads((reg.root / "audit.jsonl").read_text().splitlines()[-1]) == audit


def readme_rest_calls() -> dict[str, str]:
    """The README's REST section as {comment line: the shell command under it}."""
    from tasks.core.settings import REPO_ROOT

    text = (REPO_ROOT / "docs" / "operations.md").read_text()
    section = text.split("## The Airflow UI and the REST API", 1)[1].split("\n## ", 1)[0]
    calls = {}
    for block in re.findall(r"```sh\n(.*?)```", section, re.S):
        for chunk in re.split(r"^# ", block, flags=re.M)[1:]:
            what, _, command = chunk.partition("\n")
            calls[what.strip()] = command.strip()
    return calls


def run_readme_call(services, what: str, **env: str) -> str:
    """Log in and run one of the README's calls with bash and curl, as a user would."""
    import os
    import subprocess
    from urllib.parse import urlsplit

    calls = readme_rest_calls()
    script = "set -euo pipefail\n" + calls["log in: a token for the calls below"] + "\n" + calls[what]
    client = services.client()
    env = {**os.environ, "PORT": str(urlsplit(services.base_url).port), "PASSWORD": client.password, **env}
    proc = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"{what}: {proc.stderr[-2000:]}"
    return proc.stdout


def test_readme_rest_calls_list_runs_read_a_log_and_the_asset_events(services):
    """The README's own curl lines against the running services: list the runs, read the train task's log
    (with its progress lines), see the data and model versions as Asset events, trigger a rollback."""
    client = services.client()
    calls = readme_rest_calls()
    assert {"trigger nightly_pipeline with a conf", "trigger a rollback", "list runs, newest first"} <= set(calls)
    # The nightly trigger the tests sent through their client has the README's body shape.
    assert '"logical_date": null, "conf": {' in calls["trigger nightly_pipeline with a conf"]

    run_readme_call(services, "unpause nightly_pipeline (a new DAG starts paused)")
    listed = [line.split() for line in run_readme_call(services, "list runs, newest first").splitlines()]
    assert listed[:2] == [["rest_e2e_2", "success"], ["rest_e2e_1", "success"]], listed

    log = run_readme_call(
        services, "read a task's log: the train task of run $RUN_ID (one of those listed), try 1", RUN_ID="rest_e2e_1"
    )
    assert "trained on" in log
    progress = [line for line in log.splitlines() if "training: step" in line]
    assert progress and "100%" in progress[-1] and "ETA" in progress[-1], log[-2000:]

    def task_log(run_id: str, task: str) -> str:
        r = client.request(
            "GET", f"/dags/{DAG}/dagRuns/{run_id}/taskInstances/{task}/logs/1", headers={"Accept": "application/json"}
        )
        assert r.status_code == 200, r.text
        return "\n".join(str(e.get("event", "")) for e in r.json()["content"])

    # The other long tasks' progress lines: counts, a rate and an ETA (the second run went through the canary).
    assert re.search(r"labeling 500 rows: LF (\d+)/\1 \(100%\), [0-9.,]+ LFs/s", task_log("rest_e2e_1", "weak_label"))
    assert "compression search: candidate 1/" in task_log("rest_e2e_2", "compress")
    canary = task_log("rest_e2e_2", "canary_analysis")
    assert "canary model-v2 vs model-v1: weight step 2/2 (100%)" in canary and "replay to http" in canary

    # Asset events in Airflow's DB, with the versions as extra: snapshot and register of both runs.
    events = client.request("GET", "/assets/events", params={"source_dag_id": DAG, "order_by": "timestamp"}).json()
    made = [(e["name"], e["source_task_id"], e["source_run_id"], e["extra"]) for e in events["asset_events"]]
    data = [(t, r, x["data_version"], x["event"]) for n, t, r, x in made if n == "sluice_data_version"]
    model = [(t, r, x["model_version"], x["data_version"]) for n, t, r, x in made if n == "sluice_model_version"]
    assert data == [
        ("snapshot", "rest_e2e_1", "data-v1", "snapshot"),
        ("snapshot", "rest_e2e_2", "data-v2", "snapshot"),
    ], made
    assert model == [
        ("register", "rest_e2e_1", "model-v1", "data-v1"),
        ("register", "rest_e2e_2", "model-v2", "data-v2"),
    ]
    # The rollback DAG's first successful run moved both pointers: one event each; the repeat moved nothing.
    moved = client.request("GET", "/assets/events", params={"source_dag_id": "rollback"}).json()["asset_events"]
    assert sorted(
        (
            e["name"],
            e["extra"]["event"],
            e["extra"].get("data_version") or e["extra"]["model_version"],
            e["extra"]["previous"],
        )
        for e in moved
    ) == [
        ("sluice_data_version", "rollback", "data-v1", "data-v2"),
        ("sluice_model_version", "rollback", "model-v1", "model-v2"),
    ]
    shown = run_readme_call(services, "the data and model versions made (Asset events: snapshot, register, rollback)")
    assert "sluice_model_version" in shown and "'model_version': 'model-v2'" in shown

    # The README's rollback (to where the registry already is): a run that succeeds and changes nothing.
    before = Registry(services.settings).state()
    out = json.loads(run_readme_call(services, "trigger a rollback"))
    assert client.wait_for_run("rollback", out["dag_run_id"], timeout_s=300) == "success"
    after = Registry(services.settings).state()
    assert (
        (after["current_data"], after["prod_model"])
        == (before["current_data"], before["prod_model"])
        == (
            "data-v1",
            "model-v1",
        )
    )

    # The registry's GTO tags followed the nightly runs and the rollback DAG: `gto show` (the real CLI) sees them.
    import subprocess
    import sys
    from pathlib import Path

    gto = str(Path(sys.executable).with_name("gto"))
    registry = Registry(services.settings).root
    shown = subprocess.run([gto, "show", "-r", str(registry), "--json"], capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["model"] == {
        "version": "v2.0.0",
        "stage": {"prod": "v1.0.0"},  # the canary stage left model-v2 when it was promoted
        "registered": True,
        "active": True,
    }


# The Sluice page on these services, after the nightly runs above (one Airflow start for both modules).
def test_sluice_page_api_needs_an_airflow_token(services):
    ui.check_api_needs_an_airflow_token(services)


def test_sluice_page_in_a_browser(services):
    ui.check_page_in_a_browser(services)


@pytest.mark.extended
def test_tuning_dag_runs_parallel_trials_and_a_nightly_run_trains_with_its_overlay(services):
    """The tuning DAG over REST on the embedded default: a study of 3 trials as mapped tasks, two at once
    (LocalExecutor), the Pareto plot and a tuned-v1 overlay; then a nightly run with
    params_overlay=latest trains with the chosen trial's values and its train record names tuned-v1."""
    from datetime import datetime

    from tasks.registry.tuning import TunedOverlays

    client = services.client()
    client.wait_for_dag("tuning")
    for bad in ({"study_name": "no spaces allowed"}, {"parallelism": 99}, {"data_version": "../x"}):
        r = client.request("POST", "/dags/tuning/dagRuns", json={"logical_date": None, "conf": bad})
        assert r.status_code == 400, r.text
    conf = {"data_version": "data-v1", "study_name": "e2e", "n_trials": 3, "parallelism": 2, "cost_ceiling": 1.0}
    run_id = client.trigger("tuning", conf, run_id="tuning_e2e_1")
    assert client.wait_for_run("tuning", run_id, timeout_s=600) == "success"
    trials = [t for t in client.task_instances("tuning", run_id) if t["task_id"] == "tune_trial"]
    assert sorted(t["map_index"] for t in trials) == [0, 1, 2] and {t["state"] for t in trials} == {"success"}
    spans = sorted((datetime.fromisoformat(t["start_date"]), datetime.fromisoformat(t["end_date"])) for t in trials)
    assert any(a[1] > b[0] for a, b in zip(spans, spans[1:])), f"no two trials ran at once: {spans}"

    tuned = services.settings.layout.run_dir(run_id) / "tuning"
    assert (tuned / "pareto.svg").read_text().startswith("<svg")
    table = json.loads((tuned / "trials.json").read_text())
    assert len(table) == 3 and all(r["cost"] and r["cost"] > 0 for r in table)
    overlays = TunedOverlays(services.settings)
    assert overlays.overlay_versions() == ["tuned-v1"]
    info = overlays.overlay_info("tuned-v1")
    assert info["study"] == "e2e" and info["data_version"] == "data-v1" and info["chosen"]["state"] == "COMPLETE"

    nightly = client.trigger(DAG, {"epochs": 2, "params_overlay": "latest"}, run_id="rest_e2e_tuned")
    assert client.wait_for_run(DAG, nightly, timeout_s=600) == "success"
    train = json.loads((services.settings.layout.run_dir(nightly) / "steps" / "train.json").read_text())
    assert train["params_overlay"] == "tuned-v1" and train["overlay_values"] == info["train"]
    assert train["epochs"] == info["train"].get("epochs", 2)
