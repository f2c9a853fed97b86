"""Low-rank factorization: each Linear W [out, in] ~ (U_r sqrt(S_r)) (sqrt(S_r) V_r), two Linear layers.

A layer is factorized only where it saves parameters: rank x (in + out) < in x out. A rank
no layer can use (rank >= in x out / (in + out) for all of them) is an error, not a no-op.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tasks.compression.finetune import fit_soft_targets, teacher_logits
from tasks.compression.mlp import layer_shapes, param_count
from tasks.core.compression_config import LowRankConfig
from tasks.core.errors import CompressionError


def factorize(linear, rank: int):
    """Sequential(Linear(in, rank, bias=False), Linear(rank, out)) from the truncated SVD of `linear`."""
    import torch
    from torch import nn

    w = linear.weight.detach().double()
    u, s, vh = torch.linalg.svd(w, full_matrices=False)
    root = s[:rank].sqrt()
    first = nn.Linear(linear.in_features, rank, bias=False)
    second = nn.Linear(rank, linear.out_features)
    with torch.no_grad():
        first.weight.copy_((root[:, None] * vh[:rank]).float())
        second.weight.copy_((u[:, :rank] * root[None, :]).float())
        second.bias.copy_(linear.bias.detach())
    return nn.Sequential(first, second)


def saves(shape: tuple[int, int], rank: int) -> bool:
    n_in, n_out = shape
    return rank * (n_in + n_out) < n_in * n_out


def low_rank(model, cfg: LowRankConfig, X: np.ndarray) -> tuple[Any, dict[str, Any]]:
    """Factorize (in place) every Linear layer the model's plug-in offers (`low_rank_layers`) where rank
    `cfg.rank` saves parameters; fine-tune."""
    from tasks.models import plugin_of

    stack, positions = plugin_of(model).low_rank_layers(model)
    linears = [stack[j] for j in positions]
    shapes = [(m.in_features, m.out_features) for m in linears]
    chosen = [i for i, s in enumerate(shapes) if saves(s, cfg.rank)]
    if not chosen:
        best = max(n_in * n_out // (n_in + n_out) for n_in, n_out in shapes)
        raise CompressionError(
            f"lowrank rank {cfg.rank} is out of range for layers {shapes} (in, out): no layer "
            f"gets smaller; the rank must be below in*out/(in+out), at most {best - 0} here"
        )
    target = teacher_logits(model, X)
    before = param_count(model)
    for i in chosen:
        stack[positions[i]] = factorize(linears[i], cfg.rank)
    losses = fit_soft_targets(
        model, X, target, epochs=cfg.fine_tune_epochs, lr=cfg.fine_tune_lr, batch_size=cfg.batch_size, seed=cfg.seed
    )
    return model.eval(), {
        "factorized_layers": chosen,
        "rank": cfg.rank,
        "params": param_count(model),
        "params_before": before,
        "layer_shapes": layer_shapes(model),
        "fine_tune_loss": losses[-1:] or None,
    }
