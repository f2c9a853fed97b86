"""The ledger adds up: compute lines are measured durations x requested resources x prices, storage is
bytes x the daily price, a day's total is the sum of its runs, and the daily report says so. The store
is seeded through the real code path (declared steps run by Step.run and its monitoring hook)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from tasks.core.context import StepContext
from tasks.cost_report import cost_report, report_day, storage_run_id
from tasks.monitoring import ledger
from tasks.monitoring.cost import GB
from tasks.monitoring.store import CostLine, MetricsStore
from tests.monitoring.steps_for_tests import labeling_work, quarantine_work


def today() -> str:
    return datetime.now(timezone.utc).date().isoformat()


def seed_two_runs(settings) -> None:
    for run in ("run-a", "run-b"):
        labeling_work.run(StepContext.create(run, settings), lambda n: None, seconds="0.2")
    quarantine_work.run(StepContext.create("run-b", settings), lambda n: None, task_id="quarantine_raw")


def test_compute_lines_are_durations_times_requests_times_prices(settings):
    seed_two_runs(settings)
    store = MetricsStore.open(settings)
    prices = StepContext.create("x", settings).params.cost
    for t in store.tasks():
        lines = {c["item"]: c for c in store.costs(t["run_id"], kind="compute") if c["task"] == t["task"]}
        hours = t["seconds"] / 3600
        assert lines["cpu"]["amount"] == pytest.approx(hours * t["cpus"] * prices.cpu_hour)
        assert lines["memory"]["amount"] == pytest.approx(hours * t["memory_gb"] * prices.memory_gb_hour)
        assert "gpu" not in lines  # no accelerator here
    by_task = ledger.by_task(store.costs())
    assert set(by_task) == {("run-a", "weak_label"), ("run-b", "weak_label"), ("run-b", "quarantine_raw")}


def test_a_day_is_the_sum_of_its_runs_and_the_report_says_so(settings):
    seed_two_runs(settings)
    (settings.home / "registry").mkdir(parents=True, exist_ok=True)
    (settings.home / "registry" / "part.parquet").write_bytes(b"x" * 3_000_000)
    (settings.home / "dvc-remote").mkdir(parents=True, exist_ok=True)
    (settings.home / "dvc-remote" / "obj").write_bytes(b"y" * 1_000_000)
    store = MetricsStore.open(settings)
    runs_before = {r["run_id"]: r["cost"] for r in store.runs()}
    ctx = StepContext.create("report-1", settings)
    rec = cost_report.run(ctx, lambda n: None, day=today())
    prices = ctx.params.cost
    storage = {c["item"]: c for c in store.costs(storage_run_id(today()))}
    assert storage["storage:registry"]["quantity"] == pytest.approx(3_000_000 / GB)
    assert storage["storage:dvc_remote"]["amount"] == pytest.approx(1_000_000 / GB * prices.storage_gb_month / 30)
    storage_total = sum(c["amount"] for c in storage.values())
    assert rec.total == pytest.approx(sum(runs_before.values()) + storage_total)
    assert rec.by_kind["labor"] == pytest.approx(prices.engineer_hours_per_incident * prices.engineer_hour)
    assert rec.biggest[0]["task"] == "quarantine_raw"  # 45 USD of engineer time beats seconds of CPU
    assert rec.avoided == pytest.approx(2 * 445 * prices.manual_label) and rec.runs == 3
    assert rec.previous_total is None and rec.change is None
    text = open(rec.report_txt).read()
    assert f"Sluice daily cost report {today()}" in text and "quarantine_raw" in text
    assert json.load(open(rec.report_json))["total"] == pytest.approx(rec.total)
    # the report's own task is in the ledger now; running it again charges storage once, not twice
    again = cost_report.run(StepContext.create("report-2", settings), lambda n: None, day=today())
    assert len(store.costs(storage_run_id(today()))) == 2
    own = sum(c["amount"] for c in store.costs("report-1") if c["kind"] in ("compute", "storage", "labor"))
    assert again.total == pytest.approx(rec.total + own)
    assert ledger.by_day(store.costs())[today()] == pytest.approx(sum(ledger.by_run(store.costs(day=today())).values()))


def test_a_cost_jump_raises_an_alert(settings, capsys):
    seed_two_runs(settings)
    store = MetricsStore.open(settings)
    yesterday = (datetime.now(timezone.utc).date() - timedelta(days=1)).isoformat()
    store.record_costs("old-run", "train", [CostLine("compute", "cpu", 1.0, "cpu_hour", 0.04, 0.04, yesterday)])
    rec = cost_report.run(StepContext.create("report-1", settings), lambda n: None, day=today())
    assert rec.previous_total == pytest.approx(0.04) and rec.change == pytest.approx(rec.total - 0.04)
    (alert,) = store.alerts("report-1")
    assert alert["rule"] == "cost_jump" and alert["task"] == "cost_report"
    assert "ALERT warning cost_jump (cost_report)" in capsys.readouterr().err


def test_report_day_default_and_bad_day():
    assert report_day(None, datetime(2026, 12, 1, 0, 30, tzinfo=timezone.utc)) == "2026-11-30"
    with pytest.raises(ValueError, match="day must be YYYY-MM-DD"):
        report_day("yesterday")
