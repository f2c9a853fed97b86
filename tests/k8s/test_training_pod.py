"""The train step in a real pod: the trainer image built by a real Docker engine (docker/trainer.Dockerfile
FROM a base made from Debian's packages, ops/images.py), loaded into the cluster's containerd, and run
by the project's KubernetesPodOperator with its own command: torchrun -> the engine, which clones the
registry over git and reads the data version from S3, both on the tier's pod network (servers bound
to the bridge's address, HOST_ADDR), and publishes to S3. The pod's weights equal, bit for bit, those
of the local backend trained here on the same data version, params and world size."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tasks.core.settings import REPO_ROOT
from tasks.core.wait import wait_until
from tasks.training.kubernetes import KubernetesTraining, plan
from tests.k8s.conftest import BUCKET, Storage
from tests.k8s.test_api_server import _no_pods_left, _run_operator

pytestmark = [pytest.mark.k8s, pytest.mark.slow]


def _fetch(storage: Storage, uri: str, dest: Path) -> Path:
    from bench.multinode_pods import FETCH

    dest.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-c", FETCH, uri, str(dest), "model.pt", "train_metrics.json"],
                   env=storage.env, check=True, timeout=120, cwd=REPO_ROOT)  # fmt: skip
    return dest


def _tensors(blob, prefix=""):
    import torch

    if isinstance(blob, torch.Tensor):
        yield prefix, blob
    elif isinstance(blob, dict):
        for k, v in blob.items():
            yield from _tensors(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(blob, (list, tuple)):
        for i, v in enumerate(blob):
            yield from _tensors(v, f"{prefix}[{i}]")


@pytest.fixture
def pod_cfg(trainer_image, trainer_namespace, storage, worker_kubeconfig) -> KubernetesTraining:
    """The project's single-node trainer pod, sized for the test (what a scaling profile sets), on the
    tier's cluster as Airflow's worker, its registry and S3 on the pod network."""
    return KubernetesTraining(
        image=trainer_image,
        namespace=trainer_namespace,
        gpus_per_node=1,  # world size 1 (one process: the engine trains on the CPU where no GPU is)
        cpu="1",
        memory="3Gi",
        shm_size="256Mi",
        ephemeral_storage="4Gi",
        tmp_size="1Gi",
        registry_url=storage.git_url,
        s3_endpoint_url=storage.s3_url,
        kube_config_file=worker_kubeconfig,
    )


def _assert_the_local_backends_weights(pod_model: Path, storage: Storage, p, workdir: Path, monkeypatch) -> None:
    """Train with the local backend, here, on the same data version (the same registry), params and world
    size, and compare every tensor of the two model files bit for bit."""
    import torch

    from tasks.models import read_blob
    from tasks.training.local import run_torchrun

    for k, v in storage.env.items():
        monkeypatch.setenv(k, v)
    run_torchrun(storage.data_version, workdir, p, timeout_s=900)
    pod_t, here_t = dict(_tensors(read_blob(pod_model))), dict(_tensors(read_blob(workdir / "model.pt")))
    assert pod_t.keys() == here_t.keys() and pod_t
    differ = [k for k in pod_t if not torch.equal(pod_t[k], here_t[k])]
    assert not differ, f"weights differ between the pod and the local backend: {differ}"


def test_the_train_step_runs_in_a_real_pod_and_its_weights_equal_the_local_backends(
    cluster, pod_cfg, storage, params, settings, tmp_path, monkeypatch
):
    p = params.train.replace(epochs=2, nproc=1, warm_start=False)
    the_plan = plan("manual__k8s-tier", storage.data_version, p, f"s3://{BUCKET}/runs", storage.git_url)
    state, log = _run_operator(settings, pod_cfg, the_plan, probe=None, startup_timeout_seconds=300)
    assert state == "success", log[-6000:]
    _no_pods_left(cluster, pod_cfg.namespace)
    pod_model = _fetch(storage, the_plan["out_uri"], tmp_path / "pod") / "model.pt"
    _assert_the_local_backends_weights(pod_model, storage, p, tmp_path / "local", monkeypatch)


@pytest.mark.extended
def test_a_pod_deleted_mid_run_resumes_from_its_checkpoint_on_the_tasks_retry(
    cluster, pod_cfg, storage, params, settings, tmp_path, monkeypatch
):
    """Preemption: the training pod is deleted once its first checkpoint is on S3 (SIGTERM, as a node
    drain sends); the task fails, Airflow retries it, the new pod fetches the published checkpoints and
    resumes; the weights equal an uninterrupted local run's."""
    import concurrent.futures

    import boto3

    p = params.train.replace(epochs=150, nproc=1, warm_start=False, checkpoint_every=50)  # ~1,350 steps
    the_plan = plan("manual__preempted", storage.data_version, p, f"s3://{BUCKET}/runs", storage.git_url)
    prefix = the_plan["out_uri"].removeprefix(f"s3://{BUCKET}/") + "/checkpoints/"
    s3 = boto3.client("s3", endpoint_url=storage.s3_url, region_name="us-east-1",
                      aws_access_key_id="k", aws_secret_access_key="k")  # fmt: skip

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        run = pool.submit(_run_operator, settings, pod_cfg, the_plan, None, startup_timeout_seconds=300,
                          retries=1, retry_delay_s=1)  # fmt: skip
        wait_until(lambda: run.done() or s3.list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("KeyCount", 0) > 0,
                   timeout_s=600, interval_s=0.5, what="the pod's first published checkpoint")  # fmt: skip
        assert not run.done(), run.result()[1][-4000:]  # it must still be training: the run is too short
        cluster.kubectl("delete", "pod", the_plan["name"], "-n", pod_cfg.namespace, "--wait=false")
        state, log = run.result(timeout=900)
    assert state == "success", log[-6000:]
    assert "resumed from ckpt-" in log, log[-6000:]  # the retry's pod, from the first pod's checkpoint
    _no_pods_left(cluster, pod_cfg.namespace)
    pod_model = _fetch(storage, the_plan["out_uri"], tmp_path / "pod") / "model.pt"
    _assert_the_local_backends_weights(pod_model, storage, p, tmp_path / "local", monkeypatch)
