import itertools

import pytest

from tasks.core.wait import wait_until


def test_returns_the_first_truthy_result():
    calls = itertools.count(1)
    assert wait_until(lambda: (n := next(calls)) >= 3 and n, timeout_s=5, interval_s=0.01) == 3


def test_times_out_naming_what_and_the_last_result():
    with pytest.raises(TimeoutError, match=r"the thing not reached after 0.2 s \(last: \[\]\)"):
        wait_until(lambda: [], timeout_s=0.2, interval_s=0.05, what="the thing")


def test_listed_errors_mean_not_yet_and_others_propagate():
    calls = itertools.count(1)

    def flaky():
        if next(calls) < 3:
            raise ConnectionError("not up")
        return "up"

    assert wait_until(flaky, timeout_s=5, interval_s=0.01, retry_on=(ConnectionError,)) == "up"
    with pytest.raises(TimeoutError, match="ConnectionError: down"):
        wait_until(
            lambda: (_ for _ in ()).throw(ConnectionError("down")),
            timeout_s=0.2,
            interval_s=0.05,
            retry_on=(ConnectionError,),
        )
    with pytest.raises(KeyError):
        wait_until(lambda: {}["x"], timeout_s=5, retry_on=(ConnectionError,))


def test_abort_if_ends_the_wait_at_once_with_its_reason():
    import time

    from tasks.core.wait import WaitAborted

    t0 = time.monotonic()
    with pytest.raises(WaitAborted, match="the server ready: it exited with 3"):
        wait_until(
            lambda: False, timeout_s=30, interval_s=0.01, what="the server ready", abort_if=lambda: "it exited with 3"
        )
    assert time.monotonic() - t0 < 5
    assert wait_until(lambda: "up", timeout_s=1, abort_if=lambda: None) == "up"
