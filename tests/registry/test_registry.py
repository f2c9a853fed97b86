import hashlib
import json
import subprocess

import numpy as np
import pandas as pd
import pytest

from tasks.registry import DEFAULT_DATASET, Registry, RegistryError, check_version


def partition(tmp_path, name, n=20, seed=0):
    rng = np.random.default_rng(seed)
    df = pd.DataFrame(
        {"email_id": np.arange(n) + seed * 1000, "label": rng.integers(0, 2, n), "label_prob": rng.random(n)}
    )
    path = tmp_path / f"{name}.parquet"
    df.to_parquet(path, index=False)
    return path, df


def test_snapshots_accumulate_partitions_as_tagged_versions(settings, tmp_path):
    reg = Registry(settings)
    p1, df1 = partition(tmp_path, "b1", seed=1)
    p2, df2 = partition(tmp_path, "b2", seed=2)
    v1 = reg.snapshot({"batch-0001": p1}, {"rows_by_batch": {"batch-0001": len(df1)}})
    v2 = reg.snapshot({"batch-0002": p2}, {"rows_by_batch": {"batch-0002": len(df2)}})
    assert (v1["data_version"], v2["data_version"]) == ("data-v1", "data-v2")
    assert reg.tags("data") == ["data-v1", "data-v2"]
    assert reg.state()["current_data"] == "data-v2"
    assert [p["batch_id"] for p in reg.data_version_info("data-v2")["partitions"]] == ["batch-0001", "batch-0002"]
    # Reading a version by tag gives exactly its partitions, old versions stay readable.
    pd.testing.assert_frame_equal(reg.read_data_version("data-v1"), df1)
    pd.testing.assert_frame_equal(reg.read_data_version("data-v2"), pd.concat([df1, df2], ignore_index=True))
    # Pushed to the DVC remote: one object per partition (plus nothing else).
    objects = [p for p in (settings.layout.dvc_remote / "files" / "md5").rglob("*") if p.is_file()]
    assert len(objects) == 2


def test_snapshot_retry_creates_no_duplicate(settings, tmp_path):
    reg = Registry(settings)
    p1, df1 = partition(tmp_path, "b1")
    first = reg.snapshot({"batch-0001": p1}, {"rows_by_batch": {"batch-0001": len(df1)}})
    again = reg.snapshot({"batch-0001": p1}, {"rows_by_batch": {"batch-0001": len(df1)}})
    assert first["created"] and not again["created"]
    assert again["data_version"] == "data-v1" and reg.tags("data") == ["data-v1"]


def test_interrupted_transaction_is_rolled_back(settings, tmp_path):
    reg = Registry(settings)
    p1, df1 = partition(tmp_path, "b1")
    reg.snapshot({"batch-0001": p1}, {"rows_by_batch": {"batch-0001": len(df1)}})
    head = reg.git("rev-parse", "HEAD")
    # What a kill after `dvc add` and before the commit leaves behind:
    (reg.root / "data" / DEFAULT_DATASET / "batch-0002.parquet").write_bytes(b"half")
    (reg.root / "data" / DEFAULT_DATASET / "batch-0002.parquet.dvc").write_text("outs: []\n")
    (reg.root / "registry.json").write_text('{"current_data": "data-v9"}')
    p2, df2 = partition(tmp_path, "b2", seed=2)
    v2 = reg.snapshot({"batch-0002": p2}, {"rows_by_batch": {"batch-0002": len(df2)}})
    assert v2["data_version"] == "data-v2" and v2["parent"] == "data-v1"
    assert reg.git("rev-parse", "HEAD~1") == head
    pd.testing.assert_frame_equal(reg.read_data_version("data-v2"), pd.concat([df1, df2], ignore_index=True))


def test_models_register_promote_and_stay_immutable(settings, tmp_path):
    reg = Registry(settings)
    art = tmp_path / "model.int8.onnx"
    art.write_bytes(b"onnx-bytes")
    m1 = reg.register_model("run-1", {"model.int8.onnx": art}, {"data_version": "data-v1", "metrics": {}})
    assert m1["model_version"] == "model-v1" and reg.state()["models"]["model-v1"]["stage"] == "candidate"
    assert reg.register_model("run-1", {"model.int8.onnx": art}, {"data_version": "data-v1"})["created"] is False
    reg.promote("model-v1", "test")
    m2 = reg.register_model("run-2", {"model.int8.onnx": art}, {"data_version": "data-v2"})
    reg.promote(m2["model_version"], "test")
    state = reg.state()
    assert state["prod_model"] == "model-v2"
    assert state["models"] == {"model-v1": {"stage": "archived"}, "model-v2": {"stage": "prod"}}
    assert reg.model_version_info("model-v1")["data_version"] == "data-v1"
    assert reg.promote("model-v2", "again")["changed"] is False  # idempotent
    audit = [json.loads(line) for line in (reg.root / "audit.jsonl").read_text().splitlines()]
    assert [a["action"] for a in audit] == ["register", "promote", "register", "promote"]
    assert reg.model_path("model-v2", "model.int8.onnx").read_bytes() == b"onnx-bytes"


