"""The cost ledger's arithmetic: lines equal durations x requested resources x prices."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from tasks.core.params import load_params, repo_params
from tasks.monitoring.cost import (
    GB,
    directory_bytes,
    idle_fraction,
    incident_lines,
    labor_avoided,
    price_usage,
    storage_lines,
    totals,
    waste_lines,
)
from tasks.monitoring.store import TaskUsage

PRICES = repo_params().cost.replace(
    gpu_hour=3.0, cpu_hour=0.05, memory_gb_hour=0.01, storage_gb_month=0.03, manual_label=0.1
)
T0 = datetime(2026, 11, 30, 23, 30, tzinfo=timezone.utc)


def test_params_yaml_has_the_cost_section_with_documented_defaults():
    cost = load_params().cost  # params.yaml is the prices' one home (docs/monitoring.md lists them)
    assert (cost.currency, cost.gpu_hour, cost.storage_gb_month, cost.engineer_hour) == ("USD", 2.50, 0.023, 90.0)
    assert cost.gpu_hour > cost.cpu_hour > 0 and cost.manual_label > 0 and cost.engineer_hour > 0


def test_compute_is_duration_times_requests_times_prices():
    u = TaskUsage(T0, T0 + timedelta(hours=1, minutes=30), 5400.0, cpus=8, gpus=2, memory_gb=32, backend="kubernetes")
    lines = {c.item: c for c in price_usage(u, PRICES)}
    assert lines["cpu"].amount == pytest.approx(1.5 * 8 * 0.05)
    assert lines["gpu"].amount == pytest.approx(1.5 * 2 * 3.0)
    assert lines["memory"].amount == pytest.approx(1.5 * 32 * 0.01)
    assert all(c.day == "2026-12-01" for c in lines.values())  # the day the task ended (UTC)
    assert totals(lines.values())["total"] == pytest.approx(0.6 + 9.0 + 0.48)
    cpu_only = price_usage(TaskUsage(T0, T0, 36.0, cpus=1), PRICES)
    assert [c.item for c in cpu_only] == ["cpu"] and cpu_only[0].amount == pytest.approx(0.01 * 0.05)


def test_waste_is_idle_share_of_gpu_time_and_not_billed():
    u = TaskUsage(T0, T0 + timedelta(hours=2), 7200.0, cpus=4, gpus=1)
    idle = idle_fraction([0.9, 0.1, 0.05, 0.8], floor=0.3)
    assert idle == 0.5
    (w,) = waste_lines(u, idle, PRICES)
    assert w.kind == "waste" and w.amount == pytest.approx(1.0 * 3.0)
    t = totals(price_usage(u, PRICES) + [w])
    assert t["waste"] == pytest.approx(3.0) and t["total"] == pytest.approx(t["compute"])
    assert waste_lines(TaskUsage(T0, T0, 10.0, cpus=1), 1.0, PRICES) == []  # no accelerator, no idle accelerator


def test_storage_labor_and_avoided_labels():
    (s,) = storage_lines({"registry": 3 * GB}, PRICES, "2026-11-30")
    assert s.amount == pytest.approx(3 * 0.03 / 30) and s.unit == "gb_day"
    (a,) = labor_avoided(445, PRICES, "2026-11-30")
    assert a.kind == "avoided" and a.amount == pytest.approx(44.5)
    inc = incident_lines(["quarantine_raw"], repo_params().cost, "2026-11-30")
    assert inc[0].amount == pytest.approx(0.5 * 90.0) and inc[0].kind == "labor"
    t = totals([s, a, *inc])
    assert t["total"] == pytest.approx(s.amount + inc[0].amount) and t["avoided"] == pytest.approx(44.5)


def test_directory_bytes(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x").write_bytes(b"1" * 100)
    (tmp_path / "y").write_bytes(b"2" * 23)
    assert directory_bytes(tmp_path) == 123
    assert directory_bytes(tmp_path / "missing") == 0
