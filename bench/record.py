"""The record every benchmark returns: {name, value, unit, goal, passed} (+ details)."""

from __future__ import annotations

import operator
from dataclasses import asdict, dataclass, field
from typing import Any

_OPS = {"<=": operator.le, ">=": operator.ge}


@dataclass
class Record:
    name: str
    value: float
    unit: str
    goal: str  # e.g. "<= 1.5"
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        op, target = self.goal.split()
        return bool(_OPS[op](self.value, float(target)))

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "passed": self.passed}
