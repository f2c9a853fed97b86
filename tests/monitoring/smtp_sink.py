"""A small real SMTP server on loopback for the tests: it speaks enough of RFC 5321 for smtplib
(EHLO/HELO, MAIL, RCPT, DATA, RSET, NOOP, QUIT) and keeps every message it receives."""

from __future__ import annotations

import socketserver
import threading


class _Handler(socketserver.StreamRequestHandler):
    def _send(self, line: str) -> None:
        self.wfile.write((line + "\r\n").encode())

    def handle(self) -> None:
        self._send("220 sluice-test-sink ESMTP")
        while True:
            raw = self.rfile.readline()
            if not raw:
                return
            verb = raw.decode(errors="replace").strip().split(" ", 1)[0].upper()
            if verb == "EHLO":
                self._send("250-sluice-test-sink")
                self._send("250 8BITMIME")
            elif verb in ("HELO", "MAIL", "RCPT", "RSET", "NOOP"):
                self._send("250 OK")
            elif verb == "DATA":
                self._send("354 end with <CRLF>.<CRLF>")
                lines = []
                while (line := self.rfile.readline()) not in (b".\r\n", b".\n", b""):
                    lines.append(line)
                self.server.messages.append(b"".join(lines).decode(errors="replace"))
                self._send("250 queued")
            elif verb == "QUIT":
                self._send("221 bye")
                return
            else:
                self._send("502 not implemented")


class SmtpSink(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.messages: list[str] = []
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return self.server_address[1]

    def __enter__(self) -> "SmtpSink":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()
        self.server_close()
        self._thread.join(timeout=5)
