"""The body-size middleware: a request body over `serving.max_body_bytes` is refused (413) before it is
read whole, by its Content-Length and, for a chunked body, by counting while it streams. Pure ASGI, so it
sees the bytes before FastAPI buffers them.
"""

from __future__ import annotations

import json
from typing import Any


class BodyLimit:
    """Refuses bodies over `max_bytes` (413) before they are read whole: by Content-Length, and by
    counting for chunked bodies. Pure ASGI so it sees the bytes before FastAPI buffers them."""

    class TooLarge(BaseException):
        """BaseException: FastAPI turns any Exception raised while reading a body into a 400."""

    def __init__(self, app: Any, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    async def _refuse(self, send: Any) -> None:
        body = json.dumps({"error": f"request body over the limit of {self.max_bytes} bytes"}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        for k, v in scope.get("headers", []):
            if k == b"content-length":
                try:
                    too_big = int(v) > self.max_bytes
                except ValueError:
                    too_big = False
                if too_big:
                    return await self._refuse(send)
        seen, started = 0, False

        async def limited_receive() -> Any:
            nonlocal seen
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > self.max_bytes:
                    raise BodyLimit.TooLarge()
            return msg

        async def tracking_send(msg: Any) -> None:
            nonlocal started
            started = started or msg["type"] == "http.response.start"
            await send(msg)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except BodyLimit.TooLarge:
            if not started:
                await self._refuse(send)
