"""One write in flight at a time, on a thread of its own (the checkpointers of both strategies)."""

from __future__ import annotations

import concurrent.futures
from typing import Any, Callable


class BackgroundWriter:
    """One write in flight at a time, on a thread of its own: `_submit` queues the next write (the
    caller has waited for the last one, `wait`), `wait` re-raises a failed write, `close` waits and
    stops the thread. The checkpointers of both strategies write through it."""

    def __init__(self, thread_name: str):
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix=thread_name)
        self._pending: concurrent.futures.Future | None = None

    def _submit(self, write: Callable[..., None], *args: Any, wait: bool = False) -> None:
        self._pending = self._pool.submit(write, *args)
        if wait:
            self.wait()

    def wait(self) -> None:
        if self._pending is not None:
            self._pending.result()  # re-raises a failed write here
            self._pending = None

    def close(self) -> None:
        self.wait()
        self._pool.shutdown()
