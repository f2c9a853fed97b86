import json
import math
from datetime import date

import numpy as np
import pytest

from tasks.core.files import atomic_create_with, atomic_write_bytes, atomic_write_with, json_safe


def test_json_safe_gives_strict_json():
    value = {
        "nan": math.nan,
        "inf": np.float32("inf"),
        "n": np.int64(3),
        "arr": np.array([1.5, np.nan]),
        "day": date(2026, 11, 30),
        1: (True, None),
    }
    out = json_safe(value)
    assert out == {"nan": None, "inf": None, "n": 3, "arr": [1.5, None], "day": "2026-11-30", "1": [True, None]}
    json.dumps(out, allow_nan=False)


def test_a_failed_atomic_write_leaves_the_old_file_and_no_temp(tmp_path):
    target = tmp_path / "f.txt"
    atomic_write_bytes(target, b"old")

    def broken(tmp):
        tmp.write_bytes(b"half")
        raise RuntimeError("writer died")

    with pytest.raises(RuntimeError):
        atomic_write_with(target, broken)
    assert target.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["f.txt"]


def test_an_atomic_create_never_replaces_and_leaves_no_temp(tmp_path):
    target = tmp_path / "sub" / "key"
    atomic_create_with(target, lambda tmp: tmp.write_bytes(b"first"))
    assert oct(target.stat().st_mode & 0o777) == "0o600"  # mkstemp's mode: a key stays private
    with pytest.raises(FileExistsError):
        atomic_create_with(target, lambda tmp: tmp.write_bytes(b"second"))
    assert target.read_bytes() == b"first" and [p.name for p in target.parent.iterdir()] == ["key"]


def test_a_move_across_filesystems_is_copied_whole_then_linked(tmp_path, monkeypatch):
    """quarantine's link-or-copy: os.link across devices (EXDEV) falls back to core's atomic create."""
    import errno
    import os

    from tasks.landing import quarantine

    real_link, src = os.link, tmp_path / "a.csv"
    src.write_bytes(b"rows")

    def link(a, b):
        if a == src:
            raise OSError(errno.EXDEV, "cross-device link")
        return real_link(a, b)

    monkeypatch.setattr(os, "link", link)
    dest = tmp_path / "q" / "a.csv"
    dest.parent.mkdir()
    quarantine._link_or_copy(src, dest)
    assert dest.read_bytes() == b"rows" and [p.name for p in dest.parent.iterdir()] == ["a.csv"]
    with pytest.raises(FileExistsError):
        quarantine._link_or_copy(src, dest)
