"""Reproducing a model version from its record (tasks/reproduction, `python -m tasks.reproduce`).

One nightly-like run through the steps (bench/reproduce.py `nightly_like`, 3 epochs, 2 processes)
makes model-v1; it is reproduced bit-identically from its recorded commit in a git worktree, and
with another world size (named in the verdict, metrics within tolerance); a model trained under fsdp2
reproduces bit-identically too. Records that cannot be reproduced (edited params, a missing data
version, an unknown commit) are refused, naming why.
"""

import copy
import json
import os
import subprocess
import sys

import pytest

from bench.reproduce import nightly_like
from tasks.core.settings import REPO_ROOT, Settings
from tasks.registry import Registry
from tasks.reproduction import TOLERANCE, ReproductionError, make_plan, reproduce_model


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    home = tmp_path_factory.mktemp("reproduce") / "home"
    with pytest.MonkeyPatch.context() as mp:
        for k, v in {"SLUICE_HOME": str(home), "DVC_NO_ANALYTICS": "1", "GX_ANALYTICS_ENABLED": "false"}.items():
            mp.setenv(k, v)
        mp.delenv("SLUICE_PARAMS", raising=False)
        settings = Settings.from_env()
        records = nightly_like(settings, "night-1")
        yield settings, records


@pytest.mark.slow  # `built` trains with torchrun (two processes), shared with the slow tests below
def test_the_record_holds_the_inputs_not_only_hashes(built):
    settings, records = built
    info = Registry(settings).model_version_info(records["register"].model_version)
    rep = info["reproduce"]
    assert rep["params"]["train"]["epochs"] == 3  # the resolved params, after overrides
    assert rep["params_digest"] == info["params_hash"]
    assert rep["world_size"] == 2 and rep["device"] == "cpu" and rep["warm_start"] is None
    assert rep["contracts"] and rep["lf_module"]["module"] and rep["lf_module"]["hash"]
    assert rep["dataset"]["module"] == "tasks.plugins.emails" and rep["dataset"]["source_sha256"]
    assert set(rep["versions"]) >= {"torch", "onnxruntime", "onnx", "apache-airflow"}
    assert rep["code_commit"] == info["code_commit"]
    assert rep["compression"]["chosen"] == records["compress"].chosen


@pytest.mark.slow
def test_a_nightly_model_reproduces_bit_identically(built, tmp_path):
    settings, records = built
    registry = Registry(settings)
    version = records["register"].model_version
    before = registry.state()
    rec = reproduce_model(settings, version, work_dir=tmp_path / "r")
    assert rec.verdict == "identical", rec.summary
    assert rec.weights == {"identical": True, "max_abs": 0.0}
    assert all(o["identical"] for o in rec.outputs.values())
    assert all(m["max_abs_diff"] == 0 for m in rec.metrics.values())
    assert not [c for c in rec.inputs_differed if c["input"] != "code"]  # "code" only when the tree was dirty
    assert registry.state() == before  # what is served did not change
    audit = [json.loads(x) for x in (registry.root / "audit.jsonl").read_text().splitlines()]
    assert audit[-1]["action"] == "reproduce" and audit[-1]["model_version"] == version
    assert audit[-1]["verdict"] == "identical"
    assert registry.git("log", "-1", "--format=%s") == f"audit: reproduce {version}"
    assert not registry.git("status", "--porcelain")
    worktrees = subprocess.run(["git", "-C", str(REPO_ROOT), "worktree", "list"], capture_output=True, text=True)
    assert "sluice-reproduce-" not in worktrees.stdout  # the worktree is gone


@pytest.mark.slow
def test_another_world_size_is_named_and_within_tolerance(built, tmp_path):
    settings, records = built
    rec = reproduce_model(
        settings, records["register"].model_version, work_dir=tmp_path / "r", world_size=1, audit=False
    )
    assert {"input": "world size", "recorded": 2, "now": 1} in rec.inputs_differed
    assert "world size 2 -> 1" in rec.summary
    assert rec.verdict == "within tolerance", rec.summary
    assert all(m["max_abs_diff"] <= TOLERANCE["metrics"] for m in rec.metrics.values())
    assert rec.outputs["fp32"]["max_abs"] <= TOLERANCE["fp32_outputs"]


def _edited(settings, records, edit):
    registry = Registry(settings)
    version = records["register"].model_version
    info = copy.deepcopy(registry.model_version_info(version))
    edit(info)
    with pytest.raises(ReproductionError) as exc:
        make_plan(registry, version, REPO_ROOT, info=info)
    return str(exc.value)


