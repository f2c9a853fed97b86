"""The training loop's pieces, shared by the distributed engine and in-memory fits.

One definition of the model set-up, the loss and an epoch: the torchrun engine wraps
them in DDP, samplers and checkpoints; `fit_in_memory` runs them in one process
(benchmarks that train many models side by side).
"""

from __future__ import annotations

import contextlib
import time

import torch

from tasks.core.params import TrainParams
from tasks.models import build_model, plugin_of
from tasks.models.pretrained import load_pretrained
from tasks.training.data import FeatureStats


def make_model(stats: FeatureStats, p: TrainParams) -> torch.nn.Module:
    """The model plug-in's module (train.model), seeded: every rank builds the same start. With
    `train.pretrained`, the file's weights are laid over it (what was loaded, for lineage:
    `model.sluice_pretrained`)."""
    torch.manual_seed(p.seed)
    model = build_model(p.model.module, stats, p.model.params)
    model.sluice_pretrained = load_pretrained(model, p.pretrained) if p.pretrained else None
    return model


def make_optimizer(model: torch.nn.Module, p: TrainParams) -> torch.optim.Optimizer:
    return torch.optim.AdamW(model.parameters(), lr=p.lr, weight_decay=p.weight_decay)


def make_loss(model: torch.nn.Module, stats: FeatureStats, device: torch.device | None = None):
    """The noise-aware loss on soft targets with row weights of the plug-in that built `model`, for
    labels whose (row-weighted) class shares are the stats'; a loss that is a module is moved to `device`."""
    loss = plugin_of(model).loss(stats.class_shares)
    return loss.to(device) if device is not None and isinstance(loss, torch.nn.Module) else loss


def accumulate_gradients(
    model: torch.nn.Module,
    loss_fn,
    xb: torch.Tensor,
    yb: torch.Tensor,
    scale: float,
    micro: int = 0,
    no_sync=contextlib.nullcontext,
    autocast=contextlib.nullcontext,
    min_chunks: int = 1,
) -> tuple[float, float]:
    """Backward of `scale * sum of sample losses` over xb, in chunks of `micro` rows (0: one chunk).
    Gradients add up across chunks, so the result is the same as one pass over the whole slice;
    only the last chunk may synchronize (DDP's `no_sync` for the others). `min_chunks`: run at least
    this many, the extra ones empty: under FSDP2 every chunk's forward and backward are collectives
    (all-gathers), so ranks with uneven slices must run as many chunks as the largest slice needs.

    Returns (loss sum, the perf_counter time just before the synchronizing backward): the time
    this rank needed on its own, before any wait for slower ranks (what load balancing measures)."""
    size = micro or max(1, len(xb))
    chunks = list(range(0, len(xb), size)) or [0]
    chunks += [len(xb)] * (min_chunks - len(chunks))  # empty chunks: xb[len(xb):] has no rows
    total, ready = 0.0, time.perf_counter()
    for i, start in enumerate(chunks):
        last = i == len(chunks) - 1
        with contextlib.nullcontext() if last else no_sync():
            with autocast():
                loss = loss_fn(model(xb[start : start + size]).float(), yb[start : start + size])
            if last:
                ready = time.perf_counter()
            (loss * scale).backward()
        total += float(loss.detach())
    return total, ready


def fit_in_memory(x: torch.Tensor, y: torch.Tensor, p: TrainParams) -> tuple[torch.nn.Module, list[float]]:
    """Train in this process on tensors (no registry, no checkpoints): plain mini-batch steps over a
    seeded permutation each epoch (indexing, not a DataLoader: a benchmark fits hundreds of these).
    `y` is `[n]` soft targets or `[n, 2]` (target, row weight), as the engine's stream gives."""
    stats = FeatureStats.of([(x, y)])
    model = make_model(stats, p)
    opt, loss_fn = make_optimizer(model, p), make_loss(model, stats)
    generator, n = torch.Generator().manual_seed(p.seed), len(x)
    losses = []
    for _ in range(p.epochs):
        total, order = 0.0, torch.randperm(n, generator=generator)
        for start in range(0, n, p.batch_size):
            idx = order[start : start + p.batch_size]
            opt.zero_grad(set_to_none=True)
            total += accumulate_gradients(model, loss_fn, x[idx], y[idx], 1.0 / len(idx), p.micro_batch_size)[0]
            opt.step()
        losses.append(total / n)
    return model.eval(), losses
