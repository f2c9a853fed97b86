"""Serving drift and skew: what the model servers saw in a window against what the serving model was
trained on (the `monitor_serving` DAG, hourly by default; params.yaml `monitoring.drift`).

For each model version that served /v1/predict requests in the window (the shared prediction log,
tasks/serving/predlog.py: each record has the raw input row, the model version and the served score):

- **feature drift**: every feature of the dataset plug-in's `featurize`, served rows against a seeded
  sample of the rows of the model's training data version (its lineage in the registry): a two-sample
  Kolmogorov-Smirnov test and the population stability index (PSI, bins at the reference's deciles);
- **score drift, per class**: the served scores of the rows the model puts in each class against the
  model's own scores of its training rows in that class (the same two statistics);
- **skew**: the served score of each row against the score the same model file gives offline for the
  same raw row through `featurize`: rows that differ by more than `skew_tolerance` mean the serving
  path computes other features (or runs another model) than the offline one.

Each run tests the whole window and its latest parts (`tails`: the last half and the last quarter by
default), so a shift that began late in the window is judged on a part it fills rather than diluted in
the whole hour: it is caught at the first run after it unless it began in the last quarter-hour.

Many tests every hour: each run makes (features + 2 classes) x tails tests per model version, and
`horizon_runs` runs make a horizon (a week of hourly runs by default). A test flags drift only when
both hold: its KS p-value is under family_alpha / (tests x horizon_runs) (Bonferroni over every test
of the horizon: the chance of any false alert in a week of unshifted traffic is at most family_alpha),
and its PSI reaches `min_psi` (an effect size: in heavy traffic a tiny, harmless shift is significant).
Skew is not a statistical test (the same row, the same model): a share of skewed rows over
`skew_max_share` flags it.

Bad input: no prediction with an input in the window (an empty log, a quiet hour) gives a verdict
`no_traffic` naming the log and the window; chunks cut short are skipped by the reader and named in
the verdict; a model version with fewer than `min_rows` rows in the window is listed as not judged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import numpy as np
import pandas as pd

from tasks.core.params import DriftParams

Scorer = Callable[[pd.DataFrame], np.ndarray]
CLASS_THRESHOLD = 0.5  # a score at or over it is class 1 (the server's and the evaluation's threshold)


def served_rows(records: Iterable[dict[str, Any]], start: float, end: float) -> dict[str, pd.DataFrame]:
    """Per model version, the raw rows /v1/predict served with `start <= ts < end` (not shadow, not
    failed), with the served score in column `__score` and the record time in `__ts`."""
    by_version: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        if r.get("kind") != "prediction" or r.get("shadow") or "error" in r or r.get("endpoint") != "predict":
            continue
        ts = r.get("ts")
        if ts is None or not (start <= ts < end) or not isinstance(r.get("input"), dict):
            continue
        by_version.setdefault(r["model_version"], []).append({**r["input"], "__score": r["score"], "__ts": ts})
    return {v: pd.DataFrame(rows) for v, rows in by_version.items()}


def predicted(scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the predicted class, the score compared within it) per row: binary, score >= CLASS_THRESHOLD and
    the score itself; K classes ([n, K]), the most probable class and its probability."""
    if scores.ndim == 1:
        return (scores >= CLASS_THRESHOLD).astype(int), scores
    return scores.argmax(axis=1), scores.max(axis=1)


def psi_quantile(expected: np.ndarray, actual: np.ndarray, bins: int) -> float:
    """PSI of `actual` against `expected` over bins cut at the expected's deciles (merged where a
    discrete feature repeats a value; a last bin over its maximum), with the canary's pseudo-count
    floor (tasks/canary/analysis.py psi)."""
    from tasks.canary.analysis import psi

    cuts = np.unique(np.quantile(expected, np.linspace(0.0, 1.0, bins + 1)[1:]))
    return psi(expected, actual, cuts=cuts)


def ks_pvalue(expected: np.ndarray, actual: np.ndarray) -> tuple[float, float]:
    """(KS statistic, p-value); asymptotic (exact is slow for thousands of rows; conservative on ties)."""
    from scipy.stats import ks_2samp

    res = ks_2samp(expected, actual, method="asymp")
    return float(res.statistic), float(res.pvalue)


@dataclass
class Finding:
    test: str  # a feature name, or "score|class=c"
    tail: float  # the part of the window tested: its latest `tail` x window_h hours
    ks: float
    p_value: float
    psi: float
    rows: int
    reference_rows: int
    drifted: bool


@dataclass
class VersionVerdict:
    model_version: str
    data_version: str
    rows: int
    tests: int
    alpha_per_test: float
    findings: list[Finding] = field(default_factory=list)
    skewed_rows: int = 0
    max_skew: float = 0.0
    skew: bool = False

    @property
    def drifted(self) -> list[Finding]:
        return [f for f in self.findings if f.drifted]

    @property
    def flagged(self) -> bool:
        return bool(self.drifted) or self.skew


def tests_per_run(p: DriftParams, features: int, classes: int = 2) -> int:
    """Every feature and the score in each of the classes, on the window and each of its tails."""
    return (features + classes) * len(p.tails)


