"""Replicas behind a real HAProxy (Debian's package), on real processes: a replica joins under load with
0 failed requests, a SIGTERM drains with 0 failed requests (through the runtime API, and from outside
through the readiness flip), a SIGKILL costs at most the requests in flight on it; the shared
prediction log holds every replica's records with their inputs; feedback is taken by any replica,
and an unknown, forged or expired id is a 404 from any replica saying why."""

from __future__ import annotations

import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import yaml

from ops.model_server import server_env
from ops.replicas import ReplicaSet
from tasks.core.params import load_params
from tasks.core.settings import REPO_ROOT, Settings
from tasks.registry import Registry
from tasks.serving.paths import prediction_log, request_key_file
from tasks.serving.predlog import read_log
from tasks.serving.requestid import RequestIds, load_key
from tests.helpers.server import wait_for, write_onnx

pytestmark = pytest.mark.slow
CHECK_MS, DRAIN_S, FLUSH_S = 100, 0.4, 0.2


def make_world(tmp, extra: dict | None = None):
    from tasks.datasets import load_dataset

    home = tmp / "home"
    settings = Settings.from_env({"SLUICE_HOME": str(home)})
    reg = Registry(settings)
    n = len(load_dataset().FEATURE_NAMES)
    model = write_onnx(tmp / "m1" / "model.int8.onnx", n, seed=1)
    reg.register_model("run-1", {"model.int8.onnx": model}, {"data_version": "data-v1"})
    reg.promote("model-v1", "test")
    raw = yaml.safe_load((REPO_ROOT / "params.yaml").read_text())
    raw["serving"].update(
        {"poll_s": 0.2, "drain_s": DRAIN_S, "check_interval_ms": CHECK_MS, "log_flush_s": FLUSH_S, **(extra or {})}
    )
    params_file = tmp / "params.yaml"
    params_file.write_text(yaml.safe_dump(raw))
    params = load_params(params_file)
    return home, settings, params, server_env(home, params_file), n


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return make_world(tmp_path_factory.mktemp("replicas"))


@dataclass
class Outcome:
    start: float
    end: float
    status: int  # 0: no answer at all
    replica: str


class Load:
    """`threads` httpx clients posting one row each to /v1/predict until stopped (bounded: `max_s`)."""

    def __init__(self, url: str, row: dict, threads: int = 4, max_s: float = 60):
        self.url, self.row, self.threads, self.max_s = url, row, threads, max_s
        self.stop_event = threading.Event()
        self.outcomes: list[Outcome] = []
        self.lock = threading.Lock()
        self.pool = ThreadPoolExecutor(threads)

    def _client(self) -> None:
        t_end = time.monotonic() + self.max_s
        with httpx.Client(timeout=10) as c:
            while not self.stop_event.is_set() and time.monotonic() < t_end:
                t0 = time.monotonic()
                try:
                    r = c.post(self.url + "/v1/predict", json={"rows": [self.row]})
                    out = Outcome(t0, time.monotonic(), r.status_code, r.headers.get("x-sluice-replica", ""))
                except httpx.HTTPError:
                    out = Outcome(t0, time.monotonic(), 0, "")
                with self.lock:
                    self.outcomes.append(out)

    def __enter__(self) -> "Load":
        self.futures = [self.pool.submit(self._client) for _ in range(self.threads)]
        return self

    def __exit__(self, *exc) -> None:
        self.stop_event.set()
        for f in self.futures:
            f.result()
        self.pool.shutdown()

    def failed(self) -> list[Outcome]:
        with self.lock:
            return [o for o in self.outcomes if o.status != 200]

    def served_by(self, name: str) -> list[Outcome]:
        with self.lock:
            return [o for o in self.outcomes if o.status == 200 and o.replica == name]


def a_row(emails) -> dict:
    import json

    from tasks.plugins.emails import GOLD_COLUMN

    return json.loads(emails.drop(columns=[GOLD_COLUMN]).iloc[:1].to_json(orient="records"))[0]


