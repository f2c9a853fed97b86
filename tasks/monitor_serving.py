"""monitor_serving: the served traffic of the last window against what its model was trained on.

Per model version that served /v1/predict in the window (the shared prediction log): feature drift
against its training data version, score drift per class, and skew between the served and the offline
score of the same rows (tasks/monitoring/serving_drift.py; params.yaml `monitoring.drift`). Drift or
skew raises a `serving_drift` alert (task log, metrics store, notifiers) and, in the monitor_serving
DAG, a `sluice_serving_drift` Asset event with the record's `cause` as its extra: the nightly pipeline
is scheduled on it. Writes runs/<run_id>/serving_drift.json (every test of the window).

    python -m tasks.monitor_serving [--window-end 2026-12-02T08:00:00+00:00]   # default: now

`drift_retrain` (nightly_pipeline, a drift-triggered run with no new batch): the current data version,
which the run's train step then trains on.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

from tasks.core.context import StepContext
from tasks.core.files import atomic_write_json, json_safe
from tasks.core.log import log
from tasks.core.records import DriftRetrainRecord, MonitorServingRecord
from tasks.runner import step


def _end(window_end: str | None) -> float:
    if not window_end:
        return datetime.now(timezone.utc).timestamp()
    try:
        t = datetime.fromisoformat(window_end)
    except ValueError:
        raise ValueError(f"monitor_serving: window_end must be an ISO time, got {window_end!r}") from None
    return (t if t.tzinfo else t.replace(tzinfo=timezone.utc)).timestamp()


@step(help={"window_end": "end of the window judged, ISO time (default: now); it spans monitoring.drift.window_h"})
def monitor_serving(ctx: StepContext, *, window_end: str | None = None) -> MonitorServingRecord:
    from dataclasses import asdict

    from tasks.monitoring.serving_drift import judge_window

    out = judge_window(ctx.settings, ctx.params, ctx.dataset, _end(window_end), ctx.run_dir / "models", ctx.run_id)
    verdicts = out.pop("verdicts")
    report = ctx.run_dir / "serving_drift.json"
    atomic_write_json(report, json_safe({**out, "findings": [asdict(v) for v in verdicts]}))
    log(f"monitor_serving: {out['message']}")
    return MonitorServingRecord(**out, report=str(report))


@step(help={"causes": "JSON list of the triggering sluice_serving_drift events' extras"})
def drift_retrain(ctx: StepContext, *, causes: str = "[]") -> DriftRetrainRecord:
    from tasks.registry import Registry

    found = json.loads(causes)
    if not isinstance(found, list) or not found:
        raise ValueError(f"drift_retrain needs the drift events that triggered the run, got {causes!r}")
    current = Registry(ctx.settings).state().get("current_data")
    if not current:
        raise ValueError("drift_retrain: the registry has no current data version to retrain on")
    log(f"drift-triggered run with no new batch: retraining on {current} ({len(found)} drift event(s))")
    return DriftRetrainRecord(data_version=current, causes=found)


if __name__ == "__main__":
    raise SystemExit(monitor_serving.main())
