"""The pipeline now: one read model of Sluice's state, used by `python -m ops status` (text,
`state_lines`), the Sluice page in the Airflow UI (plugins/sluice_ui) and the run report
(tasks/reports/html_report.py reads the serving state and the data versions through it).

`read_state(settings)` reads SLUICE_HOME and returns plain JSON values:

    errors          part -> why it could not be read (every other part is still read)
    current_data, prod_model, serving   registry.json at HEAD; serving with each variant's share
    runs, last_run  the newest runs that wrote a summary (outcome, branch, versions, cost, alerts,
                    whether its report exists)
    data_versions, model_versions       the newest LIMIT of each, newest first
    store           whether the metrics store exists (a read never creates it)
    alerts          the newest LIMIT alerts; open_alerts: those the newest run of each DAG raised
    costs           billed, waste, avoided per day (newest DAYS days); yesterday: that day's totals
    currency
    trends          what the page charts, oldest first: served quality by model version, requests
                    and p99 per day and variant, billed cost per day by kind, labels per night

Reads only: the registry through git (committed state, never a writer's working files), run
summaries, the metrics store when it exists. Nothing here needs the Airflow services.
"""

from __future__ import annotations

import json
import re
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable

REPORT_NAME = "report.html"  # runs/<id>/report.html (tasks/reports/html_report.py writes it)
LIMIT = 20  # rows per table
DAYS = 7  # days of the cost table
TREND_DAYS = 30  # days of the per-day charts
TREND_RUNS = 90  # run summaries read for the labels-per-night chart
BILLED_KINDS = ("compute", "storage", "labor")
ISO_DAY = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def branch_of(outcome: str | None, failed_steps: list[str] | None = None) -> str:
    """The DAG branch a run ended on, from its summary's outcome (tasks/reports/run_summary.py outcome_of)."""
    text = outcome or ""
    if failed_steps or text.startswith("FAILED"):
        return "failed"
    for prefix, branch in (
        ("deployed", "promote"),
        ("canary of", "rollback_canary"),
        ("model rejected at", "reject_model"),
        ("batch ", "quarantine"),
        ("no landing batch", "no_batch"),
    ):
        if text.startswith(prefix):
            return branch
    return "incomplete"


def read_state(settings: Any, today: date | None = None) -> dict[str, Any]:
    """Everything above, each part read on its own: one that fails is an `errors` entry."""
    from tasks.registry import Registry
    from tasks.registry.held import describe

    today = today or datetime.now(timezone.utc).date()
    out: dict[str, Any] = {"errors": {}, "yesterday": (today - timedelta(days=1)).isoformat()}

    def part(key: str, fn: Callable[[], Any], default: Any) -> Any:
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - named where the part would be; the rest is still read
            out["errors"][key] = f"{type(exc).__name__}: {exc}"
            return default

    reg = Registry(settings)
    state = part("registry", reg.state, {})
    out["current_data"], out["prod_model"] = state.get("current_data"), state.get("prod_model")
    out["serving"] = serving(state)
    out["held"] = describe(state)  # batches out of the current data (tasks/registry/held.py)
    out["currency"] = part("params", _currency, "USD")
    store = part("monitoring", lambda: _existing_store(settings), None)
    out["store"] = store is not None
    store_runs = {r["run_id"]: r for r in part("runs_costs", store.runs, [])} if store else {}
    summaries = part("runs", lambda: read_summaries(settings.layout.runs, TREND_RUNS, out["errors"]), [])
    out["runs"] = [run_row(s, store_runs) for s in summaries[:LIMIT]]
    out["last_run"] = out["runs"][0] if out["runs"] else None
    out["data_versions"] = part("data_versions", lambda: data_versions(reg, state), [])
    out["model_versions"] = part("model_versions", lambda: model_versions(reg, state, settings), [])
    out.update(part("store", lambda: store_part(store, out["yesterday"]), {}) if store else {})
    out.setdefault("alerts", [])
    out.setdefault("open_alerts", [])
    out.setdefault("alerts_run", None)
    out.setdefault("costs", [])
    out.setdefault("yesterday_costs", None)
    out["trends"] = {
        "quality_by_model": part("quality_by_model", lambda: quality_by_model(out["model_versions"], store), []),
        "serving_by_day": part("serving_by_day", lambda: serving_by_day(store), []) if store else [],
        "cost_by_day": part("cost_by_day", lambda: cost_by_day(store), []) if store else [],
        "labels_by_night": labels_by_night(summaries, store_runs),
    }
    return out


def _currency() -> str:
    from tasks.core.params import load_params

    return load_params().cost.currency


