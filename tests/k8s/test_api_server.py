"""The kubernetes backend against a real API server and kubelet (v1.20.2, tests/k8s/conftest.py).

- the preflight (tasks/training/k8s_server.py): discovery, the refusal of a multi-node run on a
  server without Indexed Jobs and podFailurePolicy, the Pod Security Admission warning, and the
  server-side dry run that catches what the server silently drops;
- the project's rendered training pod, submitted by Airflow's KubernetesPodOperator through the
  real scheduler and kubelet: its security context enforced by the runtime, its GPU request placed
  against the node's advertised GPUs (a request beyond them stays Pending, the reason in the task
  log), a pod whose command cannot run fails with its reason in the task log, and no pod is left.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from tasks.core.settings import REPO_ROOT
from tasks.training.k8s_server import ServerRefused, dry_run, preflight, server_facts
from tasks.training.kubernetes import KubernetesTraining, build_manifests, plan, run_manifests
from tests.k8s.conftest import GPUS, IMAGE

pytestmark = [pytest.mark.k8s, pytest.mark.slow]

SERVER = "v1.20.2"


@pytest.fixture
def cfg(cluster, trainer_namespace, worker_kubeconfig) -> KubernetesTraining:
    """The project's trainer pod shape, sized for the test (what a scaling profile sets), pointed at the
    tier's cluster (as Airflow's worker account, with k8s/sluice-rbac.yaml's rights) and image; nothing
    else changed."""
    return KubernetesTraining(
        image=IMAGE,
        namespace=trainer_namespace,
        gpus_per_node=1,
        cpu="100m",
        memory="256Mi",
        shm_size="64Mi",
        ephemeral_storage="1Gi",
        tmp_size="64Mi",
        registry_url="http://127.0.0.1:1/registry.git",
        kube_config_file=worker_kubeconfig,
    )


def _plan(run_id: str, params) -> dict[str, str]:
    return plan(run_id, "data-v1", params.train, "s3://sluice-artifacts/runs", "http://127.0.0.1:1/registry.git")


def _api(kube_config: str):
    from kubernetes import config

    return config.new_client_from_config(config_file=kube_config)


def _pods(cluster, namespace: str) -> list[str]:
    out = cluster.kubectl("get", "pods", "-n", namespace, "-o", "jsonpath={.items[*].metadata.name}").stdout
    return out.split()


def _no_pods_left(cluster, namespace: str) -> None:
    from tasks.core.wait import wait_until

    wait_until(lambda: _pods(cluster, namespace) == [], timeout_s=60, what=f"no pod left in {namespace}")


def test_discovery_reads_the_servers_version_and_groups(worker_kubeconfig):
    facts = server_facts(_api(worker_kubeconfig))  # what Airflow's worker account may read
    assert (facts.git_version, facts.minor) == (SERVER, 20)
    assert facts.serves("v1") and facts.serves("batch/v1") and facts.serves("apps/v1")
    assert not facts.serves("policy/v1") and not facts.serves("autoscaling/v2")  # 1.20 has neither


def test_a_single_node_run_passes_the_preflight_with_a_warning_and_creates_nothing(cluster, cfg, params):
    result = preflight(cfg, run_manifests(cfg, _plan("scheduled__2026-12-03T02:00:00+00:00", params)))
    assert result["server_version"] == SERVER
    [warning] = result["warnings"]
    assert "Pod Security Admission" in warning and "1.23" in warning and SERVER in warning, warning
    assert _pods(cluster, cfg.namespace) == []  # a dry run stores nothing


def test_a_multi_node_run_is_refused_naming_the_features_and_the_version(cluster, cfg, params):
    two = dataclasses.replace(cfg, nodes=2)
    with pytest.raises(ServerRefused) as e:
        preflight(two, run_manifests(two, _plan("manual__multi", params)))
    msg = str(e.value)
    for needed in ("2-node", "Indexed Job completion mode", "1.24", "podFailurePolicy", "1.26", SERVER):
        assert needed in msg, msg
    assert _pods(cluster, cfg.namespace) == []


def test_the_dry_run_catches_fields_the_server_drops_silently(cluster, cfg, params):
    """The trap the feature table guards against, shown on the server itself: 1.20 accepts the Indexed
    Job the Python client lets through and drops completionMode and podFailurePolicy without a word;
    reading the dry run's answer back names both."""
    two = dataclasses.replace(cfg, nodes=2)
    job = build_manifests(two, _plan("manual__multi", params))[0]
    assert job["kind"] == "Job" and job["spec"]["completionMode"] == "Indexed"
    with pytest.raises(ServerRefused) as e:
        dry_run(_api(cfg.kube_config_file), [job])
    msg = str(e.value)
    assert "spec.completionMode" in msg and "spec.podFailurePolicy" in msg, msg
    # the rendered pod keeps every field it sets
    dry_run(_api(cfg.kube_config_file), build_manifests(cfg, _plan("manual__single", params)))


