"""Progress lines for long steps: they go to the Airflow task log or the terminal."""

from __future__ import annotations

import sys
import time
from typing import Callable


def log(msg: str) -> None:
    # One write of the whole line: print() writes the text and its newline separately, and processes
    # sharing stderr (torchrun's ranks) then interleave their lines ("...complete[sluice] rank 1 ...").
    sys.stderr.write(f"[sluice] {msg}\n")
    sys.stderr.flush()


def _plural(unit: str) -> str:
    return unit if unit.endswith("s") else unit + "s"


def _duration(seconds: float) -> str:
    """12 s, 3 min 05 s, 2 h 07 min: short enough for a log line."""
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def progress(
    done: int, total: int, started: float, unit: str = "step", now: float | None = None, done_at_start: int = 0
) -> str:
    """One progress line: 'step 120/400 (30%), 12.3 steps/s, ETA 23 s'.

    `started` and `now` are readings of the same clock (time.monotonic() by default); `done_at_start`
    is the work already done at `started` (a resumed training), so the rate counts only work done
    since. Before any work is done, or when no time has passed, the rate and ETA read 'n/a'. A total
    of 0 reads as complete."""
    now = time.monotonic() if now is None else now
    elapsed, new = max(0.0, now - started), done - done_at_start
    pct = 100 if total <= 0 else int(100 * min(max(done, 0), total) / total)
    line = f"{unit} {done}/{total} ({pct}%)"
    if new <= 0 or elapsed <= 0:
        return f"{line}, {_plural(unit)}/s n/a, ETA n/a"
    rate = new / elapsed
    shown = f"{rate:,.0f}" if rate >= 100 else f"{rate:.3g}"
    return f"{line}, {shown} {_plural(unit)}/s, ETA {_duration(max(0, total - done) / rate)}"


class Progress:
    """Logs `progress(...)` lines for a loop: the first update (unless `first=False`), then at most one
    every `every_s` seconds, and always the last (the total reached).

        tracker = Progress("training", total=400)
        for step in ...: tracker.update(step + 1)

    `what` prefixes each line ('training: step 120/400 (30%), ...'); `start` is the work already done
    before the loop (a resumed training), left out of the rate."""

    def __init__(
        self,
        what: str,
        total: int,
        unit: str = "step",
        every_s: float = 5.0,
        start: int = 0,
        first: bool = True,
        clock: Callable[[], float] = time.monotonic,
        sink: Callable[[str], None] = log,
    ):
        self.what, self.total, self.unit, self.every_s, self.start = what, total, unit, every_s, start
        self.clock, self.sink = clock, sink
        self.started = clock()
        # Without a first line, the interval runs from the start: a loop shorter than `every_s` logs its end only.
        self.last: float | None = None if first else self.started
        self.finished = False

    def update(self, done: int) -> str | None:
        """Log a line if one is due; returns the line logged, or None."""
        now = self.clock()
        final = done >= self.total
        due = final or self.last is None or now - self.last >= self.every_s
        if self.finished or not due:
            return None
        self.last, self.finished = now, final
        line = f"{self.what}: {progress(done, self.total, self.started, self.unit, now, self.start)}"
        self.sink(line)
        return line
