"""The Sluice page (pure): the read model of the pipeline now (tasks/reports/pipeline_state.py) as
HTML, through the rendering layer's template (tasks/rendering/templates/sluice_page.html) and charts
(tasks/rendering/plots.py): served quality by model version, requests and p99 per day, billed cost
per day, labels per night; then the tables (runs, model versions, data versions, alerts, costs)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from markupsafe import Markup

from tasks.rendering import plots
from tasks.rendering.html import render, usd
from tasks.reports.pipeline_state import REPORT_NAME

CHART_WIDTH = 6.0  # inches: two charts side by side on a wide screen


def _chart(build: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
    """{svg} or {missing: why} (a chart with nothing to draw is a note, not an empty frame)."""
    try:
        return {"svg": build(*args, width=CHART_WIDTH, **kwargs), "missing": None}
    except ValueError as why:
        return {"svg": None, "missing": str(why)}


def quality_chart(rows: list[dict[str, Any]]) -> dict[str, Any]:
    if not rows:
        return {"svg": None, "missing": "no model version is registered yet"}
    return _chart(
        plots.line_chart,
        [f"{r['version']} ({r['stage'] or '?'})" for r in rows],
        {
            "gold test ROC AUC (served ONNX)": [r["test_roc_auc"] for r in rows],
            "online ROC AUC (feedback labels)": [r["online_roc_auc"] for r in rows],
        },
        "served quality by model version",
        "model version (stage)",
        "ROC AUC",
    )


def serving_charts(days: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if not days:
        why = "no serving day recorded yet (the daily cost report records each day of the prediction log)"
        return [{"svg": None, "missing": why}]
    labels = [d["day"] for d in days]
    variants = sorted({v for d in days for v in d["variants"]}, key=lambda v: (v != "champion", v))
    per = {v: [(d["variants"].get(v) or {}) for d in days] for v in variants}
    return [
        _chart(
            plots.bar_chart,
            labels,
            {v: [x.get("requests") for x in per[v]] for v in variants},
            "traffic: requests per day, by variant",
            "requests",
            stacked=True,
        ),
        _chart(
            plots.line_chart,
            labels,
            {v: [x.get("p99_ms") for x in per[v]] for v in variants},
            "p99 latency per day, by variant",
            "day (UTC)",
            "ms",
        ),
    ]


def cost_chart(days: list[dict[str, Any]], currency: str) -> dict[str, Any]:
    if not days:
        return {"svg": None, "missing": "no cost line recorded yet"}
    return _chart(
        plots.bar_chart,
        [d["day"] for d in days],
        {k: [d[k] for d in days] for k in ("compute", "storage", "labor")},
        f"billed cost per day, by kind ({currency})",
        currency,
        stacked=True,
    )


def labels_chart(nights: list[dict[str, Any]]) -> dict[str, Any]:
    if not nights:
        return {"svg": None, "missing": "no run has labeled a batch yet"}
    return _chart(
        plots.bar_chart,
        [n["day"] for n in nights],
        {k: [n.get(k) for n in nights] for k in ("gold", "weak", "held")},
        "labels per night (rows; held: a rejected model's batches)",
        "rows",
        stacked=True,
    )


def _link(href: str, text: str) -> Markup:
    return Markup('<a href="{}">{}</a>').format(href, text)


def _shares(shares: list[float] | None) -> str:
    """Each class's share of a batch's labeled rows, label 0 first ("-": none recorded)."""
    return " / ".join(f"{v:.2f}" for v in shares) if shares else "-"


def tables(state: dict[str, Any], base: str) -> list[dict[str, Any]]:
    """The page's tables: title, id (the browser test finds them by it), header, rows."""
    runs = [
        [
            r["run_id"], r["branch"], r["outcome"], r["data_version"], r["registered"], r["prod_model"],
            usd(r["cost"]), r["alerts"],
            _link(f"{base}/runs/{quote(r['folder'])}/{REPORT_NAME}", "report") if r["report"] else "none",
        ]
        for r in state["runs"]
    ]  # fmt: skip
    models = [
        [
            m["version"], m["stage"], m["data_version"], m["parent_model"], m["roc_auc"], (m["code_commit"] or "")[:12],
            _link(f"{base}/model-cards/{quote(m['version'])}.html", "card") if m["card"] else "none",
        ]
        for m in state["model_versions"]
    ]  # fmt: skip
    data = [
        [d["version"], "yes" if d["current"] else "", d["rows"], d["parent"], ", ".join(d["batches"]),
         ", ".join(d["reentered"]) or "none", ", ".join(d["held"]) or "none", _shares(d["class_shares"]),
         d["label_source"], d["created_at"]]
        for d in state["data_versions"]
    ]  # fmt: skip
    held = [[h["batch_id"], h["status"], h["from_version"], h["why"], h["next"]] for h in state["held"]]
    alerts = [[a["ts"], a["run_id"], a["task"], a["rule"], a["severity"], a["message"]] for a in state["alerts"]]
    costs = [[c["day"], usd(c["billed"]), usd(c["waste"]), usd(c["avoided"])] for c in state["costs"]]
    cur = state["currency"]
    return [
        {"title": "Runs", "id": "runs", "rows": runs, "header": ["run", "branch", "outcome", "data version",
         "registered", "prod model", f"cost ({cur})", "alerts", "report"]},
        {"title": "Model versions", "id": "model-versions", "rows": models, "header": ["version", "stage",
         "data version", "parent", "served ROC AUC (gold test)", "code commit", "card"]},
        {"title": "Data versions", "id": "data-versions", "rows": data, "header": ["version", "current", "rows",
         "parent", "batches", "re-entered", "held after it", "label shares (0 / 1 ...)", "labels from", "created"]},
        {"title": "Held batches (out of the current data)", "id": "held-batches", "rows": held, "header": [
         "batch", "status", "from", "why", "what brings it back"]},
        {"title": "Alerts", "id": "alerts", "rows": alerts, "header": ["time", "run", "task", "rule", "severity",
         "message"]},
        {"title": f"Recent costs ({cur} per day)", "id": "costs", "rows": costs, "header": ["day", "billed",
         "idle accelerator (waste)", "labor avoided by weak labels"]},
    ]  # fmt: skip


def render_page(state: dict[str, Any], root: str) -> str:
    """The page; `root` is where the app is mounted (links to reports and cards start there)."""
    trends = state["trends"]
    charts = [
        quality_chart(trends["quality_by_model"]),
        *serving_charts(trends["serving_by_day"]),
        cost_chart(trends["cost_by_day"], state["currency"]),
        labels_chart(trends["labels_by_night"]),
    ]
    base = root.rstrip("/")
    return render("sluice_page.html", state=state, charts=charts, tables=tables(state, base), root=base)
