"""The training engine with simulated slow ranks or a blocking checkpoint saver: a torchrun
worker entry for benchmarks and tests.

    torchrun ... -m bench.slow_engine --slow 0:0.002,1:0.004 <the engine's arguments>

`--slow RANK:SECONDS[,RANK:SECONDS]` ("*" for every rank) makes a rank sleep SECONDS per
row of its micro-batch at each step, inside the time load balancing measures (the
engine's `on_micro_batch` hook). `--sync-checkpoints` makes the step loop wait for each
checkpoint's write (the checkpoint benchmark's control). The engine itself knows nothing
of either. Launch it with `run_torchrun(..., **slowed("1:0.002"))`.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Callable

from tasks.training import engine

MODULE = "bench.slow_engine"


def seconds_per_row(spec: str, rank: int) -> float:
    """This rank's delay per row in a `RANK:SECONDS,...` spec (an exact rank wins over "*")."""
    delays = {}
    for part in filter(None, spec.split(",")):
        who, seconds = part.split(":")
        delays[who.strip()] = float(seconds)
    return delays.get(str(rank), delays.get("*", 0.0))


def slowdown(spec: str) -> Callable[[int, int], None]:
    """An `on_micro_batch` hook: sleep in proportion to the micro-batch, per the spec."""

    def hook(rank: int, rows: int) -> None:
        delay = seconds_per_row(spec, rank)
        if delay:
            time.sleep(delay * rows)

    return hook


def slowed(spec: str = "", sync_checkpoints: bool = False) -> dict:
    """Keyword arguments for `run_torchrun` / `start_torchrun`: this module as the workers' entry."""
    return {"module": MODULE, "module_args": ["--slow", spec, *(["--sync-checkpoints"] if sync_checkpoints else [])]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, allow_abbrev=False, add_help=False)
    parser.add_argument("--slow", default="", help="RANK:SECONDS[,RANK:SECONDS] per row ('*': every rank)")
    parser.add_argument(
        "--sync-checkpoints", action="store_true", help="wait for each checkpoint's write in the step loop"
    )
    args, rest = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    seconds_per_row(args.slow, 0)  # a malformed spec fails here, before torch starts
    return engine.main(rest, on_micro_batch=slowdown(args.slow), sync_checkpoints=args.sync_checkpoints)


if __name__ == "__main__":
    raise SystemExit(main())
