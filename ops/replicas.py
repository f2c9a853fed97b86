"""Model-server replicas behind HAProxy on loopback: `make up` starts them when serving.replicas > 1
(ops/services.py), the tests and bench/replicas.py drive them.

Each replica is `python -m tasks.serving --replica rN --port P` in its own process group, announcing
itself in $SLUICE_HOME/serving/replicas/rN.json; HAProxy (tasks/serving/balancer.py renders its
configuration into $SLUICE_HOME/serving/balancer/) listens on one port, and its address is the one in
$SLUICE_HOME/serving/address.json, so every client (the canary's replay, the tools) goes through it.

Scaling, with 0 failed requests:
  add       a replica is started, waited on until it answers ready itself, then added to HAProxy
            (runtime API); it takes requests once its first health check passes;
  remove    drained through the runtime API (no new requests, wait until none is in flight), then
            SIGTERM (it drains again for serving.drain_s: nothing reaches it), then deleted;
  SIGTERM   from anyone else (a node's shutdown): its readiness answers 503 at once, HAProxy takes it
            out within 2 checks, it stops accepting after serving.drain_s and finishes what is in
            flight; a connection refused meanwhile is retried on another replica;
  SIGKILL   what was in flight on it fails (HAProxy cannot replay a request it did not buffer); new
            connections to it are refused and retried elsewhere, and the checks take it out.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ops.model_server import ServerProcess, free_port
from tasks.core.files import atomic_write_json
from tasks.core.processes import group_alive, stop_groups
from tasks.core.wait import wait_until
from tasks.serving.balancer import Admin, Server, admin_socket_path, render_config
from tasks.serving.paths import address_file, balancer_dir, replica_address_file
from tasks.serving.restarts import read_restarts, record_restart


class ReplicaError(RuntimeError):
    pass


def haproxy_binary() -> str:
    found = shutil.which("haproxy") or ("/usr/sbin/haproxy" if Path("/usr/sbin/haproxy").exists() else None)
    if not found:
        raise ReplicaError("haproxy is not installed: apt-get install haproxy (Debian's package)")
    return found


class Replica(ServerProcess):
    """One `python -m tasks.serving --replica NAME` process on a port of its own (ops/model_server.py)."""

    def __init__(
        self,
        name: str,
        home: Path,
        env: dict[str, str],
        log_dir: Path,
        host: str = "127.0.0.1",
        new_session: bool = True,
    ):
        super().__init__(
            home,
            args=("--replica", name),
            base_env=env,
            host=host,
            port=free_port(host),
            log_path=log_dir / f"replica-{name}.log",
            new_session=new_session,
            poll_s=0.02,
        )
        self.name = name
        self.ready_at = 0.0  # monotonic: when it first answered ready itself

    def start(self) -> "Replica":  # type: ignore[override]
        replica_address_file(self.home, self.name).unlink(missing_ok=True)
        super().start(wait_ready=False)
        return self

    def wait_ready(self, timeout_s: float) -> float:
        try:
            seconds = super().wait_ready(timeout_s)
        except (TimeoutError, RuntimeError) as exc:
            raise ReplicaError(f"replica {self.name}: {exc}:\n{self.output()}") from None
        self.ready_at = time.monotonic()
        return seconds

    def stop(self, grace_s: float = 15) -> int | None:
        return super().stop(grace_s)


class ReplicaSet:
    """N replicas and HAProxy in front of them; a context manager that always stops every process."""

    def __init__(
        self,
        home: Path,
        params: Any,
        env: dict[str, str] | None = None,
        port: int = 0,
        log_dir: Path | None = None,
        new_sessions: bool = True,
    ):
        """`new_sessions=False`: every process stays in the caller's process group (`python -m
        ops.replicas` under `make up`, stopped as one part)."""
        self.home = Path(home)
        self.new_sessions = new_sessions
        self.sp = params.serving
        self.env = dict(os.environ if env is None else env)
        self.env["SLUICE_HOME"] = str(self.home)
        self.host = self.sp.host
        self.port = port or free_port()
        self.dir = balancer_dir(self.home)
        self.log_dir = log_dir or self.dir
        self.socket = admin_socket_path(self.dir)
        self.config = self.dir / "haproxy.cfg"
        self.replicas: dict[str, Replica] = {}
        self.haproxy: subprocess.Popen | None = None
        self._next = 1
        self.admin = Admin(self.socket)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def _new(self) -> Replica:
        name = f"r{self._next}"
        self._next += 1
        return Replica(name, self.home, self.env, self.log_dir, self.host, self.new_sessions)

    def start(self, n: int, timeout_s: float = 120) -> "ReplicaSet":
        fresh: list[Replica] = []
        try:
            for _ in range(n):
                fresh.append(self._new().start())
            for r in fresh:
                r.wait_ready(timeout_s)
                self.replicas[r.name] = r
            self._start_haproxy(timeout_s)
        except BaseException:
            for r in fresh:
                r.stop(grace_s=5)
            self.stop()
            raise
        return self

    def _start_haproxy(self, timeout_s: float) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.socket.unlink(missing_ok=True)
        servers = [Server(r.name, r.host, r.port) for r in self.replicas.values()]
        self.config.write_text(render_config(self.host, self.port, self.socket, servers, self.sp.check_interval_ms))
        check = subprocess.run([haproxy_binary(), "-c", "-q", "-f", str(self.config)], capture_output=True, text=True)
        if check.returncode != 0:
            raise ReplicaError(f"haproxy -c refused {self.config}:\n{check.stdout}{check.stderr}")
        with open(self.log_dir / "haproxy.log", "ab") as out:
            self.haproxy = subprocess.Popen(
                [haproxy_binary(), "-db", "-f", str(self.config)],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=self.new_sessions,
            )

        def up() -> bool:
            if self.haproxy.poll() is not None:
                raise ReplicaError(f"haproxy exited with {self.haproxy.returncode}: see {self.log_dir / 'haproxy.log'}")
            if not self.socket.exists():
                return False
            states = {name: row["status"] for name, row in self.admin.servers().items()}
            return all(states.get(name, "").startswith("UP") for name in self.replicas)

        wait_until(up, timeout_s=timeout_s, interval_s=0.05, what="haproxy up with every replica", retry_on=(OSError,))
        self._announce()

    def _announce(self) -> None:
        atomic_write_json(
            address_file(self.home),
            {
                "host": self.host,
                "port": self.port,
                "url": self.url,
                "pid": self.haproxy.pid if self.haproxy else None,
                "balancer": "haproxy",
                "replicas": {n: r.url for n, r in self.replicas.items()},
            },
        )

    def add(self, timeout_s: float = 60) -> Replica:
        """Start one more replica; it joins the balancer once it answers ready itself."""
        r = self._new().start()
        try:
            r.wait_ready(timeout_s)
            self.admin.add(Server(r.name, r.host, r.port), self.sp.check_interval_ms)
        except BaseException:
            r.stop(grace_s=5)
            raise
        self.replicas[r.name] = r
        self._announce()
        return r

    def remove(self, name: str, timeout_s: float = 30) -> float:
        """Drain `name` through the runtime API, SIGTERM it, wait until it exits, delete it. Returns seconds."""
        t0 = time.monotonic()
        r = self.replicas[name]
        self.admin.drain(name, timeout_s)
        r.signal(signal.SIGTERM)
        r.wait_exit(timeout_s)
        self.admin.remove(name)
        del self.replicas[name]
        self._announce()
        return time.monotonic() - t0

    def kill(self, name: str) -> None:
        """SIGKILL `name` (a crash); it stays in HAProxy until `forget`, its checks take it out."""
        r = self.replicas[name]
        r.signal(signal.SIGKILL)
        r.wait_exit(10)

    def forget(self, name: str) -> None:
        """Delete a dead replica from the balancer, and its address file (a killed replica cannot)."""
        self.admin.remove(name)
        self.replicas.pop(name, None)
        replica_address_file(self.home, name).unlink(missing_ok=True)
        self._announce()

    def pids(self) -> dict[str, int]:
        out = {f"replica {n}": r.proc.pid for n, r in self.replicas.items() if r.proc is not None}
        if self.haproxy is not None:
            out["haproxy"] = self.haproxy.pid
        return out

    def stop(self) -> None:
        """SIGTERM every replica (each drains) and HAProxy last; SIGKILL what is left."""
        try:
            if self.new_sessions:
                groups = {n: p for n, p in self.pids().items() if n != "haproxy" and group_alive(p)}
                if groups:
                    stop_groups(groups, grace_s=self.sp.drain_s + 15)
            else:
                for r in self.replicas.values():
                    r.signal(signal.SIGTERM)
                for r in self.replicas.values():
                    r.stop(grace_s=self.sp.drain_s + 15)
        finally:
            if self.haproxy is not None:
                if self.new_sessions:
                    stop_groups({"haproxy": self.haproxy.pid}, grace_s=5)
                elif self.haproxy.poll() is None:
                    self.haproxy.terminate()
                    try:
                        self.haproxy.wait(5)
                    except subprocess.TimeoutExpired:
                        self.haproxy.kill()
                        self.haproxy.wait(5)
                self.haproxy.poll()
            for r in self.replicas.values():
                if r.proc is not None:
                    r.proc.poll()
                    if r.proc.returncode is not None:  # stopped: its address file names a dead pid
                        replica_address_file(self.home, r.name).unlink(missing_ok=True)
            try:
                if json.loads(address_file(self.home).read_text()).get("url") == self.url:
                    address_file(self.home).unlink()
            except (OSError, ValueError):
                pass
            self.socket.unlink(missing_ok=True)
            if self.socket.parent != self.dir:  # admin_socket_path's short folder
                shutil.rmtree(self.socket.parent, ignore_errors=True)

    def __enter__(self) -> "ReplicaSet":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    """python -m ops.replicas --replicas N --port P: N replicas and HAProxy on P, in this process's
    group, until SIGTERM or SIGINT (`make up` runs it as its model-server part when serving.replicas > 1).
    A replica that exits is deleted from the balancer and replaced by a new one; HAProxy exiting ends it."""
    import argparse
    import threading

    from tasks.core.params import load_params
    from tasks.core.settings import Settings

    parser = argparse.ArgumentParser(prog="python -m ops.replicas", description=main.__doc__)
    parser.add_argument("--replicas", type=int, required=True)
    parser.add_argument("--port", type=int, default=0, help="the balancer's port (0: a free one)")
    args = parser.parse_args(argv)
    if args.replicas < 1:
        parser.error("--replicas must be at least 1")
    settings = Settings.from_env()
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    params = load_params(settings=settings)
    rs = ReplicaSet(settings.home, params, port=args.port, new_sessions=False)
    crash_loop = CrashLoop(settings, params.serving)
    try:
        rs.start(args.replicas)
        print(f"[sluice] {args.replicas} model-server replicas behind haproxy at {rs.url}", file=sys.stderr, flush=True)
        while not stop.wait(0.5):
            if rs.haproxy is not None and rs.haproxy.poll() is not None:
                print("[sluice] replicas: haproxy exited: stopping (make up restarts the part)", file=sys.stderr)
                return 1
            for name in [n for n, r in rs.replicas.items() if r.proc is not None and r.proc.poll() is not None]:
                code = rs.replicas[name].proc.returncode
                rs.forget(name)
                new = rs.add()
                record_restart(settings.home, name, code, new.name)
                print(f"[sluice] replicas: {name} exited ({code}): replaced by {new.name}", file=sys.stderr, flush=True)
            crash_loop.check()
    finally:
        rs.stop()
    return 0


class CrashLoop:
    """The `replica_restarts` alert (tasks.monitoring.alerts), kept in the metrics store under one run of
    this watchdog (dag_id "model-server"): written when it starts (none open: an earlier watchdog's alert
    is resolved), raised when the restarts within serving.restart_window_s reach restart_alert_count,
    and resolved (rewritten empty) once they fall below."""

    def __init__(self, settings: Any, sp: Any):
        from datetime import datetime, timezone

        self.settings, self.sp = settings, sp
        self.run_id = f"replicas__{datetime.now(timezone.utc):%Y%m%dT%H%M%S%f}"
        self.open: bool | None = None
        self.started = time.time()

    def check(self) -> None:
        from tasks.monitoring.alerts import replica_restarts

        found = replica_restarts(
            read_restarts(self.settings.home, since=self.started),
            time.time(),
            self.sp.restart_alert_count,
            self.sp.restart_window_s,
        )
        if (found is not None) == self.open:
            return
        from tasks.monitoring.store import MetricsStore

        try:
            MetricsStore.open(self.settings).record(
                self.run_id, "replicas", alerts=[found] if found else [], dag_id="model-server"
            )
        except Exception as exc:  # noqa: BLE001 - the watchdog keeps replacing replicas whatever the store says
            print(f"[sluice] replicas: the metrics store did not take the alert: {exc}", file=sys.stderr, flush=True)
            return
        self.open = found is not None
        if found:
            print(f"[sluice] ALERT critical replica_restarts: {found.message}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
