"""What the torch-side techniques need to know about any model: its Linear layers, its size.

Low rank, structured pruning and distillation ask the model's plug-in which layers they may change
(`low_rank_layers`, `prunable`, `narrower`: tasks/core/plugins.py)."""

from __future__ import annotations


def all_linears(model) -> list:
    """Every Linear layer that runs through its own forward: attention's output projection
    (NonDynamicallyQuantizableLinear) is read as a bare weight by MultiheadAttention, where pruning's
    forward hook would never refresh it, so it is left out."""
    from torch import nn
    from torch.nn.modules.linear import NonDynamicallyQuantizableLinear

    return [
        m for m in model.modules() if isinstance(m, nn.Linear) and not isinstance(m, NonDynamicallyQuantizableLinear)
    ]


def param_count(model) -> int:
    return int(sum(p.numel() for p in model.parameters()))


def layer_shapes(model) -> list[tuple[int, int]]:
    """(in_features, out_features) of every Linear layer, in order."""
    return [(m.in_features, m.out_features) for m in all_linears(model)]
