"""The training loop's pieces, shared by the distributed engine and in-memory fits.

One definition of the model set-up, the loss and an epoch: the torchrun engine wraps
them in DDP, samplers and checkpoints; `fit_in_memory` runs them in one process
(benchmarks that train many models side by side).
"""

from __future__ import annotations

import contextlib
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

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


def make_loss(spam_share: float) -> torch.nn.Module:
    """Summed BCE on soft targets (callers scale the sum, so any split of a batch gives the same
    gradient); labels are ~10% spam, so the spam side is weighted by the imbalance to keep the
    0.5 threshold meaningful."""
    spam_share = min(max(spam_share, 0.01), 0.99)
    return torch.nn.BCEWithLogitsLoss(reduction="sum", pos_weight=torch.tensor((1 - spam_share) / spam_share))


def accumulate_gradients(
    model: torch.nn.Module,
    loss_fn,
    xb: torch.Tensor,
    yb: torch.Tensor,
    scale: float,
    micro: int = 0,
    no_sync=contextlib.nullcontext,
    autocast=contextlib.nullcontext,
) -> tuple[float, float]:
    """Backward of `scale * sum of sample losses` over xb, in chunks of `micro` rows (0: one chunk).
    Gradients add up across chunks, so the result is the same as one pass over the whole slice;
    only the last chunk may synchronize (DDP's `no_sync` for the others).

    Returns (loss sum, the perf_counter time just before the synchronizing backward): the time
    this rank needed on its own, before any wait for slower ranks (what load balancing measures)."""
    size = micro or len(xb)
    chunks = list(range(0, len(xb), size)) or [0]
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
    """Train in this process on tensors (no registry, no checkpoints): plain mini-batch steps."""
    stats = FeatureStats.of([(x, y)])
    model = make_model(stats, p)
    opt, loss_fn = make_optimizer(model, p), make_loss(stats.spam_share)
    loader = DataLoader(
        TensorDataset(x, y), batch_size=p.batch_size, shuffle=True, generator=torch.Generator().manual_seed(p.seed)
    )
    losses = []
    for _ in range(p.epochs):
        total, count = 0.0, 0
        for xb, yb in loader:
            opt.zero_grad(set_to_none=True)
            total += accumulate_gradients(model, loss_fn, xb, yb, 1.0 / len(xb), p.micro_batch_size)[0]
            opt.step()
            count += len(xb)
        losses.append(total / count)
    return model.eval(), losses
