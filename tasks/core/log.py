"""Progress lines for long steps: they go to the Airflow task log or the terminal."""

from __future__ import annotations

import sys


def log(msg: str) -> None:
    print(f"[sluice] {msg}", file=sys.stderr, flush=True)
