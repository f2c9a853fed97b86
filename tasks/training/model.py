"""The model: a small MLP over the dataset's `featurize` output.

Feature scaling lives inside the model (buffers), so the exported ONNX graph takes
raw features and the serving side needs no separate scaler.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from tasks.core.files import atomic_write_with

CLIP_STD = 5.0


class SpamMLP(nn.Module):
    def __init__(self, n_features: int, hidden: tuple[int, ...] | list[int]):
        super().__init__()
        self.arch = {"n_features": int(n_features), "hidden": [int(h) for h in hidden]}
        self.register_buffer("mean", torch.zeros(n_features))
        self.register_buffer("std", torch.ones(n_features))
        layers: list[nn.Module] = []
        width = n_features
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        layers.append(nn.Linear(width, 1))
        self.net = nn.Sequential(*layers)

    def shard_units(self) -> list[nn.Module]:
        return [m for m in self.net if isinstance(m, nn.Linear)]

    def set_scaling(self, mean: torch.Tensor, std: torch.Tensor) -> None:
        self.mean.copy_(mean)
        self.std.copy_(std.clamp_min(1e-3))  # constant features would divide by zero

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logit of P(spam), shape [n]."""
        # Clipping the standardized inputs bounds the activation range: rare flags (a feature that
        # is 1 in 3 of 4,000 rows) would otherwise sit 30+ std out, and dynamic int8 quantization,
        # which scales each batch by its extreme value, would crush every other row to zero.
        z = ((x - self.mean) / self.std).clamp(-CLIP_STD, CLIP_STD)
        return self.net(z).squeeze(-1)


class SpamProbability(nn.Module):
    """What is exported and served: raw features -> P(spam)."""

    def __init__(self, model: SpamMLP):
        super().__init__()
        self.model = model

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.model(features))


def save_model(model: SpamMLP, path: str | Path, extra: dict[str, Any] | None = None) -> None:
    """Architecture, weights and `extra` (provenance) in one file, written atomically."""
    blob = {"arch": model.arch, "state_dict": model.state_dict(), **(extra or {})}
    atomic_write_with(Path(path), lambda tmp: torch.save(blob, tmp))


def load_model(path: str) -> SpamMLP:
    blob = torch.load(path, map_location="cpu", weights_only=True)
    model = SpamMLP(**blob["arch"])
    model.load_state_dict(blob["state_dict"])
    return model.eval()
