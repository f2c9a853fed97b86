"""The training loop's pieces, shared by the distributed engine and in-memory fits.

One definition of the model set-up, the loss and an epoch: the torchrun engine wraps
them in DDP, samplers and checkpoints; `fit_in_memory` runs them in one process
(benchmarks that train many models side by side).
"""
from __future__ import annotations

import torch
from torch.utils.data import DataLoader, TensorDataset

from tasks.params import TrainParams
from tasks.training.model import SpamMLP


def make_model(x: torch.Tensor, p: TrainParams) -> SpamMLP:
    torch.manual_seed(p.seed)
    model = SpamMLP(x.shape[1], p.hidden)
    model.set_scaling(x)
    return model


def make_optimizer(model: torch.nn.Module, p: TrainParams) -> torch.optim.Optimizer:
    return torch.optim.AdamW(model.parameters(), lr=p.lr, weight_decay=p.weight_decay)


def make_loss(y: torch.Tensor) -> torch.nn.Module:
    """BCE on soft targets; labels are ~10% spam, so the spam side is weighted by the imbalance
    to keep the 0.5 threshold meaningful."""
    spam_share = float(y.mean().clamp(0.01, 0.99))
    return torch.nn.BCEWithLogitsLoss(pos_weight=torch.tensor((1 - spam_share) / spam_share))


def train_epoch(model: torch.nn.Module, loader, opt: torch.optim.Optimizer, loss_fn) -> torch.Tensor:
    """One pass; returns [sum of sample losses, samples] (for an exact mean across ranks)."""
    total = torch.zeros(2)
    for xb, yb in loader:
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(xb), yb)
        loss.backward()
        opt.step()
        total += torch.tensor([loss.item() * len(xb), len(xb)])
    return total


def fit_in_memory(x: torch.Tensor, y: torch.Tensor, p: TrainParams) -> tuple[SpamMLP, list[float]]:
    """Train in this process on tensors (no registry, no checkpoints)."""
    model = make_model(x, p)
    opt, loss_fn = make_optimizer(model, p), make_loss(y)
    loader = DataLoader(TensorDataset(x, y), batch_size=p.batch_size, shuffle=True,
                        generator=torch.Generator().manual_seed(p.seed))
    losses = []
    for _ in range(p.epochs):
        total = train_epoch(model, loader, opt, loss_fn)
        losses.append(float(total[0] / total[1]))
    return model.eval(), losses
