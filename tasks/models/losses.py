"""The noise-aware loss the binary plug-ins share (torch; imported inside their `loss`)."""

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
    threshold stays meaningful on imbalanced labels (~10% spam in the demo)."""
    positive_share = min(max(positive_share, 0.01), 0.99)
    return NoiseAwareBCE((1 - positive_share) / positive_share)
