"""The MLP plug-in (the default model): a classifier (binary, or K classes) over the dataset's `featurize` matrix.

Feature scaling lives inside the model (buffers), so the exported ONNX graph takes raw
features and the serving side needs no separate scaler. The plug-in interface is described
in tasks/core/plugins.py. This module stays light (no torch at import: params.yaml is read,
and these Params validated, when DAG files are parsed); the torch modules are in net.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt

if TYPE_CHECKING:
    import torch
    from torch import nn

    from .net import MLP

NAME = "mlp"
BATCH_FORMAT = "dense"
INPUT, OUTPUT = "features", "p_spam"  # the served names existing clients use
TUNABLE = {"hidden": "choices"}  # a list of widths: choices, never a range
COMPRESSION = ("int8_dynamic", "int8_static", "fp16", "prune", "prune_structured", "lowrank", "distil")


class Params(BaseModel):
    """params.yaml `train.model.params` for this plug-in."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    hidden: Annotated[tuple[Annotated[StrictInt, Field(ge=1)], ...], Field(min_length=1)]
    """Widths of the hidden layers."""


def build(stats, params: Params) -> MLP:
    from tasks.models.losses import logit_count

    from .net import MLP

    model = MLP(len(stats.mean), params.hidden, logit_count(stats.classes))
    model.set_scaling(stats.mean, stats.std)
    return model


def arch(model: MLP) -> dict[str, Any]:
    return dict(model.arch)


def from_arch(arch: dict[str, Any]) -> MLP:
    from .net import MLP

    return MLP(**arch)


def loss(class_shares) -> nn.Module:
    """The noise-aware loss on soft targets with row weights (losses.noise_aware_loss)."""
    from tasks.models.losses import noise_aware_loss

    return noise_aware_loss(class_shares)


def probabilities(model: MLP, x: torch.Tensor) -> torch.Tensor:
    from tasks.models.losses import class_probabilities

    return class_probabilities(model(x))


def shard_units(model: MLP) -> list[nn.Module]:
    from torch import nn

    return [m for m in model.net if isinstance(m, nn.Linear)]


def export_wrapper(model: MLP) -> nn.Module:
    from .net import Probability

    return Probability(model)


def example_input(model: MLP, n: int) -> torch.Tensor:
    import torch

    return torch.zeros(n, model.mean.numel())


def narrower(model: MLP, hidden: list[int]) -> MLP:
    """A new MLP with `hidden` widths taking the same raw features (the same input scaling)."""
    from .net import MLP

    student = MLP(model.mean.numel(), hidden, model.outputs)
    student.set_scaling(model.mean, model.std)
    return student


def low_rank_layers(model: MLP) -> tuple[Any, list[int]]:
    """The Sequential whose Linear layers low rank may factorize, and their positions in it (a plain
    Linear/ReLU stack, checked: a factorized model is refused)."""
    from torch import nn

    from .net import plain_linears

    plain_linears(model)
    return model.net, [j for j, m in enumerate(model.net) if isinstance(m, nn.Linear)]


def prunable(model: MLP) -> list[list[tuple[str, str]]]:
    """Each hidden layer's units, one width of `narrower` each: made by `net.{2i}`, read by `net.{2i+2}`
    (a plain Linear/ReLU stack, checked: a factorized model is refused)."""
    from .net import plain_linears

    return [[(f"net.{2 * i}", f"net.{2 * i + 2}")] for i in range(len(plain_linears(model)) - 1)]
