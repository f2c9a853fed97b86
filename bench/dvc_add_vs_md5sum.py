"""dvc_add_vs_md5sum: `dvc add` over md5sum of the same bytes (goal <= 3; DVC issue 10251 saw ~10x).

1 GB in 100 files. md5sum reads and hashes them; `dvc add` (the registry's
configuration: hardlink cache) hashes them and links them into its cache. Both
read from the page cache (a warm-up pass first); alternated, medians compared.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.record import Record
from bench.registry_data import make_partitions, total_bytes

MB = 1 << 20
DVC = str(Path(sys.executable).parent / "dvc")


def _fresh_dvc_repo(root: Path, files: dict[str, Path]) -> list[str]:
    shutil.rmtree(root, ignore_errors=True)
    (root / "data").mkdir(parents=True)
    env = {**os.environ, "DVC_NO_ANALYTICS": "1"}
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    subprocess.run([DVC, "init", "-q"], cwd=root, check=True, env=env)
    subprocess.run([DVC, "config", "cache.type", "hardlink"], cwd=root, check=True, env=env)
    targets = []
    for name, src in files.items():
        os.link(src, root / "data" / f"{name}.parquet")  # same bytes, no copy
        targets.append(f"data/{name}.parquet")
    return targets


def run(n: int = 100, mb_each: int = 10, repeats: int = 3) -> list[Record]:
    env = {**os.environ, "DVC_NO_ANALYTICS": "1"}
    with tempfile.TemporaryDirectory(dir=Path.home()) as tmp:
        tmp = Path(tmp)
        files = make_partitions(tmp / "src", n, mb_each * MB, seed=4)
        paths = [str(p) for p in files.values()]
        subprocess.run(["md5sum", *paths], check=True, capture_output=True)  # warm the page cache
        md5, dvc = [], []
        for _ in range(repeats):
            t0 = time.perf_counter()
            subprocess.run(["md5sum", *paths], check=True, capture_output=True)
            md5.append(time.perf_counter() - t0)
            targets = _fresh_dvc_repo(tmp / "repo", files)
            t0 = time.perf_counter()
            subprocess.run([DVC, "add", "-q", *targets], cwd=tmp / "repo", check=True, env=env)
            dvc.append(time.perf_counter() - t0)
        size = total_bytes(files)
    m, d = statistics.median(md5), statistics.median(dvc)
    return [
        Record(
            "dvc_add_vs_md5sum",
            d / m,
            "ratio",
            "<= 3",
            {"md5sum_seconds": m, "dvc_add_seconds": d, "bytes": size, "files": n},
        )
    ]
