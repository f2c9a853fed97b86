"""The k8s tier's cluster: a real Kubernetes v1.20.2 control plane and kubelet on loopback
(ops/k8s-local.sh: etcd, kube-apiserver, controller-manager, scheduler, containerd, kubelet),
started once for the tier and stopped after it. Root only, Debian packages only.

The binaries are built once per machine from Debian's kubernetes source package and cached
(/var/cache/k8s-local; about 7.5 minutes cold on 2 cores, `.ci/run` builds them before the suite);
the packages it needs are installed by `.ci/run` (`bash ops/k8s-local.sh install`)."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tasks.core.settings import REPO_ROOT

SCRIPT = REPO_ROOT / "ops" / "k8s-local.sh"
GPUS = 2  # what the test node advertises as nvidia.com/gpu (no GPU is behind it)
IMAGE = "localhost/busybox-probe:k8s-tier"  # the probes' image (tests/k8s/test_training_pod.py builds the trainer)
# The pods' network: a bridge the tier makes and removes, on a private range. Its own address is the
# pods' gateway and the one address the tier's servers (S3, git) bind; the pods have no default route.
POD_BRIDGE = "sluicek8s0"
POD_CIDR = "10.78.0.0/24"
HOST_ADDR = "10.78.0.1"
BUCKET = "sluice-registry"  # the tier's S3 bucket: the registry's DVC remote, the runs' outputs, the prediction log


@dataclass(frozen=True)
class Cluster:
    base: Path
    kubeconfig: str
    env: dict[str, str]

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
        kubectl = Path(os.environ.get("K8S_CACHE", "/var/cache/k8s-local/v1.20.2")) / "bin" / "kubectl"
        proc = subprocess.run(
            [str(kubectl), *args], env=self.env, input=input, capture_output=True, text=True, timeout=120
        )
        if check:
            assert proc.returncode == 0, f"kubectl {' '.join(args)}: {proc.stderr[-2000:]}"
        return proc

    def script(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["bash", str(SCRIPT), *args], env=self.env, capture_output=True, text=True, timeout=timeout
        )


@pytest.fixture(scope="session")
def cluster(tmp_path_factory) -> Cluster:
    if os.geteuid() != 0:
        pytest.fail("the k8s tier starts a kubelet and containerd: run it as root (CI does)")
    if not shutil.which("etcd") or not shutil.which("containerd"):
        pytest.fail("the k8s tier needs Debian's etcd-server, containerd, runc, ...: bash ops/k8s-local.sh install")
    base = tmp_path_factory.mktemp("k8s")
    env = {
        **os.environ,
        "K8S_LOCAL_DIR": str(base),
        "K8S_LOCAL_CLEAN_HOST": "1",
        "KUBECONFIG": str(base / "kubeconfig" / "admin.kubeconfig"),
        "K8S_LOCAL_POD_BRIDGE": POD_BRIDGE,
        "K8S_LOCAL_POD_CIDR": POD_CIDR,
    }
    c = Cluster(base, env["KUBECONFIG"], env)
    built = c.script("build", timeout=1800)  # returns at once when the binaries are cached
    assert built.returncode == 0, built.stderr[-3000:]
    subprocess.run(["ip", "link", "del", POD_BRIDGE], capture_output=True)  # a killed run's
    for cmd in (["link", "add", POD_BRIDGE, "type", "bridge"], ["addr", "add", f"{HOST_ADDR}/24", "dev", POD_BRIDGE],
                ["link", "set", POD_BRIDGE, "up"]):  # fmt: skip
        subprocess.run(["ip", *cmd], check=True, capture_output=True)
    try:
        up = c.script("up")
        assert up.returncode == 0, up.stderr[-3000:] + (base / "run" / "kubelet.log").read_text()[-3000:]
        # The node says it has GPUs (an extended resource on its status) and carries the GPU node label the
        # trainer pods select: the scheduler then places GPU requests against that count.
        c.kubectl("label", "node", "localhost", "nvidia.com/gpu.present=true", "--overwrite")
        from kubernetes import client, config

        api = config.new_client_from_config(config_file=c.kubeconfig)
        client.CoreV1Api(api).patch_node_status("localhost", {"status": {"capacity": {"nvidia.com/gpu": str(GPUS)}}})
        _probe_image(c)
        yield c
    finally:
        c.script("down")
        subprocess.run(["ip", "link", "del", POD_BRIDGE], capture_output=True)


def _probe_image(c: Cluster) -> None:
    """A root filesystem of busybox (Debian's busybox-static) as the probes' image in the cluster's
    containerd: it has a shell for the probes and no torchrun, so the project's own pod command fails
    in it the way a broken image would."""
    root = c.base / "image"
    (root / "bin").mkdir(parents=True)
    shutil.copy("/bin/busybox", root / "bin" / "busybox")
    for tool in ("sh", "id", "touch", "cat", "grep", "echo", "env", "mount", "sleep"):
        (root / "bin" / tool).symlink_to("busybox")
    loaded = c.script("image", str(root), IMAGE, "/bin/sh")
    assert loaded.returncode == 0, loaded.stderr[-2000:]


@pytest.fixture(scope="session")
def trainer_namespace(cluster: Cluster) -> str:
    """The project's own trainer namespace manifest, applied, and the remote's credentials Secret the
    pods read their AWS_* variables from (the values are the test's own)."""
    cluster.kubectl("apply", "-f", str(REPO_ROOT / "k8s" / "trainer-namespace.yaml"))
    cluster.kubectl(
        "create", "secret", "generic", "sluice-registry", "-n", "sluice-train",
        "--from-literal=AWS_ACCESS_KEY_ID=k8s-tier", "--from-literal=AWS_SECRET_ACCESS_KEY=k8s-tier-secret",
        "--from-literal=AWS_DEFAULT_REGION=us-east-1",
    )  # fmt: skip
    from tasks.core.wait import wait_until

    # Pods are refused until the controller-manager has made the namespace's default ServiceAccount.
    wait_until(lambda: cluster.kubectl("get", "sa", "default", "-n", "sluice-train", check=False).returncode == 0,
               timeout_s=60, what="the sluice-train namespace's default ServiceAccount")  # fmt: skip
    return "sluice-train"


@pytest.fixture(scope="session")
def worker_kubeconfig(cluster: Cluster, trainer_namespace: str) -> str:
    """A kube config with the token of Airflow's worker service account (`sluice-worker` in `sluice`),
    bound by the project's own k8s/sluice-rbac.yaml: the tier's operators and preflight act with exactly
    the rights a cluster gives them, not the admin's."""
    import base64

    from tasks.core.wait import wait_until

    cluster.kubectl("create", "namespace", "sluice")
    cluster.kubectl("create", "serviceaccount", "sluice-worker", "-n", "sluice")
    cluster.kubectl("apply", "-f", str(REPO_ROOT / "k8s" / "sluice-rbac.yaml"))

    def token_secret() -> str:  # v1.20's token controller makes one per service account
        return cluster.kubectl(
            "get", "sa", "sluice-worker", "-n", "sluice", "-o", "jsonpath={.secrets[0].name}", check=False
        ).stdout.strip()

    secret = wait_until(token_secret, timeout_s=60, what="the sluice-worker account's token Secret")
    token = base64.b64decode(
        cluster.kubectl("get", "secret", secret, "-n", "sluice", "-o", "jsonpath={.data.token}").stdout
    ).decode()
    path = cluster.base / "kubeconfig" / "sluice-worker.kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: worker\n"
        f"clusters: [{{name: local, cluster: {{server: 'https://127.0.0.1:6443', "
        f"certificate-authority: '{cluster.base / 'pki' / 'ca.crt'}'}}}}]\n"
        f"users: [{{name: sluice-worker, user: {{token: '{token}'}}}}]\n"
        "contexts: [{name: worker, context: {cluster: local, user: sluice-worker, namespace: sluice-train}}]\n"
    )
    return str(path)


@pytest.fixture(scope="session")
def docker_engine():
    """One Docker engine for the tier's image builds (ops/images.py: its data root is cached per machine)."""
    from ops.images import engine

    with engine() as e:
        yield e


def build_and_load(cluster: Cluster, e, image: str, tag: str) -> str:
    """docker/<image>.Dockerfile built by the engine and imported into the cluster's containerd (what a
    registry pull would bring); the image's size and the time it took printed for the closing note."""
    from ops.images import build

    started = time.monotonic()
    build(e, image, tag)
    built = time.monotonic() - started
    save = subprocess.Popen(["docker", "-H", e.host, "save", tag], stdout=subprocess.PIPE)
    sock = cluster.base / "containerd" / "containerd.sock"
    load = subprocess.run(
        ["ctr", "-a", str(sock), "-n", "k8s.io", "images", "import", "-"],
        stdin=save.stdout,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert save.wait() == 0 and load.returncode == 0, load.stderr[-2000:]
    print(f"\n[k8s tier] {image} image {tag}: {e.size(tag) / 1e6:.0f} MB, built in {built:.0f} s, "
          f"loaded in {time.monotonic() - started - built:.0f} s")  # fmt: skip
    return tag


@pytest.fixture(scope="session")
def trainer_image(cluster, docker_engine) -> str:
    """The trainer image, built with Docker and imported into the cluster's containerd."""
    return build_and_load(cluster, docker_engine, "trainer", "sluice-trainer:k8s-tier")


def free_port() -> int:
    """A free port on the bridge's address (HOST_ADDR), where the tier's servers listen for the pods."""
    from ops.model_server import free_port as free_port_on

    return free_port_on(HOST_ADDR)


@dataclass(frozen=True)
class Storage:
    s3_url: str
    git_url: str
    env: dict[str, str]
    data_version: str


@pytest.fixture(scope="session")
def storage(cluster, tmp_path_factory):
    """An S3 server (moto) and `git daemon` on the bridge's address, and a data version of real emails in
    a registry pushed there (bench/multinode_pods.py's seed, as the namespaced-host cluster uses)."""
    from bench.multinode_pods import SECRET, SEED
    from tasks.core.settings import REPO_ROOT
    from tasks.core.wait import wait_until

    root = tmp_path_factory.mktemp("storage")
    s3_port, git_port = free_port(), free_port()
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
    s3 = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", HOST_ADDR, "-p", str(s3_port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env=env,
    )
    try:
        wait_until(lambda: socket.create_connection((HOST_ADDR, s3_port), timeout=1).close() or True,
                   timeout_s=30, what=f"S3 on {HOST_ADDR}:{s3_port}", retry_on=(OSError,))  # fmt: skip
        with git_daemon(root / "git", git_port):
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

        stop_groups({"moto": s3.pid})  # it leads its own session


@contextlib.contextmanager
def git_daemon(base: Path, port: int | None = None):
    """`git daemon` serving the repositories under `base` (a SLUICE_HOME: its registry is
    git://HOST_ADDR:PORT/registry) on the bridge's address, for the pods; stopped on exit. Yields the port."""
    from tasks.core.processes import stop_groups
    from tasks.core.wait import wait_until

    port = port or free_port()
    proc = subprocess.Popen(["git", "daemon", f"--listen={HOST_ADDR}", f"--port={port}", "--export-all",
                             "--reuseaddr", f"--base-path={base}", str(base)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    try:
        wait_until(lambda: socket.create_connection((HOST_ADDR, port), timeout=1).close() or True,
                   timeout_s=30, what=f"git daemon on {HOST_ADDR}:{port}", retry_on=(OSError,))  # fmt: skip
        yield port
    finally:
        stop_groups({"git daemon": proc.pid})
