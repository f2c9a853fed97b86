"""Model-server replicas behind HAProxy: replica_join_s, scale_failed_requests, replicas_throughput_ratio.

One registry with the bench-profile model (21 -> params scaling.bench_hidden -> 1, real fp32 ONNX,
onnxruntime one thread per replica), real replicas (`python -m tasks.serving --replica rN`) and a real
HAProxy (ops/replicas.py), params.yaml's serving settings. Measured side by side in one run:

  replica_join_s             process start of an added replica -> the first request it answers
                             through the balancer, under load (median of the joins of the scale run).
  scale_failed_requests      requests that failed while the set went 1 -> 2 -> 3 -> 2 -> 1 under load
                             (2 client threads), each removal a drain through the runtime API and SIGTERM.
  replicas_throughput_ratio  requests/s through the balancer with 2 replicas over 1 (the second put
                             in maintenance through the runtime API): the same HAProxy, the same client
                             and the same client threads in both arms, arms alternated twice (1, 2, 1,
                             2). OIP v2 JSON infer, batch 32. Beside it: the CPU share of the client,
                             HAProxy and the replicas over each arm (of all the machine's cores).
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np

from bench.record import Record
from bench.registry_data import settings_at
from bench.serving import BATCH, infer_body, write_mlp_onnx
from ops.model_server import server_env
from tasks.core.wait import wait_until

CLIENT_THREADS = 4
ARM_S = 6.0


class Load:
    """`threads` clients posting `body` to `url` until stopped; counts answers per replica and failures."""

    def __init__(self, url: str, body: bytes, threads: int):
        self.url, self.body, self.threads = url, body, threads
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.ok = 0
        self.failed: list[str] = []
        self.first: dict[str, float] = {}  # replica -> monotonic time of its first answer
        self.workers = [threading.Thread(target=self._loop, daemon=True) for _ in range(threads)]

    def _loop(self) -> None:
        headers = {"content-type": "application/json"}
        with httpx.Client(timeout=30) as c:
            while not self.stop.is_set():
                try:
                    r = c.post(self.url + "/v2/models/emails/infer", content=self.body, headers=headers)
                    replica, status = r.headers.get("x-sluice-replica", ""), r.status_code
                except httpx.HTTPError as exc:
                    replica, status = "", f"{type(exc).__name__}"
                with self.lock:
                    if status == 200:
                        self.ok += 1
                        self.first.setdefault(replica, time.monotonic())
                    else:
                        self.failed.append(str(status))

    def __enter__(self) -> "Load":
        for w in self.workers:
            w.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for w in self.workers:
            w.join(timeout=60)


def cpu_seconds(pids: dict[str, int]) -> dict[str, float]:
    import psutil

    out: dict[str, float] = {}
    for name, pid in pids.items():
        try:
            t = psutil.Process(pid).cpu_times()
            out[name] = t.user + t.system
        except psutil.Error:
            out[name] = 0.0
    self = resource.getrusage(resource.RUSAGE_SELF)
    out["client"] = self.ru_utime + self.ru_stime
    return out


def arm(rs, url: str, body: bytes, seconds: float) -> tuple[float, dict[str, float]]:
    """(requests/s, CPU share per part) of `seconds` of load through the balancer."""
    pids = rs.pids()
    before, t0 = cpu_seconds(pids), time.monotonic()
    with Load(url, body, CLIENT_THREADS) as load:
        time.sleep(seconds)
    elapsed = time.monotonic() - t0
    after = cpu_seconds(pids)
    if load.failed:
        raise RuntimeError(f"{len(load.failed)} requests failed in a throughput arm: {load.failed[:5]}")
    cores = os.cpu_count() or 1
    share = {k: round((after[k] - before[k]) / (elapsed * cores), 3) for k in after}
    return load.ok / elapsed, share


def run() -> list[Record]:
    from ops.replicas import ReplicaSet
    from tasks.core.params import load_params
    from tasks.registry import Registry

    params = load_params()
    widths = (21, *params.scaling.bench_hidden, 1)
    x = np.random.default_rng(1).random((BATCH, 21), dtype=np.float32)
    body = infer_body(x)
    with tempfile.TemporaryDirectory(dir=Path.home()) as tmp:
        home = Path(tmp) / "home"
        reg = Registry(settings_at(home))
        model = write_mlp_onnx(Path(tmp) / "bench.onnx", widths)
        version = reg.register_model("bench", {"model.int8.onnx": model}, {"data_version": "data-v1"})
        reg.promote(version["model_version"], "bench")
        with ReplicaSet(home, params, server_env(home)) as rs:
            rs.start(1)
            # scale 1 -> 2 -> 3 -> 2 -> 1 under load
            joins = []
            with Load(rs.url, body, 2) as load:
                time.sleep(1.0)
                added = []
                for _ in range(2):
                    r = rs.add()
                    wait_until(
                        lambda r=r: r.name in load.first,
                        timeout_s=60 - (time.monotonic() - r.started_at),
                        interval_s=0.01,
                        what=f"{r.name} answering through the balancer",
                    )
                    joins.append((load.first[r.name] - r.started_at, r.ready_at - r.started_at))
                    added.append(r.name)
                    time.sleep(1.0)
                drains = [rs.remove(name) for name in reversed(added)]
                time.sleep(1.0)
            scale_ok, scale_failed = load.ok, list(load.failed)
            # throughput: 1 vs 2 replicas, the same balancer and client
            extra = rs.add()
            time.sleep(1.0)
            rates: dict[int, list[float]] = {1: [], 2: []}
            shares: dict[int, list[dict]] = {1: [], 2: []}
            for n in (1, 2, 1, 2):
                if n == 1:
                    rs.admin.drain(extra.name)
                    rs.admin.command(f"set server replicas/{extra.name} state maint")
                else:
                    rs.admin.command(f"set server replicas/{extra.name} state ready")
                    rs.admin.wait_status(extra.name, "UP")
                time.sleep(0.3)
                rate, share = arm(rs, rs.url, body, ARM_S)
                rates[n].append(rate)
                shares[n].append(share)
    one, two = statistics.mean(rates[1]), statistics.mean(rates[2])
    load1 = os.getloadavg()[0]
    return [
        Record(
            "replica_join_s",
            statistics.median(j for j, _ in joins),
            "s",
            "<= 2.0",
            {
                "joins_s": [round(j, 3) for j, _ in joins],
                "of_which_start_to_ready_s": [round(r, 3) for _, r in joins],
                "check_interval_ms": params.serving.check_interval_ms,
            },
        ),
        Record(
            "scale_failed_requests",
            float(len(scale_failed)),
            "requests",
            "<= 0",
            {
                "requests_ok": scale_ok,
                "failures": scale_failed[:10],
                "sequence": "1 -> 2 -> 3 -> 2 -> 1",
                "drain_s": [round(d, 3) for d in drains],
                "client_threads": 2,
            },
        ),
        Record(
            "replicas_throughput_ratio",
            two / one,
            "ratio",
            ">= 1.4",
            {
                "one_replica_requests_per_s": [round(r, 1) for r in rates[1]],
                "two_replicas_requests_per_s": [round(r, 1) for r in rates[2]],
                "cpu_share_one_replica": shares[1][-1],
                "cpu_share_two_replicas": shares[2][-1],
                "cores": os.cpu_count(),
                "client_threads": CLIENT_THREADS,
                "batch": BATCH,
                "arm_s": ARM_S,
                "widths": list(widths),
                "protocol": "OIP v2 JSON",
                "load_average_1m_after": round(load1, 2),
            },
        ),
    ]


if __name__ == "__main__":
    for r in run():
        print(json.dumps(r.to_dict()))
