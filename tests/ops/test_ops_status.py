"""`python -m ops status` on a state built by the real code paths: the registry (snapshot, register, promote,
a canary), a run's report step, and the metrics store's priced ledger and alerts."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timedelta, timezone

from tasks.core.settings import REPO_ROOT, Settings


def ops_status(settings: Settings) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "SLUICE_HOME": str(settings.home), "DVC_NO_ANALYTICS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "ops", "status"], env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )


def test_status_on_a_fresh_home_says_nothing_yet(settings):
    proc = ops_status(settings)
    assert proc.returncode == 3, proc.stderr  # no services: the exit code is the services' answer
    out = proc.stdout
    assert out.startswith("not running")
    assert "data version   none yet" in out and "champion       none (nothing served yet)" in out
    assert "last run       none yet" in out and "no cost data yet" in out
    assert not (settings.layout.monitoring / "metrics.sqlite").exists()  # a status creates no store


def test_status_shows_versions_weights_last_run_alerts_and_yesterdays_cost(settings, tmp_path, monkeypatch):
    import pandas as pd

    from tasks.core.context import StepContext
    from tasks.core.params import load_params
    from tasks.ingest import ingest
    from tasks.monitoring.cost import price_usage
    from tasks.monitoring.store import Alert, MetricsStore, TaskUsage
    from tasks.registry import Registry
    from tasks.report import report

    reg = Registry(settings)
    part = tmp_path / "b1.parquet"
    pd.DataFrame({"id": range(5), "text": ["x"] * 5}).to_parquet(part)
    reg.snapshot({"batch-0001": part}, {"rows_by_batch": {"batch-0001": 5}})
    art = tmp_path / "model.int8.onnx"
    art.write_bytes(b"onnx")
    reg.register_model("run-a", {"model.int8.onnx": art}, {"data_version": "data-v1"})
    reg.promote("model-v1", "first model")
    reg.register_model("run-b", {"model.int8.onnx": art}, {"data_version": "data-v1"})
    reg.start_canary("model-v2", 25, reason="canary step 1")

    # A run through the real steps: no landing batch (the demo feed off), then the report writes summary.json.
    monkeypatch.setenv("SLUICE_DEMO_FEED", "0")
    run_settings = Settings.from_env()
    ingest(StepContext.create("run-c", run_settings))
    report(StepContext.create("run-c", run_settings))

    # Yesterday's ledger lines, priced by the cost model; an alert of the latest run.
    yesterday = datetime.now(timezone.utc) - timedelta(days=1)
    usage = TaskUsage(yesterday - timedelta(hours=2), yesterday, 7200.0, cpus=2, gpus=1, memory_gb=4)
    store = MetricsStore.open(settings)
    store.record(
        "run-b",
        "train",
        usage=usage,
        costs=price_usage(usage, load_params().cost),
        alerts=[Alert("loss_spike", "warning", "resolved: the next run of the same DAG no longer raises it")],
    )
    alert = Alert("p99_latency", "warning", "p99 41 ms over the 25 ms budget")
    store.record("run-c", "canary_analysis", alerts=[alert])
    drift = Alert("serving_drift", "warning", "served inputs drifted from data-v1")  # another DAG's: still open
    store.record("monitor_serving__1", "monitor_serving", alerts=[drift], dag_id="monitor_serving")

    proc = ops_status(settings)
    assert proc.returncode == 3, proc.stderr
    lines = proc.stdout.splitlines()
    assert "  data version   data-v1" in lines and "  prod model     model-v1" in lines
    assert "  champion       model-v1 (75% of requests)" in lines
    assert "  challenger     model-v2 (25% of requests)" in lines
    last = next(line for line in lines if line.startswith("  last run"))
    assert "run-c" in last and last.endswith("no landing batch waiting: nothing to do")
    assert "  open alerts    2 (the newest run of each DAG):" in lines
    assert "    warning  p99_latency (run-c): p99 41 ms over the 25 ms budget" in lines
    assert "    warning  serving_drift (monitor_serving__1): served inputs drifted from data-v1" in lines
    assert not any("loss_spike" in line for line in lines)
    # 2 h x (2 CPUs, 1 GPU, 4 GB) at params.yaml's prices (5.20 USD at the defaults)
    p = load_params().cost
    total = f"{2 * (2 * p.cpu_hour + p.gpu_hour + 4 * p.memory_gb_hour):.2f}"
    cost = next(line for line in lines if line.startswith("  cost yesterday"))
    day = yesterday.date().isoformat()
    assert cost.startswith(f"  cost yesterday {p.currency} {total} on {day} (compute {total}, storage 0.00"), cost
