import json
import math
from datetime import date

import numpy as np
import pytest

from tasks.core.files import atomic_write_bytes, atomic_write_with, json_safe


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