def alpha_per_test(p: DriftParams, tests: int) -> float:
    """Bonferroni over every test of the horizon: family_alpha / (tests x horizon_runs)."""
    return p.family_alpha / (max(tests, 1) * p.horizon_runs)


def compare(name: str, tail: float, ref: np.ndarray, now: np.ndarray, p: DriftParams, alpha: float) -> Finding:
    """One test: KS p-value under `alpha` and PSI at least min_psi."""
    if ref.size < 2 or now.size < 2:  # e.g. no served row in a class: nothing to compare, said so
        return Finding(name, tail, float("nan"), 1.0, float("nan"), int(now.size), int(ref.size), False)
    if np.all(ref == ref[0]) and np.all(now == now[0]) and ref[0] == now[0]:
        ks, pv, value = 0.0, 1.0, 0.0  # a constant feature on both sides
    else:
        ks, pv = ks_pvalue(ref, now)
        value = psi_quantile(ref, now, p.psi_bins)
    return Finding(name, tail, ks, pv, value, int(now.size), int(ref.size), bool(pv < alpha and value >= p.min_psi))


def judge(
    served: pd.DataFrame,
    reference: pd.DataFrame,
    featurize: Callable[[pd.DataFrame], np.ndarray],
    feature_names: list[str],
    p: DriftParams,
    model_version: str,
    data_version: str,
    scorer: Scorer,
    end: float | None = None,
) -> VersionVerdict:
    """One model version's window (ending at `end`, epoch s; default: its last row) against its training
    rows (`reference`, raw rows): the window and each tail of it (p.tails) that holds min_rows rows. Pure
    apart from `scorer` (the model file's offline score of raw rows)."""
    xs, xr = featurize(served), featurize(reference)
    if xs.shape[1] != len(feature_names) or xr.shape[1] != len(feature_names):
        raise ValueError(
            f"featurize gave {xs.shape[1]} / {xr.shape[1]} columns, FEATURE_NAMES has {len(feature_names)}"
        )
    ref_scores = np.asarray(scorer(reference), dtype=np.float64)
    offline = np.asarray(scorer(served), dtype=np.float64)
    scores = np.asarray(served["__score"].tolist(), dtype=np.float64)  # [n], or K probabilities a row [n, K]
    ts = served["__ts"].to_numpy(dtype=np.float64)
    end = float(ts.max()) if end is None else end
    tests = tests_per_run(p, len(feature_names), 2 if scores.ndim == 1 else scores.shape[1])
    alpha = alpha_per_test(p, tests)
    out = VersionVerdict(model_version, data_version, len(served), tests, alpha)
    ref_class, ref_value = predicted(ref_scores)
    served_class, served_value = predicted(scores)
    classes = range(2 if scores.ndim == 1 else scores.shape[1])
    for tail in p.tails:
        keep = ts >= end - tail * p.window_h * 3600.0
        if tail < 1.0 and keep.sum() < p.min_rows:
            continue  # too few rows in this tail to judge it (the whole window was judged)
        x, cls, value = xs[keep], served_class[keep], served_value[keep]
        for j, name in enumerate(feature_names):
            out.findings.append(compare(name, tail, xr[:, j], x[:, j], p, alpha))
        for c in classes:
            out.findings.append(compare(f"score|class={c}", tail, ref_value[ref_class == c], value[cls == c], p, alpha))
    diff = np.abs(offline - scores).reshape(len(scores), -1).max(axis=1) if len(scores) else np.zeros(0)
    out.skewed_rows = int(np.sum(diff > p.skew_tolerance))
    out.max_skew = float(diff.max()) if diff.size else 0.0
    out.skew = out.skewed_rows > p.skew_max_share * len(served)
    return out


def sample_reference(rows: pd.DataFrame, p: DriftParams) -> pd.DataFrame:
    """A seeded sample of at most `reference_rows` training rows (all of them when fewer)."""
    if len(rows) <= p.reference_rows:
        return rows.reset_index(drop=True)
    return rows.sample(n=p.reference_rows, random_state=p.seed).reset_index(drop=True)


def _tail(tail: float) -> str:
    return "" if tail >= 1.0 else f" in the window's last {tail:g}"


def cause_text(v: VersionVerdict, top: int = 3) -> str:
    """One line: what drifted or skewed for this model version."""
    parts = []
    widest: dict[str, Finding] = {}  # per drifted test, on the widest part of the window where it drifted
    for f in v.drifted:
        if f.test not in widest or f.tail > widest[f.test].tail:
            widest[f.test] = f
    worst = sorted(widest.values(), key=lambda f: -f.psi)
    if worst:
        shown = ", ".join(f"{f.test}{_tail(f.tail)} (PSI {f.psi:.2f}, p {f.p_value:.1e})" for f in worst[:top])
        more = f" and {len(worst) - top} more" if len(worst) > top else ""
        parts.append(f"{len(worst)} drifted ({len(v.drifted)} of {v.tests} tests): {shown}{more}")
    if v.skew:
        parts.append(f"skew: {v.skewed_rows} of {v.rows} rows score differently offline (max {v.max_skew:.3g})")
    return f"{v.model_version} (trained on {v.data_version}, {v.rows} rows): " + "; ".join(parts)


