"""The balancer in front of the model-server replicas: HAProxy (Debian's package), its configuration
rendered from tasks/rendering/templates/haproxy.cfg.j2, and its runtime API over a unix socket.

What the configuration promises (docs/serving.md "Replicas"):
  - each replica is health-checked on GET /v2/health/ready every serving.check_interval_ms: down after
    2 failed checks (a replica that cannot load its artifact, or one draining), up after 1 good one; a
    check times out after max(4 x the interval, 1 s), not after the interval;
  - a request is retried, on another replica, only when its connection failed before anything was
    sent (`retry-on conn-failure`, `option redispatch 1`): never at layer 7, since HAProxy can only
    replay a body it buffered whole, and bodies here go up to 4 MB;
  - one request per server connection (`option http-server-close`), so a replica that closes its idle
    connections on the way out never takes a request with them.

`Admin` talks to the runtime API: add a replica under load (`add server`, then `enable health` and
`enable server`), drain one (`set server ... state drain`: no new requests; wait until its current
sessions reach 0), take it out (`state maint`, `del server`). Processes are started by ops/replicas.py.
"""

from __future__ import annotations

import csv
import hashlib
import io
import os
import socket
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

BACKEND = "replicas"
FALL, RISE = 2, 1
RETRIES = 3


@dataclass(frozen=True)
class Server:
    name: str
    host: str
    port: int


def server_options(check_interval_ms: int) -> str:
    """The health-check options of every replica's `server` line (and of one added at run time)."""
    inter = int(check_interval_ms)
    return f"check inter {inter}ms fastinter {inter}ms downinter {inter}ms fall {FALL} rise {RISE}"


SOCKET_PATH_MAX = 97  # HAProxy refuses a longer `stats socket` path ("too long (max 97)")


def admin_socket_path(balancer: Path) -> Path:
    """The balancer's admin socket: `admin.sock` in its folder, or, where that path is longer than HAProxy
    takes (a deep SLUICE_HOME, a test's temp folder), in a private folder (0700) under the temp dir named
    by a hash of the balancer folder, so each SLUICE_HOME still has its own."""
    path = balancer / "admin.sock"
    if len(str(path)) <= SOCKET_PATH_MAX:
        return path
    short = Path(tempfile.gettempdir()) / f"sluice-balancer-{hashlib.sha256(str(balancer).encode()).hexdigest()[:16]}"
    short.mkdir(mode=0o700, exist_ok=True)
    st = short.stat()
    if st.st_uid != os.getuid() or st.st_mode & 0o077:  # a folder someone else made first, in a shared /tmp
        raise PermissionError(f"{short}: the balancer's socket folder is not private to this user; remove it")
    return short / "admin.sock"


def render_config(host: str, port: int, admin_socket: Path, servers: list[Server], check_interval_ms: int) -> str:
    from tasks.rendering.html import render_text

    return render_text(
        "haproxy.cfg.j2",
        host=host,
        port=int(port),
        socket=str(admin_socket),
        servers=servers,
        server_options=server_options(check_interval_ms),
        connect_ms=max(int(check_interval_ms) * 4, 1000),
        retries=RETRIES,
    )


class AdminError(RuntimeError):
    """The runtime API refused a command (its answer is the message)."""


class Admin:
    """HAProxy's runtime API on its unix socket (one command a connection)."""

    def __init__(self, path: Path, timeout_s: float = 5.0):
        self.path, self.timeout_s = Path(path), timeout_s

    def command(self, cmd: str) -> str:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(self.timeout_s)
            s.connect(str(self.path))
            s.sendall(cmd.encode() + b"\n")
            chunks = []
            while True:
                data = s.recv(65536)
                if not data:
                    break
                chunks.append(data)
        return b"".join(chunks).decode(errors="replace")

    def _ok(self, cmd: str) -> str:
        out = self.command(cmd).strip()
        low = out.lower()
        if any(w in low for w in ("unknown", "error", "not found", "no such", "cannot", "refused", "require")):
            raise AdminError(f"haproxy refused {cmd!r}: {out}")
        return out

    def servers(self) -> dict[str, dict[str, str]]:
        """{server: its `show stat` row} of the replicas backend (status UP/DOWN/DRAIN/MAINT, scur, ...)."""
        text = self.command("show stat").lstrip("# ")
        rows = csv.DictReader(io.StringIO(text))
        return {
            r["svname"]: r for r in rows if r.get("pxname") == BACKEND and r["svname"] not in ("BACKEND", "FRONTEND")
        }

    def status(self, name: str) -> str:
        row = self.servers().get(name)
        return row["status"] if row else "absent"

    def add(self, server: Server, check_interval_ms: int) -> None:
        """Add a replica that already answers ready: it takes requests once its first check passes."""
        target = f"{BACKEND}/{server.name}"
        self._ok(f"add server {target} {server.host}:{server.port} {server_options(check_interval_ms)}")
        self._ok(f"enable health {target}")
        self._ok(f"enable server {target}")

    def drain(self, name: str, timeout_s: float = 30.0) -> float:
        """No new requests to `name`; wait until it has none in flight. Returns the seconds waited."""
        t0 = time.monotonic()
        self._ok(f"set server {BACKEND}/{name} state drain")
        while time.monotonic() - t0 < timeout_s:
            row = self.servers().get(name)
            if row is None or int(row.get("scur") or 0) == 0 and int(row.get("qcur") or 0) == 0:
                return time.monotonic() - t0
            time.sleep(0.02)
        raise AdminError(f"{name} still has requests in flight after {timeout_s} s of draining")

    def remove(self, name: str, timeout_s: float = 10.0) -> None:
        """Maintenance, then delete (HAProxy refuses while connections remain: retried until `timeout_s`)."""
        self._ok(f"set server {BACKEND}/{name} state maint")
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self._ok(f"del server {BACKEND}/{name}")
                return
            except AdminError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def wait_status(self, name: str, want: str, timeout_s: float = 15.0) -> float:
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout_s:
            if self.status(name).split(" ")[0] == want:
                return time.monotonic() - t0
            time.sleep(0.02)
        raise AdminError(f"{name} is {self.status(name)!r}, not {want!r}, after {timeout_s} s")
