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
from tasks.training.data import FeatureStats
from tasks.training.model import SpamMLP


def make_model(stats: FeatureStats, p: TrainParams) -> SpamMLP:
    torch.manual_seed(p.seed)
    model = SpamMLP(len(stats.mean), p.hidden)
    model.set_scaling(stats.mean, stats.std)
    return model


def make_optimizer(model: torch.nn.Module, p: TrainParams) -> torch.optim.Optimizer:
    return torch.optim.AdamW(model.parameters(), lr=p.lr, weight_decay=p.weight_decay)


class NoiseAwareBCE(torch.nn.Module):
    """Summed BCE with logits on soft targets, each row weighted.

    Targets are `[n]` (soft labels, weight 1 each) or `[n, 2]` (soft label, row weight): a gold
    row is a hard 0/1 target of weight 1; a weak row's target is the label model's P(spam) and its
    weight how much the weak labels are trusted (`weak_label.weak_weight`). The sum is returned
    (callers scale it, so any split of a batch gives the same gradient)."""

    def __init__(self, pos_weight: float):
        super().__init__()
        self.register_buffer("pos_weight", torch.tensor(pos_weight))

    def forward(self, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        target, weight = (y[:, 0], y[:, 1]) if y.dim() == 2 else (y, None)
        return torch.nn.functional.binary_cross_entropy_with_logits(
            logits, target, weight=weight, reduction="sum", pos_weight=self.pos_weight
        )


def make_loss(spam_share: float) -> torch.nn.Module:
    """The noise-aware loss (`NoiseAwareBCE`); labels are ~10% spam, so the spam side is weighted
    by the (row-weighted) imbalance to keep the 0.5 threshold meaningful."""
    spam_share = min(max(spam_share, 0.01), 0.99)
    return NoiseAwareBCE((1 - spam_share) / spam_share)


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


def fit_in_memory(x: torch.Tensor, y: torch.Tensor, p: TrainParams) -> tuple[SpamMLP, list[float]]:
    """Train in this process on tensors (no registry, no checkpoints): plain mini-batch steps over a
    seeded permutation each epoch (indexing, not a DataLoader: a benchmark fits hundreds of these).
    `y` is `[n]` soft targets or `[n, 2]` (target, row weight), as the engine's stream gives."""
    stats = FeatureStats.of([(x, y)])
    model = make_model(stats, p)
    opt, loss_fn = make_optimizer(model, p), make_loss(stats.spam_share)
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