# ---- one window of the shared prediction log ------------------------------------------------------
def iso(ts: float) -> str:
    from datetime import datetime, timezone

    return datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="seconds")


def version_summary(v: VersionVerdict) -> dict[str, Any]:
    """A judged version as the step's record and the report keep it."""
    finite = [f.psi for f in v.findings if np.isfinite(f.psi)]
    return {
        "model_version": v.model_version,
        "data_version": v.data_version,
        "rows": v.rows,
        "tests": v.tests,
        "alpha_per_test": v.alpha_per_test,
        "worst_psi": max(finite) if finite else None,
        "drifted": [
            {"test": f.test, "tail": f.tail, "psi": f.psi, "p_value": f.p_value, "ks": f.ks, "rows": f.rows}
            for f in v.drifted
        ],
        "skewed_rows": v.skewed_rows,
        "max_skew": v.max_skew,
        "skew": v.skew,
        "flagged": v.flagged,
    }


def onnx_scorer(path: Any, ds: Any) -> Scorer:
    """The offline score of raw rows of dataset plug-in `ds` by a served model file (ONNX, as the
    evaluation reads it)."""
    from tasks.evaluation.scoring import predict_onnx

    return lambda df: predict_onnx(path, df, ds)


def judge_window(settings: Any, params: Any, ds: Any, end: float, artifact_dir: Any, run_id: str) -> dict[str, Any]:
    """The monitor_serving verdict on [end - window_h, end): the fields of MonitorServingRecord, and
    `verdicts` (every finding, for the report file). Reads the prediction log and the registry; writes
    only model files it fetches into `artifact_dir`."""
    from pathlib import Path

    from tasks.registry import Registry
    from tasks.registry.models import served_artifact
    from tasks.serving.paths import prediction_log
    from tasks.serving.predlog import read_log

    p: DriftParams = params.monitoring.drift
    start = end - p.window_h * 3600.0
    store = prediction_log(settings)
    cut: list[str] = []
    windows = served_rows(read_log(store, start, skipped=cut), start, end)
    out: dict[str, Any] = {
        "window_start": iso(start),
        "window_end": iso(end),
        "log": store.uri,
        "rows": sum(len(df) for df in windows.values()),
        "cut_short": cut,
        "versions": [],
        "not_judged": [],
        "verdicts": [],
    }
    skipped = f"; {len(cut)} chunk(s) cut short were skipped: {', '.join(cut)}" if cut else ""
    if not windows:
        out["status"] = "no_traffic"
        out["message"] = (
            f"no /v1/predict prediction with its input in the prediction log {store.uri} between "
            f"{out['window_start']} and {out['window_end']}: nothing to compare{skipped}"
        )
        return out
    registry = Registry(settings)
    for version, served in sorted(windows.items()):
        if len(served) < p.min_rows:
            out["not_judged"].append(f"{version}: {len(served)} rows in the window (min_rows {p.min_rows})")
            continue
        info = registry.model_version_info(version)
        data_version = info.get("data_version")
        if not data_version:
            raise ValueError(f"{version} records no training data version in its lineage: cannot judge its drift")
        reference = sample_reference(registry.read_data_version(data_version), p)
        artifact = served_artifact(registry, version)
        path = Path(artifact_dir) / version / artifact
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(registry.read_model_artifact(version, artifact))
        verdict = judge(served, reference, ds.featurize, list(ds.FEATURE_NAMES), p, version, data_version,
                        onnx_scorer(path, ds), end)  # fmt: skip
        out["versions"].append(version_summary(verdict))
        out["verdicts"].append(verdict)
    flagged = [v for v in out["verdicts"] if v.flagged]
    out["status"] = "judged"
    out["drift"] = bool(flagged)
    judged = ", ".join(f"{v.model_version} ({v.rows} rows)" for v in out["verdicts"]) or "none"
    if flagged:
        causes = [cause_text(v) for v in flagged]
        out["cause"] = {
            "event": "serving_drift",
            "run_id": run_id,
            "window_start": out["window_start"],
            "window_end": out["window_end"],
            "model_versions": [v.model_version for v in flagged],
            "data_versions": sorted({v.data_version for v in flagged}),
            "drifted": {v.model_version: sorted({f.test for f in v.drifted}) for v in flagged},
            "skew": {v.model_version: v.skewed_rows for v in flagged if v.skew},
            "why": "; ".join(causes),
        }
        out["alerts"] = [
            {
                "rule": "serving_drift",
                "severity": "warning",
                "message": f"serving drift in {out['window_start']} .. {out['window_end']}: {c}",
                "value": max((f.psi for f in v.drifted), default=float(v.skewed_rows)),
                "threshold": p.min_psi if v.drifted else p.skew_max_share * v.rows,
            }
            for v, c in zip(flagged, causes)
        ]
        out["message"] = "DRIFT: " + "; ".join(causes) + skipped
    else:
        out["message"] = f"no drift or skew: judged {judged}" + skipped
    if out["not_judged"]:
        out["message"] += "; not judged: " + "; ".join(out["not_judged"])
    return out
