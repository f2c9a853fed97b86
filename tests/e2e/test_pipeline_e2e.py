"""nightly_pipeline end to end, in-process (`airflow dags test`: real tasks, no scheduler)."""

import json

import httpx
import pytest

from ops.model_server import server_env
from tasks.registry import Registry
from tests.airflow_helpers import dags_test, migrate, task_states

pytestmark = [pytest.mark.slow, pytest.mark.paired]
FAST = {"epochs": 8}


@pytest.fixture
def airflow_home(settings):
    migrate(settings)
    return settings


def summary(settings, run_id):
    return json.loads((settings.layout.run_dir(run_id) / "summary.json").read_text())


def test_two_nightly_batches_accumulate_versions_and_the_canary_promotes_through_two_replicas(airflow_home):
    """Two nights: the second accumulates data-v2 and model-v2, and its canary goes through HAProxy to
    two replicas: its replayed predictions and their feedback land on either, the shared log joins them
    (feedback taken by a replica other than the one that served), and the challenger is promoted on both.
    (One server instead of replicas: tests/serving/test_rollout.py, tests/e2e/test_rest_api_e2e.py.)"""
    from ops.replicas import ReplicaSet
    from tasks.core.params import load_params
    from tasks.serving.paths import prediction_log
    from tasks.serving.predlog import read_log

    settings = airflow_home
    run1, state1, proc1 = dags_test(settings, FAST)
    assert state1 == "success", proc1.stdout[-3000:]
    with ReplicaSet(settings.home, load_params(settings=settings), server_env(settings.home)) as rs:
        rs.start(2)
        run2, state2, proc2 = dags_test(settings, FAST)
        served = {name: httpx.get(r.url + "/v1/serving").json() for name, r in rs.replicas.items()}
    assert state2 == "success", proc2.stdout[-3000:]
    for v in served.values():
        assert v["variants"]["champion"]["model_version"] == "model-v2" and "challenger" not in v["variants"], served
    log = read_log(prediction_log(settings))
    server_of = {r["request_id"]: r["replica"] for r in log if r["kind"] == "prediction" and not r["shadow"]}
    assert set(server_of.values()) == {"r1", "r2"}
    feedback = [r for r in log if r["kind"] == "feedback"]
    assert feedback and all(r["request_id"] in server_of for r in feedback)  # every label joins its prediction
    assert any(r["replica"] != server_of[r["request_id"]] for r in feedback)  # labelled at the other replica
    assert all("input" in r for r in log if r["kind"] == "prediction" and not r["shadow"] and "error" not in r)

    reg = Registry(settings)
    assert reg.tags("data") == ["data-v1", "data-v2"]
    info = reg.data_version_info("data-v2")
    assert [p["batch_id"] for p in info["partitions"]] == ["batch-0001", "batch-0002"]
    assert set(info["contracts"]) == {"raw_batch", "labeled"}
    state = reg.state()
    assert state["current_data"] == "data-v2"
    second = reg.model_version_info(state["prod_model"])
    assert state["prod_model"] == "model-v2" and second["data_version"] == "data-v2"
    assert second["parent_model"] == "model-v1" and second["params_hash"] and second["code_commit"]
    assert second["metrics"]["onnx_served"]["roc_auc"] > 0.7
    assert second["compression"]["artifact"] == "model.served.onnx" and second["compression"]["chosen"]

    states = task_states(settings, run2)
    taken = [
        "ingest",
        "validate_raw",
        "weak_label",
        "validate_labeled",
        "snapshot",
        "train",
        "evaluate",
        "compress",
        "register",
        "deploy_canary",
        "canary_analysis",
        "promote",
        "report",
    ]
    assert all(states[t] == "success" for t in taken), states
    assert all(
        states[t] == "skipped"
        for t in (
            "no_batch",
            "quarantine_raw",
            "quarantine_labeled",
            "reject_model_evaluate",
            "reject_model_compress",
            "rollback_canary",
            "run_failed",
        )
    )
    s = summary(settings, run2)
    assert s["outcome"] == "deployed model-v2"
    assert s["batch"]["rows_in"] == 500 and s["batch"]["rows_labeled"] + s["batch"]["rows_unlabeled"] == 500
    assert s["labeling"]["chosen"] in ("label_model", "majority_vote")
    assert {"label_model", "majority_vote"} == set(s["labeling"]["quality_dev"])
    assert s["train"]["world_size"] == 2 and s["train"]["final_loss"] > 0
    assert s["train"]["warm_start"] == "model-v1"  # incremental: from the prod model
    m = s["train"]["metrics"]  # from train/metrics.jsonl
    assert m["median_samples_per_s"] > 0 and m["median_grad_var_relative"] >= 0 and m["peak_rss_mb"] > 0
    assert s["compression"]["chosen"] and s["compression"]["bytes"] <= s["compression"]["fp32_bytes"]
    assert state["serving"]["champion"]["artifact"] == "models/model-v2/model.served.onnx"
    assert s["test"]["champion_version"] == "model-v1"
    canary = s["canary"]  # real HTTP traffic, judged step by step
    assert canary["passed"] and [st["weight"] for st in canary["steps"]] == [50, 100], canary
    assert (
        canary["steps"][-1]["metrics"]["challenger"]["requests"]
        > canary["steps"][0]["metrics"]["challenger"]["requests"]
    )
    text = (settings.layout.run_dir(run2) / "summary.txt").read_text()
    for needle in ("ROC AUC", "F1", "coverage", "data-v2", "final loss", "train metrics", "compressed", "model-v2"):
        assert needle in text
    # Both landing batches were archived, none left waiting.
    assert sorted(p.name for p in settings.layout.archive.iterdir()) == ["batch-0001.csv", "batch-0002.csv"]


