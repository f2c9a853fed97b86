"""A torchrun worker for test_fsdp: FSDP2 gradients of a global batch split unevenly over 2 ranks,
against one process's gradient of the whole batch.

    torchrun ... -m tests.training.fsdp_uneven_worker STORE_DIR OUT_JSON

Each rank accumulates its slice (of splits [40, 24] and [32, 32], in chunks of 7 rows) with the
engine's scaling (world / global batch) and, as a control, with a per-rank mean (1 / its rows),
which is what FSDP2's average over ranks would give unweighted. Rank 0 writes the largest
difference of each from the whole-batch gradient.
"""

from __future__ import annotations

import json
import sys

import torch
import torch.distributed as dist

from tasks.core.params import load_params
from tasks.models.losses import binary_loss as mlp_loss
from tasks.plugins.mlp.net import MLP
from tasks.training.batching import rank_slice
from tasks.training.engine import chunks_needed, init_process_group
from tasks.training.loop import accumulate_gradients
from tasks.training.peers import leave_process_group
from tasks.training.sharded import shard_model


def grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    from torch.distributed.tensor import DTensor

    return {
        n: (q.grad.full_tensor() if isinstance(q.grad, DTensor) else q.grad).detach().clone()
        for n, q in model.named_parameters()
    }


def main(store_dir: str, out: str) -> None:
    cpu = torch.device("cpu")
    init_process_group(cpu, store_dir, timeout_s=60)
    rank, world = dist.get_rank(), dist.get_world_size()
    p = load_params().train.replace(strategy="fsdp2", hidden=(16, 8))
    g = torch.Generator().manual_seed(3)
    x, y = torch.randn(64, 6, generator=g), torch.rand(64, generator=g)
    loss_fn = mlp_loss(0.3)

    torch.manual_seed(11)
    ref = MLP(6, tuple(p.value("hidden")))
    accumulate_gradients(ref, loss_fn, x, y, 1 / len(x))
    want = grads(ref)

    result = {}
    for splits in ([40, 24], [32, 32]):
        for how in ("engine", "per_rank_mean"):
            torch.manual_seed(11)
            model = MLP(6, tuple(p.value("hidden")))
            no_sync = shard_model(model, p, cpu, distributed=True)
            lo, hi = rank_slice(splits, rank)
            scale = world / len(x) if how == "engine" else 1 / (hi - lo)
            accumulate_gradients(
                model, loss_fn, x[lo:hi], y[lo:hi], scale, 7, no_sync, min_chunks=chunks_needed(splits, 7)
            )
            got = grads(model)
            result[f"{how}_{splits[0]}_{splits[1]}"] = max(float((got[k] - want[k]).abs().max()) for k in want)
    if rank == 0:
        with open(out, "w") as f:
            json.dump(result, f)
    leave_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
