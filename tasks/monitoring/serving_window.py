"""The business layer between runs: what the model servers recorded over a window (the shared
prediction log, every replica's chunks: tasks/serving/predlog.py, the same records the canary analysis
judges), per variant: requests, errors, error rate, p50/p99 latency, mean throughput, online ROC AUC from
feedback labels. The daily cost report records one UTC day of it (subject "day:<variant>")."""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone
from typing import Any


def day_bounds(day: str) -> tuple[float, float]:
    start = datetime.combine(date.fromisoformat(day), datetime.min.time(), tzinfo=timezone.utc)
    return start.timestamp(), (start + timedelta(days=1)).timestamp()


def serving_summary(log: Any, start: float, end: float, canary: Any | None = None) -> dict[str, dict[str, Any]]:
    """Per variant that served in [start, end): requests, errors, error_rate, p50_ms, p99_ms,
    p99_low_ms (with `canary`, the canary params: the p99's one-sided lower bound, as the canary and
    the p99_latency alert judge it), requests_per_s (over the window), labeled, online_roc_auc (None:
    too few labels of either class), model_versions. Empty when nothing was served (or there is no log)."""
    import numpy as np

    from tasks.canary.analysis import labeled_arms, p99_lower_bound, roc_auc, select_window, variant_stats
    from tasks.serving.predlog import read_log as read_serving_log

    window = select_window(read_serving_log(log, start), start, end)  # later chunks: late feedback
    stats = variant_stats(window)
    _, arms = labeled_arms(window)
    out = {}
    for variant, s in stats.items():
        if not s["requests"]:
            continue
        arm = arms[variant]
        both = arm.labels.size and 0 < float(np.sum(arm.labels)) < arm.labels.size
        out[variant] = {
            "requests": s["requests"],
            "errors": s["errors"],
            "error_rate": s["error_rate"],
            "p50_ms": s["p50_ms"],
            "p99_ms": s["p99_ms"],
            "p99_low_ms": (
                p99_lower_bound(s["latencies"], canary.confidence, canary.bootstrap, canary.seed) if canary else None
            ),
            "requests_per_s": s["requests"] / max(end - start, 1e-9),
            "labeled": int(arm.labels.size),
            "online_roc_auc": roc_auc(arm.scores, arm.labels) if both else None,
            "model_versions": s["model_versions"],
        }
    return out


def day_summary(settings: Any, params: Any, day: str) -> dict[str, dict[str, Any]]:
    from tasks.serving.paths import prediction_log

    return serving_summary(prediction_log(settings), *day_bounds(day), canary=params.canary)


def serving_lines(serving: dict[str, dict[str, Any]]) -> str:
    """The report's serving lines, one per variant that served."""
    if not serving:
        return "  serving        nothing served (no prediction log records this day)\n"
    out = []
    for variant, s in serving.items():
        auc = "n/a" if s["online_roc_auc"] is None else f"{s['online_roc_auc']:.3f}"
        out.append(
            f"  serving        {variant} {'/'.join(s['model_versions']) or '?'}: {s['requests']} requests, "
            f"errors {s['error_rate']:.2%}, p50 {s['p50_ms']:.1f} ms, p99 {s['p99_ms']:.1f} ms, "
            f"online ROC AUC {auc} ({s['labeled']} labeled)\n"
        )
    return "".join(out)
