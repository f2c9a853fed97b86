"""lf_applier_speedup: Sluice's vectorized LF applier over Snorkel's row-wise PandasLFApplier.

1M synthetic email rows (demo rows resampled, counts and lengths jittered), the
dataset's 10 rule LFs: the very same functions, applied to whole columns by
`tasks.labeling.lf.apply_lfs` and row by row by Snorkel (`LabelingFunction.to_snorkel`).
Each applier runs in its own process; the label matrices must be identical. Reports
the speedup (goal >= 20) with each side's time and peak memory growth while applying.
The model-based LF is left out of both (row-wise it would refit nothing but predict
one row at a time, which no one would do).
"""

from __future__ import annotations

import json
import subprocess
import sys

from bench.record import Record
from tasks.core.settings import REPO_ROOT

CHILD = r"""
import json, resource, sys, time
import numpy as np
from tasks.plugins.emails import load_source
from tasks.plugins.emails.lfs import LFS
from tasks.labeling.lf import apply_lfs

def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20

rows, which = int(sys.argv[1]), sys.argv[2]
rng = np.random.default_rng(0)
base = load_source().drop(columns=["spam"])
df = base.iloc[rng.integers(0, len(base), rows)].reset_index(drop=True)
df["num_char"] = df["num_char"] * rng.uniform(0.8, 1.2, rows)
df["cc"] = np.maximum(0, df["cc"] + rng.integers(-1, 2, rows))
before = rss_mb()
t0 = time.perf_counter()
if which == "sluice":
    L = apply_lfs(df, LFS)
else:
    from snorkel.labeling import PandasLFApplier
    L = PandasLFApplier([lf.to_snorkel() for lf in LFS]).apply(df, progress_bar=False)
elapsed = time.perf_counter() - t0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
np.save(sys.argv[3], L)
print(json.dumps({"seconds": elapsed, "peak_growth_mb": max(0.0, peak - before)}))
"""


def _apply(rows: int, which: str, out: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(rows), which, out], capture_output=True, text=True, cwd=REPO_ROOT
    )
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-3000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run(rows: int = 1_000_000) -> list[Record]:
    import tempfile

    import numpy as np

    with tempfile.TemporaryDirectory() as tmp:
        sluice = _apply(rows, "sluice", f"{tmp}/sluice.npy")
        snorkel = _apply(rows, "snorkel", f"{tmp}/snorkel.npy")
        same = bool((np.load(f"{tmp}/sluice.npy") == np.load(f"{tmp}/snorkel.npy")).all())
    if not same:
        raise RuntimeError("the two appliers produced different label matrices")
    return [
        Record(
            "lf_applier_speedup",
            snorkel["seconds"] / sluice["seconds"],
            "x",
            ">= 20",
            {
                "rows": rows,
                "lfs": 10,
                "sluice": sluice,
                "snorkel_pandas_lf_applier": snorkel,
                "identical_label_matrix": same,
            },
        )
    ]
