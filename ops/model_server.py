"""The model server as a subprocess: the one launcher `make up` (ops/services.py), the replicas
(ops/replicas.py), the benchmarks and the tests start it with.

  command   `python -m tasks.serving ARGS` (server_command), or what `make up` runs as its model-server
            part (part_command: the server, or ops.replicas with N replicas behind HAProxy);
  env       the caller's environment without its SLUICE_* variables, plus SLUICE_HOME (server_env);
  start     its own process group (stopped as one: tasks/core/processes.stop_groups), log in a file;
  wait      for its address file (port 0: it picks one and writes it), then for GET /v2/health/ready,
            both with tasks/core/wait, ending at once if the process exits;
  stop      SIGTERM, then SIGKILL of the group.

Servers bind 127.0.0.1 (params serving.host) on a port chosen at run time (serving.port 0, or free_port).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Mapping

import httpx

from tasks.core.processes import stop_groups
from tasks.core.settings import REPO_ROOT
from tasks.core.wait import wait_until
from tasks.serving.paths import address_file, serving_dir


def free_port(host: str = "127.0.0.1") -> int:
    """A free TCP port on `host` (for servers that must be told their port)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def server_env(home: Path, params: Path | None = None, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The server's environment: `base` (default: this process's, less its SLUICE_* variables, so a
    developer's settings do not leak into a test's server), with SLUICE_HOME (and SLUICE_PARAMS)."""
    env = dict(base) if base is not None else {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
    env.update({"SLUICE_HOME": str(home), "DVC_NO_ANALYTICS": "1", "PYTHONUNBUFFERED": "1"})
    if params is not None:
        env["SLUICE_PARAMS"] = str(params)
    return env


def server_command(*args: str) -> list[str]:
    """`python -m tasks.serving ARGS` with this interpreter."""
    return [sys.executable, "-m", "tasks.serving", *args]


def part_command(port: int, replicas: int = 1) -> list[str]:
    """What `make up` runs as its model-server part on `port`: the server, or with `replicas` > 1 that
    many behind HAProxy (ops.replicas, one process group)."""
    if replicas > 1:
        return [sys.executable, "-m", "ops.replicas", "--replicas", str(replicas), "--port", str(port)]
    return server_command("--host", "127.0.0.1", "--port", str(port))


def answers(url: str, which: str = "ready", timeout_s: float = 2) -> bool:
    """Whether GET {url}/v2/health/{which} ("ready" or "live") answers 200; False while it does not answer."""
    try:
        return httpx.get(f"{url}/v2/health/{which}", timeout=timeout_s).status_code == 200
    except httpx.HTTPError:
        return False


class ServerProcess:
    """`python -m tasks.serving` in its own process group (or the caller's: `new_session=False`); a context
    manager that always stops it. With `port` the address is known at once; without, the server takes
    params serving.port (0: a free one) and `start` reads its address file."""

    def __init__(
        self,
        home: Path,
        params: Path | None = None,
        args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
        *,
        base_env: Mapping[str, str] | None = None,
        host: str = "127.0.0.1",
        port: int | None = None,
        log_path: Path | None = None,
        new_session: bool = True,
        poll_s: float = 0.05,
    ):
        self.home = Path(home)
        self.env = env or {}  # SLUICE_* variables beyond SLUICE_HOME and SLUICE_PARAMS
        self.base_env = base_env
        self.address_file = address_file(self.home)
        self.params, self.args = params, args
        self.host, self.port = host, port
        self.new_session, self.poll_s = new_session, poll_s
        self.proc: subprocess.Popen | None = None
        self.log_path = log_path or serving_dir(self.home) / f"server-{time.time_ns()}.log"
        self.url = f"http://{host}:{port}" if port else ""
        self.started_at = 0.0  # monotonic, just before the process was started
        self.ready_s: float | None = None  # seconds from start until it first answered ready

    def command(self) -> list[str]:
        where = ("--host", self.host, "--port", str(self.port)) if self.port else ()
        return server_command(*where, *self.args)

    def start(self, timeout_s: float = 60, wait_ready: bool = True) -> "ServerProcess":
        """Start it; wait (up to `timeout_s` in all) for its address and, with `wait_ready`, until it is ready."""
        if not self.port:
            self.address_file.unlink(missing_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.started_at = time.monotonic()
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.command(),
                cwd=REPO_ROOT,
                env={**server_env(self.home, self.params, self.base_env), **self.env},
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=self.new_session,
            )
        deadline = self.started_at + timeout_s
        try:
            if not self.url:
                self.url = wait_until(
                    self._announced,
                    timeout_s=timeout_s,
                    interval_s=self.poll_s,
                    what="the server's address.json",
                    retry_on=(OSError, ValueError),
                    abort_if=self.exited,
                )
            if wait_ready:
                self.wait_ready(deadline - time.monotonic())
        except (TimeoutError, RuntimeError) as exc:
            self.stop(grace_s=5)
            raise type(exc)(f"{exc}:\n{self.output()}") from None
        return self

    def _announced(self) -> str:
        address = json.loads(self.address_file.read_text())
        return address["url"] if address.get("pid") == self.proc.pid else ""

    def exited(self) -> str | None:
        """Why the server cannot become ready (it exited), or None while it runs."""
        if self.proc is not None and self.proc.poll() is not None:
            return f"the server exited with {self.proc.returncode}"
        return None

    def wait_ready(self, timeout_s: float = 60) -> float:
        """Seconds from process start until GET /v2/health/ready answers 200 (RuntimeError if it exits first)."""
        wait_until(
            lambda: answers(self.url),
            timeout_s=max(timeout_s, 1),
            interval_s=self.poll_s,
            what=f"the server at {self.url} ready",
            abort_if=self.exited,
        )
        seconds = time.monotonic() - self.started_at
        if self.ready_s is None:
            self.ready_s = seconds
        return seconds

    def output(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def signal(self, sig: int) -> None:
        """Send `sig` to the server process alone (not its group)."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def wait_exit(self, timeout_s: float) -> int | None:
        """Its exit code once it exits; SIGKILL if it has not within `timeout_s`."""
        if self.proc is None:
            return None
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(5)

    def stop(self, grace_s: float = 10) -> int | None:
        """SIGTERM, then SIGKILL (of its whole group when it has one) after `grace_s`; its exit code."""
        if self.proc is None:
            return None
        if self.new_session:
            stop_groups({"model-server": self.proc.pid}, grace_s=grace_s)
        elif self.proc.poll() is None:
            self.signal(signal.SIGTERM)
            self.wait_exit(grace_s)
        return self.proc.poll()

    def __enter__(self) -> "ServerProcess":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
