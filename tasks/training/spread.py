"""Gradient variance across ranks, measured where DDP hands each bucket to the allreduce.

Each rank's local gradient g_r is scaled so that the allreduce's mean over ranks is
the global batch's gradient g (see the engine). Before the allreduce a wrapping comm
hook adds up ||g_r||^2 over the buckets; after it, ||g||^2 is the reduced gradient's.
The variance across ranks is then mean_r ||g_r||^2 - ||g||^2 = mean_r ||g_r - g||^2:
high when ranks see very different data (or uneven splits), zero when they agree.
"""

# No `from __future__ import annotations` here: DDP checks the hooks' return annotation object.
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook


@dataclass
class SpreadState:
    inner: Callable = allreduce_hook  # the hook that does the reduction
    inner_state: Any = None  # its state (None: the default process group)
    measure: bool = False  # set on the steps that log metrics
    local_sq: float = 0.0  # sum over buckets of ||local bucket||^2 this step

    def start(self, measure: bool) -> None:
        self.measure, self.local_sq = measure, 0.0


def measured_hook(state: SpreadState, bucket) -> torch.futures.Future[torch.Tensor]:
    if state.measure:
        state.local_sq += float(bucket.buffer().double().pow(2).sum())
    return state.inner(state.inner_state, bucket)


def variance_across_ranks(local_sq: list[float], reduced_sq: float) -> float:
    """mean_r ||g_r||^2 - ||mean_r g_r||^2, floored at 0 (rounding)."""
    return max(0.0, sum(local_sq) / len(local_sq) - reduced_sq)
