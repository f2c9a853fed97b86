"""Serving drift: how soon a shift in served traffic is caught, and how often unshifted traffic is taken
for one, with the monitor_serving detector (tasks/monitoring/serving_drift.py) at params.yaml's
`monitoring.drift` settings, on a replayed log of the emails demo, no Airflow: each hourly run is the
detector called on the window of the hour before it.

The world: a logistic regression trained on a seeded 2/3 of the emails (its training data version, the
reference); the other third is the served traffic, replayed at `RATE` rows an hour (Poisson, drawn with
replacement), each row scored by the model (no skew: the served and the offline scores agree).

Records:
- `drift_detect_hours`: `SHIFTS` shifts planted at random times (uniform over a day; each of the
  `SHIFT_KINDS` in turn); from its time on, every served row is shifted. Hours from the shift to the end
  of the first hourly run that flags it: that run's alert and its `sluice_serving_drift` event, on which
  nightly_pipeline is scheduled (the retraining trigger). The worst case over the shifts (goal <= 1.25).
  Beside it, the same shifts with the nightly cron alone (02:00 UTC): the hours until the next run.
- `drift_false_alerts_week`: alerts over 168 hourly runs of unshifted replay, every feature and both
  classes' scores tested each run (goal 0). Beside it, the same windows by an uncorrected rule (a test
  flags at p < family_alpha, no Bonferroni over features x runs, no effect size).
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable

import numpy as np
import pandas as pd

from bench.record import Record

RATE = 600  # served rows an hour
SHIFTS = 48
SEED = 11
RUN_HOUR = 2  # nightly_pipeline's cron: 02:00 UTC


def _longer(df: pd.DataFrame) -> pd.DataFrame:
    out = df.copy()
    out["num_char"] = out["num_char"] * 3
    out["line_breaks"] = out["line_breaks"] * 3
    return out


def _html(df: pd.DataFrame) -> pd.DataFrame:
    out = df.copy()
    out["format"] = 1
    return out


def _numbers(df: pd.DataFrame) -> pd.DataFrame:
    out = df.copy()
    out["number"] = "big"
    return out


# Planted shifts: longer emails (x3 characters and line breaks); every email HTML; every email with a big number.
SHIFT_KINDS: dict[str, Callable[[pd.DataFrame], pd.DataFrame]] = {"longer": _longer, "html": _html, "numbers": _numbers}


class World:
    def __init__(self, seed: int = SEED):
        from bench.canary import fit_champion
        from tasks.core.params import load_params
        from tasks.datasets import load_dataset

        self.params = load_params().monitoring.drift
        self.ds = load_dataset("tasks.plugins.emails")
        src = self.ds.load_source()
        order = np.random.default_rng(seed).permutation(len(src))
        cut = len(src) * 2 // 3
        train = src.iloc[order[:cut]].reset_index(drop=True)
        self.traffic = src.iloc[order[cut:]].drop(columns=[self.ds.GOLD_COLUMN]).reset_index(drop=True)
        self.w, self.b = fit_champion(self.ds.featurize(train), train[self.ds.GOLD_COLUMN].to_numpy())
        from tasks.monitoring.serving_drift import sample_reference

        self.reference = sample_reference(train.drop(columns=[self.ds.GOLD_COLUMN]), self.params)
        self.rng = np.random.default_rng(seed + 1)

    def score(self, df: pd.DataFrame) -> np.ndarray:
        z = self.ds.featurize(df).astype(np.float64) @ self.w + self.b
        return 1.0 / (1.0 + np.exp(-z))

    def window(self, start: float, end: float, shift_at: float | None, kind: str | None) -> pd.DataFrame:
        """Served rows of [start, end) hours: Poisson(RATE x hours) rows at uniform times, the ones at or
        after `shift_at` shifted by `kind`; with the served score and time columns the detector reads."""
        n = int(self.rng.poisson(RATE * (end - start)))
        rows = self.traffic.iloc[self.rng.integers(0, len(self.traffic), n)].reset_index(drop=True)
        ts = np.sort(self.rng.uniform(start, end, n))
        if shift_at is not None and kind is not None:
            late = ts >= shift_at
            if late.any():
                rows = pd.concat([rows[~late], SHIFT_KINDS[kind](rows[late])]).reset_index(drop=True)
        rows["__score"] = self.score(rows)
        rows["__ts"] = ts * 3600.0
        return rows

    def judge(self, served: pd.DataFrame, end: float) -> Any:
        from tasks.monitoring.serving_drift import judge

        return judge(served, self.reference, self.ds.featurize, list(self.ds.FEATURE_NAMES), self.params,
                     "model-v1", "data-v1", self.score, end)  # fmt: skip


def hours_to_next_cron(t: float, hour: int = RUN_HOUR) -> float:
    """Hours from `t` (hours since a midnight UTC) to the next `hour`:00 (the nightly cron)."""
    return (hour - t) % 24.0 or 24.0


def detect(world: World, shifts: int = SHIFTS, max_runs: int = 6) -> dict[str, Any]:
    """Each shift at a random time of a day: the hourly runs after it until one flags it."""
    times = np.random.default_rng(SEED + 2).uniform(0.0, 24.0, shifts)
    kinds = list(SHIFT_KINDS)
    per = []
    for i, t in enumerate(times):
        kind = kinds[i % len(kinds)]
        run_at, caught, seconds = math.floor(t) + 1, None, 0.0
        for _ in range(max_runs):
            window = world.window(run_at - world.params.window_h, run_at, t, kind)
            t0 = time.perf_counter()
            verdict = world.judge(window, run_at * 3600.0)
            seconds = time.perf_counter() - t0
            if verdict.flagged:
                caught = run_at + seconds / 3600.0 - t  # the run's own time: its alert and event come at its end
                break
            run_at += 1
        per.append({"shift_at_h": round(float(t), 4), "kind": kind, "hours": caught, "run_s": round(seconds, 3),
                    "cron_only_hours": hours_to_next_cron(float(t)),
                    "drifted": [f.test for f in verdict.drifted] if caught is not None else []})  # fmt: skip
    return {"per_shift": per}


def week(world: World, runs: int = 168) -> dict[str, Any]:
    """`runs` hourly windows of unshifted replay: runs that flag, and runs an uncorrected rule would flag."""
    alerts, naive, tests, flagged_tests = 0, 0, 0, []
    for h in range(runs):
        verdict = world.judge(world.window(h, h + 1, None, None), (h + 1) * 3600.0)
        tests += len(verdict.findings)
        alerts += verdict.flagged
        naive += any(f.p_value < world.params.family_alpha for f in verdict.findings)
        flagged_tests += [f"{h}:{f.test}" for f in verdict.drifted]
    return {"runs": runs, "alerts": alerts, "uncorrected_alerts": naive, "tests": tests, "flagged": flagged_tests}


def run() -> list[Record]:
    world = World()
    p = world.params
    rules = {k: getattr(p, k) for k in ("window_h", "tails", "family_alpha", "horizon_runs", "min_psi", "psi_bins",
                                         "reference_rows", "skew_tolerance", "skew_max_share")}  # fmt: skip
    d = detect(world)
    caught = [s["hours"] for s in d["per_shift"] if s["hours"] is not None]
    missed = len(d["per_shift"]) - len(caught)
    worst = max(caught) if caught and not missed else float("inf")
    cron_worst = max(s["cron_only_hours"] for s in d["per_shift"])
    detect_details = {
        "rate_rows_per_hour": RATE,
        "shifts": len(d["per_shift"]),
        "missed": missed,
        "mean_hours": float(np.mean(caught)) if caught else None,
        "cron_only_worst_hours": cron_worst,
        "worst_vs_cron_only": worst / cron_worst,
        "rules": rules,
        "per_shift": d["per_shift"],
    }
    w = week(world)
    week_details = {"rate_rows_per_hour": RATE, **w, "uncorrected_per_test_alpha": p.family_alpha, "rules": rules}
    return [
        Record("drift_detect_hours", worst, "hours", "<= 1.25", detect_details),
        Record("drift_false_alerts_week", float(w["alerts"]), "alerts", "<= 0.0", week_details),
    ]


if __name__ == "__main__":
    for r in run():
        print({k: v for k, v in r.to_dict().items() if k != "details"})
        print({k: v for k, v in r.details.items() if k not in ("per_shift", "flagged")})
