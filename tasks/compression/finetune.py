"""Training on a teacher's soft targets: the recovery fine-tune of pruning and low-rank, and distillation.

The target is the parent model's own score, not the label: what the compress gate checks
is that the compressed model keeps the uncompressed one's quality, and matching its
scores needs no labels (the rows may be unlabeled).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

from tasks.compression.export import model_input


@contextmanager
def one_thread() -> Iterator[None]:
    """Run torch's CPU kernels on one thread, as the engine trains (OMP_NUM_THREADS=1), then restore.

    A sum split over N threads rounds differently for each N: a fine-tune in a process with the
    machine's default thread count (the compress step in an Airflow task) and one in a process
    pinned to one (the reproduction's rebuild) end a few ulps apart, and a quantized file further."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def teacher_logits(model, X: np.ndarray):
    import torch

    with torch.no_grad():
        return model.eval()(torch.from_numpy(model_input(X))).detach().clone()


def fit_soft_targets(
    student,
    X: np.ndarray,
    target_logits,
    *,
    epochs: int,
    lr: float,
    batch_size: int,
    seed: int,
    temperature: float = 1.0,
) -> list[float]:
    """Train `student` (in place) so its probabilities at temperature T match the target's (sigmoid of
    one logit, softmax of K); mean loss per epoch.

    Everything random is drawn from `seed`: the batch order from a generator of its own, and the
    student's dropout from the global generator, seeded here inside `fork_rng` (so the result does
    not depend on what the process drew before, and the caller's random state is left as it was)."""
    import torch

    from tasks.models.losses import class_probabilities

    if epochs == 0 or len(X) == 0:
        return []
    x = torch.from_numpy(model_input(X))
    soft = class_probabilities(target_logits / temperature)
    params = [p for p in student.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=lr)
    gen = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        losses = _epochs(student, opt, x, soft, gen, epochs, batch_size, temperature)
    student.eval()
    return losses


def soft_target_loss(logits, soft):
    """Mean cross-entropy of logits against soft targets: binary (one logit a row) or K classes."""
    import torch.nn.functional as F

    if logits.dim() == 1:
        return F.binary_cross_entropy_with_logits(logits, soft)
    return -(soft * F.log_softmax(logits, dim=-1)).sum(-1).mean()


def _epochs(student, opt, x, soft, gen, epochs: int, batch_size: int, temperature: float) -> list[float]:
    import torch

    losses = []
    student.train()
    for _ in range(epochs):
        order = torch.randperm(len(x), generator=gen)
        total = 0.0
        for start in range(0, len(x), batch_size):
            idx = order[start : start + batch_size]
            loss = soft_target_loss(student(x[idx]) / temperature, soft[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += loss.item() * len(idx)
        losses.append(total / len(x))
    return losses
