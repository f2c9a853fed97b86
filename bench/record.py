"""The record every benchmark returns: {name, value, unit, goal, passed} (+ details), and the committed
results file they are merged into (bench/results.json), which bench/README.md is generated from."""

from __future__ import annotations

import json
import operator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tasks.core.files import atomic_write_text

_OPS = {"<=": operator.le, ">=": operator.ge}

RESULTS_FILE = Path(__file__).resolve().parent / "results.json"
# An entry of the results file, in this key order. `measures` says what the figure is (kept when the
# figure is re-measured); `notes` and `source` describe this measurement (replaced with it).
ENTRY_KEYS = ("name", "module", "value", "unit", "goal", "passed", "measured", "source", "measures", "notes", "details")


def goal_met(value: float, goal: str) -> bool:
    """Whether `value` meets `goal` ("<= 1.5", ">= 0.85"); a NaN meets no goal."""
    op, target = goal.split()
    return bool(_OPS[op](value, float(target)))


@dataclass
class Record:
    name: str
    value: float
    unit: str
    goal: str  # e.g. "<= 1.5"
    details: dict[str, Any] = field(default_factory=dict)
    # Conditions without which the figure proves nothing, by name: a control arm that must miss the
    # goal (a synchronous save where the claim is about asynchronous ones), for example. A figure
    # whose control does not hold does not pass, whatever its value. Kept in details["controls"].
    controls: dict[str, bool] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return goal_met(self.value, self.goal) and all(self.controls.values())

    def to_dict(self) -> dict[str, Any]:
        out = {**asdict(self), "passed": self.passed}
        controls = out.pop("controls")
        if controls:
            out["details"] = {**out["details"], "controls": controls}
        return out


def load_results(path: Path = RESULTS_FILE) -> list[dict[str, Any]]:
    """The results file's entries (an empty list when there is no file yet)."""
    return json.loads(path.read_text()) if path.exists() else []


def write_results(entries: list[dict[str, Any]], path: Path = RESULTS_FILE) -> None:
    """Write the entries atomically (core's atomic write: a temp file, fsynced, renamed over the old one)."""
    atomic_write_text(path, json.dumps(entries, indent=2, ensure_ascii=False) + "\n")


def merge_records(
    entries: list[dict[str, Any]], records: list[Record], *, module: str, measured: str, notes: str = ""
) -> list[dict[str, Any]]:
    """`entries` with each record put in by name: a name already there is replaced in place (keeping
    what it `measures`), a new name is appended. `measured` is the date (YYYY-MM-DD)."""
    out = [dict(e) for e in entries]
    index = {e["name"]: i for i, e in enumerate(out)}
    for r in records:
        old = out[index[r.name]] if r.name in index else {}
        entry = {
            "name": r.name,
            "module": module,
            "value": float(r.value),
            "unit": r.unit,
            "goal": r.goal,
            "passed": r.passed,
            "measured": measured,
            "source": "python -m bench",
            "measures": old.get("measures", ""),
            "notes": notes,
            "details": r.details,
        }
        if r.name in index:
            out[index[r.name]] = entry
        else:
            index[r.name] = len(out)
            out.append(entry)
    return out


def entry_errors(entries: list[dict[str, Any]]) -> list[str]:
    """What is wrong with the results file's entries, each naming the entry (empty when nothing)."""
    errors, seen = [], set()
    for i, e in enumerate(entries):
        name = e.get("name", f"entry {i}")
        missing = [k for k in ENTRY_KEYS if k not in e]
        if missing:
            errors.append(f"{name}: missing {', '.join(missing)}")
            continue
        if name in seen:
            errors.append(f"{name}: appears twice")
        seen.add(name)
        try:
            met = goal_met(float(e["value"]), e["goal"])
        except (ValueError, KeyError, TypeError, AttributeError):
            errors.append(f"{name}: goal {e['goal']!r} is not '<= N' or '>= N'")
            continue
        if e["passed"] is not met:
            errors.append(f"{name}: passed is {e['passed']} but {e['value']} {e['goal']} is {met}")
    return errors
