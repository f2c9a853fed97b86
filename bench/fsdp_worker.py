"""A torchrun worker for bench/fsdp.py: a few training steps of a large MLP under DDP or FSDP2, through
the engine's own wrapping (`engine.wrap`), optimizer and accumulation; each rank measures its peak
resident memory over its own baseline and its step times.

    torchrun ... -m bench.fsdp_worker STORE_DIR OUT_JSON STRATEGY STEPS BATCH N_FEATURES W1,W2,... [fp32|bf16]

The last, optional argument is train.fsdp.mixed_precision (params.yaml's when left out): how the
CPU choice between fp32 and bf16 was measured (docs/training.md).

The baseline is the process's RSS once torch is imported and the process group is up, before the
model exists; the peak is the kernel's high-water mark (getrusage ru_maxrss), so it includes
everything a step holds at its worst moment: weights, gradients, AdamW moments, DDP's buckets or
FSDP2's all-gather buffers, activations. Rank 0 writes every rank's figures.
"""

from __future__ import annotations

import json
import resource
import sys
import time

import psutil
import torch
import torch.distributed as dist

from tasks.core.params import load_params
from tasks.models.losses import binary_loss as mlp_loss
from tasks.plugins.mlp.net import MLP
from tasks.training.batching import equal_splits, rank_slice
from tasks.training.engine import Ranks, init_process_group, wrap
from tasks.training.loop import accumulate_gradients, make_optimizer
from tasks.training.peers import leave_process_group


def main(
    store_dir: str,
    out: str,
    strategy: str,
    steps: int,
    batch: int,
    n_features: int,
    hidden: str,
    precision: str | None = None,
) -> None:
    torch.set_num_threads(1)
    cpu = torch.device("cpu")
    init_process_group(cpu, store_dir, timeout_s=600)
    rank, world = dist.get_rank(), dist.get_world_size()
    baseline = psutil.Process().memory_info().rss
    widths = tuple(int(w) for w in hidden.split(","))
    p = load_params().train.replace(strategy=strategy, hidden=widths, nproc=world, batch_size=batch)
    if precision is not None:
        p = p.replace(fsdp={**p.fsdp.model_dump(), "mixed_precision": precision})
    torch.manual_seed(p.seed)
    model = MLP(n_features, widths)
    net = wrap(model, p, cpu, Ranks(rank, world, rank, world))
    opt, loss_fn = make_optimizer(model, p), mlp_loss(0.1)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(batch, n_features, generator=g), (torch.rand(batch, generator=g) < 0.1).float()
    lo, hi = rank_slice(equal_splits(batch, world), rank)
    times, losses = [], []
    for _ in range(steps):
        dist.barrier()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss, _ = accumulate_gradients(net.module, loss_fn, x[lo:hi], y[lo:hi], world / batch, 0, net.no_sync)
        opt.step()
        total = torch.tensor([loss], dtype=torch.float64)
        dist.all_reduce(total)
        times.append(time.perf_counter() - t0)
        losses.append(float(total) / batch)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: kilobytes
    mine = {
        "rank": rank,
        "baseline_mb": baseline / 2**20,
        "peak_mb": peak / 2**20,
        "peak_over_baseline_mb": (peak - baseline) / 2**20,
        "step_s": times,
    }
    every = [None] * world
    dist.all_gather_object(every, mine)
    if rank == 0:
        n_params = sum(t.numel() for t in model.parameters())
        with open(out, "w") as f:
            json.dump(
                {
                    "strategy": strategy,
                    "mixed_precision": p.fsdp.mixed_precision,
                    "world": world,
                    "parameters": n_params,
                    "losses": losses,
                    "ranks": every,
                },
                f,
            )
    del net  # DDP (or the sharded model), before the group goes (leave_process_group says why)
    leave_process_group()


if __name__ == "__main__":
    a = sys.argv[1:]
    main(a[0], a[1], a[2], int(a[3]), int(a[4]), int(a[5]), a[6], *a[7:8])
