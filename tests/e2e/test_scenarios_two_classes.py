"""The scenarios at K = 2 on text (tests/e2e/scenarios.py): the toy plug-in `likes` with the transformer
on one server and with bag-of-embeddings behind replicas. A file of their own, so that ops/test_run.py's
paired part (a file a worker) runs them beside the other scenarios."""

import functools
from pathlib import Path

import httpx
import pytest

from tasks.registry import Registry
from tests.e2e.scenarios import (
    MOODS_BOW,
    MOODS_TRANSFORMER,
    Client,
    begin,
    held_back_then_reentered,
    likes_params,
    night,
    one_server_from_night_one,
    planted_fault,
)
from tests.toy import likes

pytestmark = pytest.mark.paired  # two at a time (ops/test_run.py)


def assert_rolled_back_unjudged(night_summary: dict, word: str) -> None:
    assert night_summary["outcome"].startswith("canary of model-v2 rolled back"), night_summary["outcome"]
    canary = night_summary["canary"]
    assert not canary["passed"] and canary["outcome"] == "cannot_judge" and canary["champion_failing"], canary
    champ = canary["steps"][-1]["metrics"]["champion"]
    assert champ["errors"] > 10 and f"planted fault: 1 review(s) with the word '{word}'" in champ["causes"][0]["error"]


@pytest.mark.slow
def test_a_transformer_on_two_text_classes_rolled_back_by_its_canary_on_one_server(settings, tmp_path, monkeypatch):
    """likes (2 classes, text) with the transformer plug-in and one long-running server, an independent
    client counting every answer that is not a probability:

        night 1  the first model, deployed: a binary model's scores (P(class 1), no class list)
        night 2  a planted serving fault (a word's reviews fail in the server only) fails requests of both
                 variants: the canary cannot judge, raises `champion_failing` and rolls back; the batch
                 waits to re-enter"""
    import pandas as pd

    conf = {"epochs": 6}
    params = likes_params(tmp_path, MOODS_TRANSFORMER)
    begin(settings, monkeypatch, params)
    with one_server_from_night_one(settings, tmp_path, params, conf) as (server, first, fault_file):
        word, clean = planted_fault(pd.read_parquet(settings.layout.gold / "test.parquet"), likes)
        client = Client(server.url, clean, k=2)
        client.start()
        try:
            fault_file.write_text(word)  # switched on in the running server
            second = night(settings, 2, conf)
        finally:
            client.stop()
        served = httpx.get(server.url + "/v1/serving", timeout=10).json()
        answer = httpx.post(server.url + "/v1/predict", json={"rows": clean[:1]}, timeout=10).json()

    assert first["classes"] == ["0", "1"] and first["test"]["challenger"]["roc_auc"] > 0.9, first["test"]
    assert 0 <= answer["predictions"][0]["score"] <= 1 and answer["predictions"][0]["probabilities"] is None
    assert_rolled_back_unjudged(second, word)
    reg = Registry(settings)
    state = reg.state()
    assert state["prod_model"] == "model-v1" and state["current_data"] == "data-v1", state
    entry = reg.held()["batch-0002"]  # unjudged: waiting to re-enter, not counted as a rejection
    assert (entry["status"], len(entry["rejections"]), entry["reenter"]) == ("held", 0, True), entry
    assert "champion itself is failing" in entry["not_judged"]["reason"], entry
    assert served["variants"]["champion"]["model_version"] == "model-v1" and "challenger" not in served["variants"]
    assert client.sent > 50 and (client.failed, client.unready) == (0, 0), client.errors[:5]


@pytest.mark.slow
def test_a_bag_of_embeddings_model_on_two_text_classes_behind_replicas_held_back_then_rolled_back(
    settings, tmp_path, monkeypatch
):
    """likes (2 classes, text) with the bag-of-embeddings plug-in; two replicas behind HAProxy from the first
    model on, an independent client counting every answer that is not a probability:

        night 1  the first model, deployed with its tokenizer (sha256 in the served file's metadata)
        night 2  the evaluate gate's floor raised past any model: rejected (never registered), prod kept,
                 its batch held
        night 3  the held batch re-enters beside the new one; a planted serving fault on both replicas
                 fails requests of both variants: cannot judge, roll back; every replica still serves
                 model-v1's file with model-v1's tokenizer
    (The faster sibling of tests/datasets/test_reviews.py's rejected text model, in the extended tier.)"""
    import pandas as pd

    from ops.model_server import server_env
    from ops.replicas import ReplicaSet
    from tasks.core.params import load_params
    from tasks.models import load_model
    from tasks.models.artifact import read_metadata
    from tests.toy import fault

    conf = {"epochs": 6}
    write = functools.partial(likes_params, tmp_path, MOODS_BOW)
    params = write()
    begin(settings, monkeypatch, params)
    first = night(settings, 1, conf)
    assert first["outcome"] == "deployed model-v1", first["outcome"]
    reg = Registry(settings)
    champion = reg.state()["serving"]["champion"]
    served_file = reg.model_path("model-v1", Path(champion["artifact"]).name)
    tokenizer = read_metadata(served_file)["tokenizer_sha256"]

    fault_file = tmp_path / "fault-word"
    word, clean = planted_fault(pd.read_parquet(settings.layout.gold / "test.parquet"), likes)
    env = server_env(settings.home, params) | {fault.FAULT_FILE: str(fault_file)}
    with ReplicaSet(settings.home, load_params(params), env) as rs:
        rs.start(2)
        client = Client(rs.url, clean, k=2)
        client.start()
        try:
            _, third = held_back_then_reentered(
                settings, tmp_path, write, conf, on_third=lambda: fault_file.write_text(word)
            )
        finally:
            client.stop()
            fault_file.unlink(missing_ok=True)
        served = {name: httpx.get(r.url + "/v1/serving", timeout=10).json() for name, r in rs.replicas.items()}

    assert_rolled_back_unjudged(third, word)
    assert reg.tags("model") == ["model-v1", "model-v2"]  # the rejected model was never registered
    assert reg.model_version_info("model-v2")["run_id"] == third["run_id"]
    state = reg.state()
    assert state["prod_model"] == "model-v1" and state["current_data"] == "data-v1", state
    assert state["serving"]["champion"] == champion and not state["serving"].get("challenger")
    held = reg.held()
    assert {b: (e["status"], len(e["rejections"])) for b, e in held.items()} == {
        "batch-0002": ("held", 1),
        "batch-0003": ("held", 0),
    }, held
    for v in served.values():
        assert v["variants"]["champion"]["model_version"] == "model-v1" and "challenger" not in v["variants"], served
    assert read_metadata(served_file)["tokenizer_sha256"] == tokenizer
    assert load_model(reg.model_path("model-v1", "model.pt")).tokenizer_sha256 == tokenizer
    assert client.sent > 100 and (client.failed, client.unready) == (0, 0), client.errors[:5]
