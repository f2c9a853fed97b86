"""hier_internode_bytes_ratio: bytes handed to collectives spanning more than one node, hierarchical over flat.

2 simulated nodes x 2 processes on loopback (two torchrun launchers, gloo), a model
of ~0.5M parameters, bytes counted where each hook calls its collectives. Goal: 1 /
local world size (0.5 here). Mean step times of flat, hierarchical and DDP's own
allreduce are reported beside it (on one machine every link is local, so the time
advantage of hierarchical allreduce across real nodes does not show here).
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

from bench.record import Record
from tasks.core.settings import REPO_ROOT
from tasks.training.command import entry, launcher
from tasks.training.local import worker_env


def run_two_nodes(out: Path, width: int = 64, steps: int = 1) -> list[dict]:
    store = out / "store"
    store.mkdir()
    env = {**worker_env(), "PYTHONPATH": str(REPO_ROOT), "HIER_WIDTH": str(width), "HIER_STEPS": str(steps)}
    cmd = [
        *launcher(2, nnodes=2, file_store=store, rdzv_id="hier"),
        *entry("bench.hier_allreduce_worker", str(out), str(store)),
    ]
    nodes = [subprocess.Popen(cmd, env=env, cwd=REPO_ROOT, start_new_session=True) for _ in range(2)]
    codes = [n.wait(timeout=600) for n in nodes]
    if codes != [0, 0]:
        raise RuntimeError(f"torchrun launchers exited {codes}")
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(4)]


def run() -> list[Record]:
    with tempfile.TemporaryDirectory() as tmp:
        ranks = run_two_nodes(Path(tmp), width=700, steps=30)
    hier = sum(r["hier_internode_bytes"] for r in ranks)
    flat = sum(r["flat_internode_bytes"] for r in ranks)
    steps = {k: max(r["step_seconds"][k] for r in ranks) for k in ranks[0]["step_seconds"]}
    return [
        Record(
            "hier_internode_bytes_ratio",
            hier / flat,
            "ratio",
            "<= 0.5",
            {
                "hierarchical_bytes": hier,
                "flat_bytes": flat,
                "parameters": ranks[0]["parameters"],
                "max_grad_diff_vs_ddp": max(r["max_abs_diff"] for r in ranks),
                "step_seconds": steps,
                "nodes": 2,
                "local_world_size": 2,
            },
        )
    ]
