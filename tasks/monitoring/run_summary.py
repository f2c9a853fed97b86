"""The run summary's monitoring part (tasks/report.py): the run's alerts and its ledger so far, read from
the metrics store. The report step calls `run_monitoring` before its own task is recorded, so the cost is
that of the steps before it."""

from __future__ import annotations

from typing import Any

from tasks.core.log import log


def run_monitoring(settings: Any, params: Any, run_id: str) -> dict[str, Any] | None:
    """{alerts: [...], cost: {compute, storage, labor, avoided, waste, total}, currency, tasks} or None when
    monitoring is off; a store that cannot be read is a note, not a failed report."""
    if not params.monitoring.enabled:
        return None
    from tasks.monitoring.cost import totals
    from tasks.monitoring.store import MetricsStore

    try:
        store = MetricsStore.open(settings)
        alerts = [
            {k: a[k] for k in ("task", "rule", "severity", "message", "value", "threshold")}
            for a in store.alerts(run_id)
        ]
        return {
            "alerts": alerts,
            "cost": totals(store.costs(run_id)),
            "currency": params.cost.currency,
            "tasks": len(store.tasks(run_id)),
            "store": str(store.path),
        }
    except Exception as exc:  # noqa: BLE001 - the summary is written whatever the store's state
        log(f"monitoring: the run's alerts and costs could not be read ({type(exc).__name__}: {exc})")
        return {"error": f"{type(exc).__name__}: {exc}"}


def monitoring_lines(m: dict[str, Any] | None) -> list[str]:
    """The summary's lines: alerts first (marked), then the run's cost."""
    if not m:
        return []
    if "error" in m:
        return [f"  monitoring     store not readable: {m['error']}"]
    out = [f"  ALERT {a['severity']:<8} {a['rule']} [{a['task']}]: {a['message']}" for a in m["alerts"]]
    if not m["alerts"]:
        out.append("  alerts         none")
    c, cur = m["cost"], m["currency"]
    out.append(
        f"  cost           {cur} {c['total']:.4f} over {m['tasks']} tasks (compute {c['compute']:.4f}, labor "
        f"{c['labor']:.4f}); labor avoided {c['avoided']:.2f}; idle accelerator {c['waste']:.4f}"
    )
    return out
