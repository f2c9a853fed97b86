"""nightly_pipeline with SLUICE_TRAIN_BACKEND=kubernetes: wired, rendered and run without a cluster.

The real DAG file is parsed; its pod/job operator's templates are rendered with a plan
from the real `plan_training`; the manifests it would send are validated against the
Kubernetes schema; and the engine part of the rendered pod command is run here, against
an S3 server and a clone of the registry (what a pod sees), then collected by the
pipeline's `collect`."""

import json
import os
import subprocess
import sys

import pytest

from tasks.core.params import load_params
from tasks.core.settings import safe_run_id
from tasks.training.kubernetes import KubernetesTraining, render_manifests, validate_manifests
from tests.airflow_helpers import python_json

RUN = "scheduled__2026-11-30T02:00:00+00:00"

RENDER = """
import json, os, sys
from airflow.dag_processing.dagbag import DagBag
from tasks.training.kubernetes import KubernetesTraining, build_manifests

plan = json.loads(os.environ["TEST_PLAN"])

class PlanOnlyTI:
    # What the templates ask the task instance for: the plan_train task's result.
    def xcom_pull(self, task_ids, key):
        assert (task_ids, key) == ("plan_train", "result"), (task_ids, key)
        return plan

bag = DagBag()
dag = bag.dags["nightly_pipeline"]
tasks = {t.task_id: {"type": type(t).__name__, "down": sorted(t.downstream_task_ids),
                     "setup": t.is_setup, "teardown": t.is_teardown} for t in dag.tasks}
op = dag.get_task("train_pods")
op.render_template_fields({"ti": PlanOnlyTI(), "run_id": plan["run_id"]})
out = {"errors": {k: str(v) for k, v in bag.import_errors.items()}, "tasks": tasks,
       "manifests": build_manifests(KubernetesTraining.from_env(), plan, operator=op)}
if "train_rendezvous" in tasks:
    svc = dag.get_task("train_rendezvous")
    svc.render_template_fields({"ti": PlanOnlyTI(), "run_id": plan["run_id"]})
    out["service"] = json.loads(svc.yaml_conf)
print(json.dumps(out))
"""


def k8s_env(monkeypatch, nodes=1):
    monkeypatch.setenv("SLUICE_TRAIN_BACKEND", "kubernetes")
    monkeypatch.setenv("SLUICE_TRAIN_OUT_URI", "s3://sluice-artifacts/runs")
    monkeypatch.setenv("SLUICE_REGISTRY_URL", "https://git.example.internal/sluice-registry.git")
    monkeypatch.setenv("SLUICE_K8S_NODES", str(nodes))


def concrete_plan(settings, data_version="data-v7"):
    from tasks.training.kubernetes import plan

    return plan(RUN, data_version, load_params().train, settings.train_out_uri, settings.registry_url, "model-v3")


def render_dag(settings, monkeypatch, plan):
    monkeypatch.setenv("TEST_PLAN", json.dumps(plan))
    out = python_json(settings, RENDER)
    assert out["errors"] == {}
    return out


def test_one_node_the_dag_sends_a_valid_pod_running_the_planned_command(settings, monkeypatch):
    k8s_env(monkeypatch)
    from tasks.core.settings import Settings

    settings = Settings.from_env()
    plan = concrete_plan(settings)
    out = render_dag(settings, monkeypatch, plan)
    t = out["tasks"]
    assert t["plan_train"]["down"] == ["run_failed", "train_pods"]
    assert t["drift_retrain"]["down"] == ["plan_train", "run_failed"]  # a drift-triggered run with no batch
    assert t["train_pods"]["type"] == "KubernetesPodOperator" and t["train_pods"]["down"] == ["run_failed", "train"]
    assert "evaluate" in t["train"]["down"] and "train_rendezvous" not in t
    (pod,) = out["manifests"]
    validate_manifests([pod])
    # What the DAG renders at run time is what render_manifests builds from the same plan.
    (direct,) = render_manifests(
        RUN,
        "data-v7",
        load_params().train,
        KubernetesTraining.from_env(),
        init_from="model-v3",
        out_root=settings.train_out_uri,
    )
    assert pod["spec"]["containers"] == direct["spec"]["containers"]
    args = pod["spec"]["containers"][0]["args"]
    assert args[args.index("--out") + 1] == f"s3://sluice-artifacts/runs/{safe_run_id(RUN)}/train"
    assert args[args.index("--init-from") + 1] == "model-v3"
    assert pod["metadata"]["name"] == plan["name"] and pod["metadata"]["annotations"]["sluice/airflow-run-id"] == RUN


