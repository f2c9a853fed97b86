"""The progress line's format and the tracker's throttling (tasks/core/log.py)."""

from __future__ import annotations

from tasks.core.log import Progress, progress


def test_progress_line_has_counts_rate_and_eta():
    assert progress(120, 400, started=100.0, now=109.75) == "step 120/400 (30%), 12.3 steps/s, ETA 23 s"


def test_progress_eta_in_minutes_and_hours_and_other_units():
    assert progress(10, 1000, started=0.0, now=10.0, unit="row") == "row 10/1000 (1%), 1 rows/s, ETA 16 min 30 s"
    assert progress(1, 10_000, started=0.0, now=1.0, unit="LF") == "LF 1/10000 (0%), 1 LFs/s, ETA 2 h 46 min"
    assert progress(400, 400, started=0.0, now=8.0) == "step 400/400 (100%), 50 steps/s, ETA 0 s"
    assert progress(12_345, 20_000, started=0.0, now=1.0, unit="row") == "row 12345/20000 (61%), 12,345 rows/s, ETA 1 s"


def test_progress_before_any_work_or_time_says_na():
    assert progress(0, 400, started=5.0, now=9.0) == "step 0/400 (0%), steps/s n/a, ETA n/a"
    assert progress(3, 400, started=5.0, now=5.0) == "step 3/400 (0%), steps/s n/a, ETA n/a"
    assert progress(0, 0, started=0.0, now=1.0).startswith("step 0/0 (100%)")


def test_progress_of_a_resumed_loop_counts_only_new_work_in_the_rate():
    # 300 of 400 steps were done before the resume; 50 more in 10 s: 5 steps/s, 50 left -> 10 s.
    assert progress(350, 400, started=0.0, now=10.0, done_at_start=300) == "step 350/400 (87%), 5 steps/s, ETA 10 s"


def test_tracker_logs_the_first_update_then_every_interval_and_always_the_last():
    now, lines = [0.0], []
    tracker = Progress("training", total=10, every_s=5.0, clock=lambda: now[0], sink=lines.append)
    for step, t in enumerate([1.0, 2.0, 3.0, 6.5, 7.0, 12.0, 13.0, 14.0, 15.0, 16.0], start=1):
        now[0] = t
        tracker.update(step)
    assert lines == [
        "training: step 1/10 (10%), 1 steps/s, ETA 9 s",
        "training: step 4/10 (40%), 0.615 steps/s, ETA 10 s",
        "training: step 6/10 (60%), 0.5 steps/s, ETA 8 s",
        "training: step 10/10 (100%), 0.625 steps/s, ETA 0 s",
    ]
    assert tracker.update(10) is None  # the last line once only


def test_tracker_without_a_first_line_logs_a_short_loop_once_at_its_end():
    now, lines = [0.0], []
    tracker = Progress("labeling 500 rows", total=3, unit="LF", first=False, clock=lambda: now[0], sink=lines.append)
    for done, t in enumerate([0.1, 0.2, 0.4], start=1):
        now[0] = t
        tracker.update(done)
    assert lines == ["labeling 500 rows: LF 3/3 (100%), 7.5 LFs/s, ETA 0 s"]