def test_scale_up_and_down_under_load_fails_nothing(world, emails):
    home, _, params, env, _ = world
    with ReplicaSet(home, params, env) as rs:
        rs.start(1)
        with Load(rs.url, a_row(emails)) as load:
            time.sleep(0.5)
            added = rs.add()
            wait_for(lambda: load.served_by(added.name), 20, f"{added.name} serving through the balancer")
            third = rs.add()
            wait_for(lambda: load.served_by(third.name), 20, f"{third.name} serving through the balancer")
            time.sleep(0.5)
            rs.remove(added.name)  # runtime-API drain, then SIGTERM
            t_out = time.monotonic()
            # From outside: SIGTERM only; the readiness flip takes it out before it stops accepting.
            third.signal(signal.SIGTERM)
            assert third.wait_exit(DRAIN_S + 10) == 0
            time.sleep(0.5)
        served = {o.replica for o in load.outcomes if o.status == 200}
        assert {"r1", added.name, third.name} <= served
        assert load.failed() == [], load.failed()[:5]
        assert len(load.outcomes) > 100
        assert not [o for o in load.outcomes if o.start > t_out + DRAIN_S + 0.2 and o.replica == third.name]
        assert rs.admin.status(added.name) == "absent"


def test_sigkill_costs_at_most_the_requests_in_flight_on_it(world, emails):
    home, _, params, env, _ = world
    with ReplicaSet(home, params, env) as rs:
        rs.start(2)
        with Load(rs.url, a_row(emails), threads=4) as load:
            time.sleep(1.0)
            assert load.served_by("r2")
            t_kill = time.monotonic()
            rs.kill("r2")
            t_dead = time.monotonic()
            wait_for(lambda: rs.admin.status("r2").startswith("DOWN"), 10, "r2 marked down")
            time.sleep(0.5)
        failed = load.failed()
        # Only a request in flight when it died can fail (it started before r2 was gone and was still
        # waiting when the kill was sent), and no more of them than there were in flight at once: the
        # 4 client threads, about half of them on r2.
        assert all(o.start <= t_dead and o.end >= t_kill for o in failed), failed
        assert len(failed) <= load.threads
        after = [o for o in load.outcomes if o.start > t_dead]
        assert after and all(o.status == 200 and o.replica == "r1" for o in after)


def test_a_hung_replica_is_taken_out_and_the_others_keep_serving(tmp_path, emails):
    """A replica that stops answering its checks (SIGSTOP: hung) is marked down; every request goes to the other."""
    home, _, params, env, _ = make_world(tmp_path)
    with ReplicaSet(home, params, env) as rs:
        rs.start(2)
        rs.replicas["r2"].signal(signal.SIGSTOP)  # hung: its checks time out
        try:
            wait_for(lambda: rs.admin.status("r2").startswith("DOWN"), 10, "r2 marked down")
            row = a_row(emails)
            answers = [httpx.post(rs.url + "/v1/predict", json={"rows": [row]}, timeout=10) for _ in range(20)]
            assert all(a.status_code == 200 and a.headers["x-sluice-replica"] == "r1" for a in answers)
        finally:
            rs.replicas["r2"].signal(signal.SIGCONT)


