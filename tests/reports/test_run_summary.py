"""The run summary (the report step) marks the run's alerts and states its cost from the store."""

from __future__ import annotations

from tasks.core.context import StepContext
from tasks.monitoring.store import MetricsStore
from tasks.report import report
from tasks.reports.run_summary import monitoring_lines
from tests.monitoring.steps_for_tests import canary_work, labeling_work


def test_the_report_marks_alerts_and_the_runs_cost(settings):
    labeling_work.run(StepContext.create("run-1", settings), lambda n: None, seconds="0.1")
    canary_work.run(StepContext.create("run-1", settings), lambda n: None, p99="80")
    rec = report.run(StepContext.create("run-1", settings), lambda n: None, failed_steps="")
    text = open(rec.summary).read()
    assert "  ALERT warning  p99_latency [canary_analysis]: p99 latency 80.0 ms at 100%:challenger" in text
    assert "labor avoided 35.60" in text  # 445 weak labels x 0.08
    run = MetricsStore.open(settings).run("run-1")
    assert run["outcome"] == rec.outcome and run["alerts"] == 1


def test_monitoring_lines_without_alerts_and_with_an_unreadable_store():
    cost = {"total": 0.5, "compute": 0.5, "labor": 0.0, "avoided": 1.0, "waste": 0.0}
    lines = monitoring_lines({"alerts": [], "cost": cost, "currency": "USD", "tasks": 3})
    assert lines[0] == "  alerts         none" and lines[1].startswith("  cost           USD 0.5000 over 3 tasks")
    assert monitoring_lines({"error": "OperationalError: disk I/O error"}) == [
        "  monitoring     store not readable: OperationalError: disk I/O error"
    ]
    assert monitoring_lines(None) == []
