"""Canary analysis: judge a challenger against the champion from one window of the prediction log.

Pure functions over log records (read with tasks.serving.predlog.read_log). The server appends one
JSON object per line to its prediction log (tasks/serving/predlog.py), one record per scored row:

    prediction  {"kind": "prediction", "request_id", "row", "ts" (unix s), "at" (ISO),
                 "variant": "champion"|"challenger", "model_version", "latency_ms", "score",
                 "shadow", "endpoint"}
    error       a prediction record with "error": "<message>" (no score needed): counts as a
                failed request of its variant
    feedback    {"kind": "feedback", "request_id", "row", "ts", "label": 0|1}: the delayed gold
                label of the predictions with that request_id and row (in shadow mode both
                variants' records share them)

Missing "kind" is read from the fields (a "variant": a prediction; a "label" and no
variant: feedback); missing "row" is 0; the time is "ts", else "time" (unix s or ISO), else "at".

`judge(window, params)` compares, per variant: request count, error rate (a one-sided test of
two proportions with a floor), p50/p99 latency of successful requests (the p99 by a one-sided
bootstrap bound with practical margins and the one budget: `_latency_reasons` says why a tail
test), the population stability index (PSI) of the challenger's scores
against the champion's, and where feedback labels exist, online ROC AUC and F1 with a
seeded bootstrap confidence interval of challenger - champion. The bootstrap resamples
labeled rows (request_id, row), and each resample is applied to both arms at once: in
shadow mode (both arms score the same rows) the comparison is paired; in split mode each
row belongs to one arm and a resample is a bootstrap of the whole randomized experiment.

Fails closed: fewer than `min_samples` requests in a variant, a metric that cannot be
computed (NaN) where a threshold applies, or no challenger at all, is a failure with a reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Iterable, Sequence

import numpy as np

from tasks.core.files import json_safe
from tasks.core.params import CanaryParams
from tasks.registry.serving import CHALLENGER, CHAMPION, VARIANTS
from tasks.serving.predlog import Record

PSI_BINS = 10  # equal-width bins over [0, 1]
PSI_PSEUDO_COUNT = 0.5  # added to every bin's count: the floor of an empty bin (see psi)
F1_THRESHOLD = 0.5  # score >= this is a positive prediction (as tasks.evaluation.quality)
MAX_CAUSES = 3  # distinct error messages kept per variant
PASS, CHALLENGER_WORSE, CANNOT_JUDGE = "pass", "challenger_worse", "cannot_judge"


# ---- records ------------------------------------------------------------------------------


def is_feedback(rec: Record) -> bool:
    """A feedback record: a label for a served row, not itself a prediction."""
    kind = rec.get("kind")
    if kind is not None:
        return kind == "feedback" and "request_id" in rec
    return "label" in rec and "variant" not in rec and "request_id" in rec


def is_prediction(rec: Record) -> bool:
    return rec.get("kind", "prediction") == "prediction" and rec.get("variant") in VARIANTS


def is_error(rec: Record) -> bool:
    return bool(rec.get("error"))


def row_key(rec: Record) -> str:
    """What a label joins on: the request id and the row within the request."""
    row = rec.get("row", 0)
    return f"{rec.get('request_id')}#{row if isinstance(row, int) and not isinstance(row, bool) else 0}"


def record_time(rec: Record) -> float | None:
    """Epoch seconds from "ts", else "time" (a number or ISO 8601), else "at"; naive ISO is UTC."""
    for key in ("ts", "time", "at"):
        t = rec.get(key)
        if isinstance(t, bool) or t is None:
            continue
        if isinstance(t, (int, float)):
            return float(t)
        if isinstance(t, str):
            try:
                dt = datetime.fromisoformat(t.replace("Z", "+00:00"))
            except ValueError:
                continue
            if dt.tzinfo is None:
                dt = dt.replace(tzinfo=timezone.utc)
            return dt.timestamp()
    return None


def select_window(
    records: Iterable[Record],
    start: float | None = None,
    end: float | None = None,
    model_versions: dict[str, str] | None = None,
) -> list[Record]:
    """The predictions with `start <= time < end` (epoch seconds; None: open), plus every
    feedback record for their request ids, whenever it arrived (labels come late).

    `model_versions` ({"champion": "model-v3", ...}) keeps only predictions a variant made
    with that version (a window that straddles a swap of versions)."""
    records = list(records)
    preds = []
    for rec in records:
        if not is_prediction(rec):
            continue
        if start is not None or end is not None:
            t = record_time(rec)
            if t is None or (start is not None and t < start) or (end is not None and t >= end):
                continue
        if (
            model_versions
            and rec["variant"] in model_versions
            and rec.get("model_version") != model_versions[rec["variant"]]
        ):
            continue
        preds.append(rec)
    ids = {p.get("request_id") for p in preds}
    return preds + [r for r in records if is_feedback(r) and r.get("request_id") in ids]


def labels_by_row(records: Iterable[Record]) -> dict[str, int]:
    """row_key -> the class (0/1; 0..K-1) from feedback records (the last one wins; unreadable labels
    are ignored)."""
    out: dict[str, int] = {}
    for rec in records:
        if not is_feedback(rec):
            continue
        label = rec.get("label")
        if isinstance(label, str) and label.strip().isdigit():
            label = int(label)
        if isinstance(label, bool) or not isinstance(label, int) or label < 0:
            continue
        out[row_key(rec)] = int(label)
    return out


# ---- metrics ------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (linear interpolation); NaN for no values."""
    arr = np.asarray(values, dtype=np.float64)
    return float(np.percentile(arr, q)) if arr.size else float("nan")