def test_feedback_from_any_replica_and_the_shared_log(world, emails):
    home, settings, params, env, n = world
    row = a_row(emails)
    with ReplicaSet(home, params, env) as rs:
        rs.start(2)
        urls = {name: r.url for name, r in rs.replicas.items()}
        served: dict[str, dict] = {}
        deadline = time.monotonic() + 20
        while len(served) < 2 and time.monotonic() < deadline:
            r = httpx.post(rs.url + "/v1/predict", json={"rows": [row, row]}, timeout=10)
            assert r.status_code == 200
            served.setdefault(r.headers["x-sluice-replica"], r.json())
        assert set(served) == {"r1", "r2"}
        infer = httpx.post(
            rs.url + "/v2/models/emails/infer",
            json={"inputs": [{"name": "features", "shape": [1, n], "datatype": "FP32", "data": [0.5] * n}]},
            timeout=10,
        )
        assert infer.status_code == 200, infer.text
        # Each replica's request id, labelled at the *other* replica directly.
        for name, body in served.items():
            other = urls["r2" if name == "r1" else "r1"]
            fb = httpx.post(other + "/v1/feedback", json={"request_id": body["request_id"], "label": [1, 0]})
            assert fb.status_code == 200, fb.text
            wrong = httpx.post(other + "/v1/feedback", json={"request_id": body["request_id"], "label": 1})
            assert wrong.status_code == 422 and "list of 2 labels" in wrong.json()["error"]
        # Unknown, forged and expired ids: 404 from either replica, saying which.
        good = served["r1"]["request_id"]
        nonce, expiry, rows, sig = good.split(".")
        forged = f"{nonce}.{int(expiry) + 10**6}.{rows}.{sig}"
        ids = RequestIds(load_key(request_key_file(home)), 3600)
        expired = ids.issue(1, now=time.time() - 7200)
        for url in urls.values():
            for rid, why in (("f" * 32, "not an id this service issued"), (forged, "signature does not match")):
                r = httpx.post(url + "/v1/feedback", json={"request_id": rid, "label": 1})
                assert r.status_code == 404 and why in r.json()["error"], r.text
            r = httpx.post(url + "/v1/feedback", json={"request_id": expired, "label": 1})
            assert r.status_code == 404 and "expired" in r.json()["error"], r.text

        def logged():
            recs = read_log(prediction_log(settings))
            fb = [
                x
                for x in recs
                if x["kind"] == "feedback" and x["request_id"] in {b["request_id"] for b in served.values()}
            ]
            return recs if len(fb) == 4 else None

        recs = wait_for(logged, 10, "every replica's records in the shared log")
    by_id = {b["request_id"]: name for name, b in served.items()}
    preds = [x for x in recs if x["kind"] == "prediction" and x["request_id"] in by_id]
    assert len(preds) == 4
    for p in preds:
        assert p["replica"] == by_id[p["request_id"]] and p["input"] == row and p["endpoint"] == "predict"
    fbs = [x for x in recs if x["kind"] == "feedback" and x["request_id"] in by_id]
    assert all(f["replica"] != by_id[f["request_id"]] for f in fbs)  # labelled elsewhere
    oip = [
        x for x in recs if x.get("endpoint") == "infer" and x["request_id"] == infer.json()["parameters"]["request_id"]
    ]
    assert len(oip) == 1 and oip[0]["input"] == [0.5] * n
    keys = prediction_log(settings).keys()
    assert {k.split("/")[0] for k in keys} >= {"r1", "r2"}


def replica_pid(home, name: str) -> int:
    import json

    from tasks.serving.paths import replica_address_file

    return int(json.loads(replica_address_file(home, name).read_text())["pid"])


