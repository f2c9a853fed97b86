"""Synthetic partitions for the registry benchmarks: real parquet files of random floats."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from tasks.core.settings import Settings


def make_partitions(folder: Path, n: int, bytes_each: int, seed: int = 0, start: int = 0) -> dict[str, Path]:
    """n parquet files of about `bytes_each` (random float64: incompressible), named batch-NNNNN."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    rows = max(1, bytes_each // 8)
    out = {}
    for i in range(start, start + n):
        path = folder / f"batch-{i:05d}.parquet"
        pd.DataFrame({"x": rng.random(rows)}).to_parquet(path, index=False, compression=None)
        out[path.stem] = path
    return out


def settings_at(home: Path) -> Settings:
    return Settings.from_env({"SLUICE_HOME": str(home)})


def total_bytes(parts: dict[str, Path]) -> int:
    return sum(p.stat().st_size for p in parts.values())
