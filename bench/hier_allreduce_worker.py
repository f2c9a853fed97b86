"""Run under torchrun on 2 (simulated) nodes: hierarchical hook vs flat hook vs DDP's own allreduce.

Arguments: the output folder, the process group's file-store folder. Writes rank<N>.json
into the output folder: gradient differences against DDP's
allreduce, the bytes each rank handed to collectives spanning several nodes, and
mean step times. Used by tests/test_hierarchical_allreduce.py and bench/hier_allreduce.py.
"""

import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from tasks.training.engine import init_process_group
from tasks.training.hierarchical import FlatState, HierarchicalState, flat_allreduce_hook, hierarchical_allreduce_hook
from tasks.training.peers import leave_process_group

WIDTH = int(os.environ.get("HIER_WIDTH", "64"))
STEPS = int(os.environ.get("HIER_STEPS", "1"))


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(32, WIDTH),
        torch.nn.ReLU(),
        torch.nn.Linear(WIDTH, WIDTH),
        torch.nn.ReLU(),
        torch.nn.Linear(WIDTH, 1),
    )


def main(out, store_dir):
    init_process_group(torch.device("cpu"), store_dir)  # gloo: 2 simulated nodes on one machine
    rank, local = dist.get_rank(), int(os.environ["LOCAL_WORLD_SIZE"])
    torch.manual_seed(100 + rank)  # every rank its own data
    x, y = torch.randn(16, 32), torch.randn(16, 1)
    grads, states, step_s = {}, {}, {}
    for name in ("ddp", "hierarchical", "flat"):
        m = DDP(model(), bucket_cap_mb=1)
        if name == "hierarchical":
            states[name] = HierarchicalState.build(local)
            m.register_comm_hook(states[name], hierarchical_allreduce_hook)
        elif name == "flat":
            states[name] = FlatState(nodes=dist.get_world_size() // local)
            m.register_comm_hook(states[name], flat_allreduce_hook)
        torch.nn.functional.mse_loss(m(x), y).backward()
        grads[name] = torch.cat([p.grad.flatten() for p in m.parameters()])
        first = {k: getattr(states.get(name), k, 0) for k in ("internode_bytes", "calls")}
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(STEPS - 1):  # further steps only for timing
            m.zero_grad(set_to_none=True)
            torch.nn.functional.mse_loss(m(x), y).backward()
        dist.barrier()
        step_s[name] = (time.perf_counter() - t0) / max(1, STEPS - 1)
        if name in states:  # report the bytes of one step
            states[name].internode_bytes, states[name].calls = first["internode_bytes"], first["calls"]
    result = {
        "rank": rank,
        "node": int(os.environ.get("GROUP_RANK", "0")),
        "local_world_size": local,
        "max_abs_diff": float((grads["hierarchical"] - grads["ddp"]).abs().max()),
        "flat_max_abs_diff": float((grads["flat"] - grads["ddp"]).abs().max()),
        "hier_internode_bytes": states["hierarchical"].internode_bytes,
        "flat_internode_bytes": states["flat"].internode_bytes,
        "hier_calls": states["hierarchical"].calls,
        "flat_calls": states["flat"].calls,
        "step_seconds": step_s,
        "parameters": sum(p.numel() for p in model().parameters()),
    }
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)
    del m  # the last DDP module, before the group goes (leave_process_group says why)
    leave_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
