"""The model server as a subprocess (`python -m tasks.serving`) in its own process group, always stopped
(SIGTERM, then SIGKILL of the group: tasks/core/processes.stop_groups): what the benchmarks and the tests
start a server with. A context manager; `start` waits for the server's address file, `wait_ready` for
GET /v2/health/ready."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from tasks.core.processes import stop_groups
from tasks.core.settings import REPO_ROOT
from tasks.serving.paths import address_file, serving_dir


def server_env(home: Path, params: Path | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
    env.update({"SLUICE_HOME": str(home), "DVC_NO_ANALYTICS": "1", "PYTHONUNBUFFERED": "1"})
    if params is not None:
        env["SLUICE_PARAMS"] = str(params)
    return env


class ServerProcess:
    """`python -m tasks.serving` in its own process group; a context manager that always stops it."""

    def __init__(
        self, home: Path, params: Path | None = None, args: tuple[str, ...] = (), env: dict[str, str] | None = None
    ):
        self.home = Path(home)
        self.env = env or {}  # SLUICE_* variables beyond SLUICE_HOME and SLUICE_PARAMS
        self.address_file = address_file(self.home)
        self.params, self.args = params, args
        self.proc: subprocess.Popen | None = None
        self.log_path = serving_dir(self.home) / f"server-{time.time_ns()}.log"
        self.url = ""
        self.started_at = 0.0

    def start(self, timeout_s: float = 60, wait_ready: bool = True) -> "ServerProcess":
        self.address_file.unlink(missing_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "wb")
        self.started_at = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tasks.serving", *self.args],
            cwd=REPO_ROOT,
            env={**server_env(self.home, self.params), **self.env},
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout_s
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.output()}")
            try:
                address = json.loads(self.address_file.read_text())
                if address.get("pid") == self.proc.pid:
                    self.url = address["url"]
                    break
            except (OSError, ValueError):
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"no address.json after {timeout_s} s:\n{self.output()}")
            time.sleep(0.05)
        if wait_ready:
            self.wait_ready(deadline - time.monotonic())
        return self

    def wait_ready(self, timeout_s: float = 60) -> float:
        """Seconds from process start until GET /v2/health/ready answers 200."""
        deadline = time.monotonic() + max(timeout_s, 1)
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url + "/v2/health/ready", timeout=2).status_code == 200:
                    return time.monotonic() - self.started_at
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.output()}")
            time.sleep(0.05)
        raise TimeoutError(f"server not ready after {timeout_s} s:\n{self.output()}")

    def output(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def stop(self, grace_s: float = 10) -> int | None:
        if self.proc is not None:
            try:
                stop_groups({"model-server": self.proc.pid}, grace_s=grace_s)
            finally:
                self._log.close()
            return self.proc.poll()
        return None

    def __enter__(self) -> "ServerProcess":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
