"""uvicorn's Server as the model server runs it: a signal only asks for the graceful shutdown (uvicorn
re-raises SIGTERM after its own, which kills the process before our cleanup runs and exits -15), and
`on_started` runs once it accepts connections (the address file is written then)."""

from __future__ import annotations

import contextlib
import signal
from typing import Callable

import uvicorn


class GracefulServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, on_started: Callable[[], None]):
        super().__init__(config)
        self.on_started = on_started

    @contextlib.contextmanager
    def capture_signals(self):  # type: ignore[override]
        previous = {
            s: signal.signal(s, lambda signum, _frame: self.handle_exit(signum, None))
            for s in (signal.SIGTERM, signal.SIGINT)
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