def test_contract_breaking_batch_is_quarantined(airflow_home, emails):
    settings = airflow_home
    layout = settings.layout.ensure()
    bad = emails.iloc[:300].drop(columns=["spam", "winner"]).copy()  # a column went missing
    bad.loc[bad.index[:5], "line_breaks"] = -1  # and a broken extractor
    bad.to_csv(layout.landing / "bad-batch.csv", index=False)
    original = (layout.landing / "bad-batch.csv").read_bytes()

    run_id, state, proc = dags_test(settings, {"batch": "bad-batch"})
    assert state == "success", proc.stdout[-3000:]  # a gate is not a crash
    states = task_states(settings, run_id)
    assert states["quarantine_raw"] == "success" and states["weak_label"] == "skipped"
    assert states["snapshot"] == "skipped" and states["run_failed"] == "skipped"

    folder = layout.quarantine / "bad-batch"
    assert (folder / "bad-batch.csv").exists() and not (layout.landing / "bad-batch.csv").exists()
    assert (folder / "bad-batch.csv").read_bytes() == original  # kept byte for byte
    report = json.loads((folder / "report.json").read_text())
    names = {(f["expectation"], f["column"]) for f in report["failures"]}
    assert ("expect_table_columns_to_match_set", None) in names
    assert ("expect_column_values_to_be_between", "line_breaks") in names
    assert "line_breaks" in (folder / "report.txt").read_text()
    assert Registry(settings).state()["current_data"] is None  # data version unchanged
    assert "quarantined at validate_raw" in summary(settings, run_id)["outcome"]


def test_unknown_conf_key_fails_the_first_task_naming_it(airflow_home):
    settings = airflow_home
    run_id, state, proc = dags_test(settings, {"epoch": 5})  # a typo of "epochs"
    assert state == "failed" and task_states(settings, run_id)["ingest"] == "failed"
    expected = "unknown run conf key(s) ['epoch']; known: ['batch', 'epochs', 'params_overlay']"
    assert expected in proc.stdout + proc.stderr
    assert summary(settings, run_id)["outcome"] == "FAILED at ingest"


def test_unknown_batch_param_fails_the_run_but_reports(airflow_home):
    settings = airflow_home
    run_id, state, _ = dags_test(settings, {"batch": "no-such-batch"})
    states = task_states(settings, run_id)
    assert state == "failed"
    assert states["ingest"] == "failed" and states["report"] == "success" and states["run_failed"] == "failed"
    assert summary(settings, run_id)["outcome"] == "FAILED at ingest"