PROBE_DAG = """
import json, pathlib, pendulum
from airflow.sdk import DAG
from tasks.training.kubernetes import KubernetesTraining, training_operator

spec = json.loads((pathlib.Path(__file__).parent / "spec.json").read_text())
kwargs = spec["kwargs"]
if "retry_delay_s" in kwargs:
    kwargs["retry_delay"] = pendulum.duration(seconds=kwargs.pop("retry_delay_s"))
with DAG("k8s_tier", schedule=None, start_date=pendulum.datetime(2026, 1, 1)) as dag:
    op = training_operator("train_pods", KubernetesTraining(**spec["cfg"]), spec["plan"], **kwargs)
    if spec["probe"] is not None:
        op.cmds, op.arguments = ["sh", "-c", spec["probe"]], []

if __name__ == "__main__":
    print(json.dumps({"state": str(dag.test().state)}))
"""


def _run_operator(settings, cfg: KubernetesTraining, the_plan: dict, probe: str | None, **kwargs):
    """The project's training operator (tasks/training/kubernetes.py) for `the_plan`, in a DAG run by
    Airflow (`dag.test()`, in a subprocess with the Airflow environment and a DAG folder of its own),
    optionally with its command replaced by a shell `probe`. Returns (state, the task log)."""
    from tests.airflow_helpers import env_for, migrate

    migrate(settings)
    dags = settings.home / "k8s-tier-dags"
    dags.mkdir(parents=True, exist_ok=True)
    spec = {"cfg": dataclasses.asdict(cfg), "plan": the_plan, "kwargs": kwargs, "probe": probe}
    (dags / "spec.json").write_text(json.dumps(spec))
    (dags / "k8s_tier.py").write_text(PROBE_DAG)
    env = {**env_for(settings), "AIRFLOW__CORE__DAGS_FOLDER": str(dags)}
    proc = subprocess.run(
        [sys.executable, str(dags / "k8s_tier.py")], env=env, capture_output=True, text=True, timeout=400, cwd=REPO_ROOT
    )
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])["state"], log


PROBE = (
    "echo uid=$(id -u); "
    "touch /rootfs-write 2>&1 || echo root-read-only; "
    "grep ' /dev/shm ' /proc/mounts; "
    "echo out > /workspace/out/probe && echo workspace-writable; "
    "echo threads=$OMP_NUM_THREADS key=$AWS_ACCESS_KEY_ID; "
    "grep CapEff /proc/self/status"
)


def test_the_rendered_pod_runs_through_the_kubernetes_pod_operator_with_its_security_enforced(
    cluster, cfg, params, settings
):
    state, log = _run_operator(settings, cfg, _plan("manual__probe", params), PROBE)
    assert state == "success", log[-4000:]
    assert "uid=1000" in log, log[-3000:]
    assert "Read-only file system" in log and "root-read-only" in log, log[-3000:]
    assert "/dev/shm tmpfs" in log, log[-3000:]  # the memory-backed emptyDir
    assert "workspace-writable" in log
    assert "threads=1 key=k8s-tier" in log  # the local backend's pinned environment; the Secret's env
    assert "CapEff:\t0000000000000000" in log  # no capabilities
    _no_pods_left(cluster, cfg.namespace)  # on_finish_action: delete_pod


