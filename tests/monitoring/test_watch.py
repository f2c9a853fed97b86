"""The monitoring hook in Step.run: usage, costs, hardware and record metrics in the store, idempotent,
failures recorded, and a broken store never failing the step."""

from __future__ import annotations

import pytest

from tasks.core.context import StepContext
from tasks.monitoring.cost import price_usage, totals
from tasks.monitoring.store import MetricsStore, TaskUsage
from tests.conftest import write_params
from tests.monitoring.steps_for_tests import failing_work, labeling_work, quarantine_work


def no_upstream(name):
    return None


def run_step(settings, the_step, run_id="run-1", task_id=None, **options):
    ctx = StepContext.create(run_id, settings)
    return ctx, the_step.run(ctx, no_upstream, task_id=task_id, **options)


def test_a_step_run_records_usage_costs_and_metrics(settings):
    ctx, rec = run_step(settings, labeling_work, seconds="1.2", children=1)
    store = MetricsStore.open(settings)
    (task,) = store.tasks("run-1")
    assert task["task"] == "weak_label" and task["state"] == "success" and task["backend"] == "local"
    assert 1.2 <= task["seconds"] < 30
    assert task["cpus"] >= 1 and 0 < task["memory_gb"] < 8  # peak RSS of the task's process tree
    # the ledger: compute = measured seconds x requested resources x prices; labor avoided = labels x price
    lines = store.costs("run-1")
    compute = [c for c in lines if c["kind"] == "compute"]
    prices = ctx.params.cost
    cpu = next(c for c in compute if c["item"] == "cpu")
    assert cpu["amount"] == pytest.approx(task["seconds"] / 3600 * task["cpus"] * prices.cpu_hour)
    (avoided,) = [c for c in lines if c["kind"] == "avoided"]
    assert avoided["quantity"] == rec.rows - rec.abstained_rows
    assert avoided["amount"] == pytest.approx(445 * prices.manual_label)
    assert store.runs()[0]["cost"] == pytest.approx(totals(lines)["total"])
    # metrics: the data layer from the record, the hardware layer from the sampler
    data = {(m["name"], m["subject"]): m["value"] for m in store.metrics("run-1", layer="data")}
    assert data[("coverage", "")] == 0.89 and data[("lf_coverage", "lf_b")] == 0.16
    assert ("lf_dev_accuracy", "lf_b") not in data  # a missing value is not recorded as a number
    hw = store.metrics("run-1", layer="hardware")
    series = [m["value"] for m in hw if m["name"] == "cpu_percent"]
    assert len(series) >= 1 and max(series) > 5  # the burning processes were seen (a loaded machine reads low)
    assert next(m for m in hw if m["name"] == "processes_max")["value"] >= 2
    (gpu,) = [m for m in hw if m["name"] == "gpu_available"]
    assert gpu["value"] == 0.0 and gpu["subject"].startswith("not available: NVML")


def test_a_rerun_replaces_the_tasks_rows(settings):
    run_step(settings, labeling_work, seconds="0.2")
    store = MetricsStore.open(settings)
    first = (len(store.metrics("run-1", layer="data")), len(store.costs("run-1")))
    run_step(settings, labeling_work, seconds="0.2")
    assert (len(store.metrics("run-1", layer="data")), len(store.costs("run-1"))) == first
    assert len(store.tasks("run-1")) == 1
    run_step(settings, labeling_work, task_id="weak_label_again", seconds="0.2")
    assert {t["task"] for t in store.tasks("run-1")} == {"weak_label", "weak_label_again"}


def test_a_failed_step_is_recorded_failed_and_still_raises(settings):
    with pytest.raises(RuntimeError, match="the LF module raised"):
        run_step(settings, failing_work)
    store = MetricsStore.open(settings)
    (task,) = store.tasks("run-1")
    assert task["state"] == "failed" and task["seconds"] > 0
    assert [c["item"] for c in store.costs("run-1")] == ["cpu", "memory"]  # a failed task cost money too


def test_an_incident_costs_engineer_time(settings):
    ctx, _ = run_step(settings, quarantine_work, task_id="quarantine_raw")
    (labor,) = MetricsStore.open(settings).costs("run-1", kind="labor")
    assert labor["item"] == "incident:quarantine:validate_raw"
    assert labor["amount"] == pytest.approx(ctx.params.cost.engineer_hours_per_incident * ctx.params.cost.engineer_hour)


def test_a_broken_store_never_fails_the_step(settings, capsys):
    settings.home.mkdir(parents=True)
    (settings.home / "monitoring").write_text("a file where the store's folder should be")
    _, rec = run_step(settings, labeling_work, seconds="0.1")
    assert rec.rows == 500
    assert "monitoring: task weak_label not recorded" in capsys.readouterr().err


def test_monitoring_off_records_nothing(settings, tmp_path, monkeypatch):
    params = tmp_path / "params.yaml"
    write_params(params, {"monitoring": {"enabled": False}})
    monkeypatch.setenv("SLUICE_PARAMS", str(params))
    from tasks.core.settings import Settings

    run_step(Settings.from_env(), labeling_work, seconds="0.1")
    assert not (settings.home / "monitoring").exists()


def test_prices_applied_by_the_hook_equal_price_usage(settings):
    ctx, _ = run_step(settings, labeling_work, seconds="0.2")
    store = MetricsStore.open(settings)
    (t,) = store.tasks("run-1")
    from datetime import datetime

    usage = TaskUsage(
        datetime.fromisoformat(t["started"]),
        datetime.fromisoformat(t["ended"]),
        t["seconds"],
        t["cpus"],
        t["gpus"],
        t["memory_gb"],
    )
    expected = {c.item: c.amount for c in price_usage(usage, ctx.params.cost)}
    got = {c["item"]: c["amount"] for c in store.costs("run-1", kind="compute")}
    assert got == pytest.approx(expected)
