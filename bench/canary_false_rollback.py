"""Healthy challengers under load: how often does the canary roll back a model that is not worse?

The canary world of bench/canary.py (a real model server, the demo's gold rows, the small canary
steps: 25% then 100%, 150 requests an attempt, a failing step measured again once) with `CHALLENGERS`
healthy challengers: the champion's logistic regression refitted on a bootstrap resample of its
training rows (seed i), the same model retrained with another seed. While every canary runs,
`LOAD_THREADS` background clients post /v1/predict at `LOAD_RATE` requests/s each to the same server
(the loaded machine of the issue). Each challenger is judged by `run_canary` with params.yaml's
rules, and each of its attempts is also judged by the rules the canary had before (a control arm on
the same windows: p99 over max_p99_ms 250 or over 3.0 x the champion's, error rate over 0.01, no
re-measure; PSI and online AUC as now).

Records:
- `canary_false_rollback_rate`: the share of healthy challengers rolled back (goal 0; the 95% upper
  bound, Clopper-Pearson, in the details with each check's false-alarm rate over all attempts);
- `canary_false_rollback_rate_before`: the same share by the earlier rules (reported beside it).

The planted bad challengers stay caught at their first step: bench/canary.py canary_detect_requests.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.canary import ARTIFACT, Load, build_world, fit_champion, gold_bodies, labeled_rows, lr_onnx
from bench.record import Record

CHALLENGERS = 30
LOAD_THREADS, LOAD_RATE = 2, 50.0
OLD = {"max_p99_ms": 250.0, "max_p99_ratio": 3.0, "max_error_rate": 0.01}  # the rules before this bench
CHECKS = {
    "samples": "below the minimum sample",
    "errors": "error rate",
    "latency": "p99",
    "psi": "score PSI",
    "online_auc": "online ROC AUC",
}


def upper_bound(failures: int, n: int, confidence: float = 0.95) -> float:
    """One-sided Clopper-Pearson upper bound of a rate from `failures` in `n` (3/n-ish at 0)."""
    from scipy.stats import beta

    return 1.0 if failures >= n else float(beta.ppf(confidence, failures + 1, n - failures))


def old_rules_fail(metrics: dict[str, Any], reasons: list[str]) -> bool:
    """The earlier rules on one attempt's window: its own PSI, AUC and sample reasons, plus the old
    latency and error-rate thresholds on the window's figures."""
    champ, chall = metrics.get("champion") or {}, metrics.get("challenger") or {}
    p99c, p99k = champ.get("p99_ms") or 0.0, chall.get("p99_ms") or 0.0
    latency = p99k > OLD["max_p99_ms"] or (p99c > 0 and p99k / p99c > OLD["max_p99_ratio"])
    errors = (chall.get("error_rate") or 0.0) > OLD["max_error_rate"]
    kept = [r for r in reasons if CHECKS["psi"] in r or CHECKS["online_auc"] in r or CHECKS["samples"] in r]
    return latency or errors or bool(kept)


def healthy_challengers(world: Any, n: int) -> list[str]:
    """`n` refits of the champion on bootstrap resamples of its training rows, registered."""
    (tx, ty), _ = labeled_rows(world.settings, world.params)
    versions = []
    for i in range(n):
        idx = np.random.default_rng(1000 + i).integers(0, len(ty), len(ty))
        w, b = fit_champion(tx[idx], ty[idx])
        path = lr_onnx(world.root / "models" / f"healthy-{i}" / ARTIFACT, w, b, name=f"healthy{i}")
        versions.append(
            world.registry.register_model(f"bench-healthy-{i}", {ARTIFACT: path}, {"data_version": "data-v1"})[
                "model_version"
            ]
        )
    return versions


def judge_all(world: Any, versions: list[str]) -> dict[str, Any]:
    """Every healthy challenger through the canary under background load: verdicts, per-check alarms."""
    rolled, rolled_before, alarms, attempts, per = 0, 0, dict.fromkeys(CHECKS, 0), 0, []
    with Load(world.url, gold_bodies(world), threads=LOAD_THREADS, rate=LOAD_RATE) as load:
        t0 = time.monotonic()
        for i, version in enumerate(versions):
            world.versions[f"healthy-{i}"] = version
            rollout = world.canary(f"healthy-{i}")
            rolled += not rollout.passed
            first_attempts = [s for s in rollout.steps if s.attempt == 1]
            rolled_before += any(old_rules_fail(s.metrics, s.reasons) for s in first_attempts)
            for s in rollout.steps:
                attempts += 1
                for check, text in CHECKS.items():
                    alarms[check] += any(text in r for r in s.reasons)
            per.append({"version": version, "passed": rollout.passed, "attempts": len(rollout.steps),
                        "reasons": rollout.reasons})  # fmt: skip
            print(f"[bench] healthy challenger {i + 1}/{len(versions)}: {'pass' if rollout.passed else 'ROLLED BACK'} "
                  f"({len(rollout.steps)} attempts) [{time.monotonic() - t0:.0f} s]", flush=True)  # fmt: skip
        load_phase = load.phase(0, float("inf"))
    return {"rolled": rolled, "rolled_before": rolled_before, "alarms": alarms, "attempts": attempts,
            "per_challenger": per, "load": load_phase}  # fmt: skip


def run(challengers: int = CHALLENGERS) -> list[Record]:
    with tempfile.TemporaryDirectory(dir=Path.home()) as tmp:
        world = build_world(Path(tmp), cases=())
        try:
            out = judge_all(world, healthy_challengers(world, challengers))
        finally:
            world.stop()
    n, c = challengers, world.params.canary
    details = {
        "challengers": n,
        "load": {"threads": LOAD_THREADS, "rate_per_thread": LOAD_RATE, **out["load"]},
        "upper_bound_95": upper_bound(out["rolled"], n),
        "false_alarm_rate_per_check": {k: v / max(out["attempts"], 1) for k, v in out["alarms"].items()},
        "attempts": out["attempts"],
        "rules": {k: getattr(c, k) for k in ("p99_budget_ms", "latency_margin_ms", "latency_margin_ratio",
                                              "error_rate_margin", "failures_before_rollback", "confidence")},
        "per_challenger": out["per_challenger"],
    }  # fmt: skip
    before = {**details, "rules": OLD, "upper_bound_95": upper_bound(out["rolled_before"], n)}
    return [
        Record("canary_false_rollback_rate", out["rolled"] / n, "ratio", "<= 0.0", details),
        Record("canary_false_rollback_rate_before", out["rolled_before"] / n, "ratio", "<= 0.0", before),
    ]


if __name__ == "__main__":
    for r in run():
        print({k: v for k, v in r.to_dict().items() if k != "details"}, r.details["upper_bound_95"])
