"""The replicas' restart ledger: one JSON line per replica that exited and was replaced
(`$SLUICE_HOME/serving/balancer/restarts.jsonl`), written by the watchdog (`python -m ops.replicas`),
read by `make status`, by every replica's `/metrics` (`sluice_replica_restarts_total{replica}`) and by the
crash-loop alert (tasks.monitoring.alerts.replica_restarts)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Iterable

from prometheus_client.core import CounterMetricFamily

from tasks.serving.paths import balancer_dir


def restarts_file(home: Path | str) -> Path:
    return balancer_dir(home) / "restarts.jsonl"


def record_restart(home: Path | str, replica: str, code: int | None, replaced_by: str) -> dict[str, Any]:
    """Append one restart (a whole line in one write, fsynced: a reader never sees half of one)."""
    entry = {"replica": replica, "exit_code": code, "replaced_by": replaced_by, "ts": time.time()}
    path = restarts_file(home)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps(entry) + "\n")
        out.flush()
        os.fsync(out.fileno())
    return entry


def read_restarts(home: Path | str, since: float | None = None) -> list[dict[str, Any]]:
    """Every restart recorded (since `since`, unix seconds), oldest first; unreadable lines are skipped."""
    try:
        lines = restarts_file(home).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    out = []
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and (since is None or entry.get("ts", 0) >= since):
            out.append(entry)
    return out


class RestartCollector:
    """`sluice_replica_restarts_total{replica}` from the ledger, read at each scrape (the watchdog that
    writes it is another process)."""

    def __init__(self, home: Path | str):
        self.home = home

    def collect(self) -> Iterable[CounterMetricFamily]:
        family = CounterMetricFamily(
            "sluice_replica_restarts",
            "Replicas that exited and were replaced, by the replica that exited",
            labels=["replica"],
        )
        counts: dict[str, int] = {}
        for entry in read_restarts(self.home):
            counts[str(entry.get("replica"))] = counts.get(str(entry.get("replica")), 0) + 1
        for replica, n in sorted(counts.items()):
            family.add_metric([replica], n)
        yield family
