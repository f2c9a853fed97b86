"""The nightly DAG on the kubernetes backend, under Airflow's real scheduler and API server
(ops/services.py), against the tier's cluster: ingest -> ... -> snapshot on this machine, then
plan_train (its preflight against the v1.20 server) -> train_pods (the KubernetesPodOperator with the
project's rendered single-node pod, from the trainer image in the cluster's containerd) -> train
(`collect` from S3) -> evaluate. The pod clones the run's registry over git and reads the data version
through DVC from S3, both on the tier's pod network; its resources come from a scaling profile in the
test's params.yaml, nothing else changed. The run is stopped with the services once evaluate is done:
the rest of the night (compress, the canary) is the local backend's, covered elsewhere."""

from __future__ import annotations

import pytest
import yaml

from ops.services import AirflowServices
from tasks.core.files import read_json
from tasks.core.processes import group_alive
from tasks.core.settings import REPO_ROOT, Settings
from tasks.core.wait import wait_until
from tests.k8s.conftest import BUCKET, HOST_ADDR, git_daemon
from tests.k8s.test_api_server import _no_pods_left

pytestmark = [pytest.mark.k8s, pytest.mark.slow]

# What the test's node can hold (2 cores): one pod, one process (a GPU request the node advertises).
POD = {"nodes": 1, "gpus_per_node": 1, "cpu": "1", "memory": "3Gi", "shm_size": "256Mi",
       "ephemeral_storage": "4Gi", "tmp_size": "1Gi"}  # fmt: skip


def test_the_nightly_dag_trains_in_a_real_pod_through_the_scheduler_and_evaluates_its_model(
    cluster, trainer_image, storage, trainer_namespace, worker_kubeconfig, tmp_path, monkeypatch
):
    raw = yaml.safe_load((REPO_ROOT / "params.yaml").read_text())
    raw["scaling"]["profiles"]["k8s_tier"] = POD
    raw["scaling"]["profile"] = "k8s_tier"
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(raw))
    home = tmp_path / "home"
    home.mkdir()
    with git_daemon(home) as git_port:  # the run's registry (SLUICE_HOME/registry), as the pods reach it
        env = {
            "SLUICE_HOME": str(home),
            "SLUICE_PARAMS": str(params),
            "SLUICE_DVC_REMOTE": f"s3://{BUCKET}/nightly-registry",
            "SLUICE_S3_ENDPOINT_URL": storage.s3_url,
            "SLUICE_TRAIN_BACKEND": "kubernetes",
            "SLUICE_TRAIN_OUT_URI": f"s3://{BUCKET}/nightly-runs",
            "SLUICE_REGISTRY_URL": f"git://{HOST_ADDR}:{git_port}/registry",
            "SLUICE_K8S_IMAGE": trainer_image,
            "SLUICE_K8S_NAMESPACE": trainer_namespace,
            "SLUICE_K8S_CONFIG_FILE": worker_kubeconfig,  # Airflow's worker account, k8s/sluice-rbac.yaml's rights
            **{k: v for k, v in storage.env.items() if k.startswith(("AWS_", "GIT_"))},
        }
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        settings = Settings.from_env()
        svc = AirflowServices(settings, nightly_schedule=False).start()
        pgids = dict(svc.pgids)
        try:
            client = svc.client()
            client.wait_for_dag("nightly_pipeline")
            client.unpause("nightly_pipeline")
            run = client.trigger("nightly_pipeline", conf={"epochs": 8}, run_id="manual__k8s_tier_night")

            def evaluated():
                states = {t["task_id"]: t["state"] for t in client.task_instances("nightly_pipeline", run)}
                done = ("success", "failed", "upstream_failed", "skipped")
                return states if states.get("evaluate") in done or "failed" in states.values() else None

            states = wait_until(evaluated, timeout_s=840, interval_s=3, what="the night's evaluate")
            want = {t: "success" for t in ("snapshot", "plan_train", "train_pods", "train", "evaluate")}
            assert {t: states.get(t) for t in want} == want, states
        finally:
            svc.stop()
        assert not any(group_alive(p) for p in pgids.values()), "a service outlived stop()"

    run_dir = settings.layout.run_dir(run)
    plan = read_json(run_dir / "steps" / "plan_train.json")
    assert plan["server_version"] == "v1.20.2" and plan["dataset"] == "tasks.plugins.emails", plan
    train = read_json(run_dir / "steps" / "train.json")
    assert train["outputs"] == plan["out_uri"] and train["outputs"].startswith(f"s3://{BUCKET}/nightly-runs/")
    snapshot = read_json(run_dir / "steps" / "snapshot.json")
    assert train["data_version"] == plan["data_version"] == snapshot["data_version"]
    assert train["world_size"] == 1 and train["rows"] > 0, train  # the pod's one process
    assert (run_dir / "train" / "model.pt").exists()  # collected from S3 for evaluate
    evaluation = read_json(run_dir / "steps" / "evaluate.json")
    assert evaluation["passed"] is True, evaluation
    _no_pods_left(cluster, trainer_namespace)  # the operator deleted its pod
