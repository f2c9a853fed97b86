"""Pruning: unstructured magnitude pruning (torch.nn.utils.prune) and structured neuron removal.

Unstructured: each Linear weight loses exactly round(ratio x numel) of its smallest-|w|
entries; the mask stays on during the fine-tune (pruned weights stay 0), then the
reparametrization is removed so the model is a plain one with zeros in it. The ONNX file
stays dense: this saves nothing by itself (sparse kernels would); it is a step of a chain.

Structured: whole hidden units go. The model's plug-in names them (`prunable`: for each width its
`narrower` takes, the Linear layers that produce those units and the ones that consume them: the
MLP's hidden layers one by one, the transformer's FFN width in every block at once). In each
producer the units are ranked by the L2 norm of their incoming weights and the top
k = width - round(ratio x width) (at least 1) are kept; its rows and its consumer's columns are
sliced, every other weight is copied, so the model is really smaller and faster.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tasks.compression.finetune import fit_soft_targets, teacher_logits
from tasks.compression.mlp import all_linears, layer_shapes, param_count
from tasks.core.compression_config import PruneConfig, PruneStructuredConfig


def sparsity(model) -> dict[str, Any]:
    """Fraction of exact zeros in the Linear weights: overall and per layer."""
    per_layer = []
    zeros = total = 0
    for m in all_linears(model):
        w = m.weight.detach()
        z = int((w == 0).sum())
        per_layer.append(z / w.numel())
        zeros, total = zeros + z, total + w.numel()
    return {"overall": zeros / total if total else 0.0, "per_layer": per_layer}


def prune_unstructured(model, cfg: PruneConfig, X: np.ndarray) -> tuple[Any, dict[str, Any]]:
    """Magnitude-prune every Linear weight of `model` (in place) to `cfg.ratio`, fine-tune, make permanent."""
    import torch
    from torch.nn.utils import prune

    target = teacher_logits(model, X)
    torch.manual_seed(cfg.seed)
    layers = all_linears(model)
    for m in layers:
        prune.l1_unstructured(m, name="weight", amount=cfg.ratio)
    losses = fit_soft_targets(
        model, X, target, epochs=cfg.fine_tune_epochs, lr=cfg.fine_tune_lr, batch_size=cfg.batch_size, seed=cfg.seed
    )
    for m in layers:
        prune.remove(m, "weight")
    return model.eval(), {
        "sparsity": sparsity(model)["overall"],
        "params": param_count(model),
        "fine_tune_loss": losses[-1:] or None,
    }


def prune_structured(model, cfg: PruneStructuredConfig, X: np.ndarray) -> tuple[Any, dict[str, Any]]:
    """A new, narrower model of the same plug-in (its `narrower`) keeping the strongest units of each
    group its `prunable` names, fine-tuned."""
    import torch

    from tasks.models import plugin_of

    plugin = plugin_of(model)
    groups = plugin.prunable(model)
    layers = dict(model.named_modules())
    target = teacher_logits(model, X)
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    widths = []
    for group in groups:
        width = layers[group[0][0]].out_features
        k = max(1, width - int(round(cfg.ratio * width)))
        widths.append(k)
        for producer, consumer in group:
            norms = layers[producer].weight.detach().norm(dim=1)  # the unpruned weights' (as ranked, not sliced)
            keep = torch.sort(torch.topk(norms, k).indices).values  # sorted: stable unit order
            state[f"{producer}.weight"] = state[f"{producer}.weight"][keep]
            state[f"{producer}.bias"] = state[f"{producer}.bias"][keep]
            state[f"{consumer}.weight"] = state[f"{consumer}.weight"][:, keep]
    student = plugin.narrower(model, widths)
    student.load_state_dict(state)  # strict: every weight of the student is the teacher's, sliced or whole
    before = param_count(model)
    losses = fit_soft_targets(
        student, X, target, epochs=cfg.fine_tune_epochs, lr=cfg.fine_tune_lr, batch_size=cfg.batch_size, seed=cfg.seed
    )
    return student.eval(), {
        "widths": widths,
        "arch": plugin.arch(student),
        "params": param_count(student),
        "params_before": before,
        "layer_shapes": layer_shapes(student),
        "fine_tune_loss": losses[-1:] or None,
    }
