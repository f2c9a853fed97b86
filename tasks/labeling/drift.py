"""Labeling drift: this batch's coverage, conflict rate and label balance vs the previous version's."""

from __future__ import annotations

import numpy as np

from tasks.core.params import WeakLabelParams
from tasks.labeling.lf import ABSTAIN

# The key of class 1's share in data versions recorded before every dataset got `class_shares` (binary
# datasets only): read by `class_shares`, never written.
LEGACY_CLASS_1_SHARE = "spam_share"


def class_shares(stats: dict | None) -> list[float] | None:
    """Each class's share of a batch's labeled rows (`class_shares`), also from a record written
    before them (a binary batch's share of class 1 only); None when the record has neither."""
    stats = stats or {}
    if stats.get("class_shares") is not None:
        return list(stats["class_shares"])
    one = stats.get(LEGACY_CLASS_1_SHARE)
    return None if one is None else [1.0 - one, one]


def labeling_stats(L: np.ndarray, label: np.ndarray, classes: int = 2) -> dict:
    """Coverage (any vote), conflict rate (votes for two or more classes), and the label balance among
    labeled rows: `class_shares`, one share a class (K = 2 too)."""
    voted = L != ABSTAIN
    kinds = sum(((L == c) & voted).any(axis=1).astype(int) for c in range(classes)) if len(L) else np.zeros(0)
    labeled = label != ABSTAIN
    stats: dict = {
        "coverage": float(voted.any(axis=1).mean()) if len(L) else 0.0,
        "conflict_rate": float((kinds >= 2).mean()) if len(L) else 0.0,
    }
    counts = np.bincount(label[labeled].astype(int), minlength=classes)
    stats["class_shares"] = (counts / max(counts.sum(), 1)).tolist()
    return stats


def drift_flags(now: dict, before: dict | None, p: WeakLabelParams) -> list[str]:
    """Readable flags for every statistic that moved beyond its threshold. Pure."""
    if not before:
        return []
    limits = {"coverage": p.drift_max_coverage_change, "conflict_rate": p.drift_max_conflict_change}
    flags = []
    for key, limit in limits.items():
        if key in before and key in now and abs(now[key] - before[key]) > limit:
            flags.append(f"{key} moved {before[key]:.3f} -> {now[key]:.3f} (more than {limit:.2f})")
    shares, old = class_shares(now), class_shares(before)
    if shares and old and len(shares) == len(old):
        # binary: class 1's share says it all (class 0's moves by as much)
        for c, (a, b) in list(enumerate(zip(old, shares)))[1 if len(shares) == 2 else 0 :]:
            if abs(b - a) > p.drift_max_balance_change:
                flags.append(f"class {c}'s share moved {a:.3f} -> {b:.3f} (more than {p.drift_max_balance_change:.2f})")
    return flags
