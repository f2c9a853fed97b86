"""The real services (api-server, scheduler, dag-processor) on loopback, driven over REST."""

import json

import httpx
import psutil
import pytest

from ops.services import AirflowServices, ServiceError
from tasks.core.processes import group_alive
from tasks.registry import Registry

pytestmark = pytest.mark.slow
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