@pytest.mark.parametrize("bad", ["../data-v1", "data-v0", "data-v1/../../x", "data-1", "", "DATA-V1", "data-v1 "])
def test_malformed_versions_are_refused(bad):
    with pytest.raises(RegistryError, match="is not a data version"):
        check_version("data", bad)


def test_unknown_versions_are_refused(settings):
    reg = Registry(settings)
    reg.ensure()
    with pytest.raises(RegistryError, match="does not exist"):
        reg.data_version_info("data-v7")
    with pytest.raises(RegistryError, match="does not exist"):
        reg.promote("model-v3", "nope")
    assert reg.state()["prod_model"] is None


def test_unsafe_batch_id_is_refused(settings, tmp_path):
    p1, _ = partition(tmp_path, "b1")
    with pytest.raises(RegistryError, match="not a safe name"):
        Registry(settings).snapshot({"../escape": p1}, {})


def test_registry_commits_have_an_identity_without_global_git_config(settings, tmp_path, monkeypatch):
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "no-global-gitconfig"))
    p1, df1 = partition(tmp_path, "b1")
    Registry(settings).snapshot({"batch-0001": p1}, {"rows_by_batch": {"batch-0001": len(df1)}})
    author = subprocess.run(
        ["git", "-C", str(settings.layout.registry), "log", "-1", "--format=%an"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert author == "sluice-pipeline"


def _two_versions_each(reg, tmp_path):
    art = tmp_path / "model.int8.onnx"
    art.write_bytes(b"onnx")
    for i in (1, 2):
        p, df = partition(tmp_path, f"b{i}", seed=i)
        reg.snapshot({f"batch-000{i}": p}, {"rows_by_batch": {f"batch-000{i}": len(df)}})
        m = reg.register_model(f"run-{i}", {"model.int8.onnx": art}, {"data_version": f"data-v{i}"})
        reg.promote(m["model_version"], "test")


def test_rollback_moves_data_model_and_serving_together_once(settings, tmp_path):
    reg = Registry(settings)
    _two_versions_each(reg, tmp_path)
    tags_before = reg.tags("data") + reg.tags("model")
    r = reg.rollback("data-v1", "model-v1", "bad labels in batch 2", who="alice")
    assert r["changed"] and r["from"] == {"data_version": "data-v2", "model_version": "model-v2"}
    state = reg.state()
    assert (state["current_data"], state["prod_model"]) == ("data-v1", "model-v1")
    assert state["serving"] == {
        "champion": {
            "model_version": "model-v1",
            "artifact": "models/model-v1/model.int8.onnx",
            "sha256": hashlib.sha256(b"onnx").hexdigest(),
        },
        "challenger": None,
        "challenger_weight": 0,
        "mode": "split",
    }
    assert state["models"] == {"model-v1": {"stage": "prod"}, "model-v2": {"stage": "rolled_back"}}
    assert reg.tags("data") + reg.tags("model") == tags_before  # nothing deleted
    last = json.loads((reg.root / "audit.jsonl").read_text().splitlines()[-1])
    assert last["action"] == "rollback" and last["who"] == "alice" and last["reason"] == "bad labels in batch 2"
    assert last["to"] == {"data_version": "data-v1", "model_version": "model-v1"}
    head = reg.git("rev-parse", "HEAD")
    assert reg.rollback("data-v1", "model-v1", "again")["changed"] is False  # harmless twice
    assert reg.git("rev-parse", "HEAD") == head
    # The next snapshot builds on the rolled-back data version.
    p3, df3 = partition(tmp_path, "b3", seed=3)
    v3 = reg.snapshot({"batch-0003": p3}, {"rows_by_batch": {"batch-0003": len(df3)}})
    assert v3["parent"] == "data-v1"
    assert [p["batch_id"] for p in v3["partitions"]] == ["batch-0001", "batch-0003"]


@pytest.mark.parametrize(
    "data, model, match",
    [
        ("data-v9", None, "no such data version"),
        (None, "model-v9", "no such model version"),
        ("../../etc", None, "not a data version"),
        (None, "model-v1; rm -rf /", "not a model version"),
        (None, None, "needs a data version, a model version, or both"),
    ],
)
def test_bad_rollback_changes_nothing(settings, tmp_path, data, model, match):
    reg = Registry(settings)
    _two_versions_each(reg, tmp_path)
    head, state = reg.git("rev-parse", "HEAD"), reg.state()
    with pytest.raises(RegistryError, match=match):
        reg.rollback(data, model, "test")
    assert reg.git("rev-parse", "HEAD") == head and reg.state() == state


def test_a_clone_with_an_empty_cache_streams_a_version_from_the_remote(settings, tmp_path):
    reg = Registry(settings)
    p1, df1 = partition(tmp_path, "b1", seed=1)
    p2, df2 = partition(tmp_path, "b2", seed=2)
    reg.snapshot({"batch-0001": p1, "batch-0002": p2}, {"rows_by_batch": {"batch-0001": 20, "batch-0002": 20}})
    # Nothing of the pipeline's disk but the git repo (as a pod would clone it) and the remote.
    clone = tmp_path / "pod-clone"
    subprocess.run(["git", "clone", "-q", str(reg.root), str(clone)], check=True)
    got = Registry(settings).read_data_version("data-v1", repo_url=str(clone))
    pd.testing.assert_frame_equal(got, pd.concat([df1, df2], ignore_index=True))
    assert not (clone / ".dvc" / "cache").exists() or not any((clone / ".dvc" / "cache").rglob("*.parquet"))


def test_versions_are_mirrored_to_a_git_remote_that_pods_read_through(settings, tmp_path, monkeypatch):
    """SLUICE_REGISTRY_GIT_REMOTE: the branch and tags go to a git server (here a bare repository)
    after their data reached the DVC remote; a reader with only that URL gets the versions."""
    from tasks.core.settings import Settings

    bare = tmp_path / "server" / "registry.git"
    subprocess.run(["git", "init", "-q", "--bare", str(bare)], check=True)
    monkeypatch.setenv("SLUICE_REGISTRY_GIT_REMOTE", str(bare))
    reg = Registry(Settings.from_env())
    p1, df1 = partition(tmp_path, "b1", seed=1)
    reg.snapshot({"batch-0001": p1}, {"rows_by_batch": {"batch-0001": 20}})
    art = tmp_path / "model.pt"
    art.write_bytes(b"weights")
    reg.register_model("run-1", {"model.pt": art}, {"data_version": "data-v1"})
    refs = subprocess.run(["git", "ls-remote", str(bare)], capture_output=True, text=True, check=True).stdout
    assert "refs/heads/main" in refs and "refs/tags/data-v1" in refs and "refs/tags/model-v1" in refs
    pd.testing.assert_frame_equal(reg.read_data_version("data-v1", repo_url=str(bare)), df1)
    assert reg.read_model_artifact("model-v1", "model.pt", repo_url=str(bare)) == b"weights"


def test_nightly_model_rejection_rolls_data_back_to_prods_lineage(settings, tmp_path):
    from tasks.core.context import StepContext
    from tasks.core.records import EvaluateRecord
    from tasks.reject_model import reject_model

    reg = Registry(settings)
    art = tmp_path / "model.int8.onnx"
    art.write_bytes(b"onnx")
    p1, df1 = partition(tmp_path, "b1", seed=1)
    reg.snapshot({"batch-0001": p1}, {"rows_by_batch": {"batch-0001": len(df1)}})
    reg.promote(reg.register_model("r1", {"model.int8.onnx": art}, {"data_version": "data-v1"})["model_version"], "t")
    p2, df2 = partition(tmp_path, "b2", seed=2)
    reg.snapshot({"batch-0002": p2}, {"rows_by_batch": {"batch-0002": len(df2)}})  # tonight's data
    gate = EvaluateRecord.model_construct(
        passed=False, reasons=["test ROC AUC 0.61 is below the floor 0.70"], champion_version="model-v1"
    )
    out = reject_model(StepContext.create("run-2", settings), evaluate=gate)
    assert out.rolled_back and out.prod_model == "model-v1" and out.current_data == "data-v1" and out.gate == "evaluate"
    last = json.loads((reg.root / "audit.jsonl").read_text().splitlines()[-1])
    assert last["action"] == "rollback" and last["who"] == "nightly_pipeline" and "below the floor" in last["reason"]
    assert reg.tags("data") == ["data-v1", "data-v2"]  # the rejected data version is kept


def test_rejection_without_a_prod_model_changes_nothing(settings, tmp_path):
    from tasks.core.context import StepContext
    from tasks.core.records import CompressRecord, EvaluateRecord
    from tasks.reject_model import reject_model

    reg = Registry(settings)
    p1, df1 = partition(tmp_path, "b1", seed=1)
    reg.snapshot({"batch-0001": p1}, {"rows_by_batch": {"batch-0001": len(df1)}})
    passed = EvaluateRecord.model_construct(passed=True, reasons=[], champion_version=None)
    out = reject_model(
        StepContext.create("run-1", settings),
        evaluate=passed,
        compress=CompressRecord.model_construct(passed=False, reasons=["int8 drop"]),
    )
    assert not out.rolled_back and out.prod_model is None and out.current_data == "data-v1" and out.gate == "compress"


def test_stale_git_lock_of_a_killed_command_is_cleared(settings, tmp_path):
    reg = Registry(settings)
    p1, df1 = partition(tmp_path, "b1", seed=1)
    reg.snapshot({"batch-0001": p1}, {"rows_by_batch": {"batch-0001": len(df1)}})
    (reg.root / ".git" / "index.lock").write_text("")  # what a SIGKILLed `git add` leaves
    (reg.root / ".git" / "refs" / "heads" / "main.lock").write_text("")
    p2, df2 = partition(tmp_path, "b2", seed=2)
    assert reg.snapshot({"batch-0002": p2}, {"rows_by_batch": {"batch-0002": len(df2)}})["data_version"] == "data-v2"
    assert not (reg.root / ".git" / "index.lock").exists()


def test_dvc_rwlock_cut_short_by_a_killed_command_is_cleared(settings, tmp_path):
    """A `dvc add` SIGKILLed while rewriting .dvc/tmp/rwlock leaves it empty: DVC then refuses every
    command (RWLockFileCorruptedError). Seen in CI in test_killed_snapshots_leave_old_or_new_state."""
    reg = Registry(settings)
    p1, df1 = partition(tmp_path, "b1", seed=1)
    reg.snapshot({"batch-0001": p1}, {"rows_by_batch": {"batch-0001": len(df1)}})
    (reg.root / ".dvc" / "tmp").mkdir(exist_ok=True)
    (reg.root / ".dvc" / "tmp" / "rwlock").write_text("")
    p2, df2 = partition(tmp_path, "b2", seed=2)
    assert reg.snapshot({"batch-0002": p2}, {"rows_by_batch": {"batch-0002": len(df2)}})["data_version"] == "data-v2"
    pd.testing.assert_frame_equal(reg.read_data_version("data-v2"), pd.concat([df1, df2], ignore_index=True))


def test_a_rollback_reports_every_problem_at_once(settings):
    from tasks.registry import RegistryError

    with pytest.raises(RegistryError) as err:
        Registry(settings).rollback("data-x", "model-0", "  ")
    msg = str(err.value)
    assert "'data-x' is not a data version" in msg and "'model-0' is not a model version" in msg
    assert "needs a reason" in msg


def test_files_hidden_by_an_untracked_gitignore_of_a_killed_dvc_add_are_cleaned(settings, tmp_path):
    """A `dvc add` killed after writing models/<v>/.gitignore, before staging it: one `git clean`
    removes the .gitignore but not the file it hid, which then shows up untracked. Seen in CI in
    test_killed_registrations_and_promotions_leave_old_or_new_state ('?? models/')."""
    reg = Registry(settings)
    p1, df1 = partition(tmp_path, "b1", seed=1)
    reg.snapshot({"batch-0001": p1}, {"rows_by_batch": {"batch-0001": len(df1)}})
    folder = reg.root / "models" / "model-v1"
    folder.mkdir(parents=True)
    (folder / "model.int8.onnx").write_bytes(b"killed run's model")
    (folder / ".gitignore").write_text("/model.int8.onnx\n")
    with reg.transaction():
        pass
    assert reg.git("status", "--porcelain") == ""
    assert not (reg.root / "models").exists()
