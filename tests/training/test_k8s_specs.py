"""Kubernetes specs of the train step, rendered without a cluster and checked against the API schema."""

import dataclasses

import kubernetes_validate
import pytest

from tasks.core.params import load_params
from tasks.training.kubernetes import (
    RDZV_PORT,
    WORKDIR,
    KubernetesTraining,
    job_name,
    render_manifests,
    validate_manifests,
)

RUN = "scheduled__2026-11-30T02:00:00+00:00"


@pytest.fixture(scope="module")
def p():
    return load_params().train


def _container(manifest):
    spec = manifest["spec"]["template"]["spec"] if manifest["kind"] == "Job" else manifest["spec"]
    (c,) = spec["containers"]
    return spec, c


def test_one_node_pod(p):
    cfg = KubernetesTraining(gpus_per_node=4, registry_url="https://git.example.internal/sluice-registry.git")
    (pod,) = render_manifests(RUN, "data-v7", p, cfg, init_from="s3://models/model-v3/model.pt")
    validate_manifests([pod])
    spec, c = _container(pod)
    assert pod["kind"] == "Pod" and pod["metadata"]["namespace"] == "sluice-train"  # not Airflow's namespace
    assert c["command"] == ["torchrun"]
    assert c["args"][:2] == ["--standalone", "--nproc-per-node=4"]
    # The engine arguments are the local backend's, plus where the registry is.
    i = c["args"].index("-m")
    assert c["args"][i : i + 2] == ["-m", "tasks.training.engine"] and "data-v7" in c["args"]
    assert c["args"][c["args"].index("--registry-url") + 1].endswith("sluice-registry.git")
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "4"
    assert {"cpu", "memory"} <= set(c["resources"]["requests"])
    assert {v["name"]: v for v in spec["volumes"]}["dshm"]["emptyDir"]["medium"] == "Memory"
    assert "/dev/shm" in {m["mountPath"] for m in c["volumeMounts"]}
    assert spec["nodeSelector"] and spec["tolerations"][0]["key"] == "nvidia.com/gpu"
    assert c["envFrom"][0]["secretRef"]["name"] == "sluice-registry"
    assert pod["metadata"]["labels"]["sluice/data-version"] == "data-v7"
    assert spec["restartPolicy"] == "Never"


def test_multi_node_indexed_job_and_headless_service(p):
    cfg = KubernetesTraining(nodes=4, gpus_per_node=8)
    job, service, policy = render_manifests(RUN, "data-v7", p, cfg)
    validate_manifests([job, service, policy])
    name = job_name(RUN)
    assert job["metadata"]["name"] == f"job-{name}"
    assert job["spec"]["completionMode"] == "Indexed" and job["spec"]["completions"] == job["spec"]["parallelism"] == 4
    assert job["spec"]["backoffLimit"] == 8 and job["spec"]["ttlSecondsAfterFinished"] == 3600
    rules = job["spec"]["podFailurePolicy"]["rules"]
    assert [r["action"] for r in rules] == ["Ignore", "FailJob"]
    spec, c = _container(job)
    assert spec["subdomain"] == name and service["metadata"]["name"] == name
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["selector"] == {"sluice/run": name}
    assert job["spec"]["template"]["metadata"]["labels"]["sluice/run"] == name
    assert f"--rdzv-endpoint=job-{name}-0.{name}:29500" in c["args"] and "--nnodes=4" in c["args"]


def test_job_names_are_dns_labels():
    assert job_name("manual__2026-11-30T11:14:18.893808+00:00") == "train-manual-2026-11-30t11-14-18-893808-00"
    assert len(job_name("x" * 300)) <= 42


@pytest.mark.parametrize(
    "breakage, error, match",
    [
        (
            lambda m: m["spec"]["containers"][0]["resources"]["limits"].update({"nvidia.com/gpu": "one"}),
            ValueError,
            "not a quantity",
        ),
        (
            lambda m: m["spec"]["containers"][0]["resources"]["limits"].update({"nvidia.com/gpu": "1.5"}),
            ValueError,
            "whole number",
        ),
        (lambda m: m["spec"].update({"restartPolicy": "Always"}), ValueError, "restartPolicy"),
        (lambda m: m["spec"].update({"nodeSelectr": {}}), kubernetes_validate.ValidationError, "nodeSelectr"),
        (lambda m: m["spec"]["containers"][0].update({"image": 7}), kubernetes_validate.ValidationError, "7"),
    ],
    ids=["gpu-word", "gpu-fraction", "restart-always", "unknown-key", "wrong-type"],
)
def test_validation_catches_broken_specs(p, breakage, error, match):
    (pod,) = render_manifests(RUN, "data-v1", p, KubernetesTraining())
    breakage(pod)
    with pytest.raises(error, match=match):
        validate_manifests([pod])


def test_bad_shape_is_refused():
    with pytest.raises(ValueError, match="must be >= 1"):
        KubernetesTraining(nodes=0)
    assert dataclasses.replace(KubernetesTraining.from_env({"SLUICE_K8S_NODES": "2"}), gpus_per_node=2).nodes == 2


