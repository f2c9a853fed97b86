"""The serving state for canary releases: champion, challenger, weight, mode; on a real git + DVC registry."""

import hashlib
import json
import shutil

import pytest

from tasks.registry import SERVED_ARTIFACT, Registry, RegistryError, serving_state
from tests.registry.test_registry import partition


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def audit(reg):
    return [json.loads(line) for line in (reg.root / "audit.jsonl").read_text().splitlines()]


def models(reg, tmp_path, n):
    """n registered model versions, model-vK's int8 artifact holding b"onnx-K"; model-v1 promoted."""
    for k in range(1, n + 1):
        art = tmp_path / f"m{k}" / SERVED_ARTIFACT
        art.parent.mkdir()
        art.write_bytes(f"onnx-{k}".encode())
        reg.register_model(f"run-{k}", {SERVED_ARTIFACT: art}, {"data_version": "data-v1"})
    reg.promote("model-v1", "first model")


def pointer(k):
    return {
        "model_version": f"model-v{k}",
        "artifact": f"models/model-v{k}/{SERVED_ARTIFACT}",
        "sha256": sha(f"onnx-{k}".encode()),
    }


@pytest.fixture
def reg(settings, tmp_path):
    reg = Registry(settings)
    models(reg, tmp_path, 3)
    return reg


def test_register_records_each_artifacts_sha256_and_size(settings, tmp_path):
    reg = Registry(settings)
    pt, onnx = tmp_path / "model.pt", tmp_path / SERVED_ARTIFACT
    pt.write_bytes(b"weights" * 1000)
    onnx.write_bytes(b"onnx-bytes")
    info = reg.register_model("run-1", {"model.pt": pt, SERVED_ARTIFACT: onnx}, {"data_version": "data-v1"})
    want = {
        "model.pt": {"sha256": sha(b"weights" * 1000), "bytes": 7000},
        SERVED_ARTIFACT: {"sha256": sha(b"onnx-bytes"), "bytes": 10},
    }
    assert info["artifacts"] == want
    assert reg.model_version_info("model-v1")["artifacts"] == want  # in the tagged record
    for name, digest in want.items():  # and matching the registered files
        assert sha(reg.model_path("model-v1", name).read_bytes()) == digest["sha256"]
        assert sha(reg.read_model_artifact("model-v1", name)) == digest["sha256"]
    promoted = reg.promote("model-v1", "first")
    assert promoted["serving"]["champion"]["sha256"] == sha(b"onnx-bytes")
    assert reg.state()["serving"]["champion"]["sha256"] == sha(reg.model_path("model-v1", SERVED_ARTIFACT).read_bytes())


def test_start_canary_serves_a_challenger_beside_the_champion_once(reg):
    head, lines = reg.git("rev-parse", "HEAD"), len(audit(reg))
    out = reg.start_canary("model-v2", 10, reason="nightly run 7")
    assert out["changed"]
    serving = reg.state()["serving"]
    assert serving == {"champion": pointer(1), "challenger": pointer(2), "challenger_weight": 10, "mode": "split"}
    assert reg.state()["prod_model"] == "model-v1"  # prod does not move
    assert reg.state()["models"]["model-v2"]["stage"] == "canary"
    assert reg.git("rev-parse", "HEAD~1") == head and reg.git("status", "--porcelain") == ""  # one commit
    last = audit(reg)[-1]
    assert len(audit(reg)) == lines + 1 and last["action"] == "start_canary"
    assert (last["model_version"], last["weight"], last["mode"], last["reason"]) == (
        "model-v2",
        10,
        "split",
        "nightly run 7",
    )
    head = reg.git("rev-parse", "HEAD")
    assert reg.start_canary("model-v2", 10, reason="retry")["changed"] is False  # idempotent
    assert reg.git("rev-parse", "HEAD") == head and len(audit(reg)) == lines + 1
    # The same challenger again with another mode: updated in place.
    assert reg.start_canary("model-v2", 25, "shadow", "mirror instead")["changed"]
    assert reg.state()["serving"]["mode"] == "shadow" and reg.state()["serving"]["challenger_weight"] == 25


