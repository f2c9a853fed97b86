"""The noise-aware losses the plug-ins share, binary and K classes (torch; imported inside their `loss`)."""

from __future__ import annotations

import torch
from torch import nn


class NoiseAwareBCE(nn.Module):
    """Summed BCE with logits on soft targets, each row weighted.

    Targets are `[n]` (soft labels, weight 1 each) or `[n, 2]` (soft label, row weight): a gold
    row is a hard 0/1 target of weight 1; a weak row's target is the label model's probability and
    its weight how much the weak labels are trusted (`weak_label.weak_weight`). The sum is returned
    (callers scale it, so any split of a batch gives the same gradient)."""

    def __init__(self, pos_weight: float):
        super().__init__()
        self.register_buffer("pos_weight", torch.tensor(pos_weight))

    def forward(self, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        target, weight = (y[:, 0], y[:, 1]) if y.dim() == 2 else (y, None)
        return nn.functional.binary_cross_entropy_with_logits(
            logits, target, weight=weight, reduction="sum", pos_weight=self.pos_weight
        )


def binary_loss(positive_share: float) -> NoiseAwareBCE:
    """NoiseAwareBCE with the positive side weighted by the (row-weighted) imbalance, so the 0.5
    threshold stays meaningful on imbalanced labels (~10% of the demo's rows in class 1)."""
    positive_share = min(max(positive_share, 0.01), 0.99)
    return NoiseAwareBCE((1 - positive_share) / positive_share)


class NoiseAwareCE(nn.Module):
    """Summed soft-target cross-entropy over K classes, each row weighted: targets `[n, K + 1]` (the K
    class probabilities: a gold row's one-hot, a weak row's label-model distribution; then the row
    weight). Each class is weighted by `class_weight` (imbalance), as NoiseAwareBCE weights the
    positive side. The sum is returned."""

    def __init__(self, class_weight: list[float]):
        super().__init__()
        self.register_buffer("class_weight", torch.tensor(class_weight, dtype=torch.float32))

    def forward(self, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        k = logits.shape[-1]
        if y.dim() != 2 or y.shape[1] != k + 1:
            raise ValueError(
                f"targets of {k} classes are [n, {k + 1}] (class probabilities, row weight); got {list(y.shape)}"
            )
        target, weight = y[:, :k], y[:, k]
        per_row = -(target * nn.functional.log_softmax(logits, dim=-1) * self.class_weight).sum(-1)
        return (per_row * weight).sum()


def noise_aware_loss(class_shares) -> nn.Module:
    """The loss of a model of K = len(class_shares) classes, its classes weighted by their (row-weighted)
    shares of the labels: binary, NoiseAwareBCE (`binary_loss`); K > 2, NoiseAwareCE with each class
    at 1 / (K * share), the balanced weighting, so no class is drowned by a frequent one."""
    shares = [min(max(float(s), 0.01), 0.99) for s in class_shares]
    if len(shares) == 2:
        return binary_loss(shares[1])
    return NoiseAwareCE([1.0 / (len(shares) * s) for s in shares])


def class_probabilities(logits: torch.Tensor) -> torch.Tensor:
    """Logits -> probabilities: one logit per row (binary) -> P(class 1) [n]; K logits -> softmax [n, K]."""
    return torch.sigmoid(logits) if logits.dim() == 1 else torch.softmax(logits, dim=-1)


def logit_count(classes: int) -> int:
    """The outputs of a model's head for `classes` classes: a binary model has one logit."""
    if classes < 2:
        raise ValueError(f"a classifier needs at least 2 classes, got {classes}")
    return 1 if classes == 2 else classes
