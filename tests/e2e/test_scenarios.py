"""The scenario matrix (tests/e2e/scenarios.py): which pairs of features the nights cross, and the
scenarios that have no older test of their own."""

import itertools

import httpx
import pytest

from tasks.core.settings import REPO_ROOT
from tasks.registry import Registry
from tests.airflow_helpers import migrate
from tests.e2e.scenarios import (
    AXES,
    KNOWN_GAPS,
    MOODS_TRANSFORMER,
    SCENARIOS,
    Client,
    Scenario,
    missing_pairs,
    moods_params,
    night,
)
from tests.toy import moods


def test_the_matrix_crosses_every_pair_but_the_known_gaps_and_names_real_tests():
    assert missing_pairs() == list(KNOWN_GAPS), "the pairs no scenario crosses changed: update KNOWN_GAPS"
    for s in SCENARIOS:
        path, name = s.test.split("::")
        assert f"def {name}(" in (REPO_ROOT / path).read_text(), s.test
        assert s.model in AXES["model"] and s.k in AXES["k"] and s.serving in AXES["serving"], s
        assert s.outcomes and set(s.outcomes) <= set(AXES["outcome"]), s
    # the check can fail: a scenario taken away opens the pairs only it crossed
    assert len(missing_pairs(SCENARIOS[1:])) > len(KNOWN_GAPS)
    axes = [AXES["model"], AXES["k"], AXES["serving"]]
    every = [Scenario("t", "d", m, k, sv, AXES["outcome"], "") for m, k, sv in itertools.product(*axes)]
    assert missing_pairs(every) == []


@pytest.mark.slow
def test_a_transformer_behind_replicas_held_back_by_a_gate_then_promoted(settings, tmp_path, monkeypatch):
    """moods (3 classes, text) with the transformer plug-in; two replicas behind HAProxy from the first
    model on, an independent client counting every answer that is not 3 probabilities:

        night 1  the first model, deployed
        night 2  the evaluate gate's floor raised past any model: rejected, prod kept, its batch held
        night 3  the floor back: the held batch re-enters the snapshot beside the new one, and the
                 model is promoted by a canary through the balancer to both replicas"""
    from ops.replicas import ReplicaSet
    from tasks.core.params import load_params
    from tests.serving.server import server_env

    conf = {"epochs": 6}
    params = moods_params(tmp_path, MOODS_TRANSFORMER)
    monkeypatch.setenv("SLUICE_PARAMS", str(params))
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT))  # so Airflow's task processes find tests.toy
    migrate(settings)
    first = night(settings, 1, conf)
    assert first["outcome"] == "deployed model-v1", first["outcome"]
    assert first["classes"] == ["bad", "fine", "good"]

    import pandas as pd

    gold_test = pd.read_parquet(settings.layout.gold / "test.parquet")
    with ReplicaSet(settings.home, load_params(params), server_env(settings.home, params)) as rs:
        rs.start(2)
        client = Client(rs.url, gold_test[moods.RAW_COLUMNS].to_dict("records"), k=3)
        client.start()
        try:
            moods_params(tmp_path, MOODS_TRANSFORMER, evaluate={"min_roc_auc": 0.9999})
            second = night(settings, 2, conf)
            moods_params(tmp_path, MOODS_TRANSFORMER)
            third = night(settings, 3, conf)
        finally:
            client.stop()
        served = {name: httpx.get(r.url + "/v1/serving", timeout=10).json() for name, r in rs.replicas.items()}

    assert second["outcome"].startswith("model rejected at evaluate"), second["outcome"]
    assert second["outcome"].endswith("prod stays model-v1; data pointer back to data-v1"), second["outcome"]
    reg = Registry(settings)
    # the rejected model was never registered: model-v2 is the third night's
    assert reg.tags("model") == ["model-v1", "model-v2"]
    assert reg.model_version_info("model-v2")["run_id"] == third["run_id"]

    assert third["outcome"] == "deployed model-v2", third["outcome"]
    canary = third["canary"]
    assert canary["passed"] and canary["outcome"] == "pass", canary
    state = reg.state()
    assert state["prod_model"] == "model-v2" and state["current_data"] == "data-v3"
    batches = [p["batch_id"] for p in reg.data_version_info("data-v3")["partitions"]]
    assert batches == ["batch-0001", "batch-0002", "batch-0003"]  # the held batch is back
    entry = state["held"]["batch-0002"]
    assert entry["status"] == "reentered" and entry["in_version"] == "data-v3"
    for v in served.values():
        assert v["variants"]["champion"]["model_version"] == "model-v2" and "challenger" not in v["variants"], served
    assert client.sent > 100 and (client.failed, client.unready) == (0, 0), client.errors[:5]