def test_make_ups_replicas_part_runs_and_stops_as_one_process_group(world, emails):
    """`python -m ops.replicas` (the model-server part of `make up` when serving.replicas > 1): the balancer's
    address in address.json, requests served by both replicas, and SIGTERM to its group stops every process.
    A replica killed is replaced, and that shows: the restart ledger, `sluice_replica_restarts_total` on
    /metrics, no stale address file; restart_alert_count restarts in the window are a critical
    `replica_restarts` alert among make status's open alerts."""
    import json
    import subprocess
    import sys

    from ops.services import free_port
    from tasks.core.processes import group_alive, stop_groups
    from tasks.serving.paths import address_file, replica_address_file
    from tasks.serving.restarts import read_restarts

    home, _, _, env, _ = world
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "ops.replicas", "--replicas", "2", "--port", str(port)],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:

        def announced():
            try:
                a = json.loads(address_file(home).read_text())
            except (OSError, ValueError):
                return None
            return a if a.get("port") == port and a.get("balancer") == "haproxy" else None

        address = wait_for(announced, 60, "the balancer's address")
        assert set(address["replicas"]) == {"r1", "r2"}
        row = a_row(emails)
        seen = {
            httpx.post(address["url"] + "/v1/predict", json={"rows": [row]}, timeout=10).headers["x-sluice-replica"]
            for _ in range(20)
        }
        assert seen == {"r1", "r2"}
        # A replica that dies is replaced: r3 joins, r1 leaves the balancer.
        os.kill(replica_pid(home, "r1"), signal.SIGKILL)
        address = wait_for(
            lambda: (a := announced()) and set(a["replicas"]) == {"r2", "r3"} and a, 60, "r3 in r1's place"
        )
        seen = set()
        deadline = time.monotonic() + 20
        while "r3" not in seen and time.monotonic() < deadline:
            seen.add(
                httpx.post(address["url"] + "/v1/predict", json={"rows": [row]}, timeout=10).headers["x-sluice-replica"]
            )
        assert "r3" in seen and "r1" not in seen
        # The restart shows: the ledger, the Prometheus counter, and r1's address file is gone.
        (entry,) = read_restarts(home)
        assert (entry["replica"], entry["exit_code"], entry["replaced_by"]) == ("r1", -signal.SIGKILL, "r3")
        assert not replica_address_file(home, "r1").exists()
        exposition = httpx.get(address["url"] + "/metrics", timeout=10).text
        assert 'sluice_replica_restarts_total{replica="r1"} 1.0' in exposition
        assert not open_alerts(home), "one restart is no crash loop"
        # A crash loop: as many restarts as serving.restart_alert_count within the window -> a critical alert.
        limit = load_params(home.parent / "params.yaml").serving.restart_alert_count
        for n in range(2, limit + 1):
            victim = sorted(announced()["replicas"])[0]
            os.kill(replica_pid(home, victim), signal.SIGKILL)
            wait_for(lambda n=n: len(read_restarts(home)) == n and announced(), 60, f"restart {n} replaced")
        (alert,) = wait_for(lambda: open_alerts(home), 20, "the crash-loop alert")
        assert (alert["rule"], alert["severity"]) == ("replica_restarts", "critical")
        assert f"{limit} model-server replicas exited and were replaced" in alert["message"]
        # make status's part for the balancer: each replica asked itself, and the restarts
        from ops.__main__ import _replica_lines

        status = _replica_lines(Settings.from_env({"SLUICE_HOME": str(home)}))
        assert status[0] == f"  model-server replicas behind haproxy: 2, restarts since start: {limit}", status
        assert all(" ready, serving champion model-v1" in line for line in status[1:3]), status
        assert status[3].startswith("    restart: r1 exited (-9), replaced by r3 at "), status
    finally:
        stop_groups({"replicas": proc.pid}, grace_s=20)
    assert proc.wait(5) == 0 and not group_alive(proc.pid)
    assert not address_file(home).exists()
    assert not list(replica_address_file(home, "x").parent.glob("*.json"))  # no file names a dead replica


def open_alerts(home) -> list[dict]:
    """What make status lists as open alerts for `home`."""
    from tasks.reports.pipeline_state import read_state

    return read_state(Settings.from_env({"SLUICE_HOME": str(home)}))["open_alerts"]


