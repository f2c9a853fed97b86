"""What the Sluice page shows, read from SLUICE_HOME: runs (outcome, branch, versions, report), data
versions, model versions with their stages, what is served (champion and challenger with their
weights), alerts and recent costs from the metrics store. `overview` reads; `render_page` is pure.

A part that cannot be read (no registry yet, no metrics store) is an `errors` entry that the page
shows in its place; the rest is still shown.
"""

from __future__ import annotations

import json
import re
from html import escape
from pathlib import Path
from typing import Any, Callable
from urllib.parse import quote

from tasks.monitoring.html_report import REPORT_NAME, branch_of, read_data_versions

LIMIT = 20  # rows per table
RUN_FOLDER = re.compile(r"^[A-Za-z0-9._~-]+$")  # what safe_run_id makes (tasks/core/settings.py)
CARD_FILE = re.compile(r"^model-v[0-9]+\.(html|md)$")


def overview(settings: Any) -> dict[str, Any]:
    """Everything the page shows (plain JSON values)."""
    from tasks.registry import Registry

    out: dict[str, Any] = {"errors": {}}

    def part(key: str, fn: Callable[[], Any], default: Any) -> Any:
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - shown on the page in the part's place
            out["errors"][key] = f"{type(exc).__name__}: {exc}"
            return default

    reg = Registry(settings)
    state = part("registry", reg.state, {})
    store = part("monitoring", lambda: _store(settings), None)
    store_runs = {r["run_id"]: r for r in (part("runs_costs", store.runs, []) if store else [])}
    out["runs"] = part("runs", lambda: runs(settings.layout.runs, store_runs), [])
    out["data_versions"] = part("data_versions", lambda: data_versions(reg, state), [])
    out["model_versions"] = part("model_versions", lambda: model_versions(reg, state, settings), [])
    out["serving"] = serving(state)
    out["current_data"], out["prod_model"] = state.get("current_data"), state.get("prod_model")
    out["alerts"] = part("alerts", lambda: list(reversed(store.alerts()))[:LIMIT], []) if store else []
    out["costs"] = part("costs", lambda: daily_costs(store.costs()), []) if store else []
    return out


def _store(settings: Any):
    from tasks.monitoring.store import MetricsStore

    return MetricsStore.open(settings)


