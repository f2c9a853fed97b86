"""Waiting for a condition, the one way (tenacity): poll `probe` until it returns something truthy."""

from __future__ import annotations

from typing import Callable, TypeVar

from tenacity import RetryError, Retrying, retry_if_exception_type, retry_if_result, stop_after_delay, wait_fixed

T = TypeVar("T")


def wait_until(
    probe: Callable[[], T],
    *,
    timeout_s: float,
    interval_s: float = 0.2,
    what: str = "a condition",
    retry_on: tuple[type[BaseException], ...] = (),
) -> T:
    """Call `probe` every `interval_s` until its result is truthy (returned) or `timeout_s` passes
    (TimeoutError naming `what` and the last result or error). Exceptions in `retry_on` count as
    "not yet"; any other exception propagates at once."""
    retrying = Retrying(
        stop=stop_after_delay(timeout_s),
        wait=wait_fixed(interval_s),
        reraise=False,
        retry=retry_if_result(lambda r: not r) | retry_if_exception_type(retry_on),
    )
    try:
        return retrying(probe)
    except RetryError as exc:
        last = exc.last_attempt
        seen = f"{type(last.exception()).__name__}: {last.exception()}" if last.failed else repr(last.result())
        raise TimeoutError(f"{what} not reached after {timeout_s:g} s (last: {seen})") from None
