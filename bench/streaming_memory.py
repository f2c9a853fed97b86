"""streaming_memory_ratio: the training engine's peak memory on 10x the data over 1x (goal <= 1.2).

One registry, two data versions of real email rows (resampled, gold labels as soft
targets): data-v1 with 4 partitions of 50,000 rows, data-v2 with 40 (2M rows).
The engine trains one epoch on each, one process, with a 16 MB partition cache, in
a fresh process each time; its peak resident memory is read from the kernel
(ru_maxrss of the finished child). Beside it, for scale, the same ratio for reading
each version whole into memory, as the engine did before it streamed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.record import Record
from tasks.core.params import load_params
from tasks.core.settings import Settings
from tasks.registry import Registry
from tasks.training.command import engine_args, params_json

ROWS_PER_PARTITION = 50_000
CACHE_MB = 16

_WHOLE = """
import sys
from tasks.datasets import load_dataset
from tasks.registry import Registry
from tasks.core.settings import Settings
df = Registry(Settings.from_env()).read_data_version(sys.argv[1])
x = load_dataset().featurize(df[df["label"] != -1])
print(x.shape)
"""


def _peak_rss_mb(cmd: list[str], env: dict[str, str]) -> float:
    """Peak resident memory of `cmd`, measured by a fresh wrapper process (ru_maxrss of its child)."""
    wrapper = (
        "import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True); "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
    )
    out = subprocess.run([sys.executable, "-c", wrapper, *cmd], env=env, check=True, capture_output=True, text=True)
    return int(out.stdout.strip().splitlines()[-1]) / 1024  # Linux reports kilobytes


def _versions(home: Path) -> tuple[str, str]:
    import numpy as np

    from tasks.plugins.emails import GOLD_COLUMN, load_source

    src = load_source()
    rng = np.random.default_rng(0)
    reg = Registry(Settings.from_env({"SLUICE_HOME": str(home)}))
    home.mkdir(parents=True, exist_ok=True)
    versions = []
    for first, count in ((0, 4), (4, 36)):
        parts = {}
        for i in range(first, first + count):
            df = src.iloc[rng.integers(0, len(src), ROWS_PER_PARTITION)].reset_index(drop=True)
            df["email_id"] = np.arange(ROWS_PER_PARTITION) + i * ROWS_PER_PARTITION
            df["label"] = df.pop(GOLD_COLUMN)
            df["label_prob"] = df["label"].astype(float)
            parts[f"batch-{i:04d}"] = home / f"p{i}.parquet"
            df.to_parquet(parts[f"batch-{i:04d}"], index=False)
        versions.append(reg.snapshot(parts, {"rows_by_batch": {b: ROWS_PER_PARTITION for b in parts}})["data_version"])
        for path in parts.values():
            path.unlink()
    return versions[0], versions[1]


def run() -> list[Record]:
    p = load_params().train.replace(
        epochs=1,
        batch_size=4096,
        nproc=1,
        log_every=50,
        checkpoint_every=10_000,
        warm_start=False,
        stream_cache_mb=CACHE_MB,
        device="cpu",
    )
    with tempfile.TemporaryDirectory(dir=Path.home()) as tmp:
        tmp = Path(tmp)
        env = {**os.environ, "SLUICE_HOME": str(tmp / "home"), "OMP_NUM_THREADS": "1"}
        small, large = _versions(tmp / "home")
        peak, whole = {}, {}
        for name, version in (("1x", small), ("10x", large)):
            engine = [sys.executable, *engine_args(version, str(tmp / f"out-{name}"), params_json(p))]
            peak[name] = _peak_rss_mb(engine, env)
            whole[name] = _peak_rss_mb([sys.executable, "-c", _WHOLE, version], env)
            m = json.loads((tmp / f"out-{name}" / "train_metrics.json").read_text())
            assert m["rows"] == ROWS_PER_PARTITION * (4 if name == "1x" else 40), m["rows"]
            print(
                f"[bench] {name}: engine peak {peak[name]:.0f} MB, whole-version read {whole[name]:.0f} MB",
                file=sys.stderr,
                flush=True,
            )
    return [
        Record(
            "streaming_memory_ratio",
            peak["10x"] / peak["1x"],
            "ratio",
            "<= 1.2",
            {
                "engine_peak_mb": peak,
                "whole_read_peak_mb": whole,
                "whole_read_ratio": whole["10x"] / whole["1x"],
                "rows_per_partition": ROWS_PER_PARTITION,
                "partitions": {"1x": 4, "10x": 40},
                "cache_mb": CACHE_MB,
            },
        )
    ]
