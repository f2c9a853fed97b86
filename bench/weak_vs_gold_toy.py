"""The labeling benchmark (bench/weak_vs_gold.py) on the dataset plug-in in tests/toy: the labels
saved are not a property of one dataset. Records carry the suffix `_toy`."""

from __future__ import annotations

from bench.record import Record
from bench.weak_vs_gold import TOY
from bench.weak_vs_gold import run as run_on


def run(splits: int = 5) -> list[Record]:
    return run_on(splits, dataset=TOY, suffix="_toy")
