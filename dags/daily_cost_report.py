"""
### daily_cost_report

One UTC day of Sluice's cost ledger, every day at 00:30 UTC for the day before (also triggerable for
any day). It charges the day's storage (the registry's and the DVC remote's bytes, prorated from
`cost.storage_gb_month`), then reads the metrics store's ledger: the billed total (compute from each
task's measured duration x requested resources, storage, engineer time of incidents), the change from
the previous day, the biggest costs, idle accelerator time shown as waste, and the manual labeling that
weak labels avoided. Writes `SLUICE_HOME/reports/cost-<day>.txt` and `.json`; a jump over
`monitoring.alerts.cost_jump_ratio` x the previous day raises a `cost_jump` alert, delivered through the
notifiers in `monitoring.notifiers`. Prices: `params.yaml` `cost`; details: `docs/monitoring.md`.

**Params**: `day` (`YYYY-MM-DD`, UTC; empty: yesterday).

`POST /api/v2/dags/daily_cost_report/dagRuns {"logical_date": null, "conf": {"day": "2026-11-30"}}`
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import Param, dag, task

from tasks.core.schedules import cron  # airflow only


@dag(
    dag_id="daily_cost_report",
    schedule=cron("30 0 * * *"),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 1, "retry_delay": timedelta(seconds=30), "owner": "sluice"},
    dagrun_timeout=timedelta(hours=1),
    tags=["sluice", "cost"],
    doc_md=__doc__,
    params={
        "day": Param(
            None,
            type=["null", "string"],
            pattern=r"^\d{4}-\d{2}-\d{2}$",
            description="UTC day to report (YYYY-MM-DD); empty: yesterday.",
        ),
    },
)
def daily_cost_report():
    @task
    def cost_report(**context):
        from tasks.runner import run_airflow_task

        return run_airflow_task("tasks.cost_report", context, day=context["params"]["day"]).total

    cost_report()


daily_cost_report()
