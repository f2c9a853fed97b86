"""Labeling drift: this batch's coverage, conflict rate and label balance vs the previous version's."""

from __future__ import annotations

import numpy as np

from tasks.core.params import WeakLabelParams
from tasks.labeling.lf import ABSTAIN


def labeling_stats(L: np.ndarray, label: np.ndarray) -> dict[str, float]:
    """Coverage (any vote), conflict rate (votes for both classes), spam share among labeled rows."""
    voted = L != ABSTAIN
    spam = ((L == 1) & voted).any(axis=1)
    ham = ((L == 0) & voted).any(axis=1)
    labeled = label != ABSTAIN
    return {
        "coverage": float(voted.any(axis=1).mean()) if len(L) else 0.0,
        "conflict_rate": float((spam & ham).mean()) if len(L) else 0.0,
        "spam_share": float((label[labeled] == 1).mean()) if labeled.any() else 0.0,
    }


def drift_flags(now: dict[str, float], before: dict[str, float] | None, p: WeakLabelParams) -> list[str]:
    """Readable flags for every statistic that moved beyond its threshold. Pure."""
    if not before:
        return []
    limits = {
        "coverage": p.drift_max_coverage_change,
        "conflict_rate": p.drift_max_conflict_change,
        "spam_share": p.drift_max_balance_change,
    }
    flags = []
    for key, limit in limits.items():
        if key in before and abs(now[key] - before[key]) > limit:
            flags.append(f"{key} moved {before[key]:.3f} -> {now[key]:.3f} (more than {limit:.2f})")
    return flags
