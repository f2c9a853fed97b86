"""Start and stop the real Airflow services on loopback, and talk to the REST API.

api-server (REST API + UI, 127.0.0.1 only), scheduler (LocalExecutor, no log
server: task logs are read from the shared log folder) and dag-processor each run
in their own process group, so stopping escalates from SIGTERM to SIGKILL of the
whole group (LocalExecutor workers can ignore SIGTERM after a failed task).

Each part is recorded with its own pid, the start time of that pid (/proc/<pid>/stat field
22, clock ticks since boot) and its command line, so a part that died is told apart from a
live one even when its group still holds orphans (a SIGKILLed scheduler leaves its
LocalExecutor workers behind), and a pid the kernel gave to another program since is never
taken for ours. A process group's id stays allocated while any member lives, so the members
of the group of a dead leader of ours are ours; a group whose leader pid now names another
process is not, and is never signalled.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import httpx

from ops.airflow_env import ADMIN_USER, airflow_env, ensure_secrets
from ops.model_server import answers, free_port, part_command, server_env
from tasks.core.files import atomic_write_json
from tasks.core.processes import ProcessGroupError, group_members, proc_info, reap, stop_groups
from tasks.core.settings import Settings
from tasks.core.wait import wait_until

COMPONENTS = {
    "api-server": ["api-server", "--host", "127.0.0.1"],
    "scheduler": ["scheduler", "--skip-serve-logs"],
    "dag-processor": ["dag-processor"],
}
PARTS = (*COMPONENTS, "model-server")
# What says each part is healthy: a key of Airflow's /api/v2/monitor/health (the API answering it at all
# and its database for the api-server), or the model server's own endpoint.
HEALTH_KEYS = {
    "api-server": "metadatabase",
    "scheduler": "scheduler",
    "dag-processor": "dag_processor",
    "model-server": "model_server",
}
# Parts the health endpoint judges by their heartbeat: one alive but without a heartbeat is hung.
HEARTBEAT_PARTS = ("scheduler", "dag-processor")


class ServiceError(ProcessGroupError):
    pass


def _airflow_cmd(*args: str) -> list[str]:
    return [str(Path(sys.executable).parent / "airflow"), *args]


@dataclass(frozen=True)
class Part:
    """One recorded service process: its pid (its group's id too), start time and command line."""

    name: str
    pid: int
    start: int | None = None  # None: recorded before identities were (trust the pid)
    cmdline: tuple[str, ...] | None = None

    @classmethod
    def of(cls, name: str, pid: int, exec_wait_s: float = 2.0) -> "Part":
        """The part as it reads now. A process just spawned may still be inside execve, where /proc shows
        an empty command line for a moment: wait (up to `exec_wait_s`) until it has one."""

        def execed() -> tuple | None:
            info = proc_info(pid)
            return None if info is not None and not info[3] and info[0] != "Z" else (info,)

        try:
            (info,) = wait_until(execed, timeout_s=exec_wait_s, interval_s=0.01, what=f"{name}'s command line")
        except TimeoutError:
            info = proc_info(pid)  # still without one: take it as it reads
        if info is None:
            raise ServiceError(f"{name} (pid {pid}) is not running")
        return cls(name, pid, info[2], info[3])

    def to_json(self) -> dict:
        return {"pid": self.pid, "start": self.start, "cmdline": list(self.cmdline or ())}

    @classmethod
    def from_json(cls, name: str, d: dict | int) -> "Part":
        if isinstance(d, int):
            return cls(name, d)
        return cls(name, d["pid"], d.get("start"), tuple(d["cmdline"]) if d.get("cmdline") else None)

    def leader(self, cmdline: bool = True) -> str:
        """'alive' (our process), 'dead' (gone or a zombie) or 'reused' (the pid names another process now).
        `cmdline=False` checks the start time only (while a part may still retitle itself at start)."""
        reap(self.pid)
        info = proc_info(self.pid)
        if info is None or info[0] == "Z":
            return "dead"
        if (self.start is not None and info[2] != self.start) or (cmdline and self.cmdline and info[3] != self.cmdline):
            return "reused"
        return "alive"

    def survey(self) -> tuple[str, list[int]]:
        """(leader state, orphans): orphans are the live members of the group of a dead leader (ours: the
        group id cannot be handed out again while they live). A reused pid's group is someone else's."""
        state = self.leader()
        return state, (group_members(self.pid) if state == "dead" else [])

    def describe(self, state: str, orphans: list[int]) -> str:
        if state == "alive":
            return f"{self.name}: alive (pid {self.pid})"
        if state == "reused":
            return f"{self.name}: dead (pid {self.pid} now belongs to another process: not ours, not signalled)"
        return f"{self.name}: dead (pid {self.pid} is gone" + (
            f"; {len(orphans)} orphaned process(es) left in its group: {orphans})" if orphans else ")"
        )


def stop_parts(parts: list[Part], grace_s: float = 15.0) -> list[str]:
    """Stop the groups of `parts` that are ours (a live leader, or orphans of a dead one); never one whose
    leader pid now names another process. Returns one line per part: what was found and done."""
    found, signal_these = [], {}
    for part in parts:
        state, orphans = part.survey()
        line = part.describe(state, orphans)
        if state == "alive":
            signal_these[part.name] = part.pid
            line += ": stopped"
        elif orphans:
            signal_these[f"{part.name}'s orphans"] = part.pid
            line += ": killed them"
        found.append(line)
    stop_groups(signal_these, grace_s)
    return found


def params_file(settings: Settings) -> Path:
    """The params file a process with `settings` reads (SLUICE_PARAMS, else the checkout's params.yaml)."""
    from tasks.core.settings import REPO_ROOT

    return Path(settings.params or REPO_ROOT / "params.yaml").resolve()


def params_mismatch(settings: Settings, state: dict) -> str | None:
    """Why a command with `settings` must not use the services `state` (services.json) records: they read
    another params file (each task loads its params from the services' environment, so the caller's
    SLUICE_PARAMS would be silently ignored). None when they read the same file."""
    from tasks.core.settings import REPO_ROOT

    theirs = Path(state.get("params") or REPO_ROOT / "params.yaml")
    mine = params_file(settings)
    if theirs == mine:
        return None
    return (
        f"the running services read {theirs}, and this command was given {mine} (SLUICE_PARAMS): a run "
        f"through them would ignore it. Stop them first (make down), then run again with your params; or "
        f"unset SLUICE_PARAMS to run with theirs"
    )


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
        self.nightly_schedule = nightly_schedule
        self.started_at = time.time()  # unix seconds: what "since start" means in make status
        self.restarts: dict[str, int] = {}  # part -> times heal() restarted it since start
        self.parts: dict[str, Part] = {}
        self.retired: list[Part] = []  # dead leaders whose orphans (a scheduler's workers) may still run

    @property
    def pgids(self) -> dict[str, int]:
        return {name: part.pid for name, part in self.parts.items()}

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
        proc = subprocess.run(
            _airflow_cmd(
                "pools",
                "set",
                "sluice_registry",
                "1",
                "registry writers, one at a time (nightly steps and the rollback DAG)",
            ),
            env=self.env,
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            raise ServiceError(f"airflow pools set sluice_registry failed:\n{proc.stderr[-3000:]}")

    def start(self, timeout_s: float = 120) -> "AirflowServices":
        self.migrate()
        for name in PARTS:
            self._spawn(name)
        self._write_state()
        try:
            self._wait_healthy(timeout_s)
        except BaseException:
            self.stop()
            raise
        self._record_identities()
        return self

    def _spawn(self, name: str) -> None:
        logs = self.home / "logs" / "services"
        logs.mkdir(parents=True, exist_ok=True)
        with open(logs / f"{name}.log", "ab") as out:
            if name == "model-server":  # beside Airflow: it follows the registry's serving state by itself
                from tasks.core.params import load_params

                # serving.replicas > 1: that many replicas behind HAProxy on serve_port, one process group
                n = load_params(settings=self.settings).serving.replicas
                cmd = part_command(self.serve_port, n)
                env = server_env(self.settings.home, base=self.env)
            else:
                cmd, env = _airflow_cmd(*COMPONENTS[name]), self.env
            proc = subprocess.Popen(
                cmd, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
            )  # session leader: its pid is the group id
        self.parts[name] = Part.of(name, proc.pid)

    def _record_identities(self) -> None:
        """Once healthy, record each command line as it now reads (the api-server retitles itself)."""
        for name, part in self.parts.items():
            info = proc_info(part.pid)
            if info and info[2] == part.start:
                self.parts[name] = Part(name, part.pid, part.start, info[3])
        self._write_state()

    def _write_state(self, stopping: bool = False) -> None:
        state = {
            "stopping": stopping,
            "port": self.port,
            "serve_port": self.serve_port,
            "nightly_schedule": self.nightly_schedule,
            "params": str(params_file(self.settings)),  # what every task of these services reads
            "started_at": self.started_at,
            "restarts": self.restarts,
            "pgids": self.pgids,
            "parts": {n: p.to_json() for n, p in self.parts.items()},
            "retired": [{"name": p.name, **p.to_json()} for p in self.retired],
        }
        atomic_write_json(self.state_file, state)

    @classmethod
    def attach(cls, settings: Settings, state: dict | None = None) -> "AirflowServices":
        """The services a previous start recorded (alive or not), to check, heal or stop."""
        state = state if state is not None else cls.recorded(settings)
        if state is None:
            raise ServiceError("no services recorded (make up)")
        svc = cls(settings, port=state["port"], nightly_schedule=state.get("nightly_schedule", True))
        svc.serve_port = state.get("serve_port") or svc.serve_port
        svc.started_at = state.get("started_at") or svc.started_at
        parts = state.get("parts") or state["pgids"]
        svc.parts = {n: Part.from_json(n, d) for n, d in parts.items()}
        svc.retired = [Part.from_json(d["name"], d) for d in state.get("retired", [])]
        svc.restarts = dict(state.get("restarts") or {})
        return svc

    def refresh(self) -> bool:
        """Take the parts as services.json now records them (another command may have restarted one).
        False when nothing is recorded or the record is being stopped (`make down`): nothing to heal then."""
        state = self.recorded(self.settings)
        if state is None or state.get("stopping"):
            return False
        recorded = self.attach(self.settings, state)
        for field in ("port", "serve_port", "env", "nightly_schedule", "parts", "retired", "restarts"):
            setattr(self, field, getattr(recorded, field))
        return True

    def endpoint_health(self) -> dict[str, str]:
        """What the services say of themselves: {part: problem} for each part whose endpoint is not healthy."""
        problems = {}
        try:
            health = httpx.get(f"{self.base_url}/api/v2/monitor/health", timeout=5).json()
            problems.update(health_problems(health))
        except (httpx.HTTPError, ValueError) as exc:
            problems["api-server"] = f"its health endpoint does not answer ({type(exc).__name__})"
        try:  # ready, not only live: a server that cannot serve its model says so here
            r = httpx.get(f"{self.serve_url}/v2/health/ready", timeout=5)
            try:
                body = r.json()
            except ValueError:
                body = {"last_error": r.text[:200]}
            waiting = body.get("serving") == "nothing" and not body.get("last_error")  # no prod model yet
            if r.status_code != 200 and not waiting:
                why = body.get("last_error") or body.get("serving")
                problems["model-server"] = f"not ready (/v2/health/ready answers {r.status_code}: {why})"
        except httpx.HTTPError as exc:
            problems["model-server"] = f"/v2/health/ready does not answer ({type(exc).__name__})"
        return problems

    def check(self) -> dict[str, str]:
        """{part: problem} for each part not alive and healthy; {} when all are."""
        problems = {}
        for name, part in self.parts.items():
            state, orphans = part.survey()
            if state != "alive":
                problems[name] = part.describe(state, orphans).split(": ", 1)[1]
        if len(problems) < len(self.parts):
            for name, why in self.endpoint_health().items():
                problems.setdefault(name, f"alive, but {why}")
        return problems

    def heal(
        self, timeout_s: float = 120, say: Callable[[str], None] = print, hung: dict[str, str] | None = None
    ) -> list[str]:
        """Restart every part whose process is dead (or whose pid now names another process), and each part
        named in `hung` ({part: why}: alive, but the health endpoint has called it unhealthy for too long),
        saying which and why. A hung part's own process is killed (SIGKILL: a hung process handles nothing);
        its group's other members (a scheduler's LocalExecutor workers) are left to finish, recorded, so
        `make down` stops them. Waits until the restarted parts are healthy; returns them."""
        restart = {}
        for name, part in self.parts.items():
            state, orphans = part.survey()
            if state != "alive":
                restart[name] = (part, part.describe(state, orphans).split(": ", 1)[1], orphans)
            elif name in (hung or {}):
                restart[name] = (part, f"alive but hung ({hung[name]})", None)
        for name, (part, why, orphans) in restart.items():
            if orphans is None:  # hung: kill its own process, then it is a dead leader like any other
                self._kill_leader(part)
                orphans = part.survey()[1]
            if orphans and name == "scheduler":
                # Its LocalExecutor workers may be running a task that still reports to the API: left to
                # finish, and recorded, so `make down` stops them.
                self.retired.append(part)
                say(f"[sluice] {name} is {why}: restarting it (its orphans are left to finish; make down stops them)")
            else:
                if orphans:
                    stop_groups({f"{name}'s orphans": part.pid}, grace_s=5)
                say(f"[sluice] {name} is {why}: restarting it")
            self._spawn(name)
            self.restarts[name] = self.restarts.get(name, 0) + 1
        if restart:
            self._write_state()
            self._wait_healthy(timeout_s, parts=list(restart))
            self._record_identities()
            say(f"[sluice] restarted: {', '.join(restart)}")
        return list(restart)

    @staticmethod
    def _kill_leader(part: Part, timeout_s: float = 10) -> None:
        """SIGKILL `part`'s own process (not its group) and wait until it is gone; never a pid not ours."""
        if part.leader() != "alive":
            return
        try:
            os.kill(part.pid, signal.SIGKILL)  # also ends a stopped (SIGSTOP) process
        except ProcessLookupError:
            return
        try:
            wait_until(lambda: part.leader() != "alive", timeout_s=timeout_s, interval_s=0.1, what=f"{part.name} gone")
        except TimeoutError as exc:
            raise ServiceError(str(exc)) from None

    def _wait_healthy(self, timeout_s: float, parts: list[str] | None = None) -> None:
        """Wait until `parts` (default: all) are alive and healthy; others may be unhealthy meanwhile."""
        parts = list(self.parts) if parts is None else parts

        def healthy() -> dict | None:
            dead = [n for n in parts if self.parts[n].leader(cmdline=False) != "alive"]
            if dead:
                raise ServiceError(f"{dead} exited at start: see {self.home / 'logs' / 'services'}")
            health = httpx.get(f"{self.base_url}/api/v2/monitor/health", timeout=2).json()
            status = {k: v.get("status") for k, v in health.items() if isinstance(v, dict)}
            if "model-server" in parts:
                # live, not ready: before the first model is promoted there is nothing to serve
                status["model_server"] = "healthy" if answers(self.serve_url, "live") else "not live"
            wanted = [HEALTH_KEYS[n] for n in parts]
            return status if all(status.get(k, "healthy") == "healthy" for k in wanted) else None

        try:
            wait_until(
                healthy,
                timeout_s=timeout_s,
                interval_s=0.5,
                what="Airflow and the model server healthy",
                retry_on=(httpx.HTTPError, ValueError),
            )
        except TimeoutError as exc:
            raise ServiceError(str(exc)) from None

    def stop(self) -> list[str]:
        """Stop every part (and the orphans of any that died); returns what was found, one line a part.
        The record says `stopping` first, so a waiting `make run` does not restart what is being stopped."""
        if self.state_file.exists():
            self._write_state(stopping=True)
        found = stop_parts(list(self.parts.values()) + self.retired)
        self.parts, self.retired = {}, []
        self.state_file.unlink(missing_ok=True)
        return found

    def __enter__(self) -> "AirflowServices":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def client(self) -> "ApiClient":
        return ApiClient(self.base_url, ADMIN_USER, ensure_secrets(self.home)["password"])

    @staticmethod
    def recorded(settings: Settings) -> dict | None:
        """What a previous start recorded in services.json (its parts may have died since), or None."""
        state_file = settings.layout.airflow_home / "services.json"
        return json.loads(state_file.read_text()) if state_file.exists() else None

    @classmethod
    def running(cls, settings: Settings) -> dict | None:
        """The services a previous `make up` left running, if every part's own process is still alive."""
        state = cls.recorded(settings)
        if state is None:
            return None
        svc = cls.attach(settings, state)
        return state if all(p.leader() == "alive" for p in svc.parts.values()) else None


def health_problems(health: dict) -> dict[str, str]:
    """{part: problem} from Airflow's /api/v2/monitor/health answer (scheduler, dag-processor, database)."""
    problems = {}
    for key, part in (("scheduler", "scheduler"), ("dag_processor", "dag-processor"), ("metadatabase", "api-server")):
        entry = health.get(key) or {}
        if entry.get("status") not in ("healthy", None) or (key != "metadatabase" and entry.get("status") is None):
            beat = next((v for k, v in entry.items() if k.endswith("heartbeat")), None)
            problems[part] = f"the health endpoint says {key} is {entry.get('status') or 'unknown'}" + (
                f" (last heartbeat {beat})" if beat else ""
            )
    return problems


class RunWatch:
    """What `make run` does while its run goes on, called by `ApiClient.wait_for_run` (as `watch`) with the
    problems the health endpoint names, or {"api-server": why} while the API does not answer.

    A part whose process died is restarted (the api-server included: the polling goes on once it is back).
    A scheduler or dag-processor alive but unhealthy (no heartbeat: hung) is named once, and restarted when
    the endpoint has called it unhealthy for `hung_after_s` (None: never, only named). Nothing is restarted
    while services.json is gone or says `stopping` (`make down` ran): the run then ends with its one-line
    lost-API error."""

    def __init__(
        self,
        services: AirflowServices,
        hung_after_s: float | None = 60,
        say: Callable[[str], None] = lambda line: print(line, flush=True),
        clock: Callable[[], float] = time.monotonic,
    ):
        self.services, self.hung_after_s, self.say, self.clock = services, hung_after_s, say, clock
        self.unhealthy_since: dict[str, float] = {}
        self.warned: set[str] = set()

    def __call__(self, problems: dict[str, str]) -> list[str]:
        if not self.services.refresh():
            return []
        now, hung = self.clock(), {}
        for part in HEARTBEAT_PARTS:
            recorded = self.services.parts.get(part)
            if part in problems and recorded is not None and recorded.leader() == "alive":
                since = self.unhealthy_since.setdefault(part, now)
                if self.hung_after_s is not None and now - since >= self.hung_after_s:
                    hung[part] = f"{problems[part]}, for {now - since:.0f}s"
            else:
                self.unhealthy_since.pop(part, None)
        restarted = self.services.heal(say=self.say, hung=hung)
        for part in restarted:
            self.unhealthy_since.pop(part, None)
        for part, why in problems.items():
            if part in restarted or part in self.warned:
                continue
            if part in self.unhealthy_since and self.hung_after_s is not None:
                then = f"restarting it if it stays so for {self.hung_after_s:.0f}s"
            else:
                then = "the run waits for it (`make down && make up` restarts everything)"
            print(f"[sluice] {part} is unhealthy: {why}; {then}", file=sys.stderr, flush=True)
        self.warned = set(problems) - set(restarted)
        return restarted


@dataclass
class ApiClient:
    """Airflow REST API v2 with a JWT from /auth/token."""

    base_url: str
    username: str
    password: str
    _token: str | None = None

    def token(self) -> str:
        if self._token is None:
            r = httpx.post(
                f"{self.base_url}/auth/token", json={"username": self.username, "password": self.password}, timeout=10
            )
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
            wait_until(
                lambda: self.request("GET", f"/dags/{dag_id}").status_code == 200,
                timeout_s=timeout_s,
                interval_s=1,
                what=f"DAG {dag_id} parsed (see the dag-processor log)",
            )
        except TimeoutError as exc:
            raise ServiceError(str(exc)) from None

    def unpause(self, dag_id: str) -> None:
        self._ok(
            self.request("PATCH", f"/dags/{dag_id}", params={"update_mask": "is_paused"}, json={"is_paused": False})
        )

    def trigger(self, dag_id: str, conf: dict | None = None, run_id: str | None = None) -> str:
        body = {"logical_date": None, "conf": conf or {}}
        if run_id:
            body["dag_run_id"] = run_id
        return self._ok(self.request("POST", f"/dags/{dag_id}/dagRuns", json=body))["dag_run_id"]

    def dag_run(self, dag_id: str, run_id: str) -> dict:
        return self._ok(self.request("GET", f"/dags/{dag_id}/dagRuns/{run_id}"))

    def task_instances(self, dag_id: str, run_id: str) -> list[dict]:
        return self._ok(self.request("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances"))["task_instances"]

    def health(self) -> dict[str, str]:
        """{part: problem} from Airflow's health endpoint (scheduler, dag-processor, metadatabase)."""
        return health_problems(httpx.get(f"{self.base_url}/api/v2/monitor/health", timeout=10).json())

    def wait_for_run(
        self,
        dag_id: str,
        run_id: str,
        timeout_s: float = 1800,
        on_change: Callable[[str, str], None] | None = None,
        on_unhealthy: Callable[[dict[str, str]], None] | None = None,
        health_every_s: float = 10,
        unreachable_s: float = 15,
        watch: Callable[[dict[str, str]], list[str]] | None = None,
    ) -> str:
        """Poll until the run ends; report each task state change. Returns the run's final state.

        Every `health_every_s` the health endpoint is read too: a scheduler or dag-processor it calls
        unhealthy (no heartbeat for 30 s: dead or hung) is passed to `on_unhealthy`, or, without one or
        `watch`, named once on stderr with what to do. `watch` (what `make run` passes) is called at each of
        those reads with the problems found, none included, and while the API does not answer (with
        {"api-server": why}); it returns the parts it restarted. An API unreachable for `unreachable_s` and
        not restarted by `watch` (the services were stopped) is a ServiceError saying so."""
        seen: dict[str, str] = {}
        next_health = time.monotonic() + health_every_s
        unreachable_since: float | None = None
        warned: set[str] = set()

        def ended() -> str | None:
            """One poll: the run's final state once it has one; health reads and the lost API on the way."""
            nonlocal next_health, unreachable_since, warned
            try:
                run_state = self.dag_run(dag_id, run_id)["state"]  # read first: the tasks below are newer
                for ti in self.task_instances(dag_id, run_id):
                    state = ti["state"] or "none"
                    if on_change and seen.get(ti["task_id"]) != state and state not in ("none", "scheduled", "queued"):
                        on_change(ti["task_id"], state)
                    seen[ti["task_id"]] = state
                if run_state in ("success", "failed"):
                    return run_state
                if time.monotonic() >= next_health:
                    next_health = time.monotonic() + health_every_s
                    problems = self.health()
                    if watch:
                        watch(problems)
                    if problems and on_unhealthy:
                        on_unhealthy(problems)
                    for part, why in problems.items():
                        if not (on_unhealthy or watch) and part not in warned:
                            print(
                                f"[sluice] waiting for run {run_id}, but {part} is unhealthy: {why}. "
                                f"`make up` restarts a dead part; the run goes on once it is back",
                                file=sys.stderr,
                                flush=True,
                            )
                    warned = set(problems)
                unreachable_since = None
            except httpx.TransportError as exc:
                unreachable_since = unreachable_since or time.monotonic()
                if watch and watch({"api-server": f"its API does not answer ({type(exc).__name__})"}):
                    unreachable_since = None  # restarted: poll on
                elif time.monotonic() - unreachable_since >= unreachable_s:
                    raise ServiceError(
                        f"lost the Airflow API at {self.base_url} while waiting for run {run_id} "
                        f"({type(exc).__name__}: {exc}); were the services stopped (make down)? "
                        f"`make status` says what is running"
                    ) from None
            return None

        try:
            return wait_until(ended, timeout_s=timeout_s, interval_s=1, what=f"run {run_id} finished")
        except TimeoutError:
            raise ServiceError(f"run {run_id} did not finish within {timeout_s:.0f}s") from None