def psi(
    expected: Sequence[float],
    actual: Sequence[float],
    bins: int = PSI_BINS,
    pseudo_count: float = PSI_PSEUDO_COUNT,
    cuts: Sequence[float] | None = None,
) -> float:
    """Population stability index of `actual` (challenger scores) against `expected` (champion).

    Fixed equal-width bins over [0, 1] (scores outside are clipped in). Each bin's
    proportion is (count + pseudo_count) / (n + pseudo_count * bins): an empty bin gets a
    floor of about pseudo_count / n instead of 0 (log(0)), and the floor shrinks as the
    sample grows. sum((a - e) * ln(a / e)). NaN if either side is empty.

    Small samples inflate PSI: with scores like a rare-class model's (most near 0) and the same
    model on both sides, 10 bins give a mean PSI of about 0.15 at 50 vs 250 scores (11%
    above 0.25), 0.11 at 150 vs 150 (1%), 0.06 at 300 vs 300 (0%); a hard floor of 1e-4
    instead gave 0.39 (80% above 0.25) at 50 vs 250.

    With `cuts` (sorted, any values: a feature's, tasks/monitoring/serving_drift.py) the bins are
    (-inf, c1], (c1, c2], ..., (ck, inf) instead, nothing clipped. Scores of K classes ([n, K], a
    probability per class) are binned by their most probable class: the PSI of the predicted class
    mix."""
    e2, a2 = np.asarray(expected, dtype=np.float64), np.asarray(actual, dtype=np.float64)
    if e2.ndim == 2 or a2.ndim == 2:
        if not e2.size or not a2.size:
            return float("nan")
        bins = max(e2.shape[-1], a2.shape[-1])
        e, a = e2.argmax(axis=-1), a2.argmax(axis=-1)
        ce, ca = np.bincount(e, minlength=bins), np.bincount(a, minlength=bins)
    elif cuts is not None:
        e, a = np.asarray(expected, dtype=np.float64), np.asarray(actual, dtype=np.float64)
        if not e.size or not a.size:
            return float("nan")
        c = np.asarray(cuts, dtype=np.float64)
        bins = c.size + 1
        ce = np.bincount(np.searchsorted(c, e, side="left"), minlength=bins)
        ca = np.bincount(np.searchsorted(c, a, side="left"), minlength=bins)
    else:
        e = np.clip(np.asarray(expected, dtype=np.float64), 0.0, 1.0)
        a = np.clip(np.asarray(actual, dtype=np.float64), 0.0, 1.0)
        if not e.size or not a.size:
            return float("nan")
        edges = np.linspace(0.0, 1.0, bins + 1)
        ce, ca = np.histogram(e, edges)[0], np.histogram(a, edges)[0]
    pe = (ce + pseudo_count) / (e.size + pseudo_count * bins)
    pa = (ca + pseudo_count) / (a.size + pseudo_count * bins)
    return float(np.sum((pa - pe) * np.log(pa / pe)))


