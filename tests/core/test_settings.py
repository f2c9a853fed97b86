"""safe_run_id: a run id's folder name, readable and one-to-one."""

import pytest

from tasks.core.settings import SettingsError, safe_run_id


def test_distinct_run_ids_get_distinct_folders():
    ids = [
        "a:b",
        "a+b",
        "a_b",
        "a b",
        "a::b",
        "a:b ",
        " a:b",
        "manual__2025-01-02T02:00:00+00:00",
        "manual__2025-01-02T02_00_00_00_00",
        "manual__2025-01-02T02:00:00_00:00",
        "x~y",
        "x_y",
    ]
    folders = [safe_run_id(i) for i in ids]
    assert len(set(folders)) == len(ids), dict(zip(ids, folders))


def test_plain_ids_are_unchanged_and_others_stay_readable():
    assert safe_run_id("run-1.2_x") == "run-1.2_x"
    name = safe_run_id("scheduled__2025-01-02T02:00:00+00:00")
    assert name.startswith("scheduled__2025-01-02T02_00_00_00_00~") and len(name.rsplit("~", 1)[1]) == 12
    assert safe_run_id("a:b") == safe_run_id("a:b")  # stable
    assert all(c.isalnum() or c in "._-~" for c in name)


@pytest.mark.parametrize("bad", ["", "   ", ".", ".."])
def test_unusable_ids_are_refused(bad):
    with pytest.raises(SettingsError):
        safe_run_id(bad)
