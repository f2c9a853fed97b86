"""What `python -m ops status` says about the pipeline (beside the services): the current data version,
the champion and challenger with their traffic weights, the last run's outcome, its open alerts and
yesterday's cost.

`read_state` gathers it from the registry (its committed registry.json), runs/<id>/summary.json and
the metrics store (read only when it exists: a status never creates it); `state_lines` formats it
(pure). Nothing here needs the Airflow services.
"""

from __future__ import annotations

import json
from datetime import date, datetime, timedelta, timezone
from typing import Any

from tasks.core.settings import Settings


def last_summary(settings: Settings) -> dict[str, Any] | None:
    """The newest runs/<id>/summary.json (by when it was written), or None."""
    found = sorted(settings.layout.runs.glob("*/summary.json"), key=lambda p: p.stat().st_mtime)
    for path in reversed(found):
        try:
            return {"written": path.stat().st_mtime, **json.loads(path.read_text())}
        except (OSError, ValueError):  # one being replaced or unreadable: the one before it
            continue
    return None


def read_state(settings: Settings, today: date | None = None) -> dict[str, Any]:
    from tasks.registry import Registry

    today = today or datetime.now(timezone.utc).date()
    registry = Registry(settings).state()
    out: dict[str, Any] = {
        "data_version": registry["current_data"],
        "prod_model": registry["prod_model"],
        "serving": registry["serving"],
        "last_run": last_summary(settings),
        "yesterday": (today - timedelta(days=1)).isoformat(),
        "store": False,
        "alerts": [],
        "alerts_run": None,
        "costs": [],
        "currency": "USD",
    }
    from tasks.core.params import load_params

    out["currency"] = load_params().cost.currency
    from tasks.monitoring.store import MetricsStore, store_path

    if store_path(settings).exists():
        store = MetricsStore.open(settings)
        out["store"] = True
        runs = store.runs()
        if runs:  # open alerts: those the latest run raised (each run evaluates every rule afresh)
            out["alerts_run"] = runs[-1]["run_id"]
            out["alerts"] = store.alerts(run_id=out["alerts_run"])
        out["costs"] = store.costs(day=out["yesterday"])
    return out


def _served(serving: dict[str, Any]) -> list[str]:
    champion, challenger = serving.get("champion"), serving.get("challenger")
    if not champion:
        return ["  champion       none (nothing served yet)"]
    weight = serving.get("challenger_weight", 0) if challenger else 0
    shadow = challenger and serving.get("mode") == "shadow"
    lines = [f"  champion       {champion['model_version']} ({100 if shadow else 100 - weight}% of requests)"]
    if challenger:
        share = "shadow: scores mirrored traffic, answers none" if shadow else f"{weight}% of requests"
        lines.append(f"  challenger     {challenger['model_version']} ({share})")
    else:
        lines.append("  challenger     none")
    return lines


def state_lines(state: dict[str, Any]) -> list[str]:
    """The pipeline part of `ops status`. Pure."""
    from tasks.monitoring.cost import totals

    lines = ["pipeline:", f"  data version   {state['data_version'] or 'none yet'}"]
    lines.append(f"  prod model     {state['prod_model'] or 'none yet'}")
    lines += _served(state["serving"])
    run = state["last_run"]
    if run:
        when = datetime.fromtimestamp(run["written"], timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        lines.append(f"  last run       {run['run_id']} ({when}): {run['outcome']}")
    else:
        lines.append("  last run       none yet")
    if not state["store"]:
        lines.append("  alerts         none recorded (no metrics store yet)")
        lines.append("  cost           no cost data yet")
        return lines
    alerts = state["alerts"]
    if alerts:
        lines.append(f"  open alerts    {len(alerts)} from run {state['alerts_run']}:")
        lines += [f"    {a['severity']:<8} {a['rule']}: {a['message']}" for a in alerts]
    else:
        lines.append("  open alerts    none" + (f" (last run {state['alerts_run']})" if state["alerts_run"] else ""))
    if state["costs"]:
        t = totals(state["costs"])
        lines.append(
            f"  cost yesterday {state['currency']} {t['total']:.2f} on {state['yesterday']} "
            f"(compute {t['compute']:.2f}, storage {t['storage']:.2f}, labor {t['labor']:.2f}; "
            f"idle waste {t['waste']:.2f}, labor avoided {t['avoided']:.2f})"
        )
    else:
        lines.append(f"  cost yesterday no cost data for {state['yesterday']}")
    return lines