def _weighted_auc(scores: np.ndarray, labels: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """ROC AUC (ties count one half) for each row of `weights` [B, n]; NaN where a class is absent.
    K classes (`scores` [n, K]): the macro one-vs-rest ROC AUC."""
    if scores.ndim == 2:
        per_class = [
            _weighted_auc(scores[:, c], (labels == c).astype(np.float64), weights) for c in range(scores.shape[1])
        ]
        return np.mean(per_class, axis=0) if per_class else np.full(weights.shape[0], np.nan)
    if scores.size == 0:
        return np.full(weights.shape[0], np.nan)
    order = np.argsort(scores, kind="stable")
    s, y, w = scores[order], labels[order], weights[:, order]
    starts = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])  # groups of tied scores
    pos = np.add.reduceat(w * y, starts, axis=1)
    neg = np.add.reduceat(w * (1 - y), starts, axis=1)
    below = np.cumsum(neg, axis=1) - neg
    num = np.sum(pos * (below + 0.5 * neg), axis=1)
    den = pos.sum(axis=1) * neg.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1), np.nan)


def _weighted_f1(scores: np.ndarray, labels: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """F1 of the positive class at F1_THRESHOLD for each row of `weights`; NaN with no positives at all.
    K classes (`scores` [n, K]): the macro F1 of the most probable class (NaN when a class has none)."""
    if scores.ndim == 2:
        pred = scores.argmax(axis=1) if scores.size else np.zeros(0, int)
        per_class = [
            _weighted_f1((pred == c).astype(np.float64), (labels == c).astype(np.float64), weights)
            for c in range(scores.shape[1])
        ]
        return np.mean(per_class, axis=0) if per_class else np.full(weights.shape[0], np.nan)
    pred = (scores >= F1_THRESHOLD).astype(np.float64)
    tp = weights @ (pred * labels)
    fp = weights @ (pred * (1 - labels))
    fn = weights @ ((1 - pred) * labels)
    den = 2 * tp + fp + fn
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, 2 * tp / np.where(den > 0, den, 1), np.nan)


def roc_auc(scores: Sequence[float], labels: Sequence[int]) -> float:
    s = np.asarray(scores, dtype=np.float64)
    return float(_weighted_auc(s, np.asarray(labels, dtype=np.float64), np.ones((1, s.size)))[0])


def f1(scores: Sequence[float], labels: Sequence[int]) -> float:
    s = np.asarray(scores, dtype=np.float64)
    return float(_weighted_f1(s, np.asarray(labels, dtype=np.float64), np.ones((1, s.size)))[0])


@dataclass(frozen=True)
class Arm:
    """One variant's labeled predictions: unit index (into the shared request-id list), score ([m]; K
    classes [m, K]), label."""

    units: np.ndarray
    scores: np.ndarray
    labels: np.ndarray


def labeled_arms(window: Iterable[Record]) -> tuple[list[str], dict[str, Arm]]:
    """The labeled rows (row keys), and per variant its successful labeled predictions."""
    window = list(window)
    labels = labels_by_row(window)
    ids: dict[str, int] = {}
    rows: dict[str, list[tuple[int, Any, int]]] = {v: [] for v in VARIANTS}
    for rec in window:
        if not is_prediction(rec) or is_error(rec):
            continue
        rid = row_key(rec)
        score = _score(rec.get("score"))
        if rid not in labels or score is None:
            continue
        unit = ids.setdefault(rid, len(ids))
        rows[rec["variant"]].append((unit, score, labels[rid]))
    arms = {}
    for v, r in rows.items():
        arms[v] = Arm(
            np.asarray([u for u, _, _ in r], dtype=np.int64),
            np.asarray([s for _, s, _ in r], dtype=np.float64),
            np.asarray([y for _, _, y in r], dtype=np.float64),
        )
    return list(ids), arms


