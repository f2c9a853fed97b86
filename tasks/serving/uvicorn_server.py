"""uvicorn's Server as the model server runs it: a signal only asks for the graceful shutdown (uvicorn
re-raises SIGTERM after its own, which kills the process before our cleanup runs and exits -15), and
`on_started` runs once it accepts connections (the address file is written then).

The drain: on the first SIGTERM or SIGINT `on_drain` runs (readiness answers 503 from then on) and the
server keeps serving for `drain_s`, long enough for a balancer's health checks to take it out; then it
stops accepting, finishes the requests in flight and exits. A second signal stops it at once."""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Callable

import uvicorn


class GracefulServer(uvicorn.Server):
    def __init__(
        self,
        config: uvicorn.Config,
        on_started: Callable[[], None],
        drain_s: float = 0.0,
        on_drain: Callable[[], None] = lambda: None,
    ):
        super().__init__(config)
        self.on_started = on_started
        self.drain_s, self.on_drain = drain_s, on_drain
        self._drain: threading.Timer | None = None

    def signalled(self, signum: int) -> None:
        if self._drain is not None or self.drain_s <= 0:
            self.handle_exit(signum, None)
            return
        self.on_drain()
        self._drain = threading.Timer(self.drain_s, self.handle_exit, args=(signum, None))
        self._drain.daemon = True
        self._drain.start()

    @contextlib.contextmanager
    def capture_signals(self):  # type: ignore[override]
        previous = {
            s: signal.signal(s, lambda signum, _frame: self.signalled(signum)) for s in (signal.SIGTERM, signal.SIGINT)
        }
        try:
            yield
        finally:
            for s, h in previous.items():
                signal.signal(s, h)

    async def startup(self, sockets=None):  # type: ignore[override]
        await super().startup(sockets=sockets)
        if not self.should_exit:
            self.on_started()
