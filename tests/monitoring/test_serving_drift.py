"""Serving drift and skew (tasks/monitoring/serving_drift.py, the monitor_serving step): a feed written
with the real prediction-log writer, a real registry (a data version, an ONNX model registered on it)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tasks.core.context import StepContext, record_path
from tasks.core.files import read_json
from tasks.plugins.emails import FEATURE_NAMES
from tasks.serving.paths import prediction_log
from tasks.serving.predlog import PredictionLog, prediction_records
from tests.conftest import write_params

ARTIFACT = "model.int8.onnx"


def as_inputs(df: pd.DataFrame) -> list[dict]:
    """Raw rows as /v1/predict logs them (JSON values)."""
    return json.loads(df.to_json(orient="records", date_format="iso"))


def build_world(settings, emails: pd.DataFrame, tmp_path: Path) -> dict:
    """A data version of 2/3 of the emails (seeded), a logistic regression trained on it as ONNX and
    registered with that lineage; the other third is the unshifted traffic."""
    from bench.canary import fit_champion, lr_onnx
    from tasks.plugins.emails import GOLD_COLUMN, featurize
    from tasks.registry import Registry

    rng = np.random.default_rng(3)
    order = rng.permutation(len(emails))
    cut = len(emails) * 2 // 3
    train, rest = emails.iloc[order[:cut]].reset_index(drop=True), emails.iloc[order[cut:]].reset_index(drop=True)
    part = tmp_path / "train.parquet"
    labeled = train.rename(columns={GOLD_COLUMN: "label"})
    labeled.assign(label_prob=labeled["label"].astype("float32"), label_weight=np.float32(1.0)).to_parquet(part)
    reg = Registry(settings)
    data_version = reg.snapshot({"batch-0001": part}, {"rows_by_batch": {"batch-0001": len(train)}})["data_version"]
    w, b = fit_champion(featurize(train), train[GOLD_COLUMN].to_numpy())
    path = lr_onnx(tmp_path / "m" / ARTIFACT, w, b)
    version = reg.register_model("run-1", {ARTIFACT: path}, {"data_version": data_version})["model_version"]
    return {"settings": settings, "rest": rest.drop(columns=[GOLD_COLUMN]), "version": version,
            "data_version": data_version, "model": path}  # fmt: skip


@pytest.fixture
def world(settings, emails, tmp_path, monkeypatch):
    """build_world, and a FileNotifier that receives the alerts."""
    out = build_world(settings, emails, tmp_path)
    alerts_file = tmp_path / "alerts.txt"
    notifier = {"class_path": "tests.monitoring.notifiers.FileNotifier", "kwargs": {"path": str(alerts_file)}}
    params = write_params(tmp_path / "params.json", {"monitoring": {"notifiers": [notifier]}})
    monkeypatch.setenv("SLUICE_PARAMS", str(params))
    return {**out, "alerts": alerts_file}


def serve(settings, version: str, rows: pd.DataFrame, model: Path, score_shift: float = 0.0) -> None:
    """The rows as /v1/predict served them, through the real writer (one request of 50 rows at a time):
    the model's scores (+ `score_shift`: a serving path that scores otherwise)."""
    from tasks.evaluation.scoring import predict_onnx
    from tasks.plugins import emails

    scores = predict_onnx(model, rows, emails) + score_shift
    log = PredictionLog(prediction_log(settings), "replica-0", flush_s=60, flush_rows=200, retention_s=7 * 86400)
    try:
        inputs = as_inputs(rows)
        for i in range(0, len(rows), 50):
            log.append(prediction_records(f"q{i}", scores[i : i + 50], "champion", version, 2.0, False, "predict",
                                          inputs[i : i + 50]))  # fmt: skip
    finally:
        log.close()


def monitor(run_id: str):
    from tasks.monitor_serving import monitor_serving

    ctx = StepContext.create(run_id)
    rec = monitor_serving.run(ctx, lambda name: None)
    return ctx, rec


def shifted(rows: pd.DataFrame) -> pd.DataFrame:
    """Longer emails with more line breaks than the model was trained on (a planted covariate shift)."""
    out = rows.copy()
    out["num_char"] = out["num_char"] * 4
    out["line_breaks"] = out["line_breaks"] * 4
    return out


def stored_alerts(settings) -> list[dict]:
    from tasks.monitoring.store import MetricsStore

    return [a for a in MetricsStore.open(settings).alerts() if a["rule"] == "serving_drift"]


