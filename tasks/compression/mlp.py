"""What the torch-side techniques need to know about the model: its Linear layers in order.

Structured pruning, low rank and distillation work on a `net` Sequential of Linear/ReLU pairs
ending in Linear(width, 1), as the MLP plug-in (tasks/models/mlp.py) builds; a model plug-in lists
them in its COMPRESSION only when its modules have that shape (checked here, naming what differs).
"""

from __future__ import annotations

from tasks.core.errors import CompressionError


def plain_linears(model) -> list:
    """The Linear layers of `model.net`, checking that it is a plain Linear/ReLU stack."""
    from torch import nn

    net = getattr(model, "net", None)
    if not isinstance(net, nn.Sequential):
        raise CompressionError(f"{type(model).__name__} has no `net` Sequential of Linear/ReLU layers")
    layers = list(net)
    kinds = [type(m).__name__ for m in layers]
    expected = ["Linear", "ReLU"] * (len(layers) // 2) + ["Linear"]
    if kinds != expected:
        raise CompressionError(f"model.net is {kinds}, not a plain Linear/ReLU stack (was it already factorized?)")
    return [m for m in layers if isinstance(m, nn.Linear)]


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
