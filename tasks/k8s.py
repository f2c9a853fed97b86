"""Training on Kubernetes: the pod and job specs of the train step, built by the cncf-kubernetes provider.

- one node, N GPUs: a KubernetesPodOperator running `torchrun --standalone`;
- M nodes: a KubernetesJobOperator with an Indexed Job of M pods and a headless
  Service; pods rendezvous (c10d) at index 0, `job-<name>-0.<service>`.

Both run the engine with the same arguments as the local backend
(`tasks.training.launch.engine_args`); pods read the data version by tag from the
registry's DVC remote (`--registry-url`), never from a disk shared with Airflow.
Specs carry GPU limits, CPU and memory requests, a memory-backed /dev/shm, node
selector and tolerations, the remote's credentials from a Secret, the run's labels,
and cleanup and failure policies. `render_manifests` gives the manifests without a
cluster; `validate_manifests` checks them against the Kubernetes API schema.

Not wired into nightly_pipeline yet: the engine writes its outputs to a local
folder, and a pod's outputs must go to an fsspec URI first (see README).
"""
from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tasks.params import TrainParams
from tasks.training.launch import engine_args

RDZV_PORT = 29500
K8S_SCHEMA_VERSION = "1.34.0"
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,40}[a-z0-9])?$")


@dataclass(frozen=True)
class KubernetesTraining:
    image: str = "sluice-trainer:latest"
    namespace: str = "sluice"
    nodes: int = 1
    gpus_per_node: int = 1
    cpu: str = "8"
    memory: str = "32Gi"
    shm_size: str = "8Gi"
    node_selector: dict[str, str] = field(default_factory=lambda: {"nvidia.com/gpu.present": "true"})
    gpu_toleration: bool = True
    registry_secret: str = "sluice-registry"     # AWS_* credentials of the DVC remote
    registry_url: str = ""                        # git URL of the registry, as the pods reach it
    out_uri: str = "/workspace/out"

    def __post_init__(self) -> None:
        if self.nodes < 1 or self.gpus_per_node < 1:
            raise ValueError(f"nodes ({self.nodes}) and gpus_per_node ({self.gpus_per_node}) must be >= 1")

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None, profile: str | None = None) -> "KubernetesTraining":
        """Shape from params.yaml `scaling` (its selected profile, or `profile`), then SLUICE_K8S_* overrides."""
        from tasks.params import load_params

        env = os.environ if env is None else env
        scaling = load_params().scaling
        kw: dict[str, Any] = dict(scaling.profiles[profile or scaling.profile])
        for key, name, cast in (("SLUICE_K8S_IMAGE", "image", str), ("SLUICE_K8S_NAMESPACE", "namespace", str),
                                ("SLUICE_K8S_NODES", "nodes", int), ("SLUICE_K8S_GPUS_PER_NODE", "gpus_per_node", int),
                                ("SLUICE_REGISTRY_URL", "registry_url", str)):
            if env.get(key):
                kw[name] = cast(env[key])
        return cls(**kw)


def job_name(run_id: str) -> str:
    """A DNS-1123 name from a run id (Airflow run ids hold ':' '+' and capitals)."""
    name = re.sub(r"[^a-z0-9-]+", "-", f"train-{run_id}".lower()).strip("-")[:42].strip("-")
    if not _NAME.match(name):
        raise ValueError(f"cannot make a Kubernetes name from run id {run_id!r}")
    return name


def pod_command(data_version: str, p: TrainParams, cfg: KubernetesTraining, name: str,
                init_from: str | None = None) -> list[str]:
    if cfg.nodes == 1:
        launcher = ["torchrun", "--standalone", f"--nproc-per-node={cfg.gpus_per_node}"]
    else:
        launcher = ["torchrun", f"--nnodes={cfg.nodes}", f"--nproc-per-node={cfg.gpus_per_node}",
                    "--rdzv-backend=c10d", f"--rdzv-endpoint=job-{name}-0.{name}:{RDZV_PORT}", f"--rdzv-id={name}"]
    return [*launcher, *engine_args(data_version, cfg.out_uri, p, init_from, cfg.registry_url or None)]


