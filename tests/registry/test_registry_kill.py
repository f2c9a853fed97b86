"""SIGKILL a registry transaction at many points: the next one sees the old state or the new, never half."""

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest

from tasks.core.settings import REPO_ROOT
from tasks.registry import Registry
from tests.registry.test_registry import partition

pytestmark = pytest.mark.slow

SNAPSHOT = """
from pathlib import Path
from tasks.registry import Registry
from tasks.core.settings import Settings
import sys
Registry(Settings.from_env()).snapshot({"batch-0002": Path(sys.argv[1])}, {"rows_by_batch": {"batch-0002": 20}})
print("done")
"""
ROLLBACK = """
from tasks.registry import Registry
from tasks.core.settings import Settings
print(Registry(Settings.from_env()).rollback("data-v1", "model-v1", "kill test")["changed"])
"""


def run_and_kill(settings, code, args, delay):
    env = {**os.environ, "SLUICE_HOME": str(settings.home)}
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *args],
        env=env,
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    time.sleep(delay)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    return proc


def consistent(reg):
    """Open a transaction (recovery runs), then check every invariant of the registry."""
    with reg.transaction():
        pass
    assert reg.git("status", "--porcelain") == ""
    state = reg.state()
    assert state["current_data"] in reg.tags("data")
    for tag in reg.tags("data"):  # every version is whole and readable
        info = reg.data_version_info(tag)
        assert len(reg.read_data_version(tag)) == sum(p["rows"] for p in info["partitions"])
    if state["prod_model"]:
        assert state["serving"]["champion"]["model_version"] == state["prod_model"]
    for tag in reg.tags("model"):  # every model version's files are what it recorded
        for name, digest in reg.model_version_info(tag)["artifacts"].items():
            assert hashlib.sha256(reg.read_model_artifact(tag, name)).hexdigest() == digest["sha256"], (tag, name)
    assert cache_intact(reg)
    return state


def cache_intact(reg):
    """Every object in the DVC cache holds the bytes its name (their md5) says: nothing wrote through a link."""
    for obj in (reg.root / ".dvc" / "cache" / "files" / "md5").rglob("*"):
        if obj.is_file() and not obj.name.endswith(".dir"):
            assert hashlib.md5(obj.read_bytes()).hexdigest() == obj.parent.name + obj.name, obj
    return True


def kill_points(settings, code, args, tmp_path, n=14):
    """Delays spread over a whole unkilled run, timed on a copy of the same SLUICE_HOME. The first is
    early (5% of the run: the interpreter is still starting), so at least one kill lands before the
    commit point even when the timed run was slower than the killed ones (a loaded machine, a cold
    page cache); CI once saw every kill from 30% on land after it."""
    scratch = tmp_path / "scratch-home"
    shutil.copytree(settings.home, scratch, symlinks=True)
    env = {**os.environ, "SLUICE_HOME": str(scratch)}
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-c", code, *args], env=env, cwd=REPO_ROOT, check=True, capture_output=True)
    full = time.monotonic() - t0
    return [full * (0.05 + 1.05 * k / n) for k in range(n)]


def test_killed_snapshots_leave_old_or_new_state(settings, tmp_path):
    reg = Registry(settings)
    p1, df1 = partition(tmp_path, "b1", seed=1)
    reg.snapshot({"batch-0001": p1}, {"rows_by_batch": {"batch-0001": len(df1)}})
    p2, df2 = partition(tmp_path, "b2", seed=2)
    seen = set()
    for delay in kill_points(settings, SNAPSHOT, [str(p2)], tmp_path):
        run_and_kill(settings, SNAPSHOT, [str(p2)], delay)
        state = consistent(reg)
        seen.add(state["current_data"])
        assert reg.tags("data") in (["data-v1"], ["data-v1", "data-v2"])
        if state["current_data"] == "data-v2":
            break
    # Whatever happened, the retry makes exactly one new version holding both partitions.
    v = reg.snapshot({"batch-0002": p2}, {"rows_by_batch": {"batch-0002": len(df2)}})
    assert v["data_version"] == "data-v2" and reg.tags("data") == ["data-v1", "data-v2"]
    pd.testing.assert_frame_equal(reg.read_data_version("data-v2"), pd.concat([df1, df2], ignore_index=True))
    assert "data-v1" in seen  # at least one kill landed before the commit point


