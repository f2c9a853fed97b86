"""An Indexed Job's training pods, run on a `bench.cluster.Cluster`: the registry and S3 on the
storage host, one pod per node host, started, killed and replaced as Kubernetes would.

The command and environment are taken from the manifest `tasks.training.kubernetes.render_manifests`
renders (the Job's container for M nodes, the Pod's for one): `torchrun` is this venv's (the
image's), the emptyDir mounts become the node's own folders, the registry Secret's AWS_* keys are
added, SLUICE_HOME is the state volume (the image's default), JOB_COMPLETION_INDEX is the node's
index. Nothing else: the engine does not know it runs here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.cluster import Cluster, Host
from tasks.core.params import TrainParams
from tasks.core.settings import REPO_ROOT
from tasks.core.wait import wait_until
from tasks.training.kubernetes import STATE_DIR, KubernetesTraining, job_name, render_manifests

BUCKET = "sluice-registry"
SECRET = {"AWS_ACCESS_KEY_ID": "test-key", "AWS_SECRET_ACCESS_KEY": "test-secret", "AWS_DEFAULT_REGION": "us-east-1"}
REGISTRY_REPO = "registry"  # git://STORAGE/registry: the storage host's SLUICE_HOME/registry

SEED = """
import sys
import boto3
import numpy as np
from tasks.core.settings import Settings
from tasks.plugins.emails import GOLD_COLUMN, load_source
from tasks.registry import Registry

rows, parts, home = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
settings = Settings.from_env()
boto3.client("s3", endpoint_url=settings.s3_endpoint_url).create_bucket(Bucket=sys.argv[4])
src = load_source()
df = src.iloc[np.random.default_rng(0).integers(0, len(src), rows)].reset_index(drop=True)
df["email_id"] = range(rows)
df["label"] = df.pop(GOLD_COLUMN)
df["label_prob"] = df["label"].astype(float)
paths = {}
for i, chunk in enumerate(np.array_split(np.arange(rows), parts)):
    paths[f"batch-{i + 1:04d}"] = f"{home}/part{i}.parquet"
    df.iloc[chunk].to_parquet(paths[f"batch-{i + 1:04d}"], index=False)
info = Registry(settings).snapshot(paths, {"rows_by_batch": {k: 0 for k in paths}})
print(info["data_version"])
"""

FETCH = """
import sys
from tasks.training.outputs import _filesystem
fs, root = _filesystem(sys.argv[1])
for name in sys.argv[3:]:
    if fs.exists(f"{root}/{name}"):
        fs.get(f"{root}/{name}", f"{sys.argv[2]}/{name}", recursive=name.endswith("/"))
"""


def storage_env(cluster: Cluster) -> dict[str, str]:
    """The storage host's own environment: its SLUICE_HOME holds the registry, pushed to its S3."""
    return {
        "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "HOME": str(cluster.storage.root),
        "PYTHONPATH": str(REPO_ROOT),
        "SLUICE_HOME": str(cluster.git_root),
        "SLUICE_DVC_REMOTE": f"s3://{BUCKET}/registry",
        "SLUICE_S3_ENDPOINT_URL": cluster.s3_url,
        "DVC_NO_ANALYTICS": "1",
        "GIT_AUTHOR_NAME": "cluster",
        "GIT_AUTHOR_EMAIL": "cluster@sluice.invalid",
        "GIT_COMMITTER_NAME": "cluster",
        "GIT_COMMITTER_EMAIL": "cluster@sluice.invalid",
        **SECRET,
    }


def seed_registry(cluster: Cluster, rows: int = 600, parts: int = 2) -> str:
    """A data version of `rows` real emails (gold labels as weak ones) in the storage host's registry,
    pushed to its S3; returns its tag."""
    work = cluster.storage.root / "seed"
    work.mkdir(parents=True, exist_ok=True)
    out = cluster.run(
        cluster.storage,
        [sys.executable, "-c", SEED, str(rows), str(parts), str(work), BUCKET],
        storage_env(cluster),
        timeout_s=300,
    )
    return out.strip().splitlines()[-1]


def fetch(cluster: Cluster, uri: str, dest: Path, *names: str) -> Path:
    """Copy `names` under `uri` (S3 on the storage host) into `dest`, from the storage host."""
    dest.mkdir(parents=True, exist_ok=True)
    cluster.run(cluster.storage, [sys.executable, "-c", FETCH, uri, str(dest), *names], storage_env(cluster))
    return dest


@dataclass
class Pod:
    """One node's pod: argv and env from the manifest, its volumes mapped to `host.root`."""

    host: Host
    index: int
    argv: list[str]
    env: dict[str, str]
    log: Path
    proc: subprocess.Popen | None = None
    starts: int = 0


def _volumes(container: dict, host: Host) -> dict[str, str]:
    """The container's mount paths -> the node's folders (not /dev/shm: the host's is used)."""
    return {
        m["mountPath"]: str(host.root / "volumes" / m["name"])
        for m in container.get("volumeMounts", [])
        if m["mountPath"] != "/dev/shm"
    }