def test_a_pod_asking_more_gpus_than_the_node_has_stays_pending_and_the_task_log_says_why(
    cluster, cfg, params, settings
):
    greedy = dataclasses.replace(cfg, gpus_per_node=GPUS + 2)
    state, log = _run_operator(settings, greedy, _plan("manual__greedy", params), "true", startup_timeout_seconds=15)
    assert state == "failed", log[-4000:]
    assert "Insufficient nvidia.com/gpu" in log, log[-4000:]
    _no_pods_left(cluster, cfg.namespace)


def test_a_pod_whose_command_cannot_run_fails_with_its_reason_in_the_task_log(cluster, cfg, params, settings):
    """The project's own command (torchrun ...) in an image without torchrun: the task fails, the log
    names the reason, and the pod is deleted."""
    state, log = _run_operator(settings, cfg, _plan("manual__broken", params), None)
    assert state == "failed", log[-4000:]
    assert "torchrun" in log and ("executable file not found" in log or "no such file" in log.lower()), log[-4000:]
    _no_pods_left(cluster, cfg.namespace)


def test_plan_train_sends_the_pods_every_train_value_the_step_was_given(
    settings, monkeypatch, cluster, trainer_namespace, worker_kubeconfig
):
    """The plan_train step, its preflight against the real server: the plan carries the step's own
    train params (--set, the run's conf, the overlay), not a fresh read of params.yaml that keeps only
    epochs; the record names the server and its warning; a 2-node run is refused by the step."""
    from tasks.core.context import StepContext
    from tasks.core.errors import StepError
    from tasks.core.records import SnapshotRecord
    from tasks.core.settings import Settings
    from tasks.plan_train import plan_train
    from tests.training.test_kubernetes_backend import RUN, k8s_env

    k8s_env(monkeypatch)
    monkeypatch.setenv("SLUICE_K8S_CONFIG_FILE", worker_kubeconfig)
    monkeypatch.setenv("SLUICE_K8S_NAMESPACE", trainer_namespace)
    ctx = StepContext.create(
        RUN,
        Settings.from_env(),
        overrides={"train": {"epochs": 3, "lr": 0.0123, "model.params.hidden": [8], "seed": 99, "warm_start": False}},
    )
    snap = SnapshotRecord.model_construct(data_version="data-v1")
    rec = plan_train(ctx, snapshot=snap)
    sent = json.loads(rec.params)
    assert (sent["epochs"], sent["lr"], sent["model"]["params"]["hidden"], sent["seed"], sent["warm_start"]) == (
        3,
        0.0123,
        [8],
        99,
        False,
    )
    assert rec.server_version == SERVER and "Pod Security Admission" in rec.warnings[0], rec
    assert rec.init_from == ""  # warm_start false in the step's params: no prod model to start from
    assert rec.dataset == ctx.params.dataset.module == "tasks.plugins.emails"  # the pods' engine loads the step's
    from tasks.core.records import DriftRetrainRecord

    retrain = plan_train(ctx, drift_retrain=DriftRetrainRecord(data_version="data-v1", causes=[{"why": "drift"}]))
    assert retrain.data_version == "data-v1" and json.loads(retrain.params) == sent  # a drift-triggered run, no batch
    with pytest.raises(StepError, match="snapshot or drift_retrain"):
        plan_train(ctx)
    monkeypatch.setenv("SLUICE_K8S_NODES", "2")
    with pytest.raises(StepError, match="2-node training run cannot run on this cluster"):
        plan_train(StepContext.create(RUN, Settings.from_env()), snapshot=snap)
