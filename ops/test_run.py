"""The test suite in three parts: the tests that only compute, on workers side by side; the slow tests
that wait on processes, two at a time; then the ones that need the whole machine, one at a time.

    python -m ops.test_run [--workers N] [--fast] [--junit] [pytest arguments ...]

1. **parallel**: every test not marked `slow`, on N pytest-xdist workers (default: one a core), each
   worker's torch on one thread (two workers on two cores, each with the machine's thread count, spend
   their time in each other's spin-waits);
2. **paired**: the `slow` tests also marked `paired` (nights through Airflow, long-running servers: they
   wait on processes more than they compute, and measure no time) on two workers, each worker's torch and
   its subprocesses' on one thread; a file's tests on one worker (`--dist loadfile`: a module's service
   stack starts once);
3. **serial**: the other `slow` tests (torchrun on two processes, the cluster and k8s tiers, a timing
   figure measured inside the test) in one process: they use every core or measure time, and a test
   beside them would change what they measure.

`--fast` runs the first part only (`make test-fast`). Each part is one pytest session with the same
arguments (a `-m` given is ANDed with the part's own selection by tests/conftest.py's `--part`); a part
runs even when one before it failed, so a run reports every failure. Each part keeps its durations
(`.test-results/durations-<part>.json`, `--junit`: `junit-<part>.xml`); this merges them into
`.test-results/durations.json`, with each part's wall time, and prints the sums. Exit status: the first
failing part's (pytest's "no tests collected" counts as success: a selection may hold only one kind).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

from ops.test_durations import RESULTS, lines, merge
from tasks.core.files import atomic_write_json, read_json

PARTS = ("parallel", "paired", "serial")
PAIRED_WORKERS = 2
NO_TESTS = 5  # pytest's exit status when the selection is empty


def pytest_command(part: str, workers: int | None, junit: bool, args: list[str]) -> list[str]:
    """One part's pytest command line. Pure."""
    cmd = [sys.executable, "-m", "pytest", "--part", part]
    if part == "parallel":
        cmd += ["-n", str(workers) if workers else "auto"]
    elif part == "paired":
        cmd += ["-n", str(PAIRED_WORKERS), "--dist", "loadfile"]
    if junit:
        cmd += [f"--junitxml={RESULTS / f'junit-{part}.xml'}"]
    return cmd + args


def run_parts(workers: int | None, fast: bool, junit: bool, args: list[str]) -> int:
    RESULTS.mkdir(exist_ok=True)
    for part in PARTS:
        (RESULTS / f"durations-{part}.json").unlink(missing_ok=True)
    status, walls = 0, {}
    for part in PARTS[:1] if fast else PARTS:
        cmd = pytest_command(part, workers, junit, args)
        print(f"== test part {part}: {' '.join(cmd[1:])}", flush=True)
        t0 = time.monotonic()
        rc = subprocess.call(cmd)
        walls[part] = round(time.monotonic() - t0, 1)
        if rc not in (0, NO_TESTS) and not status:
            status = rc
    merged = merge(
        {part: read_json(path) for part in PARTS if (path := RESULTS / f"durations-{part}.json").exists()}, walls
    )
    if merged["tests"]:
        atomic_write_json(RESULTS / "durations.json", merged)
        print("\n".join(["", "test durations, every part (" + str(RESULTS / "durations.json") + "):", *lines(merged)]))
    return status


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ops.test_run", description=__doc__, allow_abbrev=False,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    ap.add_argument("--workers", type=int, default=None, help="parallel part's xdist workers (default: auto)")
    ap.add_argument("--fast", action="store_true", help="only the tests not marked slow (make test-fast)")
    ap.add_argument("--junit", action="store_true", help="write each part's junit XML to .test-results/")
    known, rest = ap.parse_known_args(argv)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    return run_parts(known.workers, known.fast, known.junit, rest)


if __name__ == "__main__":
    sys.exit(main())