def test_killed_rollbacks_leave_old_or_new_state(settings, tmp_path):
    reg = Registry(settings)
    art = tmp_path / "model.int8.onnx"
    art.write_bytes(b"onnx")
    for i in (1, 2):
        p, df = partition(tmp_path, f"b{i}", seed=i)
        reg.snapshot({f"batch-000{i}": p}, {"rows_by_batch": {f"batch-000{i}": len(df)}})
        reg.promote(
            reg.register_model(f"r{i}", {"model.int8.onnx": art}, {"data_version": f"data-v{i}"})["model_version"], "t"
        )
    for delay in kill_points(settings, ROLLBACK, [], tmp_path):
        run_and_kill(settings, ROLLBACK, [], delay)
        state = consistent(reg)
        pair = (state["current_data"], state["prod_model"])
        assert pair in (("data-v2", "model-v2"), ("data-v1", "model-v1")), pair  # both moved, or neither
        if pair == ("data-v1", "model-v1"):
            break
    reg.rollback("data-v1", "model-v1", "finish")
    audit = [json.loads(line) for line in (reg.root / "audit.jsonl").read_text().splitlines()]
    assert sum(a["action"] == "rollback" for a in audit) == 1


def test_concurrent_writers_are_serialized(settings, tmp_path):
    """Two processes snapshot at once: the lock makes one wait, both versions come out whole."""
    reg = Registry(settings)
    reg.ensure()
    code = """
from pathlib import Path
import sys
from tasks.registry import Registry
from tasks.core.settings import Settings
print(Registry(Settings.from_env()).snapshot({sys.argv[1]: Path(sys.argv[2])},
                                           {"rows_by_batch": {sys.argv[1]: 20}})["data_version"])
"""
    env = {**os.environ, "SLUICE_HOME": str(settings.home)}
    procs = []
    for i in (1, 2):
        p, _ = partition(tmp_path, f"c{i}", seed=i)
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", code, f"batch-000{i}", str(p)],
                env=env,
                cwd=REPO_ROOT,
                stdout=subprocess.PIPE,
                text=True,
            )
        )
    outs = sorted(p.communicate(timeout=120)[0].strip() for p in procs)
    assert outs == ["data-v1", "data-v2"] and all(p.returncode == 0 for p in procs)
    assert len(reg.data_version_info("data-v2")["partitions"]) == 2
    consistent(reg)


START_CANARY = """
from tasks.registry import Registry
from tasks.core.settings import Settings
print(Registry(Settings.from_env()).start_canary("model-v2", 10, reason="kill test")["changed"])
"""


def test_killed_canary_starts_leave_old_or_new_serving_state(settings, tmp_path):
    reg = Registry(settings)
    p1, df1 = partition(tmp_path, "b1", seed=1)
    reg.snapshot({"batch-0001": p1}, {"rows_by_batch": {"batch-0001": len(df1)}})
    for i in (1, 2):
        art = tmp_path / f"m{i}.onnx"
        art.write_bytes(f"onnx-{i}".encode())
        reg.register_model(f"r{i}", {"model.int8.onnx": art}, {"data_version": "data-v1"})
    reg.promote("model-v1", "t")
    for delay in kill_points(settings, START_CANARY, [], tmp_path, n=8):
        run_and_kill(settings, START_CANARY, [], delay)
        serving = consistent(reg)["serving"]
        pair = ((serving["challenger"] or {}).get("model_version"), serving["challenger_weight"])
        assert pair in ((None, 0), ("model-v2", 10)), pair  # the whole canary, or none of it
        assert (reg.state()["models"]["model-v2"]["stage"] == "canary") == (pair[0] is not None)
        if pair[0]:
            break
    reg.start_canary("model-v2", 10, reason="finish")
    audit = [json.loads(line) for line in (reg.root / "audit.jsonl").read_text().splitlines()]
    assert sum(a["action"] == "start_canary" for a in audit) == 1


