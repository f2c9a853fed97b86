import pytest

from bench.orchestration_overhead import idle_share
from bench.record import Record


def test_idle_share_merges_overlaps_and_clips():
    share, busy = idle_share(0, 10, [(1, 3), (2, 4), (6, 7), (9, 12)])
    assert busy == pytest.approx(3 + 1 + 1) and share == pytest.approx(0.5)
    assert idle_share(0, 10, [])[0] == 1.0
    assert idle_share(0, 10, [(0, 10)])[0] == 0.0


def test_record_goal_comparison():
    assert Record("x", 1.2, "ratio", "<= 1.5").passed
    assert not Record("x", 1.6, "ratio", "<= 1.5").passed
    assert Record("x", 0.9, "ratio", ">= 0.85").passed
    assert Record("x", 0.9, "ratio", ">= 0.85").to_dict()["passed"] is True
