"""Distillation: the student has the asked architecture and tracks the teacher on held-out rows."""

import numpy as np

from tasks.compression.distil import distil
from tasks.compression.mlp import layer_shapes, param_count
from tasks.core.compression_config import DistilConfig
from tests.compression.conftest import torch_prob

# A student of 8 hidden units, trained 40 epochs on 600 unlabeled rows, reaches a Spearman
# correlation of about 0.98 with the teacher on held-out rows; 0.9 leaves room for seeds.
MIN_SPEARMAN = 0.9


def _spearman(a, b):
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


def test_student_architecture_and_tracking(trained, rows, held_out, params):
    cfg = DistilConfig(hidden=(8,), epochs=40, seed=params.compress.seed)
    student, info = distil(trained, cfg, rows[0])  # labels unused
    assert layer_shapes(student) == [(20, 8), (8, 1)] and student.arch["hidden"] == [8]
    assert param_count(student) == 20 * 8 + 8 + 8 + 1 == info["params"] < param_count(trained)
    assert np.array_equal(student.mean.numpy(), trained.mean.numpy())
    corr = _spearman(torch_prob(student, held_out[0]), torch_prob(trained, held_out[0]))
    assert corr > MIN_SPEARMAN, corr