def test_unshifted_traffic_raises_nothing(world):
    serve(world["settings"], world["version"], world["rest"].head(600), world["model"])
    ctx, rec = monitor("monitor__unshifted")
    assert rec.status == "judged" and rec.rows == 600 and not rec.drift and rec.cause is None, rec.message
    (v,) = rec.versions
    assert v["model_version"] == world["version"] and v["data_version"] == world["data_version"]
    tests = (len(FEATURE_NAMES) + 2) * 3  # every feature and the score in each class; the window and 2 tails
    assert v["drifted"] == [] and v["skewed_rows"] == 0 and v["tests"] == tests
    assert v["alpha_per_test"] == pytest.approx(0.01 / (tests * 168))
    assert stored_alerts(world["settings"]) == [] and not world["alerts"].exists()
    report = read_json(Path(rec.report))
    assert len(report["findings"][0]["findings"]) == tests


def test_a_planted_shift_raises_the_alert_and_names_the_features(world):
    serve(world["settings"], world["version"], shifted(world["rest"].head(600)), world["model"])
    ctx, rec = monitor("monitor__shifted")
    assert rec.status == "judged" and rec.drift, rec.message
    drifted = set(rec.cause["drifted"][world["version"]])
    assert {"log1p_num_char", "log1p_line_breaks"} <= drifted, drifted
    assert rec.cause["event"] == "serving_drift" and rec.cause["data_versions"] == [world["data_version"]]
    assert "log1p_num_char" in rec.cause["why"] and rec.cause["run_id"] == "monitor__shifted"
    (stored,) = stored_alerts(world["settings"])
    assert stored["task"] == "monitor_serving" and "log1p_num_char" in stored["message"]
    sent = world["alerts"].read_text()
    assert "serving_drift" in sent and "monitor__shifted" in sent, sent  # through the notifier
    assert read_json(record_path(ctx.run_dir, "monitor_serving"))["drift"] is True


def test_skew_between_served_and_offline_scores_is_caught(world):
    """Same rows, same model, but the serving path scores 0.05 higher: no feature drifted, the skew shows."""
    serve(world["settings"], world["version"], world["rest"].head(300), world["model"], score_shift=0.05)
    _, rec = monitor("monitor__skew")
    (v,) = rec.versions
    assert rec.drift and v["skew"] and v["skewed_rows"] == 300, rec.message
    assert not any(d["test"].startswith("log1p") for d in v["drifted"])
    assert "skew" in rec.cause["why"] and rec.cause["skew"] == {world["version"]: 300}


def test_an_empty_log_says_so_and_emits_nothing(world):
    _, rec = monitor("monitor__empty")
    assert rec.status == "no_traffic" and not rec.drift and rec.cause is None and rec.rows == 0
    assert "no /v1/predict prediction" in rec.message and str(prediction_log(world["settings"]).uri) in rec.message
    assert stored_alerts(world["settings"]) == []


def test_a_cut_short_chunk_is_named_and_too_few_rows_are_not_judged(world):
    serve(world["settings"], world["version"], world["rest"].head(250), world["model"])
    root = Path(prediction_log(world["settings"]).uri)
    chunk = sorted(root.glob("*/*.jsonl"))[-1]  # the last 50 rows' chunk loses its trailer
    chunk.write_bytes(chunk.read_bytes()[:-200])
    _, rec = monitor("monitor__cut")
    assert rec.cut_short == [f"{chunk.parent.name}/{chunk.name}"] and chunk.name in rec.message
    assert rec.rows == 200 and len(rec.versions) == 1  # what was whole is judged

    from tasks.core.params import load_params

    p = load_params().monitoring.drift
    assert p.min_rows > 50
    for old in root.glob("*/*.jsonl"):  # only a small window left: not judged, said so
        old.unlink()
    serve(world["settings"], world["version"], world["rest"].head(50), world["model"])
    _, rec = monitor("monitor__few")
    assert rec.status == "judged" and rec.versions == [] and not rec.drift
    assert rec.not_judged == [f"{world['version']}: 50 rows in the window (min_rows {p.min_rows})"]
    assert "not judged" in rec.message


def test_psi_of_a_feature_bins_at_the_reference_quantiles():
    from tasks.monitoring.serving_drift import psi_quantile

    rng = np.random.default_rng(0)
    ref = rng.normal(0, 1, 5000)
    assert psi_quantile(ref, rng.normal(0, 1, 5000), 10) < 0.01
    assert psi_quantile(ref, rng.normal(1, 1, 5000), 10) > 0.5
    binary = (rng.random(5000) < 0.2).astype(float)  # a discrete feature: bins merge, nothing is lost
    assert psi_quantile(binary, (rng.random(5000) < 0.6).astype(float), 10) > 0.5
    assert psi_quantile(np.zeros(100), np.ones(100), 10) > 1.0  # a constant reference: values over it count


