"""Labeling drift: this batch's coverage, conflict rate and label balance vs the previous version's."""

from __future__ import annotations

import numpy as np

from tasks.core.params import WeakLabelParams
from tasks.labeling.lf import ABSTAIN


def labeling_stats(L: np.ndarray, label: np.ndarray, classes: int = 2) -> dict:
    """Coverage (any vote), conflict rate (votes for two or more classes), and the label balance among
    labeled rows: binary, `spam_share` (the share of class 1); K classes, `class_shares` (one a class)."""
    voted = L != ABSTAIN
    kinds = sum(((L == c) & voted).any(axis=1).astype(int) for c in range(classes)) if len(L) else np.zeros(0)
    labeled = label != ABSTAIN
    stats: dict = {
        "coverage": float(voted.any(axis=1).mean()) if len(L) else 0.0,
        "conflict_rate": float((kinds >= 2).mean()) if len(L) else 0.0,
    }
    if classes == 2:
        stats["spam_share"] = float((label[labeled] == 1).mean()) if labeled.any() else 0.0
    else:
        counts = np.bincount(label[labeled].astype(int), minlength=classes)
        stats["class_shares"] = (counts / max(counts.sum(), 1)).tolist()
    return stats


def drift_flags(now: dict, before: dict | None, p: WeakLabelParams) -> list[str]:
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
        if key in before and key in now and abs(now[key] - before[key]) > limit:
            flags.append(f"{key} moved {before[key]:.3f} -> {now[key]:.3f} (more than {limit:.2f})")
    shares, old = now.get("class_shares"), before.get("class_shares")
    if shares and old and len(shares) == len(old):
        for c, (a, b) in enumerate(zip(old, shares)):
            if abs(b - a) > p.drift_max_balance_change:
                flags.append(f"class {c}'s share moved {a:.3f} -> {b:.3f} (more than {p.drift_max_balance_change:.2f})")
    return flags
