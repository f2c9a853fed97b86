"""The day's serving from the model server's prediction log (written by the server's own record
builders): per variant in the daily report, kept as business metrics, and judged by the p99 rule."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from tasks.core.context import StepContext
from tasks.cost_report import cost_report
from tasks.monitoring.serving_window import serving_summary
from tasks.monitoring.store import MetricsStore
from tasks.serving.paths import prediction_log
from tasks.serving.predlog import LogStore, PredictionLog, error_record, feedback_records, prediction_records


def write_log(store, n_champion=40, n_challenger=10, challenger_ms=120.0):
    log = PredictionLog(store, "r1", 60, 25, 3600)  # small chunks: the records span several
    log2 = PredictionLog(store, "r2", 60, 25, 3600)  # the challenger's from another replica
    for i in range(n_champion):
        label = i % 2
        log.append(prediction_records(f"c{i}", [0.2 + 0.6 * label], "champion", "model-v1", 5.0 + i % 3, False, "/v1"))
        log.append(feedback_records(f"c{i}", [label]))
    for i in range(n_challenger):
        log2.append(prediction_records(f"h{i}", [0.5], "challenger", "model-v2", challenger_ms, False, "/v1"))
    log2.append([error_record("h-err", "challenger", "model-v2", 1.0, False, "/v1", "nan score")])
    log.close()
    log2.close()


def test_serving_summary_per_variant(tmp_path):
    store = LogStore(tmp_path / "predlog")
    write_log(store)
    assert len(store.keys()) > 2 and {k.split("/")[0] for k in store.keys()} == {"r1", "r2"}  # every chunk is read
    s = serving_summary(store, 0, 2e9)
    assert s["champion"]["requests"] == 40 and s["champion"]["online_roc_auc"] == pytest.approx(1.0)
    assert s["champion"]["labeled"] == 40 and s["champion"]["model_versions"] == ["model-v1"]
    assert s["challenger"]["requests"] == 11 and s["challenger"]["errors"] == 1
    assert s["challenger"]["p99_ms"] == pytest.approx(120.0) and s["challenger"]["online_roc_auc"] is None
    assert serving_summary(store, 0, 1) == {}  # nothing served in that window


def test_the_daily_report_records_the_days_serving(settings):
    write_log(prediction_log(settings))
    day = datetime.now(timezone.utc).date().isoformat()
    rec = cost_report.run(StepContext.create("report-1", settings), lambda n: None, day=day)
    assert rec.serving["champion"]["requests"] == 40
    assert "serving        challenger model-v2: 11 requests, errors 9.09%" in open(rec.report_txt).read()
    store = MetricsStore.open(settings)
    p99 = {m["subject"]: m["value"] for m in store.metrics("report-1", name="latency_p99_ms")}
    assert p99["day:challenger"] == pytest.approx(120.0)
    (alert,) = [a for a in store.alerts("report-1") if a["rule"] == "p99_latency"]
    assert "day:challenger" in alert["message"]


def test_a_days_online_accuracy_drop_against_the_previous_report(settings):
    store = prediction_log(settings)
    day = datetime.now(timezone.utc).date().isoformat()
    write_log(store)  # the champion separates the classes: online ROC AUC 1.0
    cost_report.run(StepContext.create("report-1", settings), lambda n: None, day=day)
    for key in store.keys():
        store.remove(key)
    flat = PredictionLog(store, "r1", 60, 1000, 3600)
    for i in range(40):  # the same score whatever the label: online ROC AUC 0.5
        flat.append(prediction_records(f"d{i}", [0.5], "champion", "model-v1", 5.0, False, "/v1"))
        flat.append(feedback_records(f"d{i}", [i % 2]))
    flat.close()
    cost_report.run(StepContext.create("report-2", settings), lambda n: None, day=day)
    (drop,) = [a for a in MetricsStore.open(settings).alerts("report-2") if a["rule"] == "online_accuracy_drop"]
    assert drop["severity"] == "critical" and "0.500, 0.500 under the previous run's 1.000" in drop["message"]
