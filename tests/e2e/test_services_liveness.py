"""Services that notice their own death: each part's own pid, start time and command line.

Fast: the identity check with a real child process, and the rule that a group whose leader pid now names
another process is never signalled while the orphans of a dead leader of ours are cleaned up.
Slow: the scheduler SIGKILLed during a real run is seen dead by `make status`, named unhealthy by
wait_for_run from the health endpoint, restarted by `make up`; the run completes; `make down` reports.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import httpx
import pytest

from ops.services import AirflowServices, Part, stop_parts
from tasks.core.processes import group_members, stop_groups
from tasks.core.wait import wait_until


def _sleeper(code: str | None = None) -> subprocess.Popen:
    cmd = ["sleep", "60"] if code is None else [sys.executable, "-c", code]
    return subprocess.Popen(cmd, start_new_session=True)


def test_identity_is_pid_start_time_and_command_line():
    proc = _sleeper()
    try:
        part = Part.of("sleeper", proc.pid)
        assert part.cmdline == ("sleep", "60") and part.start > 0
        assert part.leader() == "alive"
        assert Part("sleeper", proc.pid, part.start + 1, part.cmdline).leader() == "reused"  # another start
        assert Part("sleeper", proc.pid, part.start, ("sleep", "61")).leader() == "reused"  # another program
        proc.kill()
        wait_until(lambda: part.leader() == "dead", timeout_s=10, what="the killed sleep seen dead")
        assert part.survey() == ("dead", [])
    finally:
        proc.kill()
        proc.wait()


def test_never_signals_a_group_whose_leader_is_not_ours():
    proc = _sleeper()
    try:
        theirs = Part.of("scheduler", proc.pid)
        recorded = Part("scheduler", proc.pid, theirs.start - 1, theirs.cmdline)  # our process had this pid once
        found = stop_parts([recorded], grace_s=1)
        assert found == [f"scheduler: dead (pid {proc.pid} now belongs to another process: not ours, not signalled)"]
        assert proc.poll() is None and theirs.leader() == "alive"  # untouched
    finally:
        proc.kill()
        proc.wait()


def test_orphans_of_a_dead_leader_are_found_and_cleaned():
    code = (
        "import signal, subprocess, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "subprocess.Popen(['sleep', '60']); time.sleep(60)"
    )
    proc = _sleeper(code)
    try:
        part = Part.of("scheduler", proc.pid)
        wait_until(lambda: len(group_members(proc.pid)) == 2, timeout_s=10, what="leader and worker up")
        os.kill(proc.pid, signal.SIGKILL)  # the leader only, as in the bug
        proc.wait()
        state, orphans = part.survey()
        assert state == "dead" and len(orphans) == 1 and orphans[0] != proc.pid
        found = stop_parts([part], grace_s=1)
        assert found == [
            f"scheduler: dead (pid {proc.pid} is gone; 1 orphaned process(es) left in its group: "
            f"{orphans}): killed them"
        ]
        assert group_members(proc.pid) == []
    finally:
        stop_groups({"test": proc.pid}, grace_s=1) if group_members(proc.pid) else None


def _ops(settings, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ops", *args],
        env={**os.environ, "SLUICE_HOME": str(settings.home)},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.extended
@pytest.mark.slow
def test_scheduler_killed_mid_run_is_noticed_restarted_and_the_run_completes(tmp_path):
    from tasks.core.settings import Settings

    settings = Settings.from_env({"SLUICE_HOME": str(tmp_path / "home")})
    settings.layout.ensure()
    svc = AirflowServices(settings, nightly_schedule=False).start()
    try:
        client = svc.client()
        client.wait_for_dag("nightly_pipeline")
        client.unpause("nightly_pipeline")
        run_id = client.trigger("nightly_pipeline", {"epochs": 2}, run_id="liveness_1")
        wait_until(
            lambda: any(t["state"] == "running" for t in client.task_instances("nightly_pipeline", run_id)),
            timeout_s=120,
            interval_s=0.5,
            what="a task of the run running",
            retry_on=(httpx.TransportError,),  # an API slow to answer on a loaded machine: ask again
        )
        old = svc.parts["scheduler"]
        os.kill(old.pid, signal.SIGKILL)  # its own pid: its workers stay in its group

        status = _ops(settings, "status")  # the process check sees it at once
        assert status.returncode == 1, status.stdout + status.stderr
        assert f"scheduler: dead (pid {old.pid} is gone" in status.stdout

        # wait_for_run names the unhealthy scheduler from the health endpoint within a minute.
        seen: list[dict] = []

        class Noticed(Exception):
            pass

        def on_unhealthy(problems):
            seen.append(problems)
            raise Noticed

        with pytest.raises(Noticed):
            client.wait_for_run("nightly_pipeline", run_id, timeout_s=60, on_unhealthy=on_unhealthy, health_every_s=2)
        assert "scheduler" in seen[0] and "unhealthy" in seen[0]["scheduler"], seen

        up = _ops(settings, "up")
        assert up.returncode == 0, up.stdout + up.stderr
        assert f"[sluice] scheduler is dead (pid {old.pid} is gone" in up.stdout and "restarted scheduler" in up.stdout
        new = AirflowServices.attach(settings)
        assert new.parts["scheduler"].pid != old.pid and new.parts["scheduler"].leader() == "alive"
        assert new.check() == {}

        assert client.wait_for_run("nightly_pipeline", run_id, timeout_s=600) == "success"
        assert json.loads((settings.layout.run_dir(run_id) / "summary.json").read_text())["train"]["epochs"] == 2
    finally:
        down = _ops(settings, "down", timeout=120)
        print(down.stdout, down.stderr)
        recorded = [Part(n, p) for n, p in svc.pgids.items()]
        if AirflowServices.recorded(settings):
            stop_parts(list(AirflowServices.attach(settings).parts.values()))
        svc.stop()
    assert down.returncode == 0 and "scheduler: alive" in down.stdout and "stopped" in down.stdout, down.stdout
    assert not any(group_members(p.pid) for p in recorded), "a service or orphan outlived make down"
    assert not any(group_members(p.pid) for p in new.parts.values())


def test_a_lost_api_while_waiting_is_one_clear_error():
    from ops.services import ApiClient, ServiceError, free_port

    client = ApiClient(f"http://127.0.0.1:{free_port()}", "admin", "x")  # nothing listens there: make down ran
    with pytest.raises(ServiceError, match=r"lost the Airflow API at .* while waiting for run r1 .*make down"):
        client.wait_for_run("nightly_pipeline", "r1", timeout_s=30, unreachable_s=1)


def test_health_endpoint_problems_name_the_part():
    from ops.services import health_problems

    healthy = {
        "metadatabase": {"status": "healthy"},
        "scheduler": {"status": "healthy", "latest_scheduler_heartbeat": "t0"},
        "triggerer": {"status": None},
        "dag_processor": {"status": "healthy"},
    }
    assert health_problems(healthy) == {}
    dead = {**healthy, "scheduler": {"status": "unhealthy", "latest_scheduler_heartbeat": "t0"}}
    assert health_problems(dead) == {"scheduler": "the health endpoint says scheduler is unhealthy (last heartbeat t0)"}


@pytest.mark.slow
def test_ops_run_restarts_a_hung_scheduler_and_a_dead_api_server_and_the_run_completes(tmp_path, monkeypatch):
    """`python -m ops run` while the scheduler is hung (SIGSTOP: alive, no heartbeat) and the api-server is
    SIGKILLed: the api-server is restarted and the polling goes on; the scheduler, once the health endpoint
    has called it unhealthy for --restart-hung-after seconds, is killed and restarted, said once; the run
    then completes. A landing with no batch (demo feed off) keeps the run short: ingest, no_batch, report."""
    from tasks.core.settings import Settings

    monkeypatch.setenv("SLUICE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SLUICE_DEMO_FEED", "0")
    # The endpoint calls a scheduler unhealthy 15 s after its last heartbeat (Airflow's default: 30 s).
    monkeypatch.setenv("AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_THRESHOLD", "15")
    settings = Settings.from_env()
    settings.layout.ensure()
    svc = AirflowServices(settings, nightly_schedule=False).start()
    hung, api = svc.parts["scheduler"], svc.parts["api-server"]
    log = tmp_path / "ops-run.log"
    run = None
    try:
        svc.client().wait_for_dag("nightly_pipeline")
        os.kill(hung.pid, signal.SIGSTOP)
        with open(log, "w") as out:
            run = subprocess.Popen(
                [sys.executable, "-m", "ops", "run", "--restart-hung-after", "6", "--timeout", "290"],
                stdout=out,
                stderr=subprocess.STDOUT,
                text=True,
            )
        wait_until(lambda: "[sluice] triggered nightly_pipeline" in log.read_text(), timeout_s=120, what="the trigger")
        os.kill(api.pid, signal.SIGKILL)  # while the run is polled
        run.wait(timeout=300)
        said = log.read_text()
        assert run.returncode == 0, said
        assert f"[sluice] api-server is dead (pid {api.pid} " in said, said  # gone, or reaped and its pid reused
        assert said.count("[sluice] scheduler is alive but hung (the health endpoint says scheduler is unhealthy") == 1
        assert said.count("[sluice] restarted: scheduler") == 1, said
        assert "DAG run make_run__" in said and said.rstrip().endswith(": success"), said
        now = AirflowServices.attach(settings)
        assert hung.leader() == "dead" and now.parts["scheduler"].pid != hung.pid
        assert now.parts["api-server"].pid != api.pid and now.check() == {}
        assert now.restarts == {"api-server": 1, "scheduler": 1}  # make status: "(restarted 1 time since start)"
    finally:
        if run is not None and run.poll() is None:
            run.kill()
            run.wait()
        try:
            os.kill(hung.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
        if AirflowServices.recorded(settings):
            recorded = AirflowServices.attach(settings)
            # The hung scheduler's idle workers ignore SIGTERM: killed at once rather than after make down's grace.
            stop_parts(recorded.retired, grace_s=1)
            recorded.retired = []
            print("\n".join(recorded.stop()))  # what make down does, in-process
        svc.stop()
    assert not any(group_members(p.pid) for p in (hung, api)), "a service or orphan outlived the test"
    assert not any(group_members(p.pid) for p in now.parts.values())


def test_make_run_restarts_nothing_while_make_down_is_stopping_the_services(tmp_path):
    """`make down` marks services.json `stopping` before it signals anything: a `make run` that sees its parts
    die meanwhile restarts none of them (it ends with the lost-API line instead)."""
    from ops.services import RunWatch
    from tasks.core.settings import Settings

    settings = Settings.from_env({"SLUICE_HOME": str(tmp_path / "home")})
    settings.layout.ensure()
    gone = _sleeper()
    gone.kill()
    gone.wait()
    svc = AirflowServices(settings)
    # A dead part under a name heal cannot start (KeyError): were the guard gone, the test fails, spawning nothing.
    svc.parts = {"sleeper": Part("sleeper", gone.pid)}
    svc._write_state(stopping=True)
    watch = RunWatch(AirflowServices.attach(settings), hung_after_s=0.0)
    assert watch({"api-server": "its API does not answer (ConnectError)"}) == []
    assert AirflowServices.recorded(settings)["parts"]["sleeper"]["pid"] == gone.pid  # nothing was restarted
    svc.state_file.unlink()  # make down finished: nothing recorded, nothing restarted either
    assert watch({"scheduler": "unhealthy"}) == []