def test_a_shift_late_in_the_window_is_caught_on_its_tail_and_many_tests_are_corrected(params):
    """A feature that shifts in the window's last quarter: diluted in the whole hour, plain in its last
    quarter. The per-test threshold is family_alpha over every test of the horizon."""
    from tasks.monitoring.serving_drift import alpha_per_test, judge

    p = params.monitoring.drift
    rng = np.random.default_rng(1)
    reference = pd.DataFrame({"x": rng.normal(0, 1, 5000)})
    ts = np.sort(rng.uniform(0, 3600, 1200))
    x = rng.normal(0, 1, ts.size) + np.where(ts >= 3000, 1.0, 0.0)
    served = pd.DataFrame({"x": x, "__score": np.full(ts.size, 0.2), "__ts": ts})
    featurize = lambda df: df[["x"]].to_numpy(dtype=np.float32)  # noqa: E731
    scorer = lambda df: np.full(len(df), 0.2)  # noqa: E731
    v = judge(served, reference, featurize, ["x"], p, "model-v1", "data-v1", scorer, end=3600.0)
    assert v.tests == 3 * len(p.tails) and v.alpha_per_test == alpha_per_test(p, v.tests)
    by_tail = {f.tail: f for f in v.findings if f.test == "x"}
    assert not by_tail[1.0].drifted and by_tail[0.25].drifted, by_tail
    assert by_tail[0.25].rows == int(np.sum(ts >= 2700))
    assert v.flagged and not v.skew


def test_a_k_class_models_scores_are_compared_within_each_predicted_class_and_checked_for_skew(params):
    """K = 3: the served probabilities (a list a row in the log) are compared with the reference's within
    each predicted class (the top probability), and a served row whose probabilities differ from the
    file's offline ones counts as skewed."""
    from tasks.monitoring.serving_drift import judge

    p = params.monitoring.drift
    rng = np.random.default_rng(2)

    def probs(df):
        logits = np.stack([df["x"].to_numpy(), -df["x"].to_numpy(), np.zeros(len(df))], axis=1)
        return np.exp(logits) / np.exp(logits).sum(1, keepdims=True)

    reference = pd.DataFrame({"x": rng.normal(0, 1, 3000)})
    ts = np.sort(rng.uniform(0, 3600, 900))
    served = pd.DataFrame({"x": rng.normal(0, 1, ts.size), "__ts": ts})
    served["__score"] = probs(served).tolist()
    featurize = lambda df: df[["x"]].to_numpy(dtype=np.float32)  # noqa: E731
    v = judge(served, reference, featurize, ["x"], p, "model-v1", "data-v1", probs, end=3600.0)
    names = {f.test for f in v.findings}
    assert {"score|class=0", "score|class=1", "score|class=2"} <= names and v.tests == 4 * len(p.tails)
    assert not v.flagged and not v.skew and v.skewed_rows == 0
    served["__score"] = [row[::-1] for row in served["__score"]]  # what the server answered is not the file's
    assert judge(served, reference, featurize, ["x"], p, "model-v1", "data-v1", probs, end=3600.0).skew


def test_the_drift_cause_and_the_retrain_reach_the_summary():
    """An Asset-triggered run has no conf: the events' extras are the cause the summary shows."""
    from tasks.core.records import DriftRetrainRecord, IngestRecord
    from tasks.reports.run_summary import build_summary, render_text, trigger_summary

    cause = {
        "event": "serving_drift",
        "run_id": "scheduled__x",
        "window_start": "2026-12-02T07:00:00+00:00",
        "window_end": "2026-12-02T08:00:00+00:00",
        "why": "model-v3 (trained on data-v3, 600 rows): ...",
    }
    steps = {
        "ingest": IngestRecord(status="no_batch"),
        "drift_retrain": DriftRetrainRecord(data_version="data-v3", causes=[cause]),
    }
    summary = build_summary("asset_triggered__y", steps, {"current_data": "data-v3"}, [])
    summary["trigger"] = trigger_summary([cause], steps)
    text = render_text(summary)
    assert "trigger        serving drift 2026-12-02T07:00:00+00:00 .. 2026-12-02T08:00:00+00:00" in text
    assert "(monitor_serving run scheduled__x): model-v3 (trained on data-v3, 600 rows)" in text
    assert "retrain        no new batch: retrained on the current data version data-v3" in text
    assert trigger_summary([], {}) is None  # a run of the cron says nothing of drift