def runs(runs_dir: Path, store_runs: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Runs that wrote a summary, newest first."""
    found = sorted(runs_dir.glob("*/summary.json"), key=lambda p: p.stat().st_mtime, reverse=True)[:LIMIT]
    out = []
    for path in found:
        s = json.loads(path.read_text())
        ledger = store_runs.get(s.get("run_id"), {})
        out.append(
            {
                "run_id": s.get("run_id"),
                "folder": path.parent.name,
                "outcome": s.get("outcome"),
                "branch": branch_of(s.get("outcome"), s.get("failed_steps")),
                "data_version": s.get("data_version"),
                "registered": s.get("registered"),
                "prod_model": s.get("prod_model"),
                "report": (path.parent / REPORT_NAME).is_file(),
                "cost": ledger.get("cost"),
                "alerts": ledger.get("alerts"),
            }
        )
    return out


def data_versions(reg: Any, state: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    versions = reg.tags("data")[-LIMIT:]
    for v, info in reversed(list(zip(versions, read_data_versions(reg, versions)))):
        out.append(
            {
                "version": v,
                "current": v == state.get("current_data"),
                "rows": info.get("total_rows"),
                "parent": info.get("parent"),
                "created_at": info.get("created_at"),
                "spam_share": (info.get("labeling_stats") or {}).get("spam_share"),
                "label_source": info.get("label_source"),
            }
        )
    return out


def model_versions(reg: Any, state: dict[str, Any], settings: Any) -> list[dict[str, Any]]:
    from tasks.monitoring.model_card import card_paths

    stages = state.get("models") or {}
    out = []
    for v in reversed(reg.tags("model")[-LIMIT:]):
        info = reg.model_version_info(v)
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


def serving(state: dict[str, Any]) -> dict[str, Any]:
    """Champion and challenger with the share of requests each gets."""
    s = state.get("serving") or {}
    champion, challenger = (
        (s.get("champion") or {}).get("model_version"),
        (s.get("challenger") or {}).get("model_version"),
    )
    weight = int(s.get("challenger_weight") or 0) if challenger else 0
    shadow = s.get("mode") == "shadow"
    return {
        "champion": champion,
        "champion_weight": 100 if shadow or not challenger else 100 - weight,
        "challenger": challenger,
        "challenger_weight": weight,
        "mode": s.get("mode") or "split",
    }


def daily_costs(lines: list[dict[str, Any]], days: int = 7) -> list[dict[str, Any]]:
    """Per day, newest first: the billed total and the waste and avoided labor beside it."""
    by_day: dict[str, dict[str, float]] = {}
    for c in lines:
        d = by_day.setdefault(c["day"], {"billed": 0.0, "waste": 0.0, "avoided": 0.0})
        kind = c.get("kind") or "compute"
        key = kind if kind in ("waste", "avoided") else "billed"
        d[key] += float(c.get("amount") or 0.0)
    return [{"day": day, **v} for day, v in sorted(by_day.items(), reverse=True)[:days]]


# ---- the page (pure) ---------------------------------------------------------------------------------
def _t(header: list[str], rows: list[list[str]], table_id: str) -> str:
    """A table; cells are HTML already escaped by the caller."""
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    empty = f'<tr><td colspan="{len(header)}">none yet</td></tr>' if not rows else ""
    return f'<table id="{table_id}"><thead><tr>{head}</tr></thead><tbody>{body}{empty}</tbody></table>'


def _e(v: Any) -> str:
    if v is None:
        return "&ndash;"
    if isinstance(v, float):
        return f"{v:.4g}"
    return escape(str(v))


def _usd(v: Any) -> str:
    return "&ndash;" if v is None else f"{float(v):,.4f}"


def render_page(data: dict[str, Any], root: str) -> str:
    """The page; `root` is where the app is mounted (links to reports and cards start there)."""
    base = escape(root.rstrip("/"), quote=True)
    sv = data.get("serving") or {}
    errors = data.get("errors") or {}
    parts = [
        "<h1>Sluice</h1>",
        f'<p id="serving">Serving: champion <b>{_e(sv.get("champion"))}</b> at {_e(sv.get("champion_weight"))}%'
        + (
            f", challenger <b>{_e(sv.get('challenger'))}</b> at {_e(sv.get('challenger_weight'))}% "
            f"({_e(sv.get('mode'))})"
            if sv.get("challenger")
            else ", no challenger"
        )
        + f" &middot; current data version <b>{_e(data.get('current_data'))}</b>"
        f" &middot; prod model <b>{_e(data.get('prod_model'))}</b></p>",
    ]
    parts += [f'<p class="error">{escape(k)} could not be read: {escape(v)}</p>' for k, v in errors.items()]
    parts.append("<h2>Runs</h2>")
    parts.append(
        _t(
            ["run", "branch", "outcome", "data version", "registered", "prod model", "cost (USD)", "alerts", "report"],
            [
                [
                    _e(r["run_id"]),
                    _e(r["branch"]),
                    _e(r["outcome"]),
                    _e(r["data_version"]),
                    _e(r["registered"]),
                    _e(r["prod_model"]),
                    _usd(r.get("cost")),
                    _e(r.get("alerts")),
                    f'<a href="{base}/runs/{quote(r["folder"])}/{REPORT_NAME}">report</a>' if r["report"] else "none",
                ]
                for r in data.get("runs") or []
            ],
            "runs",
        )
    )
    parts.append("<h2>Model versions</h2>")
    parts.append(
        _t(
            ["version", "stage", "data version", "parent", "served ROC AUC (gold test)", "code commit", "card"],
            [
                [
                    _e(m["version"]),
                    _e(m["stage"]),
                    _e(m["data_version"]),
                    _e(m["parent_model"]),
                    _e(m["roc_auc"]),
                    _e((m["code_commit"] or "")[:12]),
                    f'<a href="{base}/model-cards/{quote(m["version"])}.html">card</a>' if m["card"] else "none",
                ]
                for m in data.get("model_versions") or []
            ],
            "model-versions",
        )
    )
    parts.append("<h2>Data versions</h2>")
    parts.append(
        _t(
            ["version", "current", "rows", "parent", "spam share of its batch", "labels from", "created"],
            [
                [
                    _e(d["version"]),
                    "yes" if d["current"] else "",
                    _e(d["rows"]),
                    _e(d["parent"]),
                    _e(d["spam_share"]),
                    _e(d["label_source"]),
                    _e(d["created_at"]),
                ]
                for d in data.get("data_versions") or []
            ],
            "data-versions",
        )
    )
    parts.append("<h2>Alerts</h2>")
    parts.append(
        _t(
            ["time", "run", "task", "rule", "severity", "message"],
            [
                [
                    _e(a.get("ts")),
                    _e(a.get("run_id")),
                    _e(a.get("task")),
                    _e(a.get("rule")),
                    _e(a.get("severity")),
                    _e(a.get("message")),
                ]
                for a in data.get("alerts") or []
            ],
            "alerts",
        )  # fmt: skip
    )
    parts.append("<h2>Recent costs (USD per day)</h2>")
    parts.append(
        _t(
            ["day", "billed", "idle accelerator (waste)", "labor avoided by weak labels"],
            [[_e(c["day"]), _usd(c["billed"]), _usd(c["waste"]), _usd(c["avoided"])] for c in data.get("costs") or []],
            "costs",
        )
    )
    style = (
        "body{font-family:sans-serif;margin:1em 1.5em;color:#222} h1{font-size:1.4em} h2{font-size:1.1em}"
        "table{border-collapse:collapse;font-size:.85em} td,th{border:1px solid #ddd;padding:2px 6px;text-align:left}"
        ".error{color:#a94442;background:#f2dede;padding:4px 8px}"
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>Sluice</title>'
        f"<style>{style}</style></head><body>{''.join(parts)}</body></html>\n"
    )