def test_params_edited_by_hand_are_refused(built):
    msg = _edited(*built, lambda i: i["reproduce"]["params"]["train"].update(epochs=4))
    assert "cannot be reproduced" in msg and "params were edited" in msg and "params hash" in msg


def test_a_missing_data_version_is_refused_naming_it(built):
    msg = _edited(*built, lambda i: i.update(data_version="data-v9"))
    assert "data version data-v9 does not exist" in msg


def test_an_unknown_commit_is_refused_naming_it(built):
    msg = _edited(*built, lambda i: i["reproduce"].update(code_commit="0123456" * 5 + "abcde"))
    assert "unknown to the repository" in msg
    msg = _edited(*built, lambda i: (i.pop("reproduce")))
    assert "no 'reproduce' inputs" in msg


def test_the_cli_refuses_in_one_line(built):
    settings, _ = built
    env = {**os.environ, "SLUICE_HOME": str(settings.home)}
    proc = subprocess.run(
        [sys.executable, "-m", "tasks.reproduce", "model-v9"],
        env=env,
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=120,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "model version model-v9 does not exist" in proc.stderr


@pytest.mark.extended
@pytest.mark.slow
def test_a_model_trained_with_fsdp2_records_the_strategy_and_reproduces_bit_identically(tmp_path):
    home = tmp_path / "home"
    with pytest.MonkeyPatch.context() as mp:
        for k, v in {"SLUICE_HOME": str(home), "DVC_NO_ANALYTICS": "1", "GX_ANALYTICS_ENABLED": "false"}.items():
            mp.setenv(k, v)
        mp.delenv("SLUICE_PARAMS", raising=False)
        settings = Settings.from_env()
        records = nightly_like(settings, "night-1", overrides={"train": {"strategy": "fsdp2"}})
        version = records["register"].model_version
        rep = Registry(settings).model_version_info(version)["reproduce"]
        assert rep["params"]["train"]["strategy"] == "fsdp2" and rep["world_size"] == 2, rep
        rec = reproduce_model(settings, version, work_dir=tmp_path / "r", audit=False)
    assert rec.verdict == "identical", rec.summary
    assert rec.weights == {"identical": True, "max_abs": 0.0}
    assert all(o["identical"] for o in rec.outputs.values())


@pytest.mark.slow
def test_a_text_model_reproduces_bit_identically_with_its_registered_tokenizer(tmp_path):
    """A transformer on reviews, trained under a params file of its own (SLUICE_PARAMS), whose WordPiece
    tokenizer rank 0 trained on the data version. Reproduced from a shell with no SLUICE_PARAMS, it is
    rebuilt from the recorded params (the reviews plug-in, not the checkout's emails), reads text through
    the registered tokenizer (checked by its sha256, never trained again), and gives the weights and the
    served file bit for bit."""
    from tasks.models import load_model
    from tests.conftest import write_params_with_model
    from tests.datasets.test_reviews import TEXT_MODELS

    home = tmp_path / "home"
    path = write_params_with_model(
        tmp_path / "params.yaml",
        {"dataset": {"module": "tasks.plugins.reviews", "params": {}}, "evaluate": {"min_roc_auc": 0.5}},
        TEXT_MODELS["transformer"],
    )
    with pytest.MonkeyPatch.context() as mp:
        for k, v in {"SLUICE_HOME": str(home), "DVC_NO_ANALYTICS": "1", "GX_ANALYTICS_ENABLED": "false"}.items():
            mp.setenv(k, v)
        mp.setenv("SLUICE_PARAMS", str(path))
        records = nightly_like(Settings.from_env(), "night-1")
        mp.delenv("SLUICE_PARAMS")
        settings = Settings.from_env()
        version = records["register"].model_version
        registry = Registry(settings)
        assert registry.model_version_info(version)["reproduce"]["dataset"]["module"] == "tasks.plugins.reviews"
        registered = load_model(str(registry.model_path(version, "model.pt")))
        assert registered.tokenizer_json and registered.tokenizer_sha256
        rec = reproduce_model(settings, version, work_dir=tmp_path / "r", audit=False)
    assert rec.verdict == "identical", rec.summary
    assert rec.weights == {"identical": True, "max_abs": 0.0}
    assert rec.outputs and all(o["identical"] for o in rec.outputs.values()), rec.outputs
    rebuilt = load_model(str(next((tmp_path / "r").rglob("model.pt"))))
    assert rebuilt.tokenizer_sha256 == registered.tokenizer_sha256