def test_several_nodes_get_a_job_and_a_rendezvous_service_as_setup_and_teardown(settings, monkeypatch):
    k8s_env(monkeypatch, nodes=3)
    from tasks.core.settings import Settings

    settings = Settings.from_env()
    plan = concrete_plan(settings)
    out = render_dag(settings, monkeypatch, plan)
    t = out["tasks"]
    assert t["train_pods"]["type"] == "IndexedTrainingJobOperator"  # a KubernetesJobOperator
    assert t["train_rendezvous"]["setup"] and t["train_rendezvous_delete"]["teardown"]
    assert "train_pods" in t["train_rendezvous"]["down"] and "train_rendezvous_delete" in t["train_pods"]["down"]
    job, service = out["manifests"]
    assert service == out["service"]  # the Service the setup task creates is the one rendered
    validate_manifests([job, service])
    assert job["spec"]["completions"] == 3 and job["spec"]["podFailurePolicy"]["rules"]
    name = plan["name"]
    assert job["spec"]["template"]["spec"]["subdomain"] == name == service["metadata"]["name"]
    assert f"--rdzv-endpoint=job-{name}-0.{name}:29500" in job["spec"]["template"]["spec"]["containers"][0]["args"]


def test_a_bad_backend_is_a_dag_import_error(settings, monkeypatch):
    monkeypatch.setenv("SLUICE_TRAIN_BACKEND", "slurm")
    out = python_json(
        settings,
        """
import json
from airflow.dag_processing.dagbag import DagBag
bag = DagBag()
print(json.dumps({k: str(v) for k, v in bag.import_errors.items()}))
""",
    )
    assert any("SLUICE_TRAIN_BACKEND: must be 'local' or 'kubernetes', got 'slurm'" in v for v in out.values()), out


def test_plan_needs_the_pod_side_settings(settings):
    from tasks.training.kubernetes import plan_training

    with pytest.raises(ValueError, match="SLUICE_TRAIN_OUT_URI"):
        plan_training(RUN, settings, "data-v1", load_params().train, "tasks.plugins.emails")


@pytest.mark.slow
def test_the_rendered_pod_command_trains_here_and_the_pipeline_collects_it(
    settings, emails, tmp_path, s3_server, monkeypatch
):
    from tasks.core.context import StepContext
    from tasks.core.files import read_json
    from tasks.core.records import TrainPlanRecord
    from tasks.core.settings import Settings
    from tasks.registry import Registry
    from tasks.train import collect
    from tasks.training.kubernetes import plan_training
    from tests.conftest import S3_BUCKET
    from tests.training.test_training import three_partitions

    monkeypatch.setenv("SLUICE_DVC_REMOTE", f"s3://{S3_BUCKET}/registry")
    monkeypatch.setenv("SLUICE_S3_ENDPOINT_URL", s3_server)
    version = three_partitions(Registry(Settings.from_env()), emails, tmp_path)
    clone = tmp_path / "registry-clone"
    subprocess.run(["git", "clone", "-q", str(Settings.from_env().layout.registry), str(clone)], check=True)
    k8s_env(monkeypatch)
    monkeypatch.setenv("SLUICE_TRAIN_OUT_URI", f"s3://{S3_BUCKET}/runs")
    monkeypatch.setenv("SLUICE_REGISTRY_URL", str(clone))
    monkeypatch.setenv("SLUICE_PARAMS", str(_small_params(tmp_path)))
    settings = Settings.from_env()
    params = load_params(settings.params)
    plan = plan_training(RUN, settings, version, params.train, params.dataset.module)  # the plan_train task
    (pod,) = render_dag(settings, monkeypatch, plan)["manifests"]
    c = pod["spec"]["containers"][0]
    engine = c["args"][c["args"].index("-m") :]  # after `torchrun --standalone ...`
    assert engine[engine.index("--dataset") + 1] == "tasks.plugins.emails"  # the step's, not the image's file
    engine[engine.index("--workdir") + 1] = str(tmp_path / "pod-disk")
    env = {**os.environ, **{e["name"]: e["value"] for e in c["env"]}}
    subprocess.run([sys.executable, *engine], env=env, check=True, timeout=600)
    result = collect(StepContext.create(RUN, settings), plan_train=TrainPlanRecord(**plan))  # the train task
    assert result.data_version == version and result.outputs == plan["out_uri"]
    assert (settings.layout.run_dir(RUN) / "train" / "model.pt").exists()
    assert read_json(settings.layout.run_dir(RUN) / "train" / "train_metrics.json")["partitions"] == 3


def _small_params(tmp_path):
    import yaml

    from tasks.core.settings import REPO_ROOT

    raw = yaml.safe_load((REPO_ROOT / "params.yaml").read_text())
    raw["train"].update(epochs=2)
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path