def bootstrap_difference(
    arms: dict[str, Arm], n_units: int, resamples: int, confidence: float, seed: int
) -> dict[str, dict[str, Any]]:
    """Challenger - champion of ROC AUC and F1: the observed difference and a percentile bootstrap CI.

    Each resample draws `n_units` labeled rows with replacement (seeded) and weighs every
    prediction of both arms by how often its row was drawn: the same resample for both
    arms and both metrics. Resamples where a metric is undefined (an arm without one
    class) are left out and counted in `degenerate`."""
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, n_units, size=(resamples, n_units)) if n_units else np.zeros((resamples, 0), int)
    counts = np.zeros((resamples, n_units))
    np.add.at(counts, (np.arange(resamples)[:, None], draws), 1.0)
    alpha = 1.0 - confidence
    out: dict[str, dict[str, Any]] = {}
    for name, fn in (("roc_auc", _weighted_auc), ("f1", _weighted_f1)):
        per_arm_obs, per_arm_boot = {}, {}
        for v in VARIANTS:
            arm = arms[v]
            per_arm_obs[v] = float(fn(arm.scores, arm.labels, np.ones((1, len(arm.scores))))[0])
            per_arm_boot[v] = fn(arm.scores, arm.labels, counts[:, arm.units])
        diffs = per_arm_boot[CHALLENGER] - per_arm_boot[CHAMPION]
        ok = diffs[np.isfinite(diffs)]
        low, high = np.quantile(ok, [alpha / 2, 1 - alpha / 2]) if ok.size else (np.nan, np.nan)
        out[name] = {
            CHAMPION: per_arm_obs[CHAMPION],
            CHALLENGER: per_arm_obs[CHALLENGER],
            "difference": per_arm_obs[CHALLENGER] - per_arm_obs[CHAMPION],
            "ci_low": float(low),
            "ci_high": float(high),
            "confidence": confidence,
            "resamples": int(resamples),
            "degenerate": int(resamples - ok.size),
            "seed": seed,
        }
    return out


