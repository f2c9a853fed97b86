"""Which rows each rank trains on at each step, and how the global batch is split (pure functions).

A step's global batch is a slice of a per-epoch order that every rank derives from
the seed (`tasks.training.data.EpochOrder`), so the exact data position of a run is
just its step number. The
global batch is split into per-rank micro-batches (`splits`, summing to the batch
size); load balancing changes the splits, never the global batch.
"""

from __future__ import annotations

import torch


def seeded_permutation(n: int, seed: int, epoch: int, salt: int = 0) -> torch.Tensor:
    """A permutation of range(n) that depends only on (seed, epoch, salt)."""
    g = torch.Generator().manual_seed((seed * 1_000_003 + epoch) * 65_537 + salt)
    return torch.randperm(n, generator=g)


def equal_splits(batch: int, world: int) -> list[int]:
    base, extra = divmod(batch, world)
    return [base + (1 if r < extra else 0) for r in range(world)]


def rank_slice(splits: list[int], rank: int) -> tuple[int, int]:
    """This rank's [start, stop) within the global batch."""
    start = sum(splits[:rank])
    return start, start + splits[rank]


def rebalance(splits: list[int], seconds_per_sample: list[float], batch: int) -> list[int]:
    """New splits proportional to each rank's throughput (1 / seconds per sample), summing to
    `batch`, at least 1 each; largest remainders get the leftover rows. Deterministic."""
    world = len(splits)
    speed = [1.0 / max(s, 1e-9) for s in seconds_per_sample]
    total = sum(speed)
    ideal = [batch * v / total for v in speed]
    new = [max(1, int(i)) for i in ideal]
    while sum(new) > batch:  # the max(1, .) floors can overshoot
        j = max(range(world), key=lambda r: (new[r] - ideal[r], r))
        new[j] -= 1
    order = sorted(range(world), key=lambda r: (-(ideal[r] - int(ideal[r])), r))
    k = 0
    while sum(new) < batch:
        new[order[k % world]] += 1
        k += 1
    return new
