"""The torch pieces every token model plug-in shares (tasks/plugins/bow, tasks/plugins/transformer):
masked pooling, the head's logits, and what is exported. Id 0 is padding (tasks/models/tokens.py):
masked everywhere."""

from __future__ import annotations

import torch
from torch import nn

from tasks.models.losses import class_probabilities


def masked_mean(h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over the sequence of `h` [n, L, d] where `mask` [n, L] is 1 (a row of padding only: zeros)."""
    m = mask.unsqueeze(-1).to(h.dtype)
    return (h * m).sum(1) / m.sum(1).clamp_min(1.0)


def with_outputs(arch: dict, outputs: int) -> int:
    """Record a head of K > 2 logits in `arch` (a binary model's arch omits it, as before K classes)."""
    if outputs != 1:
        arch["outputs"] = int(outputs)
    return int(outputs)


def logits(out: torch.Tensor, outputs: int) -> torch.Tensor:
    """The head's output: [n] for one logit (binary), [n, K] for K."""
    return out.squeeze(-1) if outputs == 1 else out


class Probability(nn.Module):
    """What is exported and served: token ids -> P(positive) [n], or the K class probabilities [n, K]."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return class_probabilities(self.model(input_ids))