def _number(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    v = float(v)
    return v if math.isfinite(v) else None


def _score(v: Any) -> float | list[float] | None:
    """A logged score: P(class 1), or a K-class model's list of K probabilities; None if unreadable."""
    if isinstance(v, list):
        values = [_number(x) for x in v]
        return values if len(values) >= 2 and all(x is not None for x in values) else None  # type: ignore[return-value]
    return _number(v)


def variant_stats(window: Iterable[Record]) -> dict[str, dict[str, Any]]:
    """Per variant: requests (distinct request ids), rows, errors (requests with an error record),
    error_rate, p50_ms and p99_ms (one latency per successful request), model_versions, causes (the
    first MAX_CAUSES distinct error messages, each with its request count), scores."""
    reqs: dict[str, dict[str, dict[str, Any]]] = {v: {} for v in VARIANTS}
    causes: dict[str, dict[str, int]] = {v: {} for v in VARIANTS}  # error message -> requests, first seen first
    scores: dict[str, list[Any]] = {v: [] for v in VARIANTS}
    rows = {v: 0 for v in VARIANTS}
    versions: dict[str, set[str]] = {v: set() for v in VARIANTS}
    for rec in window:
        if not is_prediction(rec):
            continue
        v = rec["variant"]
        rows[v] += 1
        if rec.get("model_version"):
            versions[v].add(str(rec["model_version"]))
        req = reqs[v].setdefault(str(rec.get("request_id")), {"error": False, "latency": None})
        if is_error(rec):
            if not req["error"]:
                cause = str(rec["error"])
                causes[v][cause] = causes[v].get(cause, 0) + 1
            req["error"] = True
            continue
        lat, score = _number(rec.get("latency_ms")), _score(rec.get("score"))
        if lat is not None and req["latency"] is None:
            req["latency"] = lat
        if score is not None:
            scores[v].append(score)
    out = {}
    for v in VARIANTS:
        n = len(reqs[v])
        errors = sum(r["error"] for r in reqs[v].values())
        latency = [r["latency"] for r in reqs[v].values() if not r["error"] and r["latency"] is not None]
        out[v] = {
            "requests": n,
            "rows": rows[v],
            "errors": errors,
            "error_rate": errors / n if n else float("nan"),
            "p50_ms": percentile(latency, 50),
            "p99_ms": percentile(latency, 99),
            "model_versions": sorted(versions[v]),
            "causes": [{"error": e, "requests": c} for e, c in list(causes[v].items())[:MAX_CAUSES]],
            "scores": scores[v],
            "latencies": latency,
        }
    return out


# ---- the verdict --------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    passed: bool
    reasons: list[str] = field(default_factory=list)
    """Why it failed: each names the metric, the observed value and the threshold."""
    metrics: dict[str, Any] = field(default_factory=dict)
    """What was compared (JSON-able: NaN is None)."""
    outcome: str = PASS
    """PASS; CHALLENGER_WORSE (the challenger measured and found worse); CANNOT_JUDGE (too few
    answers, or a champion that fails its own requests: nothing fair to compare with)."""
    champion_failing: bool = False
    """The champion failed more than `error_rate_margin` of its requests: production itself is broken
    (a critical alert), whatever the challenger did."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "outcome": self.outcome,
            "champion_failing": self.champion_failing,
            "reasons": list(self.reasons),
            "metrics": self.metrics,
        }


def _fmt(v: float, unit: str = "", digits: int = 3) -> str:
    return "n/a" if v is None or not math.isfinite(v) else f"{v:.{digits}f}{unit}"


def failures(variant: str, stats: dict[str, Any]) -> str:
    """'champion: 215 of 390 requests failed: <first cause> (215); ...' for a variant's errors."""
    causes = "; ".join(f"{c['error']} ({c['requests']})" for c in stats.get("causes", []))
    return f"{variant}: {stats['errors']} of {stats['requests']} requests failed" + (f": {causes}" if causes else "")


def _sample_reasons(stats: dict[str, dict[str, Any]], p: CanaryParams) -> list[str]:
    """Too few requests cannot be judged (fail closed). (A variant's failed requests count: a challenger
    failing every request is worse, not unjudged; a failing champion is _champion_reasons'.)"""
    return [
        f"{v} requests {stats[v]['requests']} are below the minimum sample {p.min_samples}: cannot judge"
        for v in VARIANTS
        if stats[v]["requests"] < p.min_samples
    ]


def _champion_reasons(champ: dict[str, Any], p: CanaryParams) -> list[str]:
    """A champion failing significantly more than `error_rate_margin` of its requests (a one-sided test of
    its error rate against that margin, p < 1 - confidence): production is broken, and the challenger
    cannot be judged against it. (A stray failure or two, a replica killed mid-request, is not.)"""
    n, e, m = champ["requests"], champ["errors"], p.error_rate_margin
    if not n or e / n <= m:
        return []
    z = (e / n - m) / math.sqrt(max(m * (1 - m), 1e-12) / n)
    if 0.5 * math.erfc(z / math.sqrt(2)) >= 1 - p.confidence:
        return []
    return [f"{failures(CHAMPION, champ)}: the champion itself is failing (cannot judge the challenger against it)"]


def _error_reasons(champ: dict[str, Any], chall: dict[str, Any], p: CanaryParams) -> tuple[dict[str, Any], list[str]]:
    """A one-sided two-proportion z-test (challenger's error rate above the champion's) with a floor:
    the challenger fails only when its rate is significantly higher (p < 1 - confidence) and higher
    by more than `error_rate_margin`."""
    n1, n2, e1, e2 = chall["requests"], champ["requests"], chall["errors"], champ["errors"]
    if not (n1 and n2):
        return {"p_value": None}, []
    r1, r2, pooled = e1 / n1, e2 / n2, (e1 + e2) / (n1 + n2)
    se = math.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n2))
    z = (r1 - r2) / se if se > 0 else 0.0
    p_value = 0.5 * math.erfc(z / math.sqrt(2))  # P(Z >= z)
    test = {"difference": r1 - r2, "z": z, "p_value": p_value, "margin": p.error_rate_margin}
    if p_value < 1 - p.confidence and r1 - r2 > p.error_rate_margin:
        return test, [
            f"challenger error rate {_fmt(r1, digits=4)} ({e1}/{n1}) is significantly above the champion's "
            f"{_fmt(r2, digits=4)} ({e2}/{n2}; one-sided two-proportion test p={p_value:.2g} < "
            f"{1 - p.confidence:.2g}) by more than {p.error_rate_margin:g}; {failures(CHALLENGER, chall)}"
        ]
    return test, []


