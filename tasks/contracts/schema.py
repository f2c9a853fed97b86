"""A table's columns against a contract's, as the difference in words. Pure functions.

    renamed: cc -> carbon_copy; missing: winner; unexpected: extra

A rename is a missing column and an unexpected one that look like the same column: a close name (equal or
one containing the other once case and separators are dropped, the initials of one spelling the other, or a
string similarity of at least 0.75), or, when the previous version's data is at hand, the same distinct
values. It is a reading of names and values, not knowledge; any column it does not pair is listed as
missing or unexpected.
"""

from __future__ import annotations

import re
from difflib import SequenceMatcher
from typing import Any

_SIMILAR = 0.75  # SequenceMatcher ratio of two normalized names from which they count as close
_MAX_VALUES = 50  # a column with more distinct values than this is not paired by its values


def _norm(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def _initials(name: str) -> str:
    return "".join(word[0] for word in re.split(r"[^a-z0-9]+", name.lower()) if word)


def name_closeness(a: str, b: str) -> float:
    """How surely two column names name the same thing: 0 (not close) up to 1 (equal but for case and
    separators)."""
    na, nb = _norm(a), _norm(b)
    if not na or not nb:
        return 0.0
    if na == nb:
        return 1.0
    short, long = sorted((na, nb), key=len)
    if len(short) >= 3 and short in long:
        return 0.9
    if len(short) >= 2 and (na == _initials(b) or nb == _initials(a)):
        return 0.85
    ratio = SequenceMatcher(None, na, nb).ratio()
    return ratio if ratio >= _SIMILAR else 0.0


def same_values(new: Any, old: Any) -> bool:
    """Whether two columns (pandas Series) hold the same set of distinct values (a few of them)."""
    a, b = set(new.dropna().unique().tolist()), set(old.dropna().unique().tolist())
    return 0 < len(a) <= _MAX_VALUES and a == b


def schema_difference(
    actual: list[str], expected: list[str], frame: Any = None, reference: Any = None
) -> dict[str, list]:
    """{"renamed": [(expected name, actual name)], "missing": [...], "unexpected": [...]}, in column order.
    `frame` (holding `actual`) and `reference` (the previous version, holding `expected`): pair by values too."""
    missing = [c for c in expected if c not in actual]
    unexpected = [c for c in actual if c not in expected]
    scored = []
    for i, m in enumerate(missing):
        for j, u in enumerate(unexpected):
            score = name_closeness(m, u)
            if not score and frame is not None and reference is not None and m in reference and u in frame:
                score = 0.8 if same_values(frame[u], reference[m]) else 0.0
            if score:
                scored.append((-score, i, j, m, u))
    renamed = []
    for _, _, _, m, u in sorted(scored):  # the surest pairs first, each column paired once
        if m in missing and u in unexpected:
            renamed.append((m, u))
            missing.remove(m)
            unexpected.remove(u)
    renamed.sort(key=lambda pair: expected.index(pair[0]))
    return {"renamed": renamed, "missing": missing, "unexpected": unexpected}


def describe_difference(diff: dict[str, list]) -> str:
    """'renamed: a -> b; missing: c; unexpected: d' (empty parts left out; '' when there is no difference)."""
    parts = []
    if diff.get("renamed"):
        parts.append("renamed: " + ", ".join(f"{m} -> {u}" for m, u in diff["renamed"]))
    if diff.get("missing"):
        parts.append("missing: " + ", ".join(diff["missing"]))
    if diff.get("unexpected"):
        parts.append("unexpected: " + ", ".join(diff["unexpected"]))
    return "; ".join(parts)


def column_order_difference(actual: list[str], expected: list[str]) -> str | None:
    """For the same columns in another order: where the order first differs; None otherwise."""
    if actual == expected or sorted(actual) != sorted(expected):
        return None
    i = next(k for k, (a, e) in enumerate(zip(actual, expected)) if a != e)
    return f"the same columns in another order: column {i + 1} is {actual[i]}, expected {expected[i]}"
