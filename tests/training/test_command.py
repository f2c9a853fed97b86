"""The one torchrun command builder (tasks/training/command.py): its launcher part for each way the
launchers meet, and the local backend's and the pods' whole commands."""

import sys
from pathlib import Path

import pytest

from tasks.training.command import TORCHRUN, engine_args, entry, launcher


def test_local_launcher_is_a_file_store_rendezvous_on_loopback(tmp_path):
    assert launcher(2, max_restarts=1, file_store=tmp_path) == [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes=1",
        "--nproc-per-node=2",
        "--max-restarts=1",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={tmp_path / 'rendezvous'}",
        "--rdzv-conf=store_type=file",
        "--local-addr=127.0.0.1",
    ]
    # two launchers on one folder simulate two nodes; torchrun's default restarts when none is given
    two = launcher(2, nnodes=2, file_store=tmp_path, rdzv_id="hier")
    assert two[3:5] == ["--nnodes=2", "--nproc-per-node=2"] and "--rdzv-id=hier" in two
    assert not any(a.startswith("--max-restarts") for a in two) and two[-1] == "--local-addr=127.0.0.1"


def test_pod_launchers_standalone_and_tcp():
    assert launcher(4, program=TORCHRUN) == ["torchrun", "--standalone", "--nproc-per-node=4"]
    assert launcher(2, program=TORCHRUN, nnodes=3, max_restarts=3, endpoint="job-x-0.x:29500", rdzv_id="x") == [
        "torchrun",
        "--nnodes=3",
        "--nproc-per-node=2",
        "--max-restarts=3",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=job-x-0.x:29500",
        "--rdzv-id=x",
    ]


def test_launcher_refuses_ambiguous_rendezvous():
    with pytest.raises(ValueError, match="not both"):
        launcher(2, file_store=Path("/tmp/s"), endpoint="h:1")
    with pytest.raises(ValueError, match="standalone"):
        launcher(2, nnodes=2)


def test_engine_part_is_the_module_then_its_arguments():
    assert entry("bench.w", "a", "b") == ["-m", "bench.w", "a", "b"]
    assert engine_args("data-v1", "/out", "{}", module="bench.slow_engine", module_args=("--slow", "0:1")) == [
        *entry("bench.slow_engine", "--slow", "0:1"),
        "--data-version",
        "data-v1",
        "--out",
        "/out",
        "--params",
        "{}",
    ]
    assert engine_args("d", "o", "{}")[:2] == ["-m", "tasks.training.engine"]
