"""Knowledge distillation: a smaller model trained on the teacher's scores over unlabeled rows.

The student is the teacher's plug-in at other widths (its `narrower`, which keeps the teacher's
input handling: the MLP's scaling buffers), or a model of another plug-in that reads the same
inputs (`DistilConfig.student`: a transformer's ids read by a bag-of-embeddings, with the
teacher's tokenizer). It learns the teacher's probabilities at temperature T (sigmoid of its logit,
or softmax of its K logits) with a soft cross-entropy (finetune.soft_target_loss).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tasks.compression.finetune import fit_soft_targets, teacher_logits
from tasks.compression.mlp import layer_shapes, param_count
from tasks.core.compression_config import DistilConfig, StudentSpec
from tasks.core.errors import CompressionError


def distil(teacher, cfg: DistilConfig, X: np.ndarray) -> tuple[Any, dict[str, Any]]:
    import torch

    from tasks.models import plugin_of

    if len(X) < 2:
        raise CompressionError(f"distil needs rows to learn the teacher's scores on; got {len(X)}")
    target = teacher_logits(teacher, X)
    torch.manual_seed(cfg.seed)
    if cfg.student is None:
        try:
            student = plugin_of(teacher).narrower(teacher, list(cfg.hidden or ()))
        except ValueError as exc:
            raise CompressionError(f"{cfg.label}: {exc}") from exc
    else:
        student = other_plugin_student(teacher, cfg.student, X, target)
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
        "student": plugin_of(student).NAME,
        "hidden": list(cfg.hidden) if cfg.hidden else None,
        "params": param_count(student),
        "params_teacher": param_count(teacher),
        "layer_shapes": layer_shapes(student),
        "final_loss": losses[-1],
    }


def other_plugin_student(teacher, spec: StudentSpec, X: np.ndarray, target) -> Any:
    """A new model of `spec`'s plug-in that takes the teacher's inputs: token ids through the
    teacher's tokenizer (its `vocab_size` and `max_len`), or the features the teacher reads (the
    student's input statistics from the rows X)."""
    import torch

    from tasks.models import ModelPluginError, attach_tokenizer, build_model, load_model_plugin, plugin_of
    from tasks.models.losses import class_probabilities
    from tasks.training.data import FeatureStats

    mine, theirs = plugin_of(teacher), load_model_plugin(spec.module)
    if theirs.BATCH_FORMAT != mine.BATCH_FORMAT:
        raise CompressionError(
            f"distil into {spec.module}: it reads {theirs.BATCH_FORMAT} inputs, the teacher "
            f"({mine.NAME}) {mine.BATCH_FORMAT}; a student must read the teacher's inputs"
        )
    params = dict(spec.params)
    if mine.BATCH_FORMAT == "tokens":
        for key in ("vocab_size", "max_len"):
            if params.setdefault(key, teacher.arch[key]) != teacher.arch[key]:
                raise CompressionError(
                    f"distil into {spec.module}: {key} {params[key]} is not the teacher's {teacher.arch[key]} "
                    "(the student reads the teacher's token ids; leave it out)"
                )
    soft = class_probabilities(target).reshape(len(target), -1)  # the teacher's, as (class targets, weight 1)
    stats = FeatureStats.of([(torch.from_numpy(X).float(), torch.cat([soft, torch.ones(len(soft), 1)], dim=1))])
    try:
        student = build_model(spec.module, stats, params)
    except (ModelPluginError, ValueError) as exc:
        raise CompressionError(f"distil into {spec.module}: {exc}") from exc
    if mine.BATCH_FORMAT == "tokens":
        attach_tokenizer(student, teacher.tokenizer_json, teacher.tokenizer_sha256)
    return student
