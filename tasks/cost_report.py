"""cost_report: one UTC day of the cost ledger (the `daily_cost_report` DAG runs it every day).

Charges the day's storage (the registry's and the DVC remote's bytes now, at `cost.storage_gb_month`
/ 30 per day; one ledger line per store per day, replaced when the report runs again), then reads the
day's lines from the metrics store: the billed total (compute + storage + labor), the change from the
previous day, the biggest costs, the idle accelerator time (waste) and the manual labeling avoided.
Writes SLUICE_HOME/reports/cost-<day>.txt and .json; a day's cost over `monitoring.alerts.cost_jump_ratio`
x the previous day's raises a `cost_jump` alert (task log, store, notifiers).

    python -m tasks.cost_report [--day 2026-11-30]    # default: yesterday (UTC)
"""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone

from tasks.core.context import StepContext
from tasks.core.files import atomic_write_bytes, atomic_write_json
from tasks.core.log import log
from tasks.core.records import CostReportRecord
from tasks.runner import step


def storage_run_id(day: str) -> str:
    """The ledger-only run a day's storage lines belong to (one per day, whoever charges it)."""
    return f"storage__{day}"


def report_day(day: str | None, now: datetime | None = None) -> str:
    """The day asked for, checked; default: yesterday (UTC), the last whole day."""
    if day:
        try:
            return date.fromisoformat(day).isoformat()
        except ValueError:
            raise ValueError(f"cost_report: day must be YYYY-MM-DD, got {day!r}") from None
    return ((now or datetime.now(timezone.utc)).date() - timedelta(days=1)).isoformat()


@step(help={"day": "the UTC day to report, YYYY-MM-DD (default: yesterday)"})
def cost_report(ctx: StepContext, *, day: str | None = None) -> CostReportRecord:
    from tasks.monitoring import alerts as alerting
    from tasks.monitoring import ledger
    from tasks.monitoring.cost import storage_lines
    from tasks.monitoring.serving_window import day_summary, serving_lines
    from tasks.monitoring.store import STORAGE, MetricsStore, to_jsonable

    day = report_day(day)
    prices, rules = ctx.params.cost, ctx.params.monitoring.alerts
    store = MetricsStore.open(ctx.settings)
    sizes, notes = ledger.storage_bytes(ctx.settings)
    store.record_costs(storage_run_id(day), "storage", storage_lines(sizes, prices, day), kind=STORAGE)
    rows, prev_rows = store.costs(day=day), store.costs(day=ledger.previous_day(day))
    rep = ledger.day_report(day, rows, prev_rows, prices.currency)
    rep["storage_bytes"], rep["notes"] = sizes, notes
    rep["serving"] = day_summary(ctx.settings, ctx.params, day)
    jump = alerting.cost_jump(rep["total"], rep["previous_total"], rules.cost_jump_ratio, rules.min_cost_for_jump, day)
    raised = [to_jsonable(jump)] if jump else []
    rep["alerts"] = raised
    text = ledger.format_report(rep, [a["message"] for a in raised]) + serving_lines(rep["serving"])
    text += "".join(f"  note: {n}\n" for n in notes)
    folder = ctx.settings.layout.reports
    folder.mkdir(parents=True, exist_ok=True)
    txt, js = folder / f"cost-{day}.txt", folder / f"cost-{day}.json"
    atomic_write_json(js, rep)
    atomic_write_bytes(txt, text.encode())
    log("daily cost report:\n" + text)
    return CostReportRecord(
        day=day,
        currency=prices.currency,
        total=rep["total"],
        by_kind=rep["by_kind"],
        previous_day=rep["previous_day"],
        previous_total=rep["previous_total"],
        change=rep["change"],
        biggest=rep["biggest"],
        waste=rep["waste"],
        avoided=rep["avoided"],
        runs=len(rep["runs"]),
        alerts=raised,
        report_txt=str(txt),
        report_json=str(js),
        serving=rep["serving"],
    )


if __name__ == "__main__":
    raise SystemExit(cost_report.main())
