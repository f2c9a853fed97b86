"""Run the torchrun command (tasks/training/command.py) for the local backend (loopback only).

The launcher and its workers get an allowlisted environment (`worker_env`), not this
process's: under Airflow that holds the JWT and session secrets, the Fernet key, the
database URL and the admin password file, none of which the training code needs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Mapping, Sequence

from tasks.core.log import log
from tasks.core.params import TrainParams
from tasks.core.processes import stop_groups
from tasks.training.command import ENGINE_MODULE, engine_args, launcher, params_json

# Names passed to the workers as they are, and prefixes of names passed (all else is dropped):
# the process basics, Sluice's settings, the DVC remote's credentials and config (AWS_*, DVC_*),
# git's (the registry), TLS trust and proxies, thread counts and the CUDA/NCCL/gloo/torch knobs.
WORKER_ENV_NAMES = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "LANG",
        "LANGUAGE",
        "TZ",
        "TERM",
        "TMPDIR",
        "PYTHONPATH",
        "VIRTUAL_ENV",
        "LD_LIBRARY_PATH",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "NO_PROXY",
        "http_proxy",
        "https_proxy",
        "no_proxy",
    }
)
WORKER_ENV_PREFIXES = (
    "LC_",
    "SLUICE_",
    "AWS_",
    "DVC_",
    "GIT_",
    "OMP_",
    "MKL_",
    "CUDA_",
    "NCCL_",
    "GLOO_",
    "TORCH_",
    "TORCHELASTIC_",
    "PYTORCH_",
    "NVIDIA_",
)


# What every training process runs with, on any backend (the pods' environment too): one compute
# thread per process (the same float reductions everywhere: the same data, params and world size give
# the same weights locally and in a pod), and unbuffered progress lines.
COMPUTE_ENV = {"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def worker_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The local backend's environment for torchrun and its workers: the allowlisted part of
    `environ` (default: this process's), then the settings that keep them on loopback. One
    compute thread per process unless told otherwise below; sockets on `lo` for gloo and NCCL
    (Kubernetes pods build their own environment: there NCCL must use the pod network)."""
    environ = os.environ if environ is None else environ
    env = {k: v for k, v in environ.items() if k in WORKER_ENV_NAMES or k.startswith(WORKER_ENV_PREFIXES)}
    env.update(
        {
            **COMPUTE_ENV,
            "GLOO_SOCKET_IFNAME": "lo",
            "NCCL_SOCKET_IFNAME": "lo",
            # Otherwise the launcher opens a TCPStore server (all interfaces) to share with workers.
            "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
        }
    )
    return env


def torchrun_command(
    data_version: str,
    out: str,
    p: TrainParams,
    store_dir: Path,
    max_restarts: int = 1,
    init_from: str | None = None,
    workdir: Path | None = None,
    module: str = ENGINE_MODULE,
    module_args: Sequence[str] = (),
    dataset: str | None = None,
) -> list[str]:
    """The local backend's command (tasks/training/command.py's two parts). On one machine the
    rendezvous uses a file store: torch's TCPStore server listens on every interface, and Sluice's
    processes listen on loopback only. The workers' process group uses another file store in the same
    folder (`--store-dir`). (Across machines, Kubernetes pods use the c10d TCP rendezvous instead.)"""
    return [
        *launcher(p.nproc, max_restarts=max_restarts, file_store=store_dir),
        *engine_args(
            data_version,
            str(out),
            params_json(p),
            init_from,
            workdir=str(workdir) if workdir else None,
            store_dir=str(store_dir),
            module=module,
            module_args=module_args,
            dataset=dataset,
        ),
    ]


def start_torchrun(
    data_version: str,
    out: Path | str,
    p: TrainParams,
    init_from: str | None = None,
    max_restarts: int = 1,
    workdir: Path | None = None,
    module: str = ENGINE_MODULE,
    module_args: Sequence[str] = (),
    dataset: str | None = None,
) -> subprocess.Popen:
    """Start the local launcher in its own process group (returns at once). `out` may be an
    fsspec URI, as in a pod; the engine then works in `workdir` and publishes to `out`.
    `module` / `module_args`: another worker entry module (see `engine_args`)."""
    local = workdir or Path(out)
    local.mkdir(parents=True, exist_ok=True)
    store_dir = local / "dist-store"
    shutil.rmtree(store_dir, ignore_errors=True)  # a previous attempt's keys must not leak in
    store_dir.mkdir(parents=True)
    cmd = torchrun_command(
        data_version, str(out), p, store_dir, max_restarts, init_from, workdir, module, module_args, dataset
    )
    log(f"launching: {' '.join(cmd[:9])} ...")
    return subprocess.Popen(cmd, env=worker_env(), start_new_session=True)


def run_torchrun(
    data_version: str,
    out: Path | str,
    p: TrainParams,
    timeout_s: float = 3600,
    init_from: str | None = None,
    workdir: Path | None = None,
    module: str = ENGINE_MODULE,
    module_args: Sequence[str] = (),
    dataset: str | None = None,
) -> None:
    """Train to the end; a worker that dies is restarted once from the newest checkpoint.
    `dataset`: the step's dataset plug-in (see engine_args)."""
    proc = start_torchrun(
        data_version, out, p, init_from, workdir=workdir, module=module, module_args=module_args, dataset=dataset
    )
    try:
        rc = proc.wait(timeout=timeout_s)
    except BaseException:  # timed out or the task was stopped: SIGTERM (workers checkpoint), then SIGKILL
        stop_groups({"torchrun": proc.pid}, grace_s=20)
        proc.wait()
        raise
    if rc != 0:
        raise RuntimeError(f"torchrun exited with {rc} (see the worker lines above)")
