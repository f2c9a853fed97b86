"""
### monitor_serving

Every hour (params.yaml `monitoring.drift.schedule`): the last `window_h` hours of /v1/predict traffic
in the shared prediction log against what the serving model was trained on. Per model version: each
feature's distribution against its training data version (KS test and PSI), its scores per class
against its own scores of those rows, and skew (the served score against the offline score of the same
raw row). Thresholds hold the chance of any false alert in a week of hourly runs under
`family_alpha` (Bonferroni), and need a PSI of at least `min_psi`: docs/monitoring.md.

Drift or skew: a `serving_drift` alert through the notifiers, and a `sluice_serving_drift` Asset event
whose extra says why; `nightly_pipeline` is scheduled on that asset as well as on its cron, so a
drifted hour retrains without waiting for 02:00 (with no new batch, on the current data version).

**Params**: `window_end` (ISO time; empty: now).
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import Param, dag, task

from tasks.core.assets import SERVING_DRIFT, SERVING_DRIFT_EVENTS  # airflow.sdk only
from tasks.core.schedules import cron  # airflow only


def _schedule() -> str:
    from tasks.core.params import load_params  # light: pydantic and PyYAML

    return load_params().monitoring.drift.schedule


@dag(
    dag_id="monitor_serving",
    schedule=cron(_schedule()),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 1, "retry_delay": timedelta(seconds=30), "owner": "sluice"},
    dagrun_timeout=timedelta(minutes=50),
    tags=["sluice", "monitoring"],
    doc_md=__doc__,
    params={
        "window_end": Param(
            None,
            type=["null", "string"],
            pattern=r"^\d{4}-\d{2}-\d{2}T[0-9:.]+([+-]\d{2}:\d{2}|Z)?$",
            description="End of the window judged (ISO time, UTC); empty: now.",
        ),
    },
)
def monitor_serving():
    @task(outlets=[SERVING_DRIFT_EVENTS])
    def monitor(**context):
        from tasks.runner import run_airflow_task

        r = run_airflow_task("tasks.monitor_serving", context, window_end=context["params"]["window_end"])
        if r.drift:
            context["outlet_events"][SERVING_DRIFT_EVENTS].add(SERVING_DRIFT, extra=r.cause)
        return r.status

    monitor()


monitor_serving()