def bootstrap_p99(latencies: Sequence[float], resamples: int, rng: np.random.Generator) -> np.ndarray:
    """The p99 of `resamples` bootstrap resamples of `latencies` (empty: an empty array)."""
    a = np.asarray(latencies, dtype=np.float64)
    if not a.size:
        return np.zeros(0)
    return np.percentile(a[rng.integers(0, a.size, (resamples, a.size))], 99, axis=1)


def p99_lower_bound(latencies: Sequence[float], confidence: float, resamples: int, seed: int) -> float:
    """A one-sided lower bound (at `confidence`) of the p99: what the p99_latency alert holds against
    the budget, in the canary's steps and in the daily serving report alike (NaN with no latencies)."""
    boot = bootstrap_p99(latencies, resamples, np.random.default_rng(seed))
    return float(np.quantile(boot, 1 - confidence)) if boot.size else float("nan")


def p99_bounds(champ: Sequence[float], chall: Sequence[float], p: CanaryParams) -> dict[str, float]:
    """Lower one-sided bootstrap bounds (at `confidence`) of the challenger's p99, the champion's, and
    of the challenger's p99 minus and over the champion's: each variant's successful-request latencies
    resampled on their own (`bootstrap` times, seeded), the p99 recomputed."""
    rng = np.random.default_rng(p.seed)
    boot_a, boot_b = bootstrap_p99(chall, p.bootstrap, rng), bootstrap_p99(champ, p.bootstrap, rng)
    if not (boot_a.size and boot_b.size):
        nan = float("nan")
        return {"challenger_low": nan, "champion_low": nan, "difference_low": nan, "ratio_low": nan}
    q = 1 - p.confidence
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(boot_b > 0, boot_a / np.where(boot_b > 0, boot_b, 1), np.inf)
    return {
        "challenger_low": float(np.quantile(boot_a, q)),
        "champion_low": float(np.quantile(boot_b, q)),
        "difference_low": float(np.quantile(boot_a - boot_b, q)),
        "ratio_low": float(np.quantile(ratio, q)),
    }


def _latency_reasons(champ: dict[str, Any], chall: dict[str, Any], p: CanaryParams) -> tuple[dict, list[str]]:
    """The challenger fails on latency only when its p99 is significantly (a one-sided bootstrap bound
    at `confidence`) above the champion's by more than `latency_margin_ms`, above it by more than
    `latency_margin_ratio`, and above the one latency budget `p99_budget_ms`: a slowdown within the
    budget, or one the champion shares (a loaded machine), does not roll back a release. A tail test:
    Mann-Whitney U would test a shift of the whole distribution, and a slow path hit by a few percent
    of requests moves the p99 without moving the median."""
    b = p99_bounds(champ["latencies"], chall["latencies"], p)
    slower = b["difference_low"] > p.latency_margin_ms and b["ratio_low"] > 1 + p.latency_margin_ratio
    if not (slower and b["challenger_low"] > p.p99_budget_ms):
        return b, []
    return b, [
        f"challenger p99 latency {_fmt(chall['p99_ms'], ' ms', 1)} vs champion {_fmt(champ['p99_ms'], ' ms', 1)}: "
        f"at {p.confidence:.0%} at least {_fmt(b['difference_low'], ' ms', 1)} and x{_fmt(b['ratio_low'], digits=2)} "
        f"slower (margins {p.latency_margin_ms:g} ms and x{1 + p.latency_margin_ratio:g}), and at least "
        f"{_fmt(b['challenger_low'], ' ms', 1)} against the budget {p.p99_budget_ms:g} ms"
    ]


