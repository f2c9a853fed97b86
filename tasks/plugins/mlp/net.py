"""The MLP plug-in's torch modules (its __init__.py is the plug-in: light, so that reading params.yaml,
as DAG files do when parsed, validates `train.model.params` without importing torch)."""

from __future__ import annotations

import torch
from torch import nn

from tasks.core.errors import CompressionError
from tasks.models.losses import class_probabilities

CLIP_STD = 5.0


class MLP(nn.Module):
    sluice_plugin = "tasks.plugins.mlp"  # which plug-in built it (tasks.models.plugin_of), for models made directly too

    def __init__(self, n_features: int, hidden: tuple[int, ...] | list[int], outputs: int = 1):
        """`outputs`: logits per row, 1 for a binary model (its arch then omits it, as before K classes)."""
        super().__init__()
        self.arch = {"n_features": int(n_features), "hidden": [int(h) for h in hidden]}
        if outputs != 1:
            self.arch["outputs"] = int(outputs)
        self.outputs = int(outputs)
        self.register_buffer("mean", torch.zeros(n_features))
        self.register_buffer("std", torch.ones(n_features))
        layers: list[nn.Module] = []
        width = n_features
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        layers.append(nn.Linear(width, outputs))
        self.net = nn.Sequential(*layers)

    def set_scaling(self, mean: torch.Tensor, std: torch.Tensor) -> None:
        self.mean.copy_(mean)
        self.std.copy_(std.clamp_min(1e-3))  # constant features would divide by zero

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logit of the positive class, shape [n]; with K > 2 outputs, the K logits [n, K]."""
        # Clipping the standardized inputs bounds the activation range: rare flags (a feature that
        # is 1 in 3 of 4,000 rows) would otherwise sit 30+ std out, and dynamic int8 quantization,
        # which scales each batch by its extreme value, would crush every other row to zero.
        z = ((x - self.mean) / self.std).clamp(-CLIP_STD, CLIP_STD)
        out = self.net(z)
        return out.squeeze(-1) if self.outputs == 1 else out


class Probability(nn.Module):
    """What is exported and served: raw features -> P(positive) [n], or the K class probabilities [n, K]."""

    def __init__(self, model: MLP):
        super().__init__()
        self.model = model

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return class_probabilities(self.model(features))


def plain_linears(model) -> list[nn.Linear]:
    """The Linear layers of `model.net`, checking that it is a plain Linear/ReLU stack (what structured
    pruning and low rank take apart; a factorized model's stack is not)."""
    net = getattr(model, "net", None)
    if not isinstance(net, nn.Sequential):
        raise CompressionError(f"{type(model).__name__} has no `net` Sequential of Linear/ReLU layers")
    layers = list(net)
    kinds = [type(m).__name__ for m in layers]
    expected = ["Linear", "ReLU"] * (len(layers) // 2) + ["Linear"]
    if kinds != expected:
        raise CompressionError(f"model.net is {kinds}, not a plain Linear/ReLU stack (was it already factorized?)")
    return [m for m in layers if isinstance(m, nn.Linear)]
