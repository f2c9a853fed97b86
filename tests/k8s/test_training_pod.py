"""The train step in a real pod: the trainer image built by a real Docker engine (docker/trainer.Dockerfile
FROM a base made from Debian's packages, ops/images.py), loaded into the cluster's containerd, and run
by the project's KubernetesPodOperator with its own command: torchrun -> the engine, which clones the
registry over git and reads the data version from S3, both on the tier's pod network (servers bound
to the bridge's address, HOST_ADDR), and publishes to S3. The pod's weights equal, bit for bit, those
of the local backend trained here on the same data version, params and world size."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tasks.core.settings import REPO_ROOT
from tasks.core.wait import wait_until
from tasks.training.kubernetes import KubernetesTraining, plan
from tests.k8s.conftest import HOST_ADDR
from tests.k8s.test_api_server import _no_pods_left, _run_operator

pytestmark = [pytest.mark.k8s, pytest.mark.slow]

TRAINER = "sluice-trainer:k8s-tier"
BUCKET = "sluice-registry"


def _port() -> int:
    with socket.socket() as s:
        s.bind((HOST_ADDR, 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def trainer_image(cluster) -> str:
    """The trainer image, built with Docker and imported into the cluster's containerd; its size printed."""
    from ops.images import build_trainer, engine

    started = time.monotonic()
    with engine() as e:
        build_trainer(e, TRAINER)
        size = e.size(TRAINER)
        save = subprocess.Popen(["docker", "-H", e.host, "save", TRAINER], stdout=subprocess.PIPE)
        sock = cluster.base / "containerd" / "containerd.sock"
        load = subprocess.run(
            ["ctr", "-a", str(sock), "-n", "k8s.io", "images", "import", "-"],
            stdin=save.stdout,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert save.wait() == 0 and load.returncode == 0, load.stderr[-2000:]
    print(f"\n[k8s tier] trainer image {TRAINER}: {size / 1e6:.0f} MB, built and loaded in "
          f"{time.monotonic() - started:.0f} s")  # fmt: skip
    return TRAINER


@dataclass(frozen=True)
class Storage:
    s3_url: str
    git_url: str
    env: dict[str, str]
    data_version: str


@pytest.fixture(scope="module")
def storage(cluster, tmp_path_factory):
    """An S3 server (moto) and `git daemon` on the bridge's address, and a data version of real emails in
    a registry pushed there (bench/multinode_pods.py's seed, as the namespaced-host cluster uses)."""
    from bench.multinode_pods import SECRET, SEED

    root = tmp_path_factory.mktemp("storage")
    s3_port, git_port = _port(), _port()
    env = {
        "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "HOME": str(root),
        "PYTHONPATH": str(REPO_ROOT),
        "SLUICE_HOME": str(root / "git"),
        "SLUICE_DVC_REMOTE": f"s3://{BUCKET}/registry",
        "SLUICE_S3_ENDPOINT_URL": f"http://{HOST_ADDR}:{s3_port}",
        "DVC_NO_ANALYTICS": "1",
        "GIT_AUTHOR_NAME": "k8s-tier",
        "GIT_AUTHOR_EMAIL": "k8s-tier@sluice.invalid",
        "GIT_COMMITTER_NAME": "k8s-tier",
        "GIT_COMMITTER_EMAIL": "k8s-tier@sluice.invalid",
        **SECRET,
    }
    (root / "git").mkdir()
    procs = [
        subprocess.Popen([sys.executable, "-m", "moto.server", "-H", HOST_ADDR, "-p", str(s3_port)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, env=env),
        subprocess.Popen(["git", "daemon", f"--listen={HOST_ADDR}", f"--port={git_port}", "--export-all",
                          "--reuseaddr", f"--base-path={root / 'git'}", str(root / "git")],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, env=env),
    ]  # fmt: skip
    try:
        for port in (s3_port, git_port):
            wait_until(lambda p=port: socket.create_connection((HOST_ADDR, p), timeout=1).close() or True,
                       timeout_s=30, what=f"a server on {HOST_ADDR}:{port}", retry_on=(OSError,))  # fmt: skip
        seed = subprocess.run(
            [sys.executable, "-c", SEED, "600", "2", str(root), BUCKET],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            cwd=REPO_ROOT,
        )
        assert seed.returncode == 0, seed.stderr[-3000:]
        yield Storage(
            env["SLUICE_S3_ENDPOINT_URL"],
            f"git://{HOST_ADDR}:{git_port}/registry",
            env,
            seed.stdout.strip().splitlines()[-1],
        )
    finally:
        from tasks.core.processes import stop_groups

        stop_groups({"moto": procs[0].pid, "git daemon": procs[1].pid})  # each leads its own session


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


@pytest.mark.extended
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
