"""Knowledge distillation: a smaller model of the same plug-in (its `narrower`) trained on the
teacher's scores over unlabeled rows.

The student takes the teacher's input handling (the MLP's scaling buffers), so it takes the
same raw features, and learns sigmoid(teacher logit / T) with a soft binary cross-entropy.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tasks.compression.finetune import fit_soft_targets, teacher_logits
from tasks.compression.mlp import layer_shapes, param_count
from tasks.core.compression_config import DistilConfig
from tasks.core.errors import CompressionError


def distil(teacher, cfg: DistilConfig, X: np.ndarray) -> tuple[Any, dict[str, Any]]:
    import torch

    from tasks.models import plugin_of

    if len(X) < 2:
        raise CompressionError(f"distil needs rows to learn the teacher's scores on; got {len(X)}")
    torch.manual_seed(cfg.seed)
    student = plugin_of(teacher).narrower(teacher, list(cfg.hidden))
    target = teacher_logits(teacher, X)
    losses = fit_soft_targets(
        student,
        X,
        target,
        epochs=cfg.epochs,
        lr=cfg.lr,
        batch_size=cfg.batch_size,
        seed=cfg.seed,
        temperature=cfg.temperature,
    )
    return student.eval(), {
        "hidden": list(cfg.hidden),
        "params": param_count(student),
        "params_teacher": param_count(teacher),
        "layer_shapes": layer_shapes(student),
        "final_loss": losses[-1],
    }
