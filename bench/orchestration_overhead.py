"""orchestration_overhead: share of a nightly run's wall time in which no task was running.

The real services (scheduler with LocalExecutor, dag-processor, api-server) on a
fresh SLUICE_HOME; one nightly_pipeline run triggered over REST on the demo data.
From the task instances' start/end times (REST API): busy = the union of task
intervals; overhead = 1 - busy / (run end - run start). Goal <= 0.2.
"""

from __future__ import annotations

import tempfile
from datetime import datetime
from pathlib import Path

from bench.record import Record
from ops.services import AirflowServices
from tasks.core.settings import Settings

DAG = "nightly_pipeline"


def _t(s: str) -> float:
    return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def idle_share(run_start: float, run_end: float, intervals: list[tuple[float, float]]) -> tuple[float, float]:
    """(idle share, busy seconds) of [run_start, run_end] given task intervals. Pure."""
    busy, cur_s, cur_e = 0.0, None, None
    for s, e in sorted(intervals):
        s, e = max(s, run_start), min(e, run_end)
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                busy += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        busy += cur_e - cur_s
    wall = run_end - run_start
    return 1 - busy / wall, busy


def run() -> list[Record]:
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings.from_env({"SLUICE_HOME": str(Path(tmp) / "home")})
        with AirflowServices(settings, nightly_schedule=False) as services:
            client = services.client()
            client.wait_for_dag(DAG)
            client.unpause(DAG)
            run_id = client.trigger(DAG, {}, run_id="bench_overhead")
            state = client.wait_for_run(DAG, run_id)
            if state != "success":
                raise RuntimeError(f"benchmark run ended {state}")
            dr = client.dag_run(DAG, run_id)
            tis = [t for t in client.task_instances(DAG, run_id) if t["start_date"] and t["end_date"]]
    start, end = _t(dr["start_date"]), _t(dr["end_date"])
    share, busy = idle_share(start, end, [(_t(t["start_date"]), _t(t["end_date"])) for t in tis])
    per_task = {t["task_id"]: round(_t(t["end_date"]) - _t(t["start_date"]), 2) for t in tis}
    return [
        Record(
            "orchestration_overhead",
            share,
            "share",
            "<= 0.2",
            {"run_seconds": end - start, "busy_seconds": busy, "tasks_run": len(tis), "task_seconds": per_task},
        )
    ]