def _quality(
    window: list[Record], p: CanaryParams, require_feedback: bool
) -> tuple[dict[str, int], dict[str, Any] | None, list[str], list[str]]:
    """Online quality from feedback: (labeled per variant, the bootstrap comparison or None, reasons, notes)."""
    ids, arms = labeled_arms(window)
    labeled = {v: len(arms[v].scores) for v in VARIANTS}
    if min(labeled.values()) < p.min_labeled:
        why = (
            f"labeled predictions champion {labeled[CHAMPION]}, challenger {labeled[CHALLENGER]}: "
            f"below the minimum {p.min_labeled} for judging online quality"
        )
        if require_feedback:
            return labeled, None, [f"online ROC AUC cannot be judged: {why}"], []
        return labeled, None, [], [f"online ROC AUC not judged: {why}"]
    quality = bootstrap_difference(arms, len(ids), p.bootstrap, p.confidence, p.seed)
    auc, bound = quality["roc_auc"], -p.max_auc_drop
    if auc["ci_low"] > bound:
        return labeled, quality, [], []
    reason = (
        f"online ROC AUC challenger - champion {_fmt(auc['difference'])} "
        f"({_fmt(auc[CHALLENGER])} vs {_fmt(auc[CHAMPION])}): the {p.confidence:.0%} CI's "
        f"lower bound {_fmt(auc['ci_low'])} is not above {bound:.3f}"
    )
    return labeled, quality, [reason], []


THRESHOLDS = (
    "min_samples",
    "min_labeled",
    "error_rate_margin",
    "p99_budget_ms",
    "latency_margin_ms",
    "latency_margin_ratio",
    "max_psi",
    "max_auc_drop",
    "confidence",
    "bootstrap",
    "seed",
)


def judge(
    window: Iterable[Record],
    params: CanaryParams,
    baseline: Iterable[Record] | None = None,
    require_feedback: bool = False,
) -> Verdict:
    """Pass or fail the challenger on one window of log records. Pure.

    `baseline`: champion records from elsewhere (e.g. the previous step's window; its
    feedback too) added to the champion's side, for a step at 100% challenger where the window has no champion
    traffic in split mode. Without labels (or with fewer than `min_labeled` labeled
    predictions in a variant) the ROC AUC check is not made and a note says so, unless
    `require_feedback`, which makes that a failure.
    """
    window = list(window)
    if baseline is not None:
        window += [r for r in baseline if is_feedback(r) or (is_prediction(r) and r["variant"] == CHAMPION)]
    p = params
    stats = variant_stats(window)
    champ, chall = stats[CHAMPION], stats[CHALLENGER]
    bounds, latency = _latency_reasons(champ, chall, p)
    errors_test, errors = _error_reasons(champ, chall, p)
    score_psi = psi(champ["scores"], chall["scores"])
    cannot = _sample_reasons(stats, p) + _champion_reasons(champ, p)
    drift = [f"score PSI (challenger vs champion) {_fmt(score_psi)} exceeds {p.max_psi:.3f}"]
    # (no scores on a side: already a sample reason; a NaN is not a drift)
    drift = [] if score_psi <= p.max_psi or (math.isnan(score_psi) and cannot) else drift
    labeled, quality, online, notes = _quality(window, p, require_feedback)
    worse = errors + latency + drift + online
    reasons = cannot + worse
    per_variant = {
        v: {k: val for k, val in stats[v].items() if k not in ("scores", "latencies")}
        | {"labeled": labeled[v], "p99_low_ms": bounds[f"{v}_low"]}
        for v in VARIANTS
    }
    metrics = {
        **per_variant,
        "p99_ratio": chall["p99_ms"] / champ["p99_ms"] if champ["p99_ms"] and champ["p99_ms"] > 0 else float("nan"),
        "latency": bounds,
        "error_rate_test": errors_test,
        "psi": score_psi,
        "psi_bins": PSI_BINS,
        "quality": quality,
        "thresholds": {k: getattr(p, k) for k in THRESHOLDS},
        "notes": notes,
    }
    outcome = CANNOT_JUDGE if cannot else CHALLENGER_WORSE if worse else PASS
    return Verdict(
        passed=not reasons,
        reasons=reasons,
        metrics=json_safe(metrics),
        outcome=outcome,
        champion_failing=bool(_champion_reasons(champ, p)),
    )
