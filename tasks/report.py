"""report: the run summary (summary.json and summary.txt) from every step's record.

Runs on every branch: deployed, model rejected, batch quarantined, nothing to do,
or a failed step. The text is what `make run` prints at the end.
"""

from __future__ import annotations

from tasks.core.context import StepContext, load_records, load_refusals
from tasks.core.files import atomic_write_bytes, atomic_write_json
from tasks.core.log import log
from tasks.core.records import ReportRecord
from tasks.datasets import class_names
from tasks.registry import Registry
from tasks.reports.run_summary import build_summary, render_text, run_monitoring, trigger_summary
from tasks.runner import step


@step(
    help={
        "failed_steps": "comma-separated steps that failed in this run",
        "drift_causes": "JSON list: the extras of the sluice_serving_drift events that triggered the run",
    }
)
def report(ctx: StepContext, *, failed_steps: str = "", drift_causes: str = "[]") -> ReportRecord:
    import json

    run_dir = ctx.run_dir
    failed = [s for s in failed_steps.split(",") if s]
    records = load_records(run_dir)
    summary = build_summary(ctx.run_id, records, Registry(ctx.settings).state(), failed, load_refusals(run_dir))
    summary["classes"] = list(class_names(ctx.dataset))  # label k's name
    summary["trigger"] = trigger_summary(json.loads(drift_causes), records)
    summary["monitoring"] = run_monitoring(ctx.settings, ctx.params, ctx.run_id)  # alerts and cost so far
    text = render_text(summary)
    atomic_write_json(run_dir / "summary.json", summary)
    atomic_write_bytes(run_dir / "summary.txt", text.encode())
    log("run summary:\n" + text)
    from tasks.reports.html_report import write_report

    log(f"run report: {write_report(ctx.settings, ctx.run_id, summary)}")
    return ReportRecord(
        outcome=summary["outcome"],
        summary=str(run_dir / "summary.txt"),
        data_version=summary["data_version"],
        prod_model=summary["prod_model"],
    )


if __name__ == "__main__":
    raise SystemExit(report.main())
