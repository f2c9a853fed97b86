"""register_model copies each artifact into models/model-vN/ after unlinking the name there: a registration
killed after its `dvc add` leaves that folder's files hardlinked to the DVC cache's objects (read-only, mode
0444), and a copy onto such a name writes through the link into the cache (as root; EACCES otherwise),
corrupting the object another version's checkout or push would read.

The leftover is made for real (a registration stopped right after `dvc add`, before its commit point). Today
the next transaction's recovery (git reset --hard, git clean -fd) also removes such a folder; the unlink is the
guard that holds when a folder survives (a recovery that stops early, a folder git ignores), so recovery is
skipped here and register's own guard is what is tested. Verified to fail without the unlink."""

from __future__ import annotations

import pytest

from tasks.registry import Registry


class Killed(BaseException):
    """What a SIGKILL at that point amounts to for the registry: nothing after it runs."""


def _cache_objects_linked_to(path, cache_root):
    ino = path.stat().st_ino
    return [p for p in cache_root.rglob("*") if p.is_file() and p.stat().st_ino == ino]


def test_a_retried_registration_never_writes_through_a_hardlink_into_the_dvc_cache(settings, tmp_path, monkeypatch):
    reg = Registry(settings)
    first = tmp_path / "run-1.onnx"
    first.write_bytes(b"run-1 model bytes")

    def killed(*args, **kwargs):
        raise Killed

    with monkeypatch.context() as m:
        m.setattr(Registry, "_commit", killed)  # stopped right after `dvc add`, before the tag (commit point)
        with pytest.raises(Killed):
            reg.register_model("run-1", {"model.int8.onnx": first}, {"data_version": "data-v1"})

    left = reg.root / "models" / "model-v1" / "model.int8.onnx"
    cached = _cache_objects_linked_to(left, reg.root / ".dvc" / "cache")
    assert len(cached) == 1 and left.stat().st_nlink == 2  # the leftover: a hardlink into the cache
    assert cached[0].stat().st_mode & 0o777 == 0o444  # DVC protects its objects: read-only
    obj, obj_bytes, obj_mode = cached[0], cached[0].read_bytes(), cached[0].stat().st_mode

    monkeypatch.setattr(Registry, "recover", lambda self: None)  # see the module docstring
    second = tmp_path / "run-2.onnx"
    second.write_bytes(b"run-2 model bytes, another run")
    m1 = reg.register_model("run-2", {"model.int8.onnx": second}, {"data_version": "data-v1"})

    assert m1["created"] and m1["model_version"] == "model-v1"
    assert reg.read_model_artifact("model-v1", "model.int8.onnx") == second.read_bytes()
    assert m1["artifacts"]["model.int8.onnx"]["bytes"] == len(second.read_bytes())
    # The cache object of the killed attempt is untouched: same bytes, same mode.
    assert obj.read_bytes() == obj_bytes == first.read_bytes() and obj.stat().st_mode == obj_mode
