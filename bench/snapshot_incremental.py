"""snapshot_incremental_ratio: a snapshot adding 1% new data over a full snapshot of the same data.

1 GB in 100 partitions (plus one more, the new 1%). Full: a fresh registry takes
all 101 partitions in one snapshot (hash, link, commit, tag, push everything).
Incremental: a registry already holding the 100 takes the new one (only it is
hashed and pushed). Goal <= 0.1. Registry.snapshot does both, with the DVC local remote.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from bench.record import Record
from bench.registry_data import make_partitions, settings_at, total_bytes
from tasks.registry import Registry

MB = 1 << 20


def run(n: int = 100, mb_each: int = 10) -> list[Record]:
    with tempfile.TemporaryDirectory(dir=Path.home()) as tmp:
        tmp = Path(tmp)
        base = make_partitions(tmp / "src", n, mb_each * MB, seed=1)
        new = make_partitions(tmp / "src", 1, mb_each * MB, seed=2, start=n)
        every = {**base, **new}

        full_reg = Registry(settings_at(tmp / "full"))
        full_reg.ensure()
        t0 = time.perf_counter()
        full_reg.snapshot(every, {})
        full = time.perf_counter() - t0

        inc_reg = Registry(settings_at(tmp / "incremental"))
        inc_reg.snapshot(base, {})
        t0 = time.perf_counter()
        inc_reg.snapshot(new, {})
        incremental = time.perf_counter() - t0
        size = total_bytes(every)
    return [
        Record(
            "snapshot_incremental_ratio",
            incremental / full,
            "ratio",
            "<= 0.1",
            {
                "full_seconds": full,
                "incremental_seconds": incremental,
                "bytes": size,
                "partitions": n + 1,
                "new_share": 1 / (n + 1),
            },
        )
    ]