REGISTER_PROMOTE = """
import sys
from pathlib import Path
from tasks.registry import Registry
from tasks.core.settings import Settings
reg = Registry(Settings.from_env())
v = reg.register_model(sys.argv[1], {"model.int8.onnx": Path(sys.argv[2])}, {"data_version": "data-v1"})
print(reg.promote(v["model_version"], "kill test")["prod_model"])
"""


class Killed(BaseException):
    pass


def test_a_registration_killed_after_dvc_add_leaves_the_cache_whole(settings, tmp_path, monkeypatch):
    """The first registration dies after `dvc add` linked its files into the cache, before its tag; the
    next one (another run, other bytes, the same version name) must not write through those links."""
    reg = Registry(settings)
    p1, df1 = partition(tmp_path, "b1", seed=1)
    reg.snapshot({"batch-0001": p1}, {"rows_by_batch": {"batch-0001": len(df1)}})
    first, second = tmp_path / "a.onnx", tmp_path / "b.onnx"
    first.write_bytes(b"killed run's model")
    second.write_bytes(b"next run's model, other bytes")
    commit = reg._commit

    def die(*args, **kwargs):
        raise Killed()

    monkeypatch.setattr(reg, "_commit", die)
    with pytest.raises(Killed):
        reg.register_model("run-killed", {"model.int8.onnx": first}, {"data_version": "data-v1"})
    monkeypatch.setattr(reg, "_commit", commit)
    v = reg.register_model("run-next", {"model.int8.onnx": second}, {"data_version": "data-v1"})
    assert v["model_version"] == "model-v1"
    assert reg.read_model_artifact("model-v1", "model.int8.onnx") == second.read_bytes()
    assert first.read_bytes() == b"killed run's model"
    consistent(reg)


def test_killed_registrations_and_promotions_leave_old_or_new_state(settings, tmp_path):
    """register_model then promote, from the first model version on, killed at points over the whole
    run; each attempt is a new run with new bytes (as the next night's would be)."""
    reg = Registry(settings)
    p1, df1 = partition(tmp_path, "b1", seed=1)
    reg.snapshot({"batch-0001": p1}, {"rows_by_batch": {"batch-0001": len(df1)}})
    arts = []
    for k in range(12):
        art = tmp_path / f"m{k}.onnx"
        art.write_bytes(f"model of attempt {k}".encode() * (k + 1))
        arts.append(art)
    delays = kill_points(settings, REGISTER_PROMOTE, ["timing", str(arts[0])], tmp_path, n=10)
    for k, delay in enumerate(delays):
        run_and_kill(settings, REGISTER_PROMOTE, [f"run-{k}", str(arts[k])], delay)
        state = consistent(reg)
        tags = reg.tags("model")
        assert tags == [f"model-v{i}" for i in range(1, len(tags) + 1)]
        if state["prod_model"]:  # promoted: the whole move, to a whole version
            assert state["prod_model"] in tags and state["models"][state["prod_model"]]["stage"] == "prod"
    # A run that is not killed registers and promotes exactly once more.
    before = len(reg.tags("model"))
    env = {**os.environ, "SLUICE_HOME": str(settings.home)}
    out = (
        subprocess.run(
            [sys.executable, "-c", REGISTER_PROMOTE, "run-final", str(arts[-1])],
            env=env,
            cwd=REPO_ROOT,
            check=True,
            capture_output=True,
            text=True,
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    assert out == f"model-v{before + 1}" and reg.state()["prod_model"] == out
    assert reg.read_model_artifact(out, "model.int8.onnx") == arts[-1].read_bytes()
    consistent(reg)
