"""Alert rules (params.yaml `monitoring.alerts`) evaluated on a task's metrics and the store, and their
delivery: a line in the task log, the run report (tasks/report.py reads them from the store), and every
Airflow notifier named in `monitoring.notifiers` (any airflow.sdk BaseNotifier subclass: the SMTP
provider's SmtpNotifier, Slack's SlackNotifier, your own), called as Airflow calls a callback notifier:
`notifier(context)`, so its templated fields see the task's context plus `sluice_alerts` (a list of
dicts), `sluice_alerts_text`, `sluice_run_id` and `sluice_task`.

Rules (0 turns one off):
    loss_spike               the loss > loss_spike_ratio x the median of the lines before it, for sustain_lines lines
    grad_variance_explosion  gradient variance across ranks > grad_variance_ratio x its median, for sustain_lines lines
    utilization_floor        mean accelerator utilization of a task that used one < util_floor
    p99_latency              a canary step's p99 latency (either variant) significantly over canary.p99_budget_ms
                             (its one-sided bootstrap lower bound: the canary's own rule and budget)
    online_accuracy_drop     the served model's online ROC AUC this far under the previous run's (the canary's
                             served variant; the daily report's champion against the day before's)
    cost_jump                a day's billed cost > cost_jump_ratio x the previous day's (the daily report)
    champion_failing         (critical) the prod model failed its own canary requests beyond
                             canary.error_rate_margin (tasks/monitoring/feed.py: production is broken)
    replica_restarts         (critical) model-server replicas restarted serving.restart_alert_count times
                             within serving.restart_window_s (a crash loop: ops/replicas.py)
"""

from __future__ import annotations

import importlib
import math
from statistics import median
from typing import TYPE_CHECKING, Any, Iterable

from tasks.core.log import log
from tasks.core.params import AlertParams, NotifierSpec
from tasks.monitoring.store import Alert, Metric, MetricsStore, TaskUsage, to_jsonable

if TYPE_CHECKING:
    from tasks.core.context import StepContext


def _finite(v: float) -> float:
    """A non-finite reading (a diverged loss is NaN or inf) counts as the largest possible."""
    return v if math.isfinite(v) else math.inf


def loss_spike(losses: list[tuple[int, float]], ratio: float, sustain: int = 3) -> Alert | None:
    """The worst rise of the loss over `ratio` x the median of the lines logged before it, held for
    `sustain` consecutive lines (one minibatch's loss is noisy: a single high line on the demo's
    64-row batches reads up to 8x the median in a healthy run; three in a row read at most 1.2x)."""
    if not ratio:
        return None
    ordered = sorted(losses)
    values = [_finite(v) for _, v in ordered]
    worst = None
    for i in range(3, len(values) - sustain + 1):
        base = median(values[:i])
        held = min(values[i : i + sustain])
        if 0 < base < math.inf and held > ratio * base and (worst is None or held / base > worst[2]):
            worst = (ordered[i][0], held, held / base, base)
    if worst is None:
        return None
    step, value, times, base = worst
    return Alert(
        "loss_spike",
        "warning",
        f"loss held at {value:.4g} or more for {sustain} lines from step {step}: {times:.1f} x the median "
        f"{base:.4g} of the lines before it (limit {ratio:g} x)",
        value,
        ratio * base,
    )


def grad_variance_explosion(variances: list[tuple[int, float]], ratio: float, sustain: int = 3) -> Alert | None:
    """Gradient variance across ranks over `ratio` x the run's median for `sustain` consecutive lines
    (a single line's variance of two ranks' small slices is noisy: up to 88x the median in a healthy run)."""
    if not ratio or len(variances) < max(3, sustain):
        return None
    ordered = sorted(variances)
    values = [_finite(v) for _, v in ordered]
    base = median(values)
    held, i = max((min(values[j : j + sustain]), j) for j in range(len(values) - sustain + 1))
    if not 0 < base < math.inf or held <= ratio * base:
        return None
    return Alert(
        "grad_variance_explosion",
        "warning",
        f"gradient variance across ranks held at {held:.4g} or more for {sustain} lines from step {ordered[i][0]}: "
        f"{held / base:.1f} x the run's median {base:.4g} (limit {ratio:g} x)",
        held,
        ratio * base,
    )