def _map(value: str, mounts: dict[str, str]) -> str:
    for path in sorted(mounts, key=len, reverse=True):
        if value == path or value.startswith(path + "/") or value.startswith(path + ":"):
            return mounts[path] + value[len(path) :]
    return value


@dataclass
class Job:
    """One training run as an Indexed Job (or a single Pod) on the cluster's first `nodes` hosts."""

    cluster: Cluster
    run_id: str
    data_version: str
    p: TrainParams
    nodes: int
    nproc: int
    dist_timeout_s: int = 60
    max_restarts: int = 3
    out_root: str = f"s3://{BUCKET}/runs"
    pods: list[Pod] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.name = job_name(self.run_id)
        if self.nodes > 1 and self.name != self.cluster.job:
            raise ValueError(f"the cluster's hosts are named for job {self.cluster.job}, this run is {self.name}")
        cfg = KubernetesTraining(
            nodes=self.nodes,
            gpus_per_node=self.nproc,
            registry_url=self.cluster.git_url(REGISTRY_REPO),
            s3_endpoint_url=self.cluster.s3_url,
            dist_timeout_s=self.dist_timeout_s,
            max_restarts=self.max_restarts,
        )
        manifest = render_manifests(self.run_id, self.data_version, self.p, cfg, out_root=self.out_root)[0]
        spec = manifest["spec"]["template"]["spec"] if manifest["kind"] == "Job" else manifest["spec"]
        (container,) = spec["containers"]
        self.manifest, self.container = manifest, container
        args = container["args"]
        self.out_uri = args[args.index("--out") + 1]
        for i, host in enumerate(self.cluster.nodes[: self.nodes]):
            mounts = _volumes(container, host)
            argv = [_map(a, mounts) for a in [*container["command"], *args]]
            argv[0] = str(Path(sys.executable).with_name(argv[0]))  # the image's torchrun: this venv's
            env = {e["name"]: _map(e["value"], mounts) for e in container.get("env", [])}
            env.update(
                {
                    **SECRET,  # envFrom: the registry Secret
                    "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
                    "PYTHONPATH": str(REPO_ROOT),  # the image's code
                    "SLUICE_HOME": mounts[STATE_DIR],
                    "OMP_NUM_THREADS": "1",
                    **({"JOB_COMPLETION_INDEX": str(i)} if manifest["kind"] == "Job" else {}),
                }
            )
            self.pods.append(Pod(host, i, argv, env, host.root / f"{self.name}.log"))

    def start(self, index: int) -> Pod:
        """(Re)create pod `index`: fresh emptyDir volumes, then its command on its node."""
        pod = self.pods[index]
        for path in _volumes(self.container, pod.host).values():
            shutil.rmtree(path, ignore_errors=True)
            Path(path).mkdir(parents=True)
        pod.starts += 1
        with open(pod.log, "a") as f:
            f.write(f"{time.time():.3f} [harness] start {pod.host.hostname} (start {pod.starts})\n")
        pod.proc = self.cluster.popen(pod.host, pod.argv, pod.env, pod.log)
        return pod

    def start_all(self) -> "Job":
        for i in range(len(self.pods)):
            self.start(i)
        return self

    def kill(self, index: int) -> float:
        """SIGKILL every process of pod `index`'s node (the node is lost); returns the time of the kill."""
        at = time.time()
        self.cluster.kill(self.pods[index].host)
        with open(self.pods[index].log, "a") as f:
            f.write(f"{at:.3f} [harness] SIGKILL every process of {self.pods[index].host.hostname}\n")
        return at

    def wait(self, timeout_s: float = 300, restart_failed: bool = False) -> list[int]:
        """Wait for every pod to exit; with `restart_failed`, a pod that fails is replaced (a Job's
        backoff), until all succeed. Returns the exit codes."""

        def done() -> bool:
            for pod in self.pods:
                rc = pod.proc.poll() if pod.proc else None
                if restart_failed and rc not in (None, 0):
                    self.start(pod.index)
            return all(p.proc.poll() is not None for p in self.pods)

        wait_until(done, timeout_s=timeout_s, interval_s=0.5, what=f"job {self.name}'s pods to exit")
        return [p.proc.returncode for p in self.pods]

    def local_out(self, index: int) -> Path:
        """Pod `index`'s --workdir (rank 0's checkpoints and metrics appear there first)."""
        return Path(_volumes(self.container, self.pods[index].host)["/workspace/out"])

    def logs(self) -> str:
        return "\n".join(f"--- {p.log}\n{p.log.read_text() if p.log.exists() else ''}" for p in self.pods)

    def outputs(self, dest: Path, *names: str) -> Path:
        return fetch(self.cluster, self.out_uri, dest, *(names or ("model.pt", "train_metrics.json")))

    def metrics(self, dest: Path) -> dict:
        return json.loads((self.outputs(dest, "train_metrics.json") / "train_metrics.json").read_text())
