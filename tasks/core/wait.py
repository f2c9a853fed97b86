"""Waiting for a condition, the one way (tenacity): poll `probe` until it returns something truthy."""

from __future__ import annotations

from typing import Callable, TypeVar

from tenacity import RetryError, Retrying, retry_if_exception_type, retry_if_result, stop_after_delay, wait_fixed

T = TypeVar("T")


class WaitAborted(RuntimeError):
    """`abort_if` named a reason to stop waiting (a process the wait is for has exited)."""


def wait_until(
    probe: Callable[[], T],
    *,
    timeout_s: float,
    interval_s: float = 0.2,
    what: str = "a condition",
    retry_on: tuple[type[BaseException], ...] = (),
    abort_if: Callable[[], str | None] | None = None,
) -> T:
    """Call `probe` every `interval_s` until its result is truthy (returned) or `timeout_s` passes
    (TimeoutError naming `what` and the last result or error). Exceptions in `retry_on` count as
    "not yet"; any other exception propagates at once. `abort_if`, called before each try, ends the
    wait with WaitAborted when it returns a reason (a string): what is waited for can no longer come."""

    def attempt() -> T:
        if abort_if is not None and (why := abort_if()):
            raise WaitAborted(f"{what}: {why}")
        return probe()

    retrying = Retrying(
        stop=stop_after_delay(max(timeout_s, 0)),
        wait=wait_fixed(interval_s),
        reraise=False,
        retry=retry_if_result(lambda r: not r) | retry_if_exception_type(retry_on),
    )
    try:
        return retrying(attempt)
    except RetryError as exc:
        last = exc.last_attempt
        seen = f"{type(last.exception()).__name__}: {last.exception()}" if last.failed else repr(last.result())
        raise TimeoutError(f"{what} not reached after {timeout_s:g} s (last: {seen})") from None
