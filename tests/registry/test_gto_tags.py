"""GTO tags mirror the registry's model versions and stage moves: the real `gto` CLI reads them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tasks.registry import Registry
from tasks.registry.gto_tags import ExistingTag, plan

GTO = str(Path(sys.executable).with_name("gto"))


def gto_show(repo: Path, *args: str) -> dict | list:
    proc = subprocess.run([GTO, "show", "-r", str(repo), "--json", *args], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def prod_of(repo: Path, sort: str = "timestamp") -> str | None:
    return gto_show(repo, "--sort", sort)["model"]["stage"].get("prod")


def test_plan_adds_registrations_and_moves_a_stage_with_gtos_counter():
    commits = {"model-v1": "a" * 40, "model-v2": "b" * 40}
    tags = [
        ExistingTag("model@v1.0.0", "a" * 40, 100),
        ExistingTag("model#prod#1", "a" * 40, 101),
        ExistingTag("data-v1", "c" * 40, 0),  # not the artifact's: ignored
    ]
    new = plan({"prod_model": "model-v2", "serving": {"challenger": None}}, commits, tags)
    assert [(t.name, t.commit) for t in new] == [
        ("model@v2.0.0", "b" * 40),
        ("model#prod!#2", "a" * 40),  # the stage leaves v1 (GTO would otherwise keep v1 as prod by semver)
        ("model#prod#3", "b" * 40),
    ]
    assert new[0].message == "Registering artifact model version v2.0.0 (registry model-v2)"
    # Once the tags exist, nothing more is planned (idempotent).
    done = tags + [ExistingTag(t.name, t.commit, 102 + i) for i, t in enumerate(new)]
    assert plan({"prod_model": "model-v2"}, commits, done) == []


def test_plan_mirrors_the_serving_challenger_as_the_canary_stage():
    commits = {"model-v1": "a" * 40, "model-v2": "b" * 40}
    tags = [ExistingTag("model@v1.0.0", "a" * 40, 1), ExistingTag("model@v2.0.0", "b" * 40, 2)]
    state = {"prod_model": "model-v1", "serving": {"challenger": {"model_version": "model-v2"}}}
    assert [t.name for t in plan(state, commits, tags)] == ["model#prod#1", "model#canary#2"]


def test_the_counter_is_gtos_one_more_than_any_of_the_artifacts_tags():
    """GTO's rule (gto.tag.name_tag): the highest `#N` on any tag of the artifact, a deprecation's included;
    another artifact's tags and lightweight look-alikes that GTO cannot parse do not count."""
    commits = {"model-v1": "a" * 40}
    tags = [
        ExistingTag("model@v1.0.0", "a" * 40, 1),
        ExistingTag("model@deprecated#4", "a" * 40, 2),
        ExistingTag("reviews#prod#9", "a" * 40, 3),
        ExistingTag("model#prod#x", "a" * 40, 4),
    ]
    assert [t.name for t in plan({"prod_model": "model-v1"}, commits, tags)] == ["model#prod#5"]


def test_gto_show_lists_the_versions_and_the_prod_stage_through_promote_and_rollback(settings, tmp_path, monkeypatch):
    """Register and promote through the real Registry; `gto show` (the CLI) in the registry repo and in a
    clone of the git mirror sees the versions and prod; a rollback moves prod back."""
    from tasks.core.settings import Settings

    bare = tmp_path / "mirror.git"
    subprocess.run(["git", "init", "-q", "--bare", str(bare)], check=True)
    monkeypatch.setenv("SLUICE_REGISTRY_GIT_REMOTE", str(bare))
    reg = Registry(Settings.from_env())
    art = tmp_path / "model.int8.onnx"
    art.write_bytes(b"onnx")
    reg.register_model("run-1", {"model.int8.onnx": art}, {"data_version": "data-v1"})
    reg.promote("model-v1", "first model")
    reg.register_model("run-2", {"model.int8.onnx": art}, {"data_version": "data-v2"})
    reg.start_canary("model-v2", 50, reason="canary")
    assert gto_show(reg.root)["model"]["stage"] == {"prod": "v1.0.0", "canary": "v2.0.0"}
    reg.promote("model-v2", "canary passed")

    versions = gto_show(reg.root, "model")
    assert sorted(v["version"] for v in versions) == ["v1.0.0", "v2.0.0"]
    assert {v["version"]: v["ref"] for v in versions} == {"v1.0.0": "model@v1.0.0", "v2.0.0": "model@v2.0.0"}
    # Each GTO version is the registry's version commit.
    for v in versions:
        n = v["version"][1]
        assert v["commit_hexsha"] == reg.git("rev-parse", f"model-v{n}^{{commit}}")
    assert prod_of(reg.root) == "v2.0.0" and prod_of(reg.root, "semver") == "v2.0.0"
    assert gto_show(reg.root)["model"]["stage"].get("canary") is None  # the challenger became prod

    # The git mirror got the tags with the commits: a clone of it reads the same.
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(bare), str(clone)], check=True, capture_output=True)
    assert prod_of(clone) == "v2.0.0"

    reg.rollback(None, "model-v1", "v2 misbehaves")  # within the same second as the promote: order still holds
    assert prod_of(reg.root) == "v1.0.0" and prod_of(reg.root, "semver") == "v1.0.0"
    assert gto_show(reg.root)["model"]["version"] == "v2.0.0"  # the latest version is still listed
    subprocess.run(["git", "-C", str(clone), "fetch", "-q", "--tags"], check=True)
    assert prod_of(clone) == "v1.0.0"
    # The registry's own record is unchanged in shape: its tags and registry.json stay the source of truth.
    assert reg.tags("model") == ["model-v1", "model-v2"] and reg.state()["prod_model"] == "model-v1"


def test_missing_gto_tags_are_caught_up_by_the_next_transaction(settings, tmp_path):
    """A transaction killed after its commit but before its GTO tags: the next one writes them."""
    reg = Registry(settings)
    art = tmp_path / "model.int8.onnx"
    art.write_bytes(b"onnx")
    reg.register_model("run-1", {"model.int8.onnx": art}, {"data_version": "data-v1"})
    reg.promote("model-v1", "first")
    for tag in ("model@v1.0.0", "model#prod#1"):
        reg.git("tag", "-d", tag)
    assert reg.promote("model-v1", "again")["changed"] is False
    assert prod_of(reg.root) == "v1.0.0"
