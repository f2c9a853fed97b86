"""The one hook between the steps and monitoring: `watch_step` wraps a step's run (tasks/runner/__init__.py).

    with watch_step(ctx, task_id, dag_id) as watch:
        rec = the_step(ctx, ...)
        watch.finished(rec)

While the step runs, a sampler thread reads the hardware (hardware.py). When it ends, successfully or
not, one transaction writes the task's usage (measured duration; what it requested), its cost lines,
its metrics (hardware samples and what its record maps to, feed.py) and the alerts its rules raise
(alerts.py); alerts are logged to the task log and delivered through the configured Airflow notifiers.
Monitoring never fails a step: a problem here is one warning line in the task log.
"""

from __future__ import annotations

import os
import time
import traceback
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Iterator

from tasks.core.log import log
from tasks.core.records import Record, RegisterRecord, ReportRecord, SnapshotRecord, TrainPlanRecord, TrainRecord

if TYPE_CHECKING:
    from tasks.core.context import StepContext
    from tasks.monitoring.hardware import HardwareSampler


@dataclass
class Watch:
    record: Record | None = None
    sampler: "HardwareSampler | None" = None
    started: datetime = field(default_factory=lambda: datetime.now(timezone.utc))
    t0: float = field(default_factory=time.monotonic)

    def finished(self, rec: Record) -> None:
        self.record = rec


@contextmanager
def watch_step(ctx: "StepContext", task: str, dag_id: str | None = None) -> Iterator[Watch]:
    """Measure and record one step's run (a no-op when params `monitoring.enabled` is false)."""
    if not ctx.params.monitoring.enabled:
        yield Watch()
        return
    watch = Watch()
    try:
        from tasks.monitoring.hardware import HardwareSampler

        watch.sampler = HardwareSampler(ctx.params.monitoring.sample_every_s).start()
    except Exception as exc:  # noqa: BLE001 - monitoring never fails a step
        log(f"monitoring: hardware sampling not started ({type(exc).__name__}: {exc})")
    state = "failed"
    try:
        yield watch
        state = "success"
    finally:
        try:
            record_step(ctx, task, dag_id, watch, state)
        except Exception as exc:  # noqa: BLE001 - monitoring never fails a step
            where = traceback.extract_tb(exc.__traceback__)[-1]
            log(
                f"monitoring: task {task} not recorded ({type(exc).__name__}: {exc} at "
                f"{os.path.basename(where.filename)}:{where.lineno})"
            )


def record_step(ctx: "StepContext", task: str, dag_id: str | None, watch: Watch, state: str) -> None:
    from tasks.core.context import load_records
    from tasks.monitoring import alerts as alerting
    from tasks.monitoring import cost
    from tasks.monitoring.feed import RunInfo, feed
    from tasks.monitoring.hardware import gpu_utilizations, hardware_metrics
    from tasks.monitoring.store import MetricsStore

    seconds = time.monotonic() - watch.t0
    ended = datetime.now(timezone.utc)
    samples, reason, names = [], "", []
    if watch.sampler is not None:
        samples = watch.sampler.stop()
        reason, names = watch.sampler.nvml_reason, watch.sampler.gpu_names
    records = load_records(ctx.run_dir)
    rec = watch.record
    usage = step_usage(watch.started, ended, seconds, samples, rec, state, ctx.settings.train_backend)
    info = RunInfo(
        run_dir=ctx.run_dir,
        ended=ended,
        prices=ctx.params.cost,
        data_version=_data_version(records, rec),
        model_version=_model_version(records, rec),
        backend=ctx.settings.train_backend,
        pod_requests=_pod_requests(records) if isinstance(rec, TrainRecord) else None,
    )
    fed = feed(rec, info)
    metrics = hardware_metrics(samples, reason, names) + fed.metrics
    floor = ctx.params.monitoring.alerts.util_floor
    costs = cost.price_usage(usage, ctx.params.cost) + fed.costs
    idle = cost.idle_fraction(gpu_utilizations(samples, int(usage.gpus)), floor)
    costs += cost.waste_lines(usage, idle, ctx.params.cost)
    store = MetricsStore.open(ctx.settings)
    raised = alerting.task_alerts(
        ctx.params.monitoring.alerts, store, ctx.run_id, task, metrics, usage, samples, ctx.params.canary.p99_budget_ms
    )
    raised += fed.alerts
    dag_id = dag_id or os.environ.get("AIRFLOW_CTX_DAG_ID")  # Airflow sets it in a running task
    store.record(ctx.run_id, task, usage=usage, metrics=metrics, costs=costs, alerts=raised, dag_id=dag_id)
    for extra_task, extra in fed.usages.items():  # e.g. the training pods on Kubernetes
        store.record(ctx.run_id, extra_task, usage=extra, costs=cost.price_usage(extra, ctx.params.cost))
    if isinstance(rec, ReportRecord):
        store.record_run(
            ctx.run_id, outcome=rec.outcome, data_version=rec.data_version, model_version=info.model_version
        )
    billed = cost.totals(costs)["total"]
    log(
        f"monitoring: {task} {state} in {seconds:.1f} s ({usage.cpus:g} CPU, {usage.gpus:g} GPU, "
        f"{usage.memory_gb:.2f} GB), {ctx.params.cost.currency} {billed:.4f}, {len(metrics)} metrics"
        + ("" if names else f"; GPU {reason or 'not available'}")
    )
    alerting.announce(ctx, task, raised)


def step_usage(
    started: datetime,
    ended: datetime,
    seconds: float,
    samples: list,
    rec: Record | None,
    state: str,
    backend: str = "local",
):
    """What the task requested on this machine: its processes x threads (the torchrun workers of a local
    training run, one compute thread each; otherwise the cores it kept busy at its peak), its peak
    resident memory, the GPUs its processes ran on. (Training pods on Kubernetes: feed.train.)"""
    from tasks.monitoring.hardware import MB, peak_cores, used_gpus
    from tasks.monitoring.store import TaskUsage

    cpus = float(peak_cores(samples)) if samples else 1.0
    gpus = float(used_gpus(samples))
    if isinstance(rec, TrainRecord) and backend == "local":
        cpus = max(cpus, float(rec.world_size))
        if rec.device.startswith("cuda"):
            gpus = max(gpus, float(rec.world_size))
    cpus = min(cpus, float(os.cpu_count() or cpus))
    memory_gb = max((s.rss_bytes for s in samples), default=0) / MB / 1024
    return TaskUsage(started, ended, seconds, cpus, gpus, memory_gb, "local", state)


def _data_version(records: dict[str, Record], rec: Record | None) -> str | None:
    for r in (rec, records.get("train"), records.get("snapshot")):
        if isinstance(r, (TrainRecord, SnapshotRecord)):
            return r.data_version
    return None


def _model_version(records: dict[str, Record], rec: Record | None) -> str | None:
    for r in (rec, records.get("register")):
        if isinstance(r, RegisterRecord):
            return r.model_version
    return None


def _pod_requests(records: dict[str, Record]) -> dict[str, float] | None:
    """What the training pods requested (kubernetes backend): the plan_train record says."""
    plan = records.get("plan_train")
    return plan.requests if isinstance(plan, TrainPlanRecord) else None