def _common(cfg: KubernetesTraining, name: str, run_id: str, data_version: str, kube_config_file: str | None):
    from kubernetes.client import models as k8s

    tolerations = [k8s.V1Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")] \
        if cfg.gpu_toleration else []
    return dict(
        namespace=cfg.namespace, image=cfg.image,
        labels={"app.kubernetes.io/name": "sluice", "app.kubernetes.io/component": "trainer",
                "sluice/run": name, "sluice/data-version": data_version},
        annotations={"sluice/airflow-run-id": run_id},
        container_resources=k8s.V1ResourceRequirements(
            requests={"cpu": cfg.cpu, "memory": cfg.memory, "nvidia.com/gpu": str(cfg.gpus_per_node)},
            limits={"memory": cfg.memory, "nvidia.com/gpu": str(cfg.gpus_per_node)}),
        node_selector=cfg.node_selector, tolerations=tolerations,
        volumes=[k8s.V1Volume(name="dshm", empty_dir=k8s.V1EmptyDirVolumeSource(medium="Memory",
                                                                                size_limit=cfg.shm_size))],
        volume_mounts=[k8s.V1VolumeMount(name="dshm", mount_path="/dev/shm")],
        env_from=[k8s.V1EnvFromSource(secret_ref=k8s.V1SecretEnvSource(name=cfg.registry_secret))],
        env_vars=[k8s.V1EnvVar(name="DVC_NO_ANALYTICS", value="1"), k8s.V1EnvVar(name="PYTHONUNBUFFERED", value="1")],
        config_file=kube_config_file, in_cluster=kube_config_file is None,
    )


def training_operator(task_id: str, run_id: str, data_version: str, p: TrainParams, cfg: KubernetesTraining,
                      init_from: str | None = None, kube_config_file: str | None = None):
    """The Airflow operator that runs training on Kubernetes (pod for 1 node, Indexed Job for M)."""
    name = job_name(run_id)
    command = pod_command(data_version, p, cfg, name, init_from)
    common = _common(cfg, name, run_id, data_version, kube_config_file)
    if cfg.nodes == 1:
        from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator

        return KubernetesPodOperator(task_id=task_id, name=name, cmds=command[:1], arguments=command[1:],
                                     random_name_suffix=False, on_finish_action="delete_pod", **common)
    from airflow.providers.cncf.kubernetes.operators.job import KubernetesJobOperator

    return KubernetesJobOperator(task_id=task_id, name=name, cmds=command[:1], arguments=command[1:],
                                 completion_mode="Indexed", completions=cfg.nodes, parallelism=cfg.nodes,
                                 random_name_suffix=False, subdomain=name, backoff_limit=cfg.nodes * 2,
                                 ttl_seconds_after_finished=3600, wait_until_job_complete=True,
                                 on_kill_propagation_policy="Foreground", **common)


def render_manifests(run_id: str, data_version: str, p: TrainParams, cfg: KubernetesTraining,
                     init_from: str | None = None) -> list[dict[str, Any]]:
    """The manifests the train step would send, built without a cluster (camelCase, as sent)."""
    from kubernetes.client import ApiClient
    from kubernetes.client import models as k8s

    with tempfile.TemporaryDirectory() as tmp:
        kube_config = Path(tmp) / "kubeconfig"        # rendering reads a config; it contacts nothing
        kube_config.write_text("apiVersion: v1\nkind: Config\ncurrent-context: render\nclusters: [{name: render, "
                               "cluster: {server: 'https://127.0.0.1:6443'}}]\nusers: [{name: render, user: {}}]\n"
                               "contexts: [{name: render, context: {cluster: render, user: render}}]\n")
        op = training_operator("train", run_id, data_version, p, cfg, init_from, str(kube_config))
        api = ApiClient()
        if cfg.nodes == 1:
            pod = op.build_pod_request_obj()
            pod.metadata.labels.pop("airflow_kpo_in_cluster", None)      # a render-time artefact
            return [api.sanitize_for_serialization(pod)]
        job = op.build_job_request_obj()
        job.spec.template.metadata.labels.pop("airflow_kpo_in_cluster", None)
        job.spec.template.spec.hostname = None
        # Retry pods lost to node disruption without counting them; fail fast on a crash in our code.
        job.spec.pod_failure_policy = k8s.V1PodFailurePolicy(rules=[
            k8s.V1PodFailurePolicyRule(action="Ignore", on_pod_conditions=[
                k8s.V1PodFailurePolicyOnPodConditionsPattern(type="DisruptionTarget", status="True")]),
            k8s.V1PodFailurePolicyRule(action="FailJob", on_exit_codes=k8s.V1PodFailurePolicyOnExitCodesRequirement(
                container_name="base", operator="In", values=[1])),
        ])
        service = k8s.V1Service(api_version="v1", kind="Service", metadata=k8s.V1ObjectMeta(
            name=op.name, namespace=cfg.namespace, labels={"app.kubernetes.io/name": "sluice", "sluice/run": op.name}),
            spec=k8s.V1ServiceSpec(cluster_ip="None", publish_not_ready_addresses=True,
                                   selector={"sluice/run": op.name},
                                   ports=[k8s.V1ServicePort(name="rendezvous", port=RDZV_PORT)]))
        return [api.sanitize_for_serialization(job), api.sanitize_for_serialization(service)]


_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$")


def validate_manifests(manifests: list[dict[str, Any]], version: str = K8S_SCHEMA_VERSION) -> None:
    """Kubernetes API schema (types, required fields, unknown keys) plus what the schema does not
    check: resource quantities, integral GPU counts, and that the restart policy is Never."""
    import kubernetes_validate

    for m in manifests:
        kubernetes_validate.validate(m, version, strict=True)
        spec = m["spec"]["template"]["spec"] if m["kind"] == "Job" else m.get("spec", {})
        for c in spec.get("containers", []):
            for kind in ("requests", "limits"):
                for res, qty in (c.get("resources", {}).get(kind) or {}).items():
                    if not _QUANTITY.match(str(qty)):
                        raise ValueError(f"{m['kind']} {c['name']}: {kind}[{res}] = {qty!r} is not a quantity")
                    if res == "nvidia.com/gpu" and not str(qty).isdigit():
                        raise ValueError(f"{m['kind']} {c['name']}: GPU count {qty!r} must be a whole number")
        if m["kind"] in ("Pod", "Job") and spec.get("restartPolicy") != "Never":
            raise ValueError(f"{m['kind']}: restartPolicy must be Never (torchrun and the Job retry, not kubelet)")