def _existing_store(settings: Any):
    """The metrics store, or None when there is none yet (a status or a page view creates nothing)."""
    from tasks.monitoring.store import MetricsStore, store_exists

    return MetricsStore.open(settings) if store_exists(settings) else None


# ---- the registry ---------------------------------------------------------------------------------------
def serving(state: dict[str, Any]) -> dict[str, Any]:
    """Champion and challenger with the share of requests each answers (shadow: the champion all)."""
    s = state.get("serving") or {}
    champion = (s.get("champion") or {}).get("model_version")
    challenger = (s.get("challenger") or {}).get("model_version")
    weight = int(s.get("challenger_weight") or 0) if challenger else 0
    mode = s.get("mode") or "split"
    return {
        "champion": champion,
        "champion_weight": 100 if mode == "shadow" or not challenger else 100 - weight,
        "challenger": challenger,
        "challenger_weight": weight,
        "mode": mode,
    }


def read_records(reg: Any, kind: str, versions: list[str]) -> list[dict[str, Any]]:
    """The records of these (tagged) versions in one `git show` rather than one per version: the
    registry keeps each in the commit its tag names (data/versions/<v>.json, models/<v>.json)."""
    if not versions:
        return []
    path = "data/versions/{v}.json" if kind == "data" else "models/{v}.json"
    text = reg.git("show", *[f"{v}:{path.format(v=v)}" for v in versions])
    decoder, out, pos = json.JSONDecoder(), [], 0
    while len(out) < len(versions):
        while text[pos].isspace():
            pos += 1
        obj, pos = decoder.raw_decode(text, pos)
        out.append(obj)
    return out


def data_versions(reg: Any, state: dict[str, Any], limit: int = LIMIT) -> list[dict[str, Any]]:
    """The newest data versions, newest first, each with its whole record under `record`."""
    from tasks.labeling.drift import class_shares

    versions = reg.tags("data")[-limit:]
    out = []
    for v, info in reversed(list(zip(versions, read_records(reg, "data", versions)))):
        stats = info.get("labeling_stats") or {}
        out.append(
            {
                "version": v,
                "current": v == state.get("current_data"),
                "rows": info.get("total_rows"),
                "parent": info.get("parent"),
                "created_at": info.get("created_at"),
                "class_shares": class_shares(stats),  # label k's share of the batch's labeled rows
                "label_source": info.get("label_source"),
                "batches": [p["batch_id"] for p in info.get("partitions", [])],
                "reentered": info.get("reentered") or [],
                "held": info.get("held") or [],
                "record": info,
            }
        )
    return out


def model_versions(reg: Any, state: dict[str, Any], settings: Any) -> list[dict[str, Any]]:
    """The newest model versions, newest first: stage, lineage, served ROC AUC on gold test, card."""
    from tasks.reports.model_card import card_paths

    stages = state.get("models") or {}
    versions = reg.tags("model")[-LIMIT:]
    out = []
    for v, info in reversed(list(zip(versions, read_records(reg, "model", versions)))):
        served = (info.get("metrics") or {}).get("onnx_served") or {}
        out.append(
            {
                "version": v,
                "stage": (stages.get(v) or {}).get("stage"),
                "data_version": info.get("data_version"),
                "parent_model": info.get("parent_model"),
                "code_commit": info.get("code_commit"),
                "roc_auc": served.get("roc_auc"),
                "created_at": info.get("created_at"),
                "card": card_paths(settings, v)["html"].is_file(),
            }
        )
    return out


# ---- run summaries --------------------------------------------------------------------------------------
def read_summaries(runs_dir: Path, limit: int, errors: dict[str, str]) -> list[dict[str, Any]]:
    """Run summaries, newest written first, each with `folder` and `written` (seconds since the epoch).
    One that cannot be read is named in errors["runs"] and skipped; the others are still read."""
    found = sorted(runs_dir.glob("*/summary.json"), key=lambda p: p.stat().st_mtime, reverse=True)[:limit]
    out, bad = [], []
    for path in found:
        try:
            summary = json.loads(path.read_text())
            report = (path.parent / REPORT_NAME).is_file()
            out.append({**summary, "folder": path.parent.name, "written": path.stat().st_mtime, "has_report": report})
        except (OSError, ValueError) as exc:
            bad.append(f"{type(exc).__name__}: {exc} ({path.parent.name}/{path.name})")
    if bad:
        errors["runs"] = "; ".join(bad)
    return out


