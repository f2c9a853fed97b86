"""The scenario matrix (tests/e2e/scenarios.py): which pairs of features the nights cross, and the
scenarios that have no older test of their own."""

import functools
import itertools

import httpx
import pytest

from tasks.core.settings import REPO_ROOT
from tasks.registry import Registry
from tests.e2e.scenarios import (
    AXES,
    KNOWN_GAPS,
    MOODS_TRANSFORMER,
    SCENARIOS,
    Client,
    Scenario,
    begin,
    held_back_then_reentered,
    missing_pairs,
    moods_params,
    night,
    one_server_from_night_one,
    scenario_params,
)
from tests.toy import moods

pytestmark = pytest.mark.paired  # the slow scenarios run two at a time (ops/test_run.py)


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
    import pandas as pd

    from ops.model_server import server_env
    from ops.replicas import ReplicaSet
    from tasks.core.params import load_params

    conf = {"epochs": 6}
    write = functools.partial(moods_params, tmp_path, MOODS_TRANSFORMER)
    params = write()
    begin(settings, monkeypatch, params)
    first = night(settings, 1, conf)
    assert first["outcome"] == "deployed model-v1", first["outcome"]
    assert first["classes"] == ["bad", "fine", "good"]

    gold_test = pd.read_parquet(settings.layout.gold / "test.parquet")
    with ReplicaSet(settings.home, load_params(params), server_env(settings.home, params)) as rs:
        rs.start(2)
        client = Client(rs.url, gold_test[moods.RAW_COLUMNS].to_dict("records"), k=3)
        client.start()
        try:
            _, third = held_back_then_reentered(settings, tmp_path, write, conf)
        finally:
            client.stop()
        served = {name: httpx.get(r.url + "/v1/serving", timeout=10).json() for name, r in rs.replicas.items()}

    assert third["outcome"] == "deployed model-v2", third["outcome"]
    canary = third["canary"]
    assert canary["passed"] and canary["outcome"] == "pass", canary
    reg = Registry(settings)
    # the rejected model was never registered: model-v2 is the third night's
    assert reg.tags("model") == ["model-v1", "model-v2"]
    assert reg.model_version_info("model-v2")["run_id"] == third["run_id"]
    state = reg.state()
    assert state["prod_model"] == "model-v2" and state["current_data"] == "data-v3"
    entry = state["held"]["batch-0002"]
    assert entry["status"] == "reentered" and entry["in_version"] == "data-v3"
    for v in served.values():
        assert v["variants"]["champion"]["model_version"] == "model-v2" and "challenger" not in v["variants"], served
    assert client.sent > 100 and (client.failed, client.unready) == (0, 0), client.errors[:5]


@pytest.mark.slow
def test_an_mlp_on_three_classes_held_back_then_rolled_back_by_its_canary(settings, tmp_path, monkeypatch):
    """toy3 (3 classes, tabular readings) with the MLP plug-in and one long-running server, an independent
    client counting every answer that is not 3 probabilities:

        night 1  the first model, deployed: LFs vote one of three classes, the label model labels at
                 cardinality 3, the model learns three logits, every gate reads macro figures
        night 2  the evaluate gate's floor raised past any model: rejected, prod kept, its batch held
        night 3  the held batch re-enters beside the new one; a planted serving fault (tests/toy/fault.py:
                 readings of some ids fail to featurize, in the server only) fails requests of both
                 variants: the canary cannot judge, raises `champion_failing` and rolls back; the
                 batches wait to re-enter, the unjudged hold not counted as a second rejection"""
    import pandas as pd

    from tasks.reports.model_card import card_paths
    from tests.toy import three

    conf = {"epochs": 10}
    write = functools.partial(scenario_params, tmp_path, "tests.toy.three", None)
    params = write()
    begin(settings, monkeypatch, params)
    with one_server_from_night_one(settings, tmp_path, params, conf) as (server, first, fault_file):
        gold_test = pd.read_parquet(settings.layout.gold / "test.parquet")
        # a quarter of the canary's rows, none of the first ones the server's self-test reads at a swap
        ids = gold_test[three.ID_COLUMN].astype(str)
        planted = set(ids.iloc[8:].sample(frac=0.25, random_state=0))
        clean = gold_test[~ids.isin(planted)]
        client = Client(server.url, clean[three.RAW_COLUMNS].to_dict("records"), k=3)
        client.start()
        try:
            _, third = held_back_then_reentered(
                settings, tmp_path, write, conf, on_third=lambda: fault_file.write_text(" ".join(sorted(planted)))
            )
        finally:
            client.stop()
        served = httpx.get(server.url + "/v1/serving", timeout=10).json()

    assert first["classes"] == ["ok", "overheating", "loose"]
    test = first["test"]["challenger"]
    assert test["roc_auc"] > 0.9 and set(test["per_class"]) == {"0", "1", "2"}, test
    lf_votes = {r["lf"]: r["polarity"] for r in first["labeling"]["lf_table"]}
    assert lf_votes == {"lf_hot": [1], "lf_shaking": [2], "lf_cool_and_calm": [0], "lf_calm": [0]}
    reg = Registry(settings)
    labeled = reg.read_data_version("data-v1")
    assert {"label_prob_0", "label_prob_1", "label_prob_2"} <= set(labeled.columns) and "label_prob" not in labeled
    assert set(labeled["label"]) <= {-1, 0, 1, 2} and {0, 1, 2} <= set(labeled["label"])
    card = card_paths(settings, "model-v1")["md"].read_text()  # the register step's model card
    assert "A 3-class classifier (ok, overheating, loose) on the toy3 dataset" in card
    assert "| lf_hot | overheating |" in card

    assert third["outcome"].startswith("canary of model-v2 rolled back"), third["outcome"]
    canary = third["canary"]
    assert not canary["passed"] and canary["outcome"] == "cannot_judge" and canary["champion_failing"], canary
    champ = canary["steps"][-1]["metrics"]["champion"]
    assert champ["errors"] > 10 and "planted fault: 1 reading(s) of the planted ids" in champ["causes"][0]["error"]
    state = reg.state()
    assert state["prod_model"] == "model-v1" and state["current_data"] == "data-v1", state
    # The canary learned nothing of the data (its champion was failing): both batches wait to re-enter,
    # and batch-0002's one real rejection is still its only one (not quarantined as rejected twice).
    held = reg.held()
    assert {b: (e["status"], len(e["rejections"])) for b, e in held.items()} == {
        "batch-0002": ("held", 1),
        "batch-0003": ("held", 0),
    }, held
    assert all(e["reenter"] and "champion itself is failing" in e["not_judged"]["reason"] for e in held.values())
    assert served["variants"]["champion"]["model_version"] == "model-v1" and "challenger" not in served["variants"]
    assert client.sent > 100 and (client.failed, client.unready) == (0, 0), client.errors[:5]
