"""Registry hardening: compare-and-set pointer moves, committed reads, the git mirror after every
pointer move, content-checked re-deliveries, injective run folders."""

import hashlib
import subprocess
import threading

import pytest

from tasks.core.settings import Settings
from tasks.registry import SERVED_ARTIFACT, Registry, RegistryError
from tests.registry.test_registry import partition


def nightly_registry(settings, tmp_path):
    """data-v1/model-v1 and data-v2/model-v2 (prod, each trained on its data version); then a nightly
    run's data-v3 and its challenger model-v3 (candidate, trained on data-v3)."""
    reg = Registry(settings)
    for i in (1, 2, 3):
        p, df = partition(tmp_path, f"b{i}", seed=i)
        reg.snapshot({f"batch-000{i}": p}, {"rows_by_batch": {f"batch-000{i}": len(df)}})
        art = tmp_path / f"m{i}" / SERVED_ARTIFACT
        art.parent.mkdir()
        art.write_bytes(f"onnx-{i}".encode())
        reg.register_model(f"run-{i}", {SERVED_ARTIFACT: art}, {"data_version": f"data-v{i}"})
        if i < 3:
            reg.promote(f"model-v{i}", "earlier night")
    return reg


def pair(reg):
    s = reg.state()
    return s["current_data"], s["prod_model"]


# ---- 1: compare-and-set ------------------------------------------------------------------


def test_promote_is_refused_when_the_champion_or_the_data_moved(settings, tmp_path):
    reg = nightly_registry(settings, tmp_path)
    reg.rollback("data-v1", "model-v1", "operator: bad labels")
    with pytest.raises(RegistryError, match="prod model is model-v1, not model-v2"):
        reg.promote("model-v3", "nightly", expect_champion="model-v2", expect_data="data-v3")
    with pytest.raises(RegistryError, match="current data version is data-v1, not data-v3"):
        reg.promote("model-v3", "nightly", expect_champion="model-v1", expect_data="data-v3")
    assert pair(reg) == ("data-v1", "model-v1")
    # What was read still holds: the move happens.
    assert reg.promote("model-v3", "ok", expect_champion="model-v1", expect_data="data-v1")["changed"]


def test_start_canary_is_refused_when_the_champion_moved(settings, tmp_path):
    reg = nightly_registry(settings, tmp_path)
    reg.rollback(None, "model-v1", "operator")
    with pytest.raises(RegistryError, match="prod model is model-v1, not model-v2"):
        reg.start_canary("model-v3", 10, reason="nightly", expect_champion="model-v2", expect_data="data-v3")
    assert reg.state()["serving"]["challenger"] is None


def test_rollback_to_prod_lineage_is_refused_when_prod_moved(settings, tmp_path):
    reg = nightly_registry(settings, tmp_path)
    reg.rollback("data-v1", "model-v1", "operator")
    with pytest.raises(RegistryError, match="prod model is model-v1, not model-v2"):
        reg.rollback_to_prod_lineage("rejected", expect_prod="model-v2", quarantine_after=2)
    assert pair(reg) == ("data-v1", "model-v1")


def test_the_reject_branchs_read_and_write_are_one_transaction(settings, tmp_path, monkeypatch):
    """An operator's rollback arriving after the reject branch read the prod model and before it
    wrote: the rollback waits for the lock and lands last, so the operator's pair stays."""
    reg = nightly_registry(settings, tmp_path)
    assert pair(reg) == ("data-v3", "model-v2")
    operator = threading.Thread(target=lambda: Registry(settings).rollback("data-v1", "model-v1", "operator"))
    read = reg.model_version_info
    fired = []

    def read_then_race(version):
        if not fired:  # the branch has read prod: the operator's rollback starts now
            fired.append(version)
            operator.start()
            operator.join(timeout=5)  # finishes at once if nothing holds the lock
        return read(version)

    monkeypatch.setattr(reg, "model_version_info", read_then_race)
    reg.rollback_to_prod_lineage("challenger rejected", quarantine_after=2)
    operator.join(timeout=60)
    assert fired and not operator.is_alive()
    assert pair(reg) == ("data-v1", "model-v1")


