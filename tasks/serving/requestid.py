"""Request ids that any replica can check without asking the one that served: signed, carrying their
expiry and their row count.

    <nonce 16 hex>.<expiry, unix s>.<rows>.<HMAC-SHA256 of the first three, 32 hex>

The key is shared by the replicas: Settings.serving_key_file (SLUICE_SERVING_KEY_FILE) names a file
holding it, else
$SLUICE_HOME/serving/request_id.key (created, mode 0600, by the first replica that needs it; in a
cluster, a Secret mounted there). An id expires `serving.log_retention_h` after it was issued: the
shared prediction log keeps its prediction that long, and feedback is only worth taking while the
prediction it labels can still be joined.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from tasks.core.files import atomic_create_with

KEY_BYTES = 32
SIG_HEX = 32


class BadRequestId(ValueError):
    """An id that is not one of ours (malformed), forged (its signature does not match) or expired."""


@dataclass(frozen=True)
class RequestIds:
    key: bytes
    ttl_s: float

    def _sig(self, body: str) -> str:
        return hmac.new(self.key, body.encode(), hashlib.sha256).hexdigest()[:SIG_HEX]

    def issue(self, rows: int, now: float | None = None) -> str:
        expiry = int((time.time() if now is None else now) + self.ttl_s)
        body = f"{secrets.token_hex(8)}.{expiry}.{int(rows)}"
        return f"{body}.{self._sig(body)}"

    def verify(self, request_id: str, now: float | None = None) -> int:
        """The row count of a valid id; BadRequestId saying why it is not."""
        parts = request_id.split(".")
        if len(parts) != 4 or not all(parts) or not (parts[1].isdigit() and parts[2].isdigit()):
            raise BadRequestId(f"unknown request id {request_id!r}: not an id this service issued")
        body, sig = ".".join(parts[:3]), parts[3]
        if not hmac.compare_digest(self._sig(body), sig):
            raise BadRequestId(f"unknown request id {request_id!r}: its signature does not match (forged or altered)")
        expiry = int(parts[1])
        now = time.time() if now is None else now
        if now > expiry:
            hours = self.ttl_s / 3600
            raise BadRequestId(
                f"request id {request_id!r} expired {now - expiry:.0f} s ago (ids live {hours:g} h, "
                "the prediction log's retention)"
            )
        return int(parts[2])


def expiry_of(request_id: str) -> int | None:
    """The expiry (unix s) an id carries, None for a string that is not shaped like one (no signature
    check: for ids the log already holds, which a replica verified when it took them)."""
    parts = str(request_id).split(".")
    if len(parts) != 4 or not parts[1].isdigit():
        return None
    return int(parts[1])


def load_key(path: Path) -> bytes:
    """The shared key in `path`, created if absent (exclusively: replicas starting together agree on
    the first one written)."""
    path = Path(path)
    for _ in range(50):
        try:
            data = path.read_bytes().strip()
            if len(data) >= 32:
                return data
        except FileNotFoundError:
            try:  # written whole (0o600) and linked in place: never replaces a key another replica made first
                atomic_create_with(path, lambda tmp: tmp.write_text(secrets.token_hex(KEY_BYTES) + "\n"))
            except FileExistsError:
                pass
            continue
        time.sleep(0.05)  # shorter than a key: being written
    raise RuntimeError(f"the request-id key at {path} is missing or shorter than 32 bytes")
