"""The torchrun command line, the one builder, in two parts:

  launcher  torchrun (in a pod: the image's `torchrun`; on this machine: `python -m torch.distributed.run`
            with this interpreter) and how its processes meet: `--standalone` (one node), a c10d
            rendezvous over a file store on this machine (loopback only), or over TCP at a host:port
            (pods on several nodes);
  engine    `-m MODULE ARGS`: the training engine and its arguments (`engine_args`, the same locally,
            in a pod and in dvc.yaml), or another worker module (a benchmark's, a test's).

The local backend (tasks/training/local.py), the Kubernetes pods (tasks/training/kubernetes.py), the
benchmarks and the tests put the two together: `[*launcher(...), *engine_args(...)]`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Sequence

from tasks.core.params import TrainParams

ENGINE_MODULE = "tasks.training.engine"  # the torchrun workers' entry module
TORCHRUN = ("torchrun",)  # a container's: the one on its PATH


def local_torchrun() -> list[str]:
    """torchrun with this interpreter (this venv's torch, whatever PATH holds)."""
    return [sys.executable, "-m", "torch.distributed.run"]


def launcher(
    nproc: int,
    *,
    program: Sequence[str] | None = None,
    nnodes: int = 1,
    max_restarts: int | None = None,
    file_store: Path | None = None,
    endpoint: str | None = None,
    rdzv_id: str | None = None,
) -> list[str]:
    """The launcher's part: `program` (default: `local_torchrun()`) and its flags, `nproc` processes
    on each of `nnodes` nodes, restarting its workers up to `max_restarts` times (None: torchrun's default).

    How the launchers meet, one of:
      file_store  a folder on this machine: c10d over a file store there, the launchers on 127.0.0.1
                  (torch's TCPStore server listens on every interface, Sluice's processes on loopback
                  only); several launchers with the same folder and `rdzv_id` simulate several nodes;
      endpoint    HOST:PORT: c10d over TCP (pods on several nodes), under `rdzv_id`;
      neither     `--standalone` (one node: torchrun's own rendezvous on a free local port).
    """
    program = list(local_torchrun() if program is None else program)
    restarts = [f"--max-restarts={max_restarts}"] if max_restarts is not None else []
    if file_store is not None and endpoint is not None:
        raise ValueError("a rendezvous over a file store or a TCP endpoint, not both")
    if file_store is None and endpoint is None:
        if nnodes != 1 or rdzv_id is not None:
            raise ValueError("--standalone is one node with its own rendezvous: give file_store or endpoint")
        return [*program, "--standalone", f"--nproc-per-node={nproc}", *restarts]
    where = (
        [f"--rdzv-endpoint={file_store / 'rendezvous'}", "--rdzv-conf=store_type=file"]
        if file_store is not None
        else [f"--rdzv-endpoint={endpoint}"]
    )
    return [
        *program,
        f"--nnodes={nnodes}",
        f"--nproc-per-node={nproc}",
        *restarts,
        "--rdzv-backend=c10d",
        *where,
        *([f"--rdzv-id={rdzv_id}"] if rdzv_id is not None else []),
        *(["--local-addr=127.0.0.1"] if file_store is not None else []),
    ]


def entry(module: str, *args: str) -> list[str]:
    """The engine's part for any worker module: `-m MODULE ARGS`."""
    return ["-m", module, *args]


def params_json(p: TrainParams) -> str:
    return json.dumps(p.model_dump(mode="json"), sort_keys=True)


def engine_args(
    data_version: str,
    out: str,
    params: str,
    init_from: str | None = None,
    registry_url: str | None = None,
    workdir: str | None = None,
    store_dir: str | None = None,
    module: str = ENGINE_MODULE,
    module_args: Sequence[str] = (),
    dataset: str | None = None,
) -> list[str]:
    """The engine's part of the command: the same locally, in a Kubernetes pod, in dvc.yaml.
    `params` is `params_json(p)` (or, in a pod spec, a template that renders to it). `module` is
    the worker's entry module: another one (a benchmark's) takes `module_args` and then the
    engine's arguments. `dataset`: the step's dataset plug-in (a pod reads its image's params.yaml,
    not the SLUICE_PARAMS of the Airflow side); None: the params file's."""
    return entry(
        module,
        *module_args,
        "--data-version",
        data_version,
        "--out",
        out,
        "--params",
        params,
        *(["--init-from", init_from] if init_from is not None else []),
        *(["--registry-url", registry_url] if registry_url else []),
        *(["--workdir", workdir] if workdir else []),
        *(["--store-dir", store_dir] if store_dir else []),
        *(["--dataset", dataset] if dataset is not None else []),
    )
