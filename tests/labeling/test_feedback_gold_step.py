"""End to end on the real parts: rows served by the model server through /v1/predict, their labels sent to
/v1/feedback, and the next nightly's weak_label step turns them into a gold version and trains on them."""

from __future__ import annotations

import json

import httpx
import pandas as pd
import pytest
import yaml

from ops.model_server import ServerProcess
from tasks.core.context import StepContext
from tasks.core.settings import REPO_ROOT
from tasks.datasets import load_dataset
from tasks.datasets.demo_feed import DemoFeed, split_demo
from tasks.ingest import ingest
from tasks.registry import TEST_REFUSAL, Registry
from tasks.reports.run_summary import training_label_lines
from tasks.validate_labeled import validate_labeled
from tasks.weak_label import weak_label
from tests.helpers.server import write_onnx

pytestmark = [pytest.mark.slow, pytest.mark.paired]


def test_a_served_prediction_with_feedback_becomes_gold_used_by_the_next_mix(settings, params, tmp_path, emails):
    ds = load_dataset()
    reg = Registry(settings)
    onnx = write_onnx(tmp_path / "m1" / "model.int8.onnx", len(ds.FEATURE_NAMES), seed=1)
    reg.register_model("run-1", {"model.int8.onnx": onnx}, {"data_version": "data-v1"})
    reg.promote("model-v1", "test")
    DemoFeed(settings.layout, params.demo, ds).ensure_gold()
    _, test, batches = split_demo(ds.load_source(), params.demo, ds)
    served = batches[1].iloc[:24]  # tomorrow night's rows, served today (not test rows)
    truth = emails.set_index(ds.ID_COLUMN)[ds.GOLD_COLUMN]
    labels = [int(truth[i]) for i in served[ds.ID_COLUMN]]
    test_row = test.drop(columns=[ds.GOLD_COLUMN]).iloc[:1]

    p = yaml.safe_load((REPO_ROOT / "params.yaml").read_text())
    p["serving"].update({"poll_s": 0.1, "log_flush_s": 0.1, "drain_s": 0.1})
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(p))
    with ServerProcess(settings.home, tmp_path / "params.yaml").start(timeout_s=90) as server:
        body = httpx.post(server.url + "/v1/predict", json={"rows": json.loads(served.to_json(orient="records"))})
        rid = body.json()["request_id"]
        r = httpx.post(server.url + "/v1/feedback", json={"request_id": rid, "label": labels, "who": "support-desk"})
        assert r.status_code == 200, r.text
        tid = httpx.post(server.url + "/v1/predict", json={"rows": json.loads(test_row.to_json(orient="records"))})
        r = httpx.post(server.url + "/v1/feedback", json={"request_id": tid.json()["request_id"], "label": 1})
        assert r.status_code == 200
    # the server stopped cleanly (SIGTERM): every record is in the log

    ctx = StepContext.create("night-1", settings, {"weak_label": {"weak_weight": 0.5, "feedback_settle_s": 0}})
    wl = weak_label(ctx, ingest=ingest(ctx))  # batch-0001; the served rows are batch-0002's
    assert reg.gold_versions() == ["gold-v1"]
    gold = {lab["row_id"]: lab for lab in reg.gold_labels()}
    assert sorted(gold) == sorted(served[ds.ID_COLUMN])
    one = gold[served[ds.ID_COLUMN].iloc[0]]
    assert (one["source"], one["who"], one["served_version"], one["request_id"]) == (
        "feedback",
        "support-desk",
        "model-v1",
        rid,
    )
    assert one["label"] == labels[0] and one["at"]
    refused = reg.gold_refused()
    assert [(r["row_id"], r["reason"]) for r in refused] == [(test_row[ds.ID_COLUMN].iloc[0], TEST_REFUSAL)]

    report = json.loads((ctx.run_dir / "feedback_gold.json").read_text())
    assert report["gold_version"] == "gold-v1" and report["used_through"] == "gold-v1"
    assert report["dev_rows"] + report["appended_rows"] == len(served) and report["dev_rows"] > 0
    assert wl.feedback_gold["accepted"] == len(served) and wl.feedback_gold["refused"] == 1
    assert wl.feedback_gold_version == "gold-v1"
    summary = "\n".join(training_label_lines(wl.model_dump()))  # the run summary's line
    assert f"feedback gold  gold-v1: {len(served)} accepted (0 conflicting), 1 refused, 0 pending" in summary

    labeled = pd.read_parquet(wl.labeled)
    appended = labeled[labeled[ds.ID_COLUMN].isin(served[ds.ID_COLUMN])]
    assert len(appended) == report["appended_rows"] > 0
    assert (appended["label_source"] == "gold").all() and (appended["label_weight"] == 1).all()
    assert (appended["label"].to_numpy() == [int(truth[i]) for i in appended[ds.ID_COLUMN]]).all()
    assert not labeled[ds.ID_COLUMN].isin(test[ds.ID_COLUMN]).any()
    assert wl.rows == len(labeled) == 500 + len(appended)
    assert validate_labeled(ctx, weak_label=wl).passed  # the appended rows pass the labeled contract


def test_the_demo_traffic_feed_serves_next_nights_rows_and_their_labels_become_gold(settings, params, tmp_path):
    from tasks.canary.demo_traffic import serve_demo_traffic, traffic_rows

    ds = load_dataset()
    reg = Registry(settings)
    onnx = write_onnx(tmp_path / "m1" / "model.int8.onnx", len(ds.FEATURE_NAMES), seed=1)
    reg.register_model("run-1", {"model.int8.onnx": onnx}, {"data_version": "data-v1"})
    reg.promote("model-v1", "test")
    demo = params.demo.replace(traffic_rows=40, feedback_rate=0.5, feedback_delay_s=0.0)
    rows, keys, labels = traffic_rows(settings.layout, demo, ds)
    _, test, batches = split_demo(ds.load_source(), demo, ds)
    assert [int(k) for k in keys] == batches[0][ds.ID_COLUMN].head(40).tolist()  # nothing delivered yet
    assert not set(map(int, keys)) & set(test[ds.ID_COLUMN])
    told = [k for k, y in zip(keys, labels) if y is not None]
    assert 10 < len(told) < 30  # about half

    p = yaml.safe_load((REPO_ROOT / "params.yaml").read_text())
    p["serving"].update({"poll_s": 0.1, "log_flush_s": 0.1, "drain_s": 0.1})
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(p))
    with ServerProcess(settings.home, tmp_path / "params.yaml").start(timeout_s=90) as server:
        result = serve_demo_traffic(settings.layout, demo, ds, server.url)
    assert (result.ok, result.feedback_sent, result.failed) == (40, len(told), 0)

    ctx = StepContext.create("night-1", settings, {"weak_label": {"weak_weight": 0.5, "feedback_settle_s": 0}})
    wl = weak_label(ctx, ingest=ingest(ctx))  # batch-0001 holds the served rows: their gold applies there
    assert sorted(str(lab["row_id"]) for lab in reg.gold_labels()) == sorted(told)
    labeled = pd.read_parquet(wl.labeled).set_index(ds.ID_COLUMN)
    report = json.loads((ctx.run_dir / "feedback_gold.json").read_text())
    assert report["batch_rows_gold"] + report["batch_rows_held"] == len(told) and report["appended_rows"] == 0
    gold_rows = labeled.loc[[int(k) for k in told]]
    trained = gold_rows[gold_rows["label_source"] == "gold"]
    assert len(trained) == report["batch_rows_gold"] > 0
    assert (gold_rows.loc[gold_rows["label_source"] != "gold", "label_weight"] == 0).all()  # dev share: no training
