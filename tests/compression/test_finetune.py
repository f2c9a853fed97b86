"""The recovery fine-tune draws everything random from its seed: a student with dropout (the transformer
has it) comes out the same whatever the process drew before, which is what lets a reproduced model's
compressed file equal the recorded one."""

import copy

import numpy as np
import torch

from tasks.compression.finetune import fit_soft_targets


def _student() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Dropout(0.3), torch.nn.Linear(16, 1), torch.nn.Flatten(0)
    )


def _fit(student: torch.nn.Module, X: np.ndarray, target: torch.Tensor) -> torch.nn.Module:
    fit_soft_targets(student, X, target, epochs=3, lr=1e-2, batch_size=16, seed=7)
    return student


def test_a_student_with_dropout_fine_tunes_the_same_whatever_the_global_random_state_was():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(64, 6)).astype(np.float32)
    target = torch.from_numpy(rng.normal(size=64).astype(np.float32))
    start = _student()

    torch.manual_seed(123)
    a = _fit(copy.deepcopy(start), X, target)
    torch.manual_seed(456)  # another history of draws before the fine-tune
    torch.rand(1000)
    before = torch.random.get_rng_state()
    b = _fit(copy.deepcopy(start), X, target)

    assert torch.equal(torch.random.get_rng_state(), before)  # the caller's random state is left as it was
    for (name, p), q in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(p, q), name
    # and dropout did act: without it the fine-tune ends elsewhere
    c = copy.deepcopy(start)
    c[2].p = 0.0
    assert not torch.equal(_fit(c, X, target)[0].weight, a[0].weight)
    assert not a.training and not b.training  # handed back in eval mode