def test_set_canary_weight_moves_the_share_only(reg):
    reg.start_canary("model-v2", 5, reason="start")
    head = reg.git("rev-parse", "HEAD")
    out = reg.set_canary_weight(50, "metrics look good", who="alice")
    assert out["changed"] and out["from"]["challenger_weight"] == 5
    serving = reg.state()["serving"]
    assert serving == {"champion": pointer(1), "challenger": pointer(2), "challenger_weight": 50, "mode": "split"}
    assert reg.git("rev-parse", "HEAD~1") == head
    last = audit(reg)[-1]
    assert (last["action"], last["who"], last["previous"], last["weight"]) == ("set_canary_weight", "alice", 5, 50)
    head = reg.git("rev-parse", "HEAD")
    assert reg.set_canary_weight(50, "again")["changed"] is False
    assert reg.git("rev-parse", "HEAD") == head


def test_promote_makes_the_challenger_champion_and_clears_it(reg):
    reg.start_canary("model-v2", 30, reason="start")
    lines = len(audit(reg))
    out = reg.promote("model-v2", "canary analysis passed")
    assert out["changed"] and out["previous"] == "model-v1"
    state = reg.state()
    assert state["prod_model"] == "model-v2"
    assert state["serving"] == {"champion": pointer(2), "challenger": None, "challenger_weight": 0, "mode": "split"}
    assert state["models"]["model-v1"]["stage"] == "archived" and state["models"]["model-v2"]["stage"] == "prod"
    assert len(audit(reg)) == lines + 1 and audit(reg)[-1]["challenger"] == "model-v2"
    assert reg.promote("model-v2", "again")["changed"] is False


def test_promote_of_another_version_displaces_the_challenger(reg):
    reg.start_canary("model-v2", 30, reason="start")
    reg.promote("model-v3", "hotfix")
    state = reg.state()
    assert state["serving"]["champion"] == pointer(3) and state["serving"]["challenger"] is None
    assert {v: m["stage"] for v, m in state["models"].items()} == {
        "model-v1": "archived",
        "model-v2": "archived",
        "model-v3": "prod",
    }


def test_promote_of_the_champion_clears_a_challenger(reg):
    reg.start_canary("model-v2", 30, reason="start")
    assert reg.promote("model-v1", "keep the champion")["changed"]
    assert reg.state()["serving"] == {
        "champion": pointer(1),
        "challenger": None,
        "challenger_weight": 0,
        "mode": "split",
    }


def test_rollback_canary_retires_the_challenger(reg):
    reg.start_canary("model-v2", 20, "shadow", reason="start")
    head, lines = reg.git("rev-parse", "HEAD"), len(audit(reg))
    out = reg.rollback_canary("p99 latency over budget", who="nightly_pipeline")
    assert out["changed"] and out["retired"] == "model-v2" and out["champion"] == "model-v1"
    assert out["from"]["challenger"] == pointer(2)
    state = reg.state()
    assert state["serving"] == {"champion": pointer(1), "challenger": None, "challenger_weight": 0, "mode": "split"}
    assert state["prod_model"] == "model-v1" and state["models"]["model-v2"]["stage"] == "rolled_back"
    assert reg.git("rev-parse", "HEAD~1") == head and len(audit(reg)) == lines + 1
    last = audit(reg)[-1]
    assert (last["action"], last["model_version"], last["who"]) == ("rollback_canary", "model-v2", "nightly_pipeline")
    head = reg.git("rev-parse", "HEAD")
    again = reg.rollback_canary("again")
    assert again["changed"] is False and again["retired"] is None and reg.git("rev-parse", "HEAD") == head
    # A retired challenger can be tried again later.
    assert reg.start_canary("model-v2", 5, reason="retry with a fix in the server")["changed"]