def test_profiles_from_params_shape_the_specs(p):
    small = KubernetesTraining.from_env({}, profile="small")
    assert (small.nodes, small.gpus_per_node) == (4, 8)
    job, *_ = render_manifests(RUN, "data-v1", p, small)
    validate_manifests([job])
    assert job["spec"]["completions"] == 4
    assert (KubernetesTraining.from_env({}).nodes, KubernetesTraining.from_env({}).gpus_per_node) == (1, 2)
    assert KubernetesTraining.from_env({"SLUICE_K8S_NODES": "2"}, profile="full").nodes == 2  # env overrides


# ---- hardening: the pod runs restricted, writes only to its volumes, reaches only its run ----------


def _security_cases(p):
    yield "pod", render_manifests(RUN, "data-v1", p, KubernetesTraining())[0]
    yield "job", render_manifests(RUN, "data-v1", p, KubernetesTraining(nodes=2))[0]


@pytest.mark.parametrize("kind", ["pod", "job"])
def test_trainer_pods_are_locked_down(p, kind):
    manifest = dict(_security_cases(p))[kind]
    validate_manifests([manifest])
    spec, c = _container(manifest)
    assert spec["automountServiceAccountToken"] is False
    psc, csc = spec["securityContext"], c["securityContext"]
    assert psc["runAsNonRoot"] is True and psc["runAsUser"] != 0
    assert psc["seccompProfile"] == {"type": "RuntimeDefault"} == csc["seccompProfile"]
    assert csc["allowPrivilegeEscalation"] is False and csc["capabilities"] == {"drop": ["ALL"]}
    assert csc["readOnlyRootFilesystem"] is True and csc["runAsNonRoot"] is True
    # Every place the trainer writes is an emptyDir: the outputs, /tmp, the state folder, /dev/shm.
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    assert {WORKDIR, "/tmp", "/dev/shm"} <= set(mounts)
    assert all("emptyDir" in volumes[name] for name in mounts.values())
    assert set(volumes) == set(mounts.values())
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["HOME"].startswith("/tmp")
    limits, requests = c["resources"]["limits"], c["resources"]["requests"]
    assert "ephemeral-storage" in limits and "ephemeral-storage" in requests


@pytest.mark.parametrize(
    "breakage, match",
    [
        (lambda s, c: c["securityContext"].update({"allowPrivilegeEscalation": True}), "allowPrivilegeEscalation"),
        (lambda s, c: c["securityContext"].pop("capabilities"), "capabilities"),
        (lambda s, c: c["securityContext"].update({"runAsNonRoot": False}), "runAsNonRoot"),
        (lambda s, c: c["securityContext"].update({"readOnlyRootFilesystem": False}), "readOnlyRootFilesystem"),
        (lambda s, c: s.update({"automountServiceAccountToken": True}), "automountServiceAccountToken"),
        (lambda s, c: c["resources"]["limits"].pop("ephemeral-storage"), "ephemeral-storage"),
        (lambda s, c: s["volumes"].append({"name": "host", "hostPath": {"path": "/"}}), "hostPath"),
        (
            lambda s, c: s["securityContext"].pop("seccompProfile") and c["securityContext"].pop("seccompProfile"),
            "seccomp",
        ),
    ],
    ids=[
        "privilege-escalation",
        "capabilities",
        "root",
        "writable-root",
        "sa-token",
        "no-disk-limit",
        "hostpath",
        "seccomp",
    ],
)
def test_validation_catches_an_unrestricted_pod(p, breakage, match):
    (pod,) = render_manifests(RUN, "data-v1", p, KubernetesTraining())
    spec, c = _container(pod)
    breakage(spec, c)
    with pytest.raises(ValueError, match=match):
        validate_manifests([pod])


def test_the_rendezvous_is_reachable_only_from_the_same_run(p):
    job, service, policy = render_manifests(RUN, "data-v1", p, KubernetesTraining(nodes=2))
    name = job_name(RUN)
    assert policy["kind"] == "NetworkPolicy" and policy["metadata"]["namespace"] == job["metadata"]["namespace"]
    assert policy["spec"]["podSelector"] == {"matchLabels": {"sluice/run": name}}
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    (rule,) = policy["spec"]["ingress"]
    assert rule["from"] == [{"podSelector": {"matchLabels": {"sluice/run": name}}}]  # this namespace, this run
    # No port list: the rendezvous port and the ports NCCL/gloo open between the run's pods, from those pods only.
    assert "ports" not in rule
    assert job["spec"]["template"]["metadata"]["labels"]["sluice/run"] == name
    assert service["spec"]["ports"][0]["port"] == RDZV_PORT
    other = render_manifests("another-run", "data-v1", p, KubernetesTraining(nodes=2))[2]
    assert other["spec"]["podSelector"] != policy["spec"]["podSelector"]