def utilization_floor(utilizations: list[float], floor: float, what: str = "accelerator") -> Alert | None:
    """Mean utilization (0..1) under the floor: the accelerator idled (the ledger shows it as waste)."""
    if not floor or not utilizations:
        return None
    mean = sum(utilizations) / len(utilizations)
    if mean >= floor:
        return None
    idle = sum(1 for u in utilizations if u < floor) / len(utilizations)
    return Alert(
        "utilization_floor",
        "warning",
        f"{what} utilization averaged {mean:.0%}, under the floor {floor:.0%} ({idle:.0%} of samples idle)",
        mean,
        floor,
    )


def p99_latency(p99_lows: list[tuple[str, float]], budget_ms: float) -> Alert | None:
    """The worst canary p99 (subject: '<weight>%:<variant>') whose lower confidence bound is over the
    budget: significantly over it, as the canary judges (one p99 from ~200 requests is noise)."""
    over = [(s, v) for s, v in p99_lows if budget_ms and v > budget_ms]
    if not over:
        return None
    subject, value = max(over, key=lambda sv: sv[1])
    return Alert(
        "p99_latency",
        "warning",
        f"p99 latency {value:.1f} ms at {subject} (its lower confidence bound) is over the budget {budget_ms:g} ms",
        value,
        budget_ms,
    )


def online_accuracy_drop(now: float | None, before: float | None, drop: float, version: str = "") -> Alert | None:
    """The served model's online ROC AUC fell more than `drop` under the previous run's."""
    if not drop or now is None or before is None or before - now <= drop:
        return None
    return Alert(
        "online_accuracy_drop",
        "critical",
        f"online ROC AUC of the served model{' ' + version if version else ''} is {now:.3f}, "
        f"{before - now:.3f} under the previous run's {before:.3f} (limit {drop:g})",
        now,
        before - drop,
    )


def cost_jump(today: float, yesterday: float | None, ratio: float, minimum: float, day: str = "") -> Alert | None:
    """A day's billed cost over `ratio` x the previous day's (days under `minimum` are not compared)."""
    if not ratio or yesterday is None or yesterday < minimum or today <= ratio * yesterday:
        return None
    return Alert(
        "cost_jump",
        "warning",
        f"cost {today:.4f} on {day or 'this day'} is {today / yesterday:.1f} x the previous day's {yesterday:.4f} "
        f"(limit {ratio:g} x)",
        today,
        ratio * yesterday,
    )


def replica_restarts(restarts: list[dict[str, Any]], now: float, count: int, window_s: float) -> Alert | None:
    """`count` or more replica restarts (tasks/serving/restarts.py entries) within the last `window_s`
    seconds: a crash loop (each replacement dies again), which the balancer alone would hide."""
    recent = [r for r in restarts if now - float(r.get("ts", 0)) <= window_s]
    if len(recent) < count:
        return None
    codes = ", ".join(f"{r.get('replica')} ({r.get('exit_code')})" for r in recent[-5:])
    return Alert(
        "replica_restarts",
        "critical",
        f"{len(recent)} model-server replicas exited and were replaced in the last {window_s:g} s (limit {count}; "
        f"last: {codes}): a crash loop",
        float(len(recent)),
        float(count),
    )


def _series(metrics: Iterable[Metric], name: str, layer: str = "algorithm") -> list[tuple[int, float]]:
    return [
        (m.step, m.value)
        for m in metrics
        if m.name == name and m.layer == layer and m.step is not None and m.value is not None
    ]


def task_alerts(
    rules: AlertParams,
    store: MetricsStore,
    run_id: str,
    task: str,
    metrics: list[Metric],
    usage: TaskUsage,
    samples: list[Any],
    p99_budget_ms: float,
) -> list[Alert]:
    """Every rule that applies to one task's metrics (and, for the online accuracy, the store's history).
    `p99_budget_ms`: the canary's one latency budget (params canary.p99_budget_ms)."""
    from tasks.monitoring.hardware import gpu_utilizations

    found: list[Alert | None] = [
        loss_spike(_series(metrics, "loss"), rules.loss_spike_ratio, rules.sustain_lines),
        grad_variance_explosion(
            _series(metrics, "grad_var_across_ranks"), rules.grad_variance_ratio, rules.sustain_lines
        ),
    ]
    if usage.gpus:
        found.append(utilization_floor(gpu_utilizations(samples, int(usage.gpus)), rules.util_floor, "GPU"))
    engine_util = [v / 100 for _, v in _series(metrics, "rank0_gpu_util", "hardware")]
    if engine_util and not samples_saw_gpu(samples):  # pods: the engine's own reading of its GPU
        found.append(utilization_floor(engine_util, rules.util_floor, "GPU (rank 0)"))
    p99s = [(m.subject, m.value) for m in metrics if m.name == "latency_p99_low_ms" and m.value is not None]
    found.append(p99_latency(p99s, p99_budget_ms))
    served = [m for m in metrics if m.name == "prod_online_roc_auc" and m.value is not None]
    if served:
        history = store.metric_history("prod_online_roc_auc", "business", subject=None)
        before = _previous_value(store, run_id, history)
        found.append(
            online_accuracy_drop(served[-1].value, before, rules.online_auc_drop, served[-1].model_version or "")
        )
    # The daily report's serving: the champion's online ROC AUC over the day against the day before's.
    daily = [m for m in metrics if m.name == "online_roc_auc" and m.subject == "day:champion" and m.value is not None]
    if daily:
        history = store.metric_history("online_roc_auc", "business", subject="day:champion")
        before = _previous_value(store, run_id, history)
        found.append(
            online_accuracy_drop(daily[-1].value, before, rules.online_auc_drop, daily[-1].model_version or "")
        )
    return [a for a in found if a is not None]