# ---- 2: readers see committed state --------------------------------------------------------


def test_state_reads_the_committed_pointers_during_an_open_transaction(settings, tmp_path):
    reg = nightly_registry(settings, tmp_path)
    reader = Registry(settings)
    with reg.transaction():
        state = reg.state()
        state["prod_model"], state["current_data"] = "model-v3", "data-v1"
        reg._write_state(state)  # written, not committed (a writer mid-transaction)
        assert reader.state()["prod_model"] == "model-v2" and reader.state()["current_data"] == "data-v3"
        assert reg.state()["prod_model"] == "model-v3"  # the writer itself sees what it is building
    assert pair(reader) == ("data-v3", "model-v2")  # discarded by the next transaction's recovery
    with reg.transaction():
        pass
    assert pair(reader) == ("data-v3", "model-v2")


# ---- 3: every pointer move reaches the git mirror -------------------------------------------


def test_every_pointer_move_is_pushed_to_the_git_mirror(settings, tmp_path, monkeypatch):
    bare = tmp_path / "server" / "registry.git"
    subprocess.run(["git", "init", "-q", "--bare", str(bare)], check=True)
    monkeypatch.setenv("SLUICE_REGISTRY_GIT_REMOTE", str(bare))
    reg = nightly_registry(Settings.from_env(), tmp_path)

    def mirrored():
        out = subprocess.run(
            ["git", "ls-remote", str(bare), "refs/heads/main"], capture_output=True, text=True, check=True
        ).stdout.split()
        return out[0] if out else None

    moves = [
        ("start_canary", lambda: reg.start_canary("model-v3", 10, reason="canary")),
        ("set_canary_weight", lambda: reg.set_canary_weight(50, "step")),
        ("rollback_canary", lambda: reg.rollback_canary("failed")),
        ("promote", lambda: reg.promote("model-v3", "passed")),
        ("rollback", lambda: reg.rollback("data-v1", "model-v1", "operator")),
    ]
    for name, move in moves:
        assert move()["changed"], name
        assert mirrored() == reg.git("rev-parse", "HEAD"), f"{name} did not reach the mirror"
    shown = subprocess.run(
        ["git", "--git-dir", str(bare), "show", "main:registry.json"], capture_output=True, text=True, check=True
    ).stdout
    assert '"prod_model": "model-v1"' in shown  # what a replica reading the mirror sees


# ---- 4: a batch's identity is its content -------------------------------------------------


def test_a_different_file_under_a_known_batch_id_is_refused(settings, tmp_path):
    reg = Registry(settings)
    p1, df1 = partition(tmp_path, "b1", seed=1)
    reg.snapshot({"batch-0001": p1}, {"rows_by_batch": {"batch-0001": len(df1)}})
    fixed, _ = partition(tmp_path, "b1-fixed", seed=7)
    with pytest.raises(RegistryError, match="batch-0001 is already in data-v1 with other content"):
        reg.snapshot({"batch-0001": fixed}, {"rows_by_batch": {"batch-0001": 20}})
    assert reg.snapshot({"batch-0001": p1}, {"rows_by_batch": {"batch-0001": 20}})["created"] is False
    assert reg.tags("data") == ["data-v1"]


def test_the_delivered_files_hash_is_recorded_and_compared(settings, tmp_path):
    reg = Registry(settings)
    p1, df1 = partition(tmp_path, "b1", seed=1)
    sha = hashlib.sha256(b"delivered").hexdigest()
    reg.snapshot({"batch-0001": p1}, {"rows_by_batch": {"batch-0001": 20}}, sources={"batch-0001": sha})
    assert reg.data_version_info("data-v1")["partitions"][0]["source_sha256"] == sha
    assert reg.snapshot({"batch-0001": p1}, {}, sources={"batch-0001": sha})["created"] is False
    with pytest.raises(RegistryError, match="delivered file's sha256 differs"):
        reg.snapshot({"batch-0001": p1}, {}, sources={"batch-0001": hashlib.sha256(b"corrected").hexdigest()})
