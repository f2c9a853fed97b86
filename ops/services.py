"""Start and stop the real Airflow services on loopback, and talk to the REST API.

api-server (REST API + UI, 127.0.0.1 only), scheduler (LocalExecutor, no log
server: task logs are read from the shared log folder) and dag-processor each run
in their own process group, so stopping escalates from SIGTERM to SIGKILL of the
whole group (LocalExecutor workers can ignore SIGTERM after a failed task).
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import httpx

from ops.airflow_env import ADMIN_USER, airflow_env, ensure_secrets
from tasks.core.settings import Settings
from tasks.core.wait import wait_until

COMPONENTS = {
    "api-server": ["api-server", "--host", "127.0.0.1"],
    "scheduler": ["scheduler", "--skip-serve-logs"],
    "dag-processor": ["dag-processor"],
}


class ServiceError(RuntimeError):
    pass


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (for servers that must be told their port)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _airflow_cmd(*args: str) -> list[str]:
    return [str(Path(sys.executable).parent / "airflow"), *args]


def _reap(pgid: int) -> None:
    """Collect exited children of ours in this group: a zombie still counts as a group member."""
    while True:
        try:
            pid, _ = os.waitpid(-pgid, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _group_alive(pgid: int) -> bool:
    _reap(pgid)
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def stop_groups(pgids: dict[str, int], grace_s: float = 15.0) -> None:
    """SIGTERM every group, wait, then SIGKILL whatever is left."""
    for pgid in pgids.values():
        try:
            os.killpg(pgid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(_group_alive(p) for p in pgids.values()):
        time.sleep(0.2)
    for name, pgid in pgids.items():
        if _group_alive(pgid):
            print(f"[sluice] {name} ignored SIGTERM: killing its process group", file=sys.stderr)
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    # Return only once every member is gone (orphans are reaped by init, not at once).
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_group_alive(p) for p in pgids.values()):
        time.sleep(0.05)
    left = [n for n, p in pgids.items() if _group_alive(p)]
    if left:
        raise ServiceError(f"process groups of {left} survived SIGKILL")


class AirflowServices:
    def __init__(self, settings: Settings, port: int | None = None, nightly_schedule: bool = True):
        """`nightly_schedule=False`: the scheduler runs triggered runs only (no cron runs), as for
        `make run`, so a run that came due while nothing was up cannot take a batch unasked."""
        self.settings = settings
        self.home = settings.layout.airflow_home
        self.state_file = self.home / "services.json"
        self.port = port or settings.api_port or free_port()
        self.serve_port = free_port()
        self.env = airflow_env(settings, self.port)
        self.env["AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE"] = str(nightly_schedule)
        self.pgids: dict[str, int] = {}

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def serve_url(self) -> str:
        return f"http://127.0.0.1:{self.serve_port}"

    def migrate(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run(_airflow_cmd("db", "migrate"), env=self.env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise ServiceError(f"airflow db migrate failed:\n{proc.stderr[-3000:]}")
        # The one-slot pool the DAGs' registry writers share (a task in a pool that does not exist is
        # never scheduled). `pools set` creates it or resets it to one slot: idempotent.
        proc = subprocess.run(_airflow_cmd("pools", "set", "sluice_registry", "1",
                                           "registry writers, one at a time (nightly steps and the rollback DAG)"),
                              env=self.env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise ServiceError(f"airflow pools set sluice_registry failed:\n{proc.stderr[-3000:]}")

    def start(self, timeout_s: float = 120) -> "AirflowServices":
        self.migrate()
        logs = self.home / "logs" / "services"
        logs.mkdir(parents=True, exist_ok=True)
        for name, args in COMPONENTS.items():
            out = open(logs / f"{name}.log", "ab")
            proc = subprocess.Popen(_airflow_cmd(*args), env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
            self.pgids[name] = proc.pid          # session leader: its pid is the group id
        # The model server beside them: it follows the registry's serving state by itself.
        out = open(logs / "model-server.log", "ab")
        proc = subprocess.Popen([sys.executable, "-m", "tasks.serving", "--host", "127.0.0.1",
                                 "--port", str(self.serve_port)], env={**self.env, "PYTHONUNBUFFERED": "1"},
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        self.pgids["model-server"] = proc.pid
        self.state_file.write_text(json.dumps({"port": self.port, "serve_port": self.serve_port,
                                               "pgids": self.pgids}))
        try:
            self._wait_healthy(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_healthy(self, timeout_s: float) -> None:
        def healthy() -> dict | None:
            dead = [n for n, p in self.pgids.items() if not _group_alive(p)]
            if dead:
                raise ServiceError(f"{dead} exited at start: see {self.home / 'logs' / 'services'}")
            health = httpx.get(f"{self.base_url}/api/v2/monitor/health", timeout=2).json()
            status = {k: v.get("status") for k, v in health.items() if isinstance(v, dict)}
            status["model_server"] = "healthy" if httpx.get(f"{self.serve_url}/v2/health/live",
                                                            timeout=2).status_code == 200 else "not live"
            wanted = ("metadatabase", "scheduler", "dag_processor", "model_server")
            return status if all(status.get(k, "healthy") == "healthy" for k in wanted) else None

        try:
            wait_until(healthy, timeout_s=timeout_s, interval_s=0.5, what="Airflow and the model server healthy",
                       retry_on=(httpx.HTTPError, ValueError))
        except TimeoutError as exc:
            raise ServiceError(str(exc)) from None

    def stop(self) -> None:
        stop_groups(self.pgids)
        self.pgids = {}
        self.state_file.unlink(missing_ok=True)

    def __enter__(self) -> "AirflowServices":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def client(self) -> "ApiClient":
        return ApiClient(self.base_url, ADMIN_USER, ensure_secrets(self.home)["password"])

    @staticmethod
    def running(settings: Settings) -> dict | None:
        """The services a previous `make up` left running, if they are still alive."""
        state_file = settings.layout.airflow_home / "services.json"
        if not state_file.exists():
            return None
        state = json.loads(state_file.read_text())
        if all(_group_alive(p) for p in state["pgids"].values()):
            return state
        return None


@dataclass
class ApiClient:
    """Airflow REST API v2 with a JWT from /auth/token."""

    base_url: str
    username: str
    password: str
    _token: str | None = None

    def token(self) -> str:
        if self._token is None:
            r = httpx.post(f"{self.base_url}/auth/token", json={"username": self.username, "password": self.password},
                           timeout=10)
            if r.status_code not in (200, 201):
                raise ServiceError(f"login refused ({r.status_code}): {r.text[:200]}")
            self._token = r.json()["access_token"]
        return self._token

    def request(self, method: str, path: str, headers: dict | None = None, **kw: Any) -> httpx.Response:
        headers = {**(headers or {}), "Authorization": f"Bearer {self.token()}"}
        return httpx.request(method, f"{self.base_url}/api/v2{path}", headers=headers, timeout=30, **kw)

    def _ok(self, r: httpx.Response) -> Any:
        if r.status_code >= 400:
            raise ServiceError(f"{r.request.method} {r.request.url.path} -> {r.status_code}: {r.text[:500]}")
        return r.json() if r.content else None

    def wait_for_dag(self, dag_id: str, timeout_s: float = 120) -> None:
        try:
            wait_until(lambda: self.request("GET", f"/dags/{dag_id}").status_code == 200, timeout_s=timeout_s,
                       interval_s=1, what=f"DAG {dag_id} parsed (see the dag-processor log)")
        except TimeoutError as exc:
            raise ServiceError(str(exc)) from None

    def unpause(self, dag_id: str) -> None:
        self._ok(self.request("PATCH", f"/dags/{dag_id}", params={"update_mask": "is_paused"},
                              json={"is_paused": False}))

    def trigger(self, dag_id: str, conf: dict | None = None, run_id: str | None = None) -> str:
        body = {"logical_date": None, "conf": conf or {}}
        if run_id:
            body["dag_run_id"] = run_id
        return self._ok(self.request("POST", f"/dags/{dag_id}/dagRuns", json=body))["dag_run_id"]

    def dag_run(self, dag_id: str, run_id: str) -> dict:
        return self._ok(self.request("GET", f"/dags/{dag_id}/dagRuns/{run_id}"))

    def task_instances(self, dag_id: str, run_id: str) -> list[dict]:
        return self._ok(self.request("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances"))["task_instances"]

    def wait_for_run(self, dag_id: str, run_id: str, timeout_s: float = 1800,
                     on_change: Callable[[str, str], None] | None = None) -> str:
        """Poll until the run ends; report each task state change. Returns the run's final state."""
        seen: dict[str, str] = {}
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            run_state = self.dag_run(dag_id, run_id)["state"]      # read first: the tasks below are newer
            for ti in self.task_instances(dag_id, run_id):
                state = ti["state"] or "none"
                if on_change and seen.get(ti["task_id"]) != state and state not in ("none", "scheduled", "queued"):
                    on_change(ti["task_id"], state)
                seen[ti["task_id"]] = state
            if run_state in ("success", "failed"):
                return run_state
            time.sleep(1)
        raise ServiceError(f"run {run_id} did not finish within {timeout_s:.0f}s")
