"""A planted serving fault for the scenario tests (tests/e2e/), off unless the variable FAULT_FILE names a
file that exists: then a test plug-in's featurize or texts fails for every row whose value (split on
spaces) holds one of the tokens written in the file. The scenario sets the variable in the server's
environment only and writes the file while the server runs: a serving path broken for some rows, switched
on without a restart, while training and evaluation (Airflow's tasks) read the same rows unharmed."""

import os
from pathlib import Path
from typing import Iterable

FAULT_FILE = "SCENARIO_FAULT_FILE"  # not SLUICE_*: Settings refuses a variable it does not know


def check(values: Iterable[object], describe: str) -> None:
    """Raise ValueError("planted fault: <n> <describe>") when the fault is on and `n` rows are hit;
    `describe` may name the planted tokens as {planted}."""
    switch = os.environ.get(FAULT_FILE)
    if not (switch and os.path.exists(switch)):
        return
    planted = Path(switch).read_text().split()
    hit = sum(bool(set(planted) & set(str(v).split())) for v in values)
    if hit:
        raise ValueError(f"planted fault: {hit} {describe.format(planted=' '.join(planted))}")
