"""rollback_scale_ratio: rollback time with 1 GB of data over rollback time with 100 MB (goal <= 1.5).

Two registries of 100 partitions each (10 MB and 1 MB partitions), each with two
data versions and two model versions; rollbacks alternate v2 -> v1 -> v2, several
times, medians compared. A rollback moves pointers and links: it copies no bytes.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from bench.record import Record
from bench.registry_data import make_partitions, settings_at, total_bytes
from tasks.registry import Registry

MB = 1 << 20


def _registry(tmp: Path, name: str, n: int, bytes_each: int) -> tuple[Registry, int]:
    parts = make_partitions(tmp / f"src-{name}", n, bytes_each, seed=3)
    reg = Registry(settings_at(tmp / name))
    names = sorted(parts)
    art = tmp / "model.int8.onnx"
    art.write_bytes(b"\0" * 1024)
    for i, chunk in enumerate((names[:-1], names[-1:]), start=1):
        reg.snapshot({b: parts[b] for b in chunk}, {})
        reg.promote(
            reg.register_model(f"{name}-{i}", {"model.int8.onnx": art}, {"data_version": f"data-v{i}"})[
                "model_version"
            ],
            "bench",
        )
    return reg, total_bytes(parts)


def run(n: int = 100, repeats: int = 5) -> list[Record]:
    with tempfile.TemporaryDirectory(dir=Path.home()) as tmp:
        tmp = Path(tmp)
        small, small_bytes = _registry(tmp, "small", n, MB)
        large, large_bytes = _registry(tmp, "large", n, 10 * MB)
        times = {"small": [], "large": []}
        for k in range(repeats * 2):
            target = ("data-v1", "model-v1") if k % 2 == 0 else ("data-v2", "model-v2")
            for name, reg in (("small", small), ("large", large)):
                t0 = time.perf_counter()
                assert reg.rollback(*target, reason="bench")["changed"]
                times[name].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    return [
        Record(
            "rollback_scale_ratio",
            med["large"] / med["small"],
            "ratio",
            "<= 1.5",
            {
                "median_seconds": med,
                "bytes": {"small": small_bytes, "large": large_bytes},
                "rollbacks_each": len(times["small"]),
            },
        )
    ]
