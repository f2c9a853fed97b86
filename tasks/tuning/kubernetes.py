"""Tuning on the kubernetes backend: a pod per trial, running the same command as the local
backend's mapped task (`python -m tasks.tune_trial --run-id R --index I --plan JSON`).

Inside the pod the trial trains with torchrun on the pod's GPUs (the local launcher, as in the
training pod), scores the gold dev set the plan names (a URI: tune_plan copies it under
SLUICE_TRAIN_OUT_URI), reads the data version through the registry's git URL and DVC remote, and
keeps its study in PostgreSQL (SLUICE_TUNING_STORAGE from the `sluice-tuning` Secret: a journal
file cannot be shared between pods). The pod spec is the training pod's (tasks/training/kubernetes.py:
restricted security, GPU limits, emptyDir volumes, the registry's Secret), one node, its own name
per trial; `render_trial_manifest` gives it without a cluster.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from tasks.training.kubernetes import STATE_DIR, KubernetesTraining, _common

TUNING_SECRET = "sluice-tuning"  # holds SLUICE_TUNING_STORAGE (postgresql://...)
PLAN_FROM_XCOM = "{{ ti.xcom_pull(task_ids='tune_plan', key='result')['%s'] }}"


def trial_pod_config(p=None, settings=None) -> KubernetesTraining:
    """The trial pod's shape: the scaling profile's pod (`p`'s `scaling`, else params.yaml's), always one
    node; `settings`: the process's (else read from the environment)."""
    scaling = p.scaling if p is not None else None
    return dataclasses.replace(KubernetesTraining.from_env(settings=settings, scaling=scaling), nodes=1)


def trial_arguments(run_id: str, index: int, plan: dict[str, Any]) -> list[str]:
    """The pod's arguments after `python`: the tune_trial step's CLI, the plan passed as JSON."""
    return ["-m", "tasks.tune_trial", "--run-id", run_id, "--index", str(index), "--plan", json.dumps(plan)]


def _pod_kwargs(cfg: KubernetesTraining, data_version: str, run_id: str, kube_config_file: str | None) -> dict:
    from kubernetes.client import models as k8s

    common = _common(cfg, {"name": "tune-trial", "data_version": data_version, "run_id": run_id}, kube_config_file)
    common["labels"] = {**common["labels"], "app.kubernetes.io/component": "tuning-trial"}
    common["env_vars"] = [
        *common["env_vars"],
        k8s.V1EnvVar(name="SLUICE_HOME", value=STATE_DIR),
        k8s.V1EnvVar(name="SLUICE_TRAIN_BACKEND", value="kubernetes"),  # prices the pod's requests
        *([k8s.V1EnvVar(name="SLUICE_REGISTRY_URL", value=cfg.registry_url)] if cfg.registry_url else []),
    ]
    common["env_from"] = [
        *common["env_from"],
        k8s.V1EnvFromSource(secret_ref=k8s.V1SecretEnvSource(name=TUNING_SECRET)),
    ]
    return common


def trial_pods(cfg: KubernetesTraining, max_active: int):
    """The DAG's mapped trial task on kubernetes: `.expand(arguments=[trial_arguments(...), ...])`."""
    from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator

    return KubernetesPodOperator.partial(
        task_id="tune_trial",
        name="tune-trial",
        cmds=["python"],
        random_name_suffix=True,
        on_finish_action="delete_pod",
        max_active_tis_per_dag=max_active,
        **_pod_kwargs(cfg, PLAN_FROM_XCOM % "data_version", "{{ run_id }}", None),
    )


def render_trial_manifest(cfg: KubernetesTraining, run_id: str, index: int, plan: dict[str, Any]) -> dict[str, Any]:
    """One trial's pod as it would be sent (camelCase), built without a cluster."""
    from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator

    from tasks.training.kubernetes import build_manifests

    op = KubernetesPodOperator(
        task_id="tune_trial",
        name=f"tune-trial-{index}",
        cmds=["python"],
        arguments=trial_arguments(run_id, index, plan),
        random_name_suffix=False,
        on_finish_action="delete_pod",
        **_pod_kwargs(cfg, plan["data_version"], run_id, None),
    )
    return build_manifests(cfg, {"name": f"tune-trial-{index}"}, operator=op)[0]