def test_the_rendered_config_is_valid_and_retries_only_on_connection_failure(tmp_path):
    import subprocess

    from ops.replicas import haproxy_binary
    from tasks.serving.balancer import Server, render_config

    cfg = render_config("127.0.0.1", 8000, tmp_path / "admin.sock", [Server("r1", "127.0.0.1", 8001)], 250)
    (tmp_path / "haproxy.cfg").write_text(cfg)
    check = subprocess.run(
        [haproxy_binary(), "-c", "-f", str(tmp_path / "haproxy.cfg")], capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr
    lines = [ln.strip() for ln in cfg.splitlines()]
    assert [ln for ln in lines if ln.startswith("retry-on")] == ["retry-on conn-failure"]
    assert "option redispatch 1" in lines and "option httpchk GET /v2/health/ready" in lines
    assert "server r1 127.0.0.1:8001 check inter 250ms fastinter 250ms downinter 250ms fall 2 rise 1" in lines
    assert not [ln for ln in lines if "http-request" in ln or "http-buffer-request" in ln]


def test_a_deep_home_gets_an_admin_socket_haproxy_takes_and_each_home_its_own(tmp_path):
    """HAProxy refuses a `stats socket` path over 97 characters (a pytest-xdist worker's temp folder
    passed it); a balancer folder that deep gets its socket in a private short folder instead."""
    import subprocess

    from ops.replicas import haproxy_binary
    from tasks.serving.balancer import SOCKET_PATH_MAX, Server, admin_socket_path, render_config

    assert admin_socket_path(Path("/srv/sluice/serving/balancer")) == Path("/srv/sluice/serving/balancer/admin.sock")
    deep = [tmp_path / ("d" * 60) / str(i) / "serving" / "balancer" for i in (1, 2)]
    sockets = [admin_socket_path(d) for d in deep]
    assert all(len(str(d / "admin.sock")) > SOCKET_PATH_MAX >= len(str(s)) for d, s in zip(deep, sockets))
    assert sockets[0] != sockets[1] and sockets[0] == admin_socket_path(deep[0])  # one per home, stable
    assert oct(sockets[0].parent.stat().st_mode & 0o777) == "0o700"
    for cfg_socket, expect in ((deep[0] / "admin.sock", 1), (sockets[0], 0)):
        (tmp_path / "haproxy.cfg").write_text(
            render_config("127.0.0.1", 8000, cfg_socket, [Server("r1", "127.0.0.1", 8001)], 250)
        )
        check = subprocess.run(
            [haproxy_binary(), "-c", "-f", str(tmp_path / "haproxy.cfg")], capture_output=True, text=True
        )
        assert check.returncode == expect, check.stdout + check.stderr
    for s in sockets:
        s.parent.rmdir()


def test_sigterm_flips_readiness_and_keeps_serving_while_it_drains(world, emails):
    from ops.replicas import Replica

    home, _, _, env, _ = world
    r = Replica("solo", home, env, home / "logs").start()
    try:
        r.wait_ready(60)
        r.signal(signal.SIGTERM)
        t0 = time.monotonic()
        ready = wait_for(lambda: (a := httpx.get(r.url + "/v2/health/ready", timeout=2)).status_code == 503 and a, 2)
        assert "draining" in ready.json()["last_error"]
        served = httpx.post(r.url + "/v1/predict", json={"rows": [a_row(emails)]}, timeout=5)
        assert served.status_code == 200  # readiness already 503, yet it serves: it drains
        assert r.wait_exit(DRAIN_S + 10) == 0
        assert time.monotonic() - t0 >= DRAIN_S * 0.9
    finally:
        r.stop(grace_s=5)


def test_replicas_that_disagree_fail_the_canary_closed_naming_each():
    """The canary asks every replica behind the balancer what it serves; two that disagree are a refusal."""
    import json
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from tasks.canary.rollout import RolloutError, wait_until_served

    def serving(challenger: str) -> dict:
        return {
            "variants": {"champion": {"model_version": "model-v1"}, "challenger": {"model_version": challenger}},
            "mode": "split",
            "challenger_weight": 50,
            "pending": False,
        }

    servers = []
    for answer in (serving("model-v2"), serving("model-v3")):

        class Handler(BaseHTTPRequestHandler):
            body = json.dumps(answer).encode()

            def do_GET(self):  # noqa: N802
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(self.body)))
                self.end_headers()
                self.wfile.write(self.body)

            def log_message(self, *args):
                pass

        srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
    try:
        urls = {f"r{i + 1}": f"http://127.0.0.1:{s.server_address[1]}" for i, s in enumerate(servers)}
        with pytest.raises(RolloutError) as err:
            wait_until_served(urls["r1"], "model-v1", "model-v2", 50, timeout_s=0.5, replicas=lambda: urls)
        msg = str(err.value)
        assert "disagree on what they serve" in msg
        assert "r1 serves champion model-v1, challenger model-v2, split 50%" in msg
        assert "r2 serves champion model-v1, challenger model-v3, split 50%" in msg
        agreed = {"r1": urls["r1"]}
        assert wait_until_served(urls["r1"], "model-v1", "model-v2", 50, timeout_s=0.5, replicas=lambda: agreed)
    finally:
        for s in servers:
            s.shutdown()
            s.server_close()