def samples_saw_gpu(samples: list[Any]) -> bool:
    return any(g.ours for s in samples for g in s.gpus)


def _previous_value(store: MetricsStore, run_id: str, history: list[dict[str, Any]]) -> float | None:
    """The value of the last run before `run_id` (by first appearance in the store)."""
    order = {r["run_id"]: i for i, r in enumerate(store.runs())}
    here = order.get(run_id, len(order))
    earlier = [h for h in history if h["run_id"] != run_id and order.get(h["run_id"], here) < here]
    earlier.sort(key=lambda h: order[h["run_id"]])
    return earlier[-1]["value"] if earlier else None


def alerts_text(alerts: Iterable[Alert | dict[str, Any]]) -> str:
    lines = []
    for a in alerts:
        d = a if isinstance(a, dict) else to_jsonable(a)
        where = f" [{d['task']}]" if d.get("task") else ""
        lines.append(f"{d['severity'].upper()} {d['rule']}{where}: {d['message']}")
    return "\n".join(lines)


def load_notifier(spec: NotifierSpec) -> Any:
    """An instance of the configured notifier class (an airflow.sdk BaseNotifier subclass)."""
    from airflow.sdk import BaseNotifier

    module, _, name = spec.class_path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"monitoring.notifiers: cannot import {spec.class_path} ({exc})") from None
    if not (isinstance(cls, type) and issubclass(cls, BaseNotifier)):
        raise ValueError(f"monitoring.notifiers: {spec.class_path} is not an Airflow BaseNotifier subclass")
    return cls(**spec.kwargs)


def notifier_context(run_id: str, task: str, alerts: list[Alert], base: dict[str, Any] | None = None) -> dict:
    """The context a notifier is called with: the running task's Airflow context (when there is one) and
    the alerts."""
    if base is None:
        base = {}
        try:
            from airflow.sdk import get_current_context

            base = dict(get_current_context())
        except Exception:  # noqa: BLE001 - not inside an Airflow task (the CLI, a test): no Airflow context
            base = {}
    return {
        **base,
        "sluice_alerts": [{**to_jsonable(a), "run_id": run_id, "task": task} for a in alerts],
        "sluice_alerts_text": alerts_text({**to_jsonable(a), "task": task} for a in alerts),
        "sluice_run_id": run_id,
        "sluice_task": task,
    }


def deliver(
    specs: Iterable[NotifierSpec], run_id: str, task: str, alerts: list[Alert], base: dict | None = None
) -> list[str]:
    """Call every configured notifier with the alerts; returns one line per delivery that failed."""
    problems = []
    if not alerts:
        return problems
    for spec in specs:
        try:
            load_notifier(spec)(notifier_context(run_id, task, alerts, base))
        except Exception as exc:  # noqa: BLE001 - a broken mail server must not fail the step
            problems.append(f"alert delivery through {spec.class_path} failed: {type(exc).__name__}: {exc}")
    return problems


def announce(ctx: "StepContext", task: str, alerts: list[Alert]) -> None:
    """Alerts into the task log, then out through the notifiers."""
    for a in alerts:
        log(f"ALERT {a.severity} {a.rule} ({task}): {a.message}")
    for problem in deliver(ctx.params.monitoring.notifiers, ctx.run_id, task, alerts):
        log(f"monitoring: {problem}")
