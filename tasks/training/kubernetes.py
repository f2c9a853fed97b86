"""Training on Kubernetes (SLUICE_TRAIN_BACKEND=kubernetes): the train step's operators and specs.

- one node, N GPUs: a KubernetesPodOperator running `torchrun --standalone`;
- M nodes: a KubernetesJobOperator with an Indexed Job of M pods and a headless
  Service (created as a setup task, deleted as a teardown); pods rendezvous (c10d)
  at index 0, `job-<name>-0.<service>`. Their torchrun may restart its workers
  (`max_restarts`): when a peer pod is lost, the survivors re-rendezvous and wait for its
  replacement; gloo and NCCL use the pod network's interface (`socket_ifname`), collectives
  time out after `dist_timeout_s` (a cut-off peer fails the step instead of hanging it), and
  the workers get a fresh store each round (TORCH_DISABLE_SHARE_RDZV_TCP_STORE). Shown on a
  network of namespaced hosts by tests/cluster/ (bench/cluster.py).

In nightly_pipeline: `plan_train` (run time: the data version, the prod model to
warm-start from, params.yaml, where outputs go) -> the pod or job, whose templated
fields read the plan -> `train`, which fetches the outputs (`tasks.train.collect`).
The pods run the engine with the same arguments as the local backend
(`tasks.training.command.engine_args`); they read the data version by tag from the
registry's git URL and DVC remote and publish to SLUICE_TRAIN_OUT_URI: no disk is
shared with Airflow. Specs carry GPU limits, CPU, memory and ephemeral-storage requests,
a memory-backed /dev/shm, node selector and tolerations, the remote's credentials from a
Secret, the run's labels, and cleanup and failure policies.

The pods run under the Pod Security Standard `restricted` (their namespace enforces it,
k8s/trainer-namespace.yaml, apart from Airflow's): non-root, no privilege escalation, no
capabilities, seccomp RuntimeDefault, a read-only root filesystem (they write only to
emptyDir volumes: the outputs, /tmp, the state folder and /dev/shm), no service account
token. k8s/trainer-networkpolicy.yaml denies all ingress to trainer pods; for M nodes a
per-run NetworkPolicy, created and deleted with the rendezvous Service, admits traffic
between the same run's pods only. `render_manifests` gives the
manifests without a cluster; `validate_manifests` checks them against the
Kubernetes API schema.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from tasks.core.params import ScalingParams, TrainParams, load_params
from tasks.core.settings import Settings
from tasks.training.command import TORCHRUN, engine_args, launcher, params_json
from tasks.training.local import COMPUTE_ENV

RDZV_PORT = 29500
PLAN_TASK = "plan_train"
WORKDIR = "/workspace/out"  # the pod's local working folder (its outputs are published)
STATE_DIR = "/workspace/.sluice"  # the pod's SLUICE_HOME (the default under the image's /workspace)
RUN_AS_USER = 1000  # docker/trainer.Dockerfile: USER 1000
K8S_SCHEMA_VERSION = "1.34.0"
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,40}[a-z0-9])?$")


@dataclass(frozen=True)
class KubernetesTraining:
    image: str = "sluice-trainer:latest"
    namespace: str = "sluice-train"  # the trainers' own namespace (PSA restricted), not Airflow's
    nodes: int = 1
    gpus_per_node: int = 1
    cpu: str = "8"
    memory: str = "32Gi"
    shm_size: str = "8Gi"
    ephemeral_storage: str = "50Gi"  # the pod's disk: outputs, checkpoints, /tmp, data cache
    tmp_size: str = "4Gi"
    node_selector: dict[str, str] = field(default_factory=lambda: {"nvidia.com/gpu.present": "true"})
    gpu_toleration: bool = True
    registry_secret: str = "sluice-registry"  # AWS_* credentials of the DVC remote
    registry_url: str = ""  # git URL of the registry, as the pods reach it
    s3_endpoint_url: str = ""  # an S3-compatible store's endpoint, as the pods reach it
    socket_ifname: str = "eth0"  # the pod network's interface: gloo's and NCCL's sockets (M nodes)
    dist_timeout_s: int = 300  # collectives' timeout (SLUICE_DIST_TIMEOUT_S in the pods): a lost peer fails the step
    max_restarts: int = 3  # M nodes: torchrun re-rendezvouses this often when a peer node is lost
    kube_config_file: str = ""  # the operators' and the preflight's kube config (empty: in-cluster)

    def __post_init__(self) -> None:
        from tasks.core.settings import url_credentials_error

        if self.nodes < 1 or self.gpus_per_node < 1:
            raise ValueError(f"nodes ({self.nodes}) and gpus_per_node ({self.gpus_per_node}) must be >= 1")
        if self.dist_timeout_s < 1 or self.max_restarts < 0:
            raise ValueError(f"dist_timeout_s ({self.dist_timeout_s}) must be >= 1, max_restarts >= 0")
        if not re.fullmatch(r"[A-Za-z0-9_.:-]{1,15}", self.socket_ifname):
            raise ValueError(f"socket_ifname {self.socket_ifname!r} is not an interface name")
        for name in ("registry_url", "s3_endpoint_url"):  # they go into pod arguments and XCom
            why = url_credentials_error(getattr(self, name))
            if why:
                raise ValueError(f"{name} {why}")

    @classmethod
    def from_env(
        cls,
        env: Mapping[str, str] | None = None,
        profile: str | None = None,
        *,
        settings: Settings | None = None,
        scaling: ScalingParams | None = None,
    ) -> "KubernetesTraining":
        """Shape from params.yaml `scaling` (its selected profile, or `profile`), then the SLUICE_K8S_*
        settings (and the registry URL, S3 endpoint and collectives' timeout). Pass the process's
        `settings` (else they are read from `env`, default the environment) and, where the params
        are at hand, their `scaling` section (else params.yaml, as `settings` names it, is read)."""
        settings = settings if settings is not None else Settings.from_env(env)
        scaling = scaling if scaling is not None else load_params(settings=settings).scaling
        kw: dict[str, Any] = dict(scaling.profiles[profile or scaling.profile])
        overrides = {
            "image": settings.k8s_image,
            "namespace": settings.k8s_namespace,
            "nodes": settings.k8s_nodes,
            "gpus_per_node": settings.k8s_gpus_per_node,
            "registry_url": settings.registry_url,
            "s3_endpoint_url": settings.s3_endpoint_url,
            "socket_ifname": settings.k8s_socket_ifname,
            "dist_timeout_s": settings.dist_timeout_s,
            "kube_config_file": settings.k8s_config_file,
        }
        kw.update({name: value for name, value in overrides.items() if value not in (None, "")})
        return cls(**kw)


_CPU = re.compile(r"^(\d+(?:\.\d+)?)(m?)$")
_MEM = re.compile(r"^(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|K|M|G|T)?$")
_MEM_UNITS = {None: 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}


def cpu_quantity(q: str) -> float:
    """A Kubernetes CPU quantity ("8", "500m") in CPUs."""
    m = _CPU.match(str(q).strip())
    if not m:
        raise ValueError(f"not a Kubernetes CPU quantity: {q!r}")
    return float(m[1]) / (1000 if m[2] else 1)


def memory_gb(q: str) -> float:
    """A Kubernetes memory quantity ("32Gi", "512Mi", "8G") in GB of 2**30 bytes."""
    m = _MEM.match(str(q).strip())
    if not m:
        raise ValueError(f"not a Kubernetes memory quantity: {q!r}")
    return float(m[1]) * _MEM_UNITS[m[2]] / 2**30


def pod_requests(cfg: "KubernetesTraining") -> dict[str, float]:
    """The whole training's requests: nodes x each pod's CPU, GPUs and memory (what the cost ledger
    prices; it travels in the plan_train record, so monitoring never re-derives the pod shape)."""
    return {
        "cpus": cfg.nodes * cpu_quantity(cfg.cpu),
        "gpus": float(cfg.nodes * cfg.gpus_per_node),
        "memory_gb": cfg.nodes * memory_gb(cfg.memory),
    }


def job_name(run_id: str) -> str:
    """A DNS-1123 name from a run id (Airflow run ids hold ':' '+' and capitals)."""
    name = re.sub(r"[^a-z0-9-]+", "-", f"train-{run_id}".lower()).strip("-")[:42].strip("-")
    if not _NAME.match(name):
        raise ValueError(f"cannot make a Kubernetes name from run id {run_id!r}")
    return name


def plan(
    run_id: str,
    data_version: str,
    p: TrainParams,
    out_root: str,
    registry_url: str,
    init_from: str | None = None,
    dataset: str = "",
) -> dict[str, str]:
    """What the pods of one training run get, as strings (the operators' templates read them).
    `dataset`: the step's dataset plug-in module ("": the image's params.yaml's)."""
    from tasks.core.settings import safe_run_id

    return {
        "name": job_name(run_id),
        "run_id": run_id,
        "data_version": data_version,
        "params": params_json(p),
        "out_uri": f"{out_root.rstrip('/')}/{safe_run_id(run_id)}/train",
        "registry_url": registry_url,
        "init_from": init_from or "",
        "dataset": dataset,
    }


def plan_training(run_id: str, settings, data_version: str, p: TrainParams, dataset: str) -> dict[str, str]:
    """The `plan_train` task: this run's plan from the step's own train params (its --set values,
    the run's conf and the tuning overlay already applied), its dataset plug-in and the registry,
    at run time."""
    from tasks.training.warm_start import warm_start_version

    if not settings.train_out_uri or not settings.registry_url:
        raise ValueError(
            "the kubernetes backend needs SLUICE_TRAIN_OUT_URI (where pods write) and "
            "SLUICE_REGISTRY_URL (the registry's git URL as pods reach it)"
        )
    init_from = warm_start_version(settings, p)
    return plan(run_id, data_version, p, settings.train_out_uri, settings.registry_url, init_from, dataset)


def from_plan(field: str) -> str:
    """A template that renders to one field of the plan_train task's result."""
    return "{{ ti.xcom_pull(task_ids='%s', key='result')['%s'] }}" % (PLAN_TASK, field)


def templated_plan() -> dict[str, str]:
    return {
        k: from_plan(k)
        for k in ("name", "run_id", "data_version", "params", "out_uri", "registry_url", "init_from", "dataset")
    }


def pod_command(cfg: KubernetesTraining, plan: dict[str, str]) -> list[str]:
    name = plan["name"]
    if cfg.nodes == 1:
        pods = launcher(cfg.gpus_per_node, program=TORCHRUN)
    else:
        pods = launcher(
            cfg.gpus_per_node,
            program=TORCHRUN,
            nnodes=cfg.nodes,
            max_restarts=cfg.max_restarts,
            endpoint=f"job-{name}-0.{name}:{RDZV_PORT}",
            rdzv_id=name,
        )
    # --init-from "" means none, --dataset "" the image's params.yaml's: the argument list keeps one
    # shape whatever the plan holds.
    return [
        *pods,
        *engine_args(
            plan["data_version"],
            plan["out_uri"],
            plan["params"],
            plan["init_from"],
            plan["registry_url"],
            workdir=WORKDIR,
            dataset=plan["dataset"],
        ),
    ]


def multinode_env(cfg: KubernetesTraining) -> dict[str, str]:
    """What M-node pods add: gloo and NCCL on the pod network's interface (not a guess from the
    hostname), and a fresh TCPStore per rendezvous round for the workers: with the launcher's shared
    store, workers key their addresses by their own launcher's restart count, which differs between
    a surviving pod and its replaced peer (the new pod counts from 0), so they would never meet."""
    return {
        "GLOO_SOCKET_IFNAME": cfg.socket_ifname,
        "NCCL_SOCKET_IFNAME": cfg.socket_ifname,
        "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
    }


def _common(cfg: KubernetesTraining, plan: dict[str, str], kube_config_file: str | None):
    from kubernetes.client import models as k8s

    tolerations = (
        [k8s.V1Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")] if cfg.gpu_toleration else []
    )
    # The root filesystem is read-only: HOME and every cache go to /tmp (an emptyDir).
    env = {
        **COMPUTE_ENV,  # what the local backend pins (tasks/training/local.py)
        "DVC_NO_ANALYTICS": "1",
        "HOME": "/tmp/home",
        "XDG_CACHE_HOME": "/tmp/cache",
        "DVC_SITE_CACHE_DIR": "/tmp/dvc-site-cache",
        "TMPDIR": "/tmp",
        "SLUICE_DIST_TIMEOUT_S": str(cfg.dist_timeout_s),
        **({"SLUICE_S3_ENDPOINT_URL": cfg.s3_endpoint_url} if cfg.s3_endpoint_url else {}),
        **(multinode_env(cfg) if cfg.nodes > 1 else {}),
    }
    seccomp = k8s.V1SeccompProfile(type="RuntimeDefault")
    kube_config_file = kube_config_file or cfg.kube_config_file or None
    volumes = [
        ("dshm", "/dev/shm", k8s.V1EmptyDirVolumeSource(medium="Memory", size_limit=cfg.shm_size)),
        ("work", WORKDIR, k8s.V1EmptyDirVolumeSource()),
        ("state", STATE_DIR, k8s.V1EmptyDirVolumeSource()),
        ("tmp", "/tmp", k8s.V1EmptyDirVolumeSource(size_limit=cfg.tmp_size)),
    ]
    return dict(
        namespace=cfg.namespace,
        image=cfg.image,
        labels={
            "app.kubernetes.io/name": "sluice",
            "app.kubernetes.io/component": "trainer",
            "sluice/run": plan["name"],
            "sluice/data-version": plan["data_version"],
        },
        annotations={"sluice/airflow-run-id": plan["run_id"]},
        container_resources=k8s.V1ResourceRequirements(
            requests={
                "cpu": cfg.cpu,
                "memory": cfg.memory,
                "nvidia.com/gpu": str(cfg.gpus_per_node),
                "ephemeral-storage": cfg.ephemeral_storage,
            },
            limits={
                "memory": cfg.memory,
                "nvidia.com/gpu": str(cfg.gpus_per_node),
                "ephemeral-storage": cfg.ephemeral_storage,
            },
        ),
        node_selector=cfg.node_selector,
        tolerations=tolerations,
        volumes=[k8s.V1Volume(name=n, empty_dir=src) for n, _, src in volumes],
        volume_mounts=[k8s.V1VolumeMount(name=n, mount_path=path) for n, path, _ in volumes],
        security_context=k8s.V1PodSecurityContext(
            run_as_non_root=True, run_as_user=RUN_AS_USER, seccomp_profile=seccomp
        ),
        container_security_context=k8s.V1SecurityContext(
            run_as_non_root=True,
            allow_privilege_escalation=False,
            read_only_root_filesystem=True,
            capabilities=k8s.V1Capabilities(drop=["ALL"]),
            seccomp_profile=seccomp,
        ),
        automount_service_account_token=False,
        env_from=[k8s.V1EnvFromSource(secret_ref=k8s.V1SecretEnvSource(name=cfg.registry_secret))],
        env_vars=[k8s.V1EnvVar(name=k, value=v) for k, v in env.items()],
        config_file=kube_config_file,
        in_cluster=kube_config_file is None,
    )


def _job_failure_policy():
    """Retry pods lost to node disruption without counting them; fail fast on a crash in our code."""
    from kubernetes.client import models as k8s

    return k8s.V1Job(
        spec=k8s.V1JobSpec(
            template=k8s.V1PodTemplateSpec(),
            pod_failure_policy=k8s.V1PodFailurePolicy(
                rules=[
                    k8s.V1PodFailurePolicyRule(
                        action="Ignore",
                        on_pod_conditions=[
                            k8s.V1PodFailurePolicyOnPodConditionsPattern(type="DisruptionTarget", status="True")
                        ],
                    ),
                    k8s.V1PodFailurePolicyRule(
                        action="FailJob",
                        on_exit_codes=k8s.V1PodFailurePolicyOnExitCodesRequirement(
                            container_name="base", operator="In", values=[1]
                        ),
                    ),
                ]
            ),
        )
    )


def training_operator(
    task_id: str, cfg: KubernetesTraining, plan: dict[str, str], kube_config_file: str | None = None, **operator_kwargs
):
    """The Airflow operator that runs training on Kubernetes (pod for 1 node, Indexed Job for M).
    `plan`: concrete values (`plan()`) or templates of the plan_train result (`templated_plan()`)."""
    command = pod_command(cfg, plan)
    common = {**_common(cfg, plan, kube_config_file), **operator_kwargs}
    if cfg.nodes == 1:
        from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator

        return KubernetesPodOperator(
            task_id=task_id,
            name=plan["name"],
            cmds=command[:1],
            arguments=command[1:],
            random_name_suffix=False,
            on_finish_action="delete_pod",
            log_events_on_failure=True,  # a pod that cannot be scheduled or start says why in the task log
            **common,
        )
    from tasks.training.kubernetes_operators import IndexedTrainingJobOperator

    return IndexedTrainingJobOperator(
        task_id=task_id,
        name=plan["name"],
        cmds=command[:1],
        arguments=command[1:],
        completion_mode="Indexed",
        completions=cfg.nodes,
        parallelism=cfg.nodes,
        random_name_suffix=False,
        subdomain=plan["name"],
        backoff_limit=cfg.nodes * 2,
        ttl_seconds_after_finished=3600,
        wait_until_job_complete=True,
        on_kill_propagation_policy="Foreground",
        full_job_spec=_job_failure_policy(),
        **common,
    )


def rendezvous_service(cfg: KubernetesTraining, name: str) -> dict[str, Any]:
    """The headless Service that gives the Indexed Job's pods stable DNS names."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": name,
            "namespace": cfg.namespace,
            "labels": {"app.kubernetes.io/name": "sluice", "sluice/run": name},
        },
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {"sluice/run": name},
            "ports": [{"name": "rendezvous", "port": RDZV_PORT}],
        },
    }


def rendezvous_network_policy(cfg: KubernetesTraining, name: str) -> dict[str, Any]:
    """Ingress to the run's pods from the same run's pods only (k8s/trainer-networkpolicy.yaml denies
    the rest). No port list: besides the rendezvous port, NCCL and gloo open ports of their own
    between the pods; what matters is who may connect, and that is this run alone."""
    run = {"matchLabels": {"sluice/run": name}}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": name,
            "namespace": cfg.namespace,
            "labels": {"app.kubernetes.io/name": "sluice", "sluice/run": name},
        },
        "spec": {"podSelector": run, "policyTypes": ["Ingress"], "ingress": [{"from": [{"podSelector": run}]}]},
    }


def training_tasks(cfg: KubernetesTraining, task_id: str = "train_pods") -> tuple[Any, list]:
    """The DAG's operator between plan_train and train (the pod, or the Indexed Job), and for M
    nodes the rendezvous Service's and the run's NetworkPolicy's creation (setup tasks) and
    deletion (their teardowns)."""
    import json

    op = training_operator(task_id, cfg, templated_plan())
    if cfg.nodes == 1:
        return op, []
    from airflow.providers.cncf.kubernetes.operators.resource import (
        KubernetesCreateResourceOperator,
        KubernetesDeleteResourceOperator,
    )

    service = json.dumps(rendezvous_service(cfg, from_plan("name")))  # JSON is YAML
    create = KubernetesCreateResourceOperator(
        task_id="train_rendezvous", yaml_conf=service, namespace=cfg.namespace
    ).as_setup()
    delete = KubernetesDeleteResourceOperator(
        task_id="train_rendezvous_delete", yaml_conf=service, namespace=cfg.namespace
    ).as_teardown(setups=create)
    policy = json.dumps(rendezvous_network_policy(cfg, from_plan("name")))
    allow = KubernetesCreateResourceOperator(
        task_id="train_network_policy", yaml_conf=policy, namespace=cfg.namespace
    ).as_setup()
    disallow = KubernetesDeleteResourceOperator(
        task_id="train_network_policy_delete", yaml_conf=policy, namespace=cfg.namespace
    ).as_teardown(setups=allow)
    create >> op >> delete
    allow >> op >> disallow
    return op, [create, delete, allow, disallow]


def render_manifests(
    run_id: str,
    data_version: str,
    p: TrainParams,
    cfg: KubernetesTraining,
    init_from: str | None = None,
    out_root: str = "s3://sluice-artifacts/runs",
) -> list[dict[str, Any]]:
    """The manifests the train step would send, built without a cluster (camelCase, as sent):
    the pod; or the Job, the rendezvous Service and the run's NetworkPolicy."""
    return run_manifests(cfg, plan(run_id, data_version, p, out_root, cfg.registry_url, init_from))


def run_manifests(cfg: KubernetesTraining, plan: dict[str, str]) -> list[dict[str, Any]]:
    """Every object one run creates, from its concrete plan: the pod; or the Job, the rendezvous
    Service and the run's NetworkPolicy (what the preflight dry-runs, tasks/training/k8s_server.py)."""
    manifests = build_manifests(cfg, plan)
    return manifests if cfg.nodes == 1 else [*manifests, rendezvous_network_policy(cfg, plan["name"])]


def build_manifests(cfg: KubernetesTraining, plan: dict[str, str], operator=None) -> list[dict[str, Any]]:
    """Manifests from a concrete plan; with `operator` (a DAG's, its templates rendered), from that one."""
    from kubernetes.client import ApiClient

    with tempfile.TemporaryDirectory() as tmp:
        kube_config = Path(tmp) / "kubeconfig"  # building reads a config; it contacts nothing
        kube_config.write_text(
            "apiVersion: v1\nkind: Config\ncurrent-context: render\nclusters: [{name: render, "
            "cluster: {server: 'https://127.0.0.1:6443'}}]\nusers: [{name: render, user: {}}]\n"
            "contexts: [{name: render, context: {cluster: render, user: render}}]\n"
        )
        op = operator or training_operator("train_pods", cfg, plan, str(kube_config))
        op.config_file, op.in_cluster = str(kube_config), False
        api = ApiClient()
        if cfg.nodes == 1:
            pod = op.build_pod_request_obj()
            pod.metadata.labels.pop("airflow_kpo_in_cluster", None)  # a render-time artefact
            return [api.sanitize_for_serialization(pod)]
        job = op.build_job_request_obj()
        job.spec.template.metadata.labels.pop("airflow_kpo_in_cluster", None)
        return [api.sanitize_for_serialization(job), rendezvous_service(cfg, plan["name"])]


def check_restricted(kind: str, spec: dict[str, Any]) -> None:
    """What Pod Security Admission `restricted` enforces on a pod spec (the trainers' namespace is labelled
    with it), plus what Sluice adds: read-only root, no service account token, an ephemeral-storage limit."""
    psc = spec.get("securityContext") or {}
    for c in spec.get("containers", []) + spec.get("initContainers", []):
        csc, where = c.get("securityContext") or {}, f"{kind} {c['name']}"
        if csc.get("runAsNonRoot", psc.get("runAsNonRoot")) is not True:
            raise ValueError(f"{where}: runAsNonRoot must be true")
        if csc.get("runAsUser", psc.get("runAsUser")) == 0:
            raise ValueError(f"{where}: runAsUser must not be 0")
        if csc.get("allowPrivilegeEscalation") is not False:
            raise ValueError(f"{where}: allowPrivilegeEscalation must be false")
        if (csc.get("capabilities") or {}).get("drop") != ["ALL"] or (csc.get("capabilities") or {}).get("add"):
            raise ValueError(f"{where}: capabilities must drop ALL and add none")
        profile = (csc.get("seccompProfile") or psc.get("seccompProfile") or {}).get("type")
        if profile not in ("RuntimeDefault", "Localhost"):
            raise ValueError(f"{where}: seccompProfile must be RuntimeDefault (got {profile!r})")
        if csc.get("readOnlyRootFilesystem") is not True:
            raise ValueError(f"{where}: readOnlyRootFilesystem must be true")
        if "ephemeral-storage" not in ((c.get("resources") or {}).get("limits") or {}):
            raise ValueError(f"{where}: an ephemeral-storage limit is required")
    if spec.get("automountServiceAccountToken") is not False:
        raise ValueError(f"{kind}: automountServiceAccountToken must be false (the trainer calls no API)")
    if spec.get("hostNetwork") or spec.get("hostPID") or spec.get("hostIPC"):
        raise ValueError(f"{kind}: host namespaces are not allowed")
    for v in spec.get("volumes", []):
        if (
            set(v)
            - {"name"}
            - {
                "emptyDir",
                "configMap",
                "secret",
                "persistentVolumeClaim",
                "projected",
                "downwardAPI",
                "ephemeral",
                "csi",
            }
        ):
            raise ValueError(
                f"{kind}: volume {v['name']!r} is of a type restricted pods may not use "
                f"({sorted(set(v) - {'name'})}, e.g. hostPath)"
            )


def validate_manifests(manifests: list[dict[str, Any]], version: str = K8S_SCHEMA_VERSION) -> None:
    """Kubernetes API schema (types, required fields, unknown keys) plus what the schema does not
    check: resource quantities, integral GPU counts, that the restart policy is Never, and the
    `restricted` pod security (check_restricted)."""
    import kubernetes_validate
    from kubernetes.utils import parse_quantity

    for m in manifests:
        kubernetes_validate.validate(m, version, strict=True)
        spec = m["spec"]["template"]["spec"] if m["kind"] == "Job" else m.get("spec", {})
        for c in spec.get("containers", []):
            for kind in ("requests", "limits"):
                for res, qty in (c.get("resources", {}).get(kind) or {}).items():
                    try:
                        parse_quantity(qty)
                    except ValueError:
                        raise ValueError(
                            f"{m['kind']} {c['name']}: {kind}[{res}] = {qty!r} is not a quantity"
                        ) from None
                    if res == "nvidia.com/gpu" and not str(qty).isdigit():
                        raise ValueError(f"{m['kind']} {c['name']}: GPU count {qty!r} must be a whole number")
        if m["kind"] in ("Pod", "Job") and spec.get("restartPolicy") != "Never":
            raise ValueError(f"{m['kind']}: restartPolicy must be Never (torchrun and the Job retry, not kubelet)")
        if m["kind"] in ("Pod", "Job"):
            check_restricted(m["kind"], spec)