def test_operator_rollback_sets_the_champion_and_clears_the_challenger(reg, settings, tmp_path):
    p1, df1 = partition(tmp_path, "b1", seed=1)
    reg.snapshot({"batch-0001": p1}, {"rows_by_batch": {"batch-0001": len(df1)}})
    reg.promote("model-v2", "nightly")
    reg.start_canary("model-v3", 40, reason="nightly")
    from tasks.core.context import StepContext
    from tasks.rollback import rollback

    out = rollback(StepContext.create("r", settings), model_version="model-v1", reason="bad model family", who="alice")
    assert out.changed and out.retired_challenger == "model-v3"
    state = reg.state()
    assert state["prod_model"] == "model-v1"
    assert state["serving"] == {"champion": pointer(1), "challenger": None, "challenger_weight": 0, "mode": "split"}
    assert {v: m["stage"] for v, m in state["models"].items()} == {
        "model-v1": "prod",
        "model-v2": "rolled_back",
        "model-v3": "rolled_back",
    }
    assert audit(reg)[-1]["challenger"] == "model-v3"
    assert reg.rollback(None, "model-v1", "again")["changed"] is False


def test_a_data_only_rollback_keeps_the_champion_and_clears_the_challenger(reg, tmp_path):
    for i in (1, 2):
        p, df = partition(tmp_path, f"b{i}", seed=i)
        reg.snapshot({f"batch-000{i}": p}, {"rows_by_batch": {f"batch-000{i}": len(df)}})
    reg.start_canary("model-v2", 40, reason="nightly")
    out = reg.rollback("data-v1", None, "bad batch 2")
    assert out["changed"] and out["to"] == {"data_version": "data-v1", "model_version": "model-v1"}
    assert reg.state()["serving"] == {
        "champion": pointer(1),
        "challenger": None,
        "challenger_weight": 0,
        "mode": "split",
    }


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda r: r.start_canary("model-v9", 10, reason="x"), "model-v9 does not exist"),
        (lambda r: r.start_canary("model-v1", 10, reason="x"), "it is the champion"),
        (lambda r: r.start_canary("../model-v2", 10, reason="x"), "not a model version"),
        (lambda r: r.start_canary("model-v2", 101, reason="x"), "integer percent 0..100"),
        (lambda r: r.start_canary("model-v2", -1, reason="x"), "integer percent 0..100"),
        (lambda r: r.start_canary("model-v2", 12.5, reason="x"), "integer percent 0..100"),
        (lambda r: r.start_canary("model-v2", True, reason="x"), "integer percent 0..100"),
        (lambda r: r.start_canary("model-v2", 10, "ab", "x"), "one of split, shadow"),
        (lambda r: r.start_canary("model-v2", 10), "needs a reason"),
        (lambda r: r.start_canary("model-v2", 10, reason="  "), "needs a reason"),
        (lambda r: r.start_canary("model-v2", 10, reason="x", artifact="model.fp32.onnx"), "has no artifact"),
        (
            lambda r: r.start_canary("model-v2", 10, reason="x", artifact="../model-v1/model.int8.onnx"),
            "not an artifact name",
        ),
        (lambda r: r.set_canary_weight(10, "x"), "there is no challenger"),
        (lambda r: r.promote("model-v2", "x", artifact="model.pt"), "has no artifact"),
    ],
)
def test_refusals_change_nothing(reg, call, match):
    head, state, lines = reg.git("rev-parse", "HEAD"), reg.state(), len(audit(reg))
    with pytest.raises(RegistryError, match=match):
        call(reg)
    assert reg.git("rev-parse", "HEAD") == head and reg.state() == state and len(audit(reg)) == lines


def test_a_second_challenger_is_refused(reg):
    reg.start_canary("model-v2", 10, reason="x")
    head = reg.git("rev-parse", "HEAD")
    with pytest.raises(RegistryError, match="model-v2 is already the challenger"):
        reg.start_canary("model-v3", 10, reason="x")
    with pytest.raises(RegistryError, match="weight must be an integer"):
        reg.set_canary_weight(200, "x")
    assert reg.git("rev-parse", "HEAD") == head


def test_no_canary_without_a_champion(settings, tmp_path):
    reg = Registry(settings)
    art = tmp_path / SERVED_ARTIFACT
    art.write_bytes(b"onnx")
    reg.register_model("run-1", {SERVED_ARTIFACT: art}, {"data_version": "data-v1"})
    with pytest.raises(RegistryError, match="no champion yet"):
        reg.start_canary("model-v1", 10, reason="x")
    assert reg.state()["serving"] == {"champion": None, "challenger": None, "challenger_weight": 0, "mode": "split"}