def run_row(s: dict[str, Any], store_runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    ledger = store_runs.get(s.get("run_id"), {})
    return {
        "run_id": s.get("run_id"),
        "folder": s["folder"],
        "written": s["written"],
        "report": s["has_report"],
        "outcome": s.get("outcome"),
        "branch": branch_of(s.get("outcome"), s.get("failed_steps")),
        "data_version": s.get("data_version"),
        "registered": s.get("registered"),
        "prod_model": s.get("prod_model"),
        "cost": ledger.get("cost"),
        "alerts": ledger.get("alerts"),
    }


# ---- the metrics store ----------------------------------------------------------------------------------
def store_part(store: Any, yesterday: str) -> dict[str, Any]:
    """Alerts (the newest; those of the latest run), the cost per day, yesterday's totals."""
    from tasks.monitoring.cost import totals

    runs = store.runs()
    alerts_run = runs[-1]["run_id"] if runs else None
    days = store.days()[-DAYS:]
    return {
        "alerts": list(reversed(store.alerts()))[:LIMIT],
        "alerts_run": alerts_run,
        "open_alerts": open_alerts(store, runs),
        "costs": daily_costs([c for d in reversed(days) for c in store.costs(day=d)]),
        "yesterday_costs": totals(lines) if (lines := store.costs(day=yesterday)) else None,
    }


def open_alerts(store: Any, runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The alerts still open: those of the newest run of each DAG (each DAG's run evaluates its rules
    afresh, so a later run of the same DAG resolves what it no longer raises; a `monitor_serving`
    alert stays open through nightly runs until the next serving check). Each names its run."""
    newest: dict[Any, str] = {}
    for r in runs:  # oldest first: the last one of each DAG wins (runs outside Airflow: dag_id None)
        newest[r.get("dag_id")] = r["run_id"]
    return [a for run_id in newest.values() for a in store.alerts(run_id=run_id)]


def daily_costs(lines: list[dict[str, Any]], days: int = DAYS) -> list[dict[str, Any]]:
    """Per day, newest first: the billed total and the waste and avoided labor beside it."""
    by_day: dict[str, dict[str, float]] = {}
    for c in lines:
        d = by_day.setdefault(c["day"], {"billed": 0.0, "waste": 0.0, "avoided": 0.0})
        kind = c.get("kind") or "compute"
        d[kind if kind in ("waste", "avoided") else "billed"] += float(c.get("amount") or 0.0)
    return [{"day": day, **v} for day, v in sorted(by_day.items(), reverse=True)[:days]]


def cost_by_day(store: Any, days: int = TREND_DAYS) -> list[dict[str, Any]]:
    """Oldest first, every day from the first with cost lines to the last: the billed amount per kind,
    the idle-accelerator waste and the labor avoided (a day without lines shows as 0: nothing billed)."""
    known = store.days()[-days:]
    rows = {d: dict.fromkeys((*BILLED_KINDS, "waste", "avoided"), 0.0) for d in _day_range(known)}
    for d in known:
        for c in store.costs(day=d):
            rows[d][c["kind"]] = rows[d].get(c["kind"], 0.0) + float(c["amount"] or 0.0)
    return [{"day": d, **v} for d, v in rows.items()]


def serving_by_day(store: Any, days: int = TREND_DAYS) -> list[dict[str, Any]]:
    """Oldest first, every day from the first served to the last: requests and p99 per variant, from the
    daily cost report's serving rows (subject "day:<variant>", its day in cost_day_total's subject)."""
    day_of_run = {
        m["run_id"]: m["subject"][4:]
        for m in store.metrics(layer="business", name="cost_day_total")
        if ISO_DAY.match(m["subject"][4:])
    }
    by_day: dict[str, dict[str, dict[str, Any]]] = {}
    for name, key in (("requests", "requests"), ("latency_p99_ms", "p99_ms")):
        for m in store.metrics(layer="business", name=name):
            day, variant = day_of_run.get(m["run_id"]), m["subject"][4:]
            if day and m["subject"].startswith("day:") and not ISO_DAY.match(variant):
                slot = by_day.setdefault(day, {}).setdefault(variant, {"model_version": m["model_version"]})
                slot[key] = m["value"]
    kept = sorted(by_day)[-days:]
    return [{"day": d, "variants": by_day.get(d, {})} for d in _day_range(kept)]


def quality_by_model(models: list[dict[str, Any]], store: Any) -> list[dict[str, Any]]:
    """Oldest version first: its served artifact's ROC AUC on the gold test set (the registry) and the
    last online ROC AUC measured for it from feedback labels (the metrics store; None: not measured)."""
    online: dict[str, float] = {}
    if store is not None:
        for m in store.metrics(layer="business", name="online_roc_auc"):
            if m["model_version"] and "/" not in m["model_version"] and m["value"] is not None:
                online[m["model_version"]] = m["value"]
    return [
        {
            "version": m["version"],
            "stage": m["stage"],
            "test_roc_auc": m["roc_auc"],
            "online_roc_auc": online.get(m["version"]),
        }
        for m in reversed(models)
    ]


def labels_by_night(summaries: list[dict[str, Any]], store_runs: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Oldest night first: the labels each night's runs made, per source (tasks/labeling/mix.py
    label_counts: gold rows, weak rows; held: the rows of batches a rejected model left out, None before
    the summaries recorded it); a night without a run is a gap. A night is the UTC day the
    metrics store first saw the run, or the day its summary was written. A run without label counts
    (before they were recorded) counts its labeled rows as weak and its gold as unknown (None)."""
    nights: dict[str, dict[str, float | None]] = {}
    for s in summaries:
        lab = s.get("labeling") or {}
        counts = lab.get("label_counts")
        labeled = (s.get("batch") or {}).get("rows_labeled")
        if not counts and labeled is None:
            continue
        day = (store_runs.get(s.get("run_id")) or {}).get("day") or _utc_day(s["written"])
        n = nights.setdefault(day, {"gold": 0.0, "weak": 0.0, "held": 0.0})
        gold = counts["gold"]["rows"] if counts else None
        n["gold"] = None if gold is None or n["gold"] is None else n["gold"] + gold
        n["weak"] = (n["weak"] or 0.0) + (counts["weak"]["rows"] if counts else labeled)
        held = (s.get("held") or {}).get("rows_tonight")  # rows a rejected model's batches held back
        n["held"] = None if held is None or n["held"] is None else n["held"] + held
    kept = sorted(nights)[-TREND_DAYS:]
    return [{"day": d, **nights.get(d, {"gold": None, "weak": None, "held": None})} for d in _day_range(kept)]


def _utc_day(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).date().isoformat()


def _day_range(days: list[str]) -> list[str]:
    """Every day from the first to the last of `days` (sorted ISO days), so that a gap shows as one."""
    if not days:
        return []
    first, last = date.fromisoformat(days[0]), date.fromisoformat(days[-1])
    return [(first + timedelta(days=i)).isoformat() for i in range((last - first).days + 1)]


# ---- `python -m ops status` (text, pure) ----------------------------------------------------------------
def _served_lines(sv: dict[str, Any]) -> list[str]:
    if not sv["champion"]:
        return ["  champion       none (nothing served yet)"]
    lines = [f"  champion       {sv['champion']} ({sv['champion_weight']}% of requests)"]
    if not sv["challenger"]:
        return [*lines, "  challenger     none"]
    shadow = sv["mode"] == "shadow"
    share = "shadow: scores mirrored traffic, answers none" if shadow else f"{sv['challenger_weight']}% of requests"
    return [*lines, f"  challenger     {sv['challenger']} ({share})"]


def state_lines(state: dict[str, Any]) -> list[str]:
    """The pipeline part of `ops status`."""
    lines = ["pipeline:", f"  data version   {state['current_data'] or 'none yet'}"]
    lines.append(f"  prod model     {state['prod_model'] or 'none yet'}")
    lines += _served_lines(state["serving"])
    held = state.get("held") or []
    lines.append(f"  held batches   {len(held) or 'none'}")
    lines += [f"    {h['batch_id']} {h['status']} (from {h['from_version']}): {h['why']}; {h['next']}" for h in held]
    run = state["last_run"]
    if run:
        when = datetime.fromtimestamp(run["written"], timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        lines.append(f"  last run       {run['run_id']} ({when}): {run['outcome']}")
    else:
        lines.append("  last run       none yet")
    lines += [f"  could not read {k}: {v}" for k, v in state["errors"].items()]
    if not state["store"]:
        return [*lines, "  alerts         none recorded (no metrics store yet)", "  cost           no cost data yet"]
    alerts, alerts_run = state["open_alerts"], state["alerts_run"]
    if alerts:
        lines.append(f"  open alerts    {len(alerts)} (the newest run of each DAG):")
        lines += [f"    {a['severity']:<8} {a['rule']} ({a['run_id']}): {a['message']}" for a in alerts]
    else:
        lines.append("  open alerts    none" + (f" (last run {alerts_run})" if alerts_run else ""))
    t, cur, day = state["yesterday_costs"], state["currency"], state["yesterday"]
    if t:
        lines.append(
            f"  cost yesterday {cur} {t['total']:.2f} on {day} (compute {t['compute']:.2f}, storage "
            f"{t['storage']:.2f}, labor {t['labor']:.2f}; idle waste {t['waste']:.2f}, "
            f"labor avoided {t['avoided']:.2f})"
        )
    else:
        lines.append(f"  cost yesterday no cost data for {day}")
    return lines