@pytest.mark.parametrize(
    "raw, want",
    [
        (None, {"champion": None, "challenger": None, "challenger_weight": 0, "mode": "split"}),
        (
            {"model_version": "model-v2", "artifact": "models/model-v2/model.int8.onnx"},
            {
                "champion": {
                    "model_version": "model-v2",
                    "artifact": "models/model-v2/model.int8.onnx",
                    "sha256": None,
                },
                "challenger": None,
                "challenger_weight": 0,
                "mode": "split",
            },
        ),
        (
            {"model_version": None, "artifact": None},
            {"champion": None, "challenger": None, "challenger_weight": 0, "mode": "split"},
        ),
        (
            {
                "champion": {"model_version": "model-v1", "artifact": "models/model-v1/x.onnx", "sha256": "ab"},
                "challenger": {"model_version": "model-v2", "artifact": "models/model-v2/x.onnx", "sha256": "cd"},
                "challenger_weight": 20,
                "mode": "shadow",
            },
            {
                "champion": {"model_version": "model-v1", "artifact": "models/model-v1/x.onnx", "sha256": "ab"},
                "challenger": {"model_version": "model-v2", "artifact": "models/model-v2/x.onnx", "sha256": "cd"},
                "challenger_weight": 20,
                "mode": "shadow",
            },
        ),
    ],
)
def test_serving_state_normalizes_the_old_shape(raw, want):
    state = {"current_data": None, "prod_model": None, "serving": raw, "models": {}}
    before = json.dumps(state)
    assert serving_state(state) == want
    assert json.dumps(state) == before  # pure


def test_serving_state_of_nothing_is_empty():
    empty = {"champion": None, "challenger": None, "challenger_weight": 0, "mode": "split"}
    assert serving_state(None) == serving_state({}) == serving_state({"serving": {}}) == empty


def test_a_registry_made_by_the_previous_code_still_reads_and_moves_on(settings, tmp_path):
    """Pre-canary registry: serving {"model_version", "artifact"}, model records listing artifact names."""
    reg = Registry(settings)
    art = tmp_path / SERVED_ARTIFACT
    art.write_bytes(b"old-onnx")
    with reg.transaction():  # what the previous register + promote wrote
        folder = reg.root / "models" / "model-v1"
        folder.mkdir(parents=True)
        shutil.copyfile(art, folder / SERVED_ARTIFACT)
        with reg._dvc() as repo:
            repo.add(str(folder))
        (reg.root / "models" / "model-v1.json").write_text(
            json.dumps(
                {"version": "model-v1", "run_id": "old", "artifacts": [SERVED_ARTIFACT], "data_version": "data-v1"}
            )
        )
        (reg.root / "registry.json").write_text(
            json.dumps(
                {
                    "current_data": None,
                    "prod_model": "model-v1",
                    "models": {"model-v1": {"stage": "prod"}},
                    "serving": {"model_version": "model-v1", "artifact": f"models/model-v1/{SERVED_ARTIFACT}"},
                }
            )
        )
        reg._commit("model-v1: register from run old", tag="model-v1")
    old = {"model_version": "model-v1", "artifact": f"models/model-v1/{SERVED_ARTIFACT}", "sha256": None}
    assert reg.state()["serving"] == {"champion": old, "challenger": None, "challenger_weight": 0, "mode": "split"}

    new = tmp_path / "new" / SERVED_ARTIFACT
    new.parent.mkdir()
    new.write_bytes(b"new-onnx")
    reg.register_model("run-2", {SERVED_ARTIFACT: new}, {"data_version": "data-v1"})
    reg.start_canary("model-v2", 10, reason="first canary on an old registry")
    serving = json.loads((reg.root / "registry.json").read_text())["serving"]  # written in the new shape
    assert serving["champion"] == old and serving["challenger"]["sha256"] == sha(b"new-onnx")
    # Going back to the old model fills in its sha256 from the registered file.
    reg.rollback(None, "model-v1", "back to the old model")
    assert reg.state()["serving"]["champion"]["sha256"] == sha(b"old-onnx")
    with pytest.raises(RegistryError, match="has no artifact 'model.pt'"):
        reg.promote("model-v1", "x", artifact="model.pt")
