"""The run report: `runs/<id>/report.html`, one self-contained file (inline SVG plots, no script, no
CDN, nothing fetched when it is opened), written by the `report` step on every branch.

Sections: outcome and branch, alerts, the lineage of what is deployed, labeling (LF coverage and dev
accuracy), label balance across data versions, training (loss and throughput), utilization, the
compression candidates, the canary, the costs. Each section is built on its own: one whose input is
absent (the run stopped before it, the metrics store holds nothing) says why it is missing; one
whose input is malformed says what failed; neither stops the others. Every string that comes from
data is escaped (html.escape).

`gather` reads the inputs (run folder, registry, metrics store); `render_report` is pure.
"""

from __future__ import annotations

import base64
import json
import math
import time
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any, Callable

from tasks.core.files import atomic_write_text, read_json
from tasks.monitoring.feed import train_lines

REPORT_NAME = "report.html"
MAX_POINTS = 400  # per line chart
BALANCE_VERSIONS = 20  # the label balance plot shows the newest data versions, this many
BILLED_KINDS = ("compute", "storage", "labor")  # the ledger's kinds that are paid (tasks/monitoring/store.py)
KINDS = (*BILLED_KINDS, "avoided", "waste")  # avoided: labor weak labels saved; waste: idle accelerator time
COLOURS = ["#4477aa", "#ee6677", "#228833", "#ccbb44", "#66ccee", "#aa3377", "#bbbbbb"]


class Missing(Exception):
    """A section's input is absent; the message says why (shown in the report in its place)."""


@dataclass
class ReportInputs:
    """Everything one report shows, read once (gather) so that rendering is a pure function."""

    run_id: str
    summary: dict[str, Any]
    registry_state: dict[str, Any] = field(default_factory=dict)
    data_versions: list[dict[str, Any]] = field(default_factory=list)  # each version's record, oldest first
    models: dict[str, dict[str, Any]] = field(default_factory=dict)  # version -> record (deployed, registered)
    train_metrics: list[dict[str, Any]] = field(default_factory=list)  # runs/<id>/train/metrics.jsonl
    candidates: dict[str, Any] | None = None  # the compress step's candidates.json
    pareto_svg: str | None = None  # the compress step's plot (tasks/compression/plot.py)
    monitoring: dict[str, list[dict[str, Any]]] | None = None  # the metrics store: alerts, costs, hardware
    missing: dict[str, str] = field(default_factory=dict)  # input -> why it could not be read
    model_cards: dict[str, str] = field(default_factory=dict)  # version -> link to its model card


# ---- the branch a run took (also shown on the Sluice page) -------------------------------------------
def branch_of(outcome: str | None, failed_steps: list[str] | None = None) -> str:
    """The DAG branch a run ended on, from its summary's outcome (tasks/report.py outcome_of)."""
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


# ---- inline SVG charts (pure) ---------------------------------------------------------------------------
def _num(v: float) -> str:
    return f"{v:.3g}" if abs(v) < 1e4 else f"{v:,.0f}"


def bar_chart(
    labels: list[str],
    series: dict[str, list[float | None]],
    title: str,
    y_label: str = "",
    y_max: float | None = None,
    width: int = 720,
    height: int = 300,
) -> str:
    """Grouped bars: one group per label, one bar per series (None: no bar). Returns an <svg>."""
    left, right, top, bottom = 60, 150, 30, 80
    values = [v for vs in series.values() for v in vs if v is not None and math.isfinite(v)]
    top_v = y_max if y_max is not None else (max(values) * 1.1 if values and max(values) > 0 else 1.0)
    plot_w, plot_h = width - left - right, height - top - bottom
    group_w = plot_w / max(len(labels), 1)
    bar_w = group_w * 0.8 / max(len(series), 1)
    out = _svg_open(width, height, title)
    out += _axes(left, top, plot_w, plot_h, 0.0, top_v, y_label)
    for gi, label in enumerate(labels):
        gx = left + gi * group_w
        for si, (name, vs) in enumerate(series.items()):
            v = vs[gi] if gi < len(vs) else None
            if v is None or not math.isfinite(v):
                continue
            h = max(0.0, min(v, top_v)) / top_v * plot_h
            x = gx + group_w * 0.1 + si * bar_w
            out.append(
                f'<rect x="{x:.1f}" y="{top + plot_h - h:.1f}" width="{bar_w:.1f}" height="{h:.1f}" '
                f'fill="{COLOURS[si % len(COLOURS)]}"><title>{escape(label)} {escape(name)}: {_num(v)}</title></rect>'
            )
        cx, cy = gx + group_w / 2, top + plot_h + 12
        out.append(
            f'<text x="{cx:.1f}" y="{cy:.1f}" font-size="10" text-anchor="end" '
            f'transform="rotate(-35 {cx:.1f} {cy:.1f})">{escape(label)}</text>'
        )
    out += _legend(list(series), width - right + 15, top)
    return "\n".join(out + ["</svg>"])


def line_chart(
    xs: list[float],
    series: dict[str, list[float | None]],
    title: str,
    x_label: str,
    y_label: str = "",
    width: int = 720,
    height: int = 280,
) -> str:
    """One polyline per series over the same x values (None: a gap). Returns an <svg>."""
    left, right, top, bottom = 60, 150, 30, 45
    ys = [v for vs in series.values() for v in vs if v is not None and math.isfinite(v)]
    if not xs or not ys:
        raise Missing("no points to plot")
    x0, x1 = min(xs), max(xs)
    x1 = x1 if x1 > x0 else x0 + 1
    y0, y1 = min(0.0, min(ys)), max(ys) * 1.1 or 1.0
    plot_w, plot_h = width - left - right, height - top - bottom

    def px(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * plot_w

    def py(y: float) -> float:
        return top + plot_h - (y - y0) / (y1 - y0) * plot_h

    if len(xs) > MAX_POINTS:  # a long run: every k-th point (the curve's shape, a bounded file)
        k = math.ceil(len(xs) / MAX_POINTS)
        xs, series = xs[::k], {n: vs[::k] for n, vs in series.items()}
    out = _svg_open(width, height, title)
    out += _axes(left, top, plot_w, plot_h, y0, y1, y_label)
    out.append(
        f'<text x="{left + plot_w / 2:.1f}" y="{height - 8}" text-anchor="middle">{escape(x_label)}</text>'
        f'<text x="{left}" y="{top + plot_h + 16}" text-anchor="middle">{_num(x0)}</text>'
        f'<text x="{left + plot_w}" y="{top + plot_h + 16}" text-anchor="middle">{_num(x1)}</text>'
    )
    for si, vs in enumerate(series.values()):
        pts = [(px(x), py(v)) for x, v in zip(xs, vs) if v is not None and math.isfinite(v)]
        colour = COLOURS[si % len(COLOURS)]
        if len(pts) > 1:
            joined = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
            out.append(f'<polyline points="{joined}" fill="none" stroke="{colour}" stroke-width="1.5"/>')
        for x, y in pts if len(pts) <= 60 else []:
            out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.5" fill="{colour}"/>')
    out += _legend(list(series), width - right + 15, top)
    return "\n".join(out + ["</svg>"])


def _svg_open(width: int, height: int, title: str) -> list[str]:
    return [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
        f'font-size="11" role="img" aria-label="{escape(title)}">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="10" y="18" font-size="13">{escape(title)}</text>',
    ]


def _axes(left: float, top: float, w: float, h: float, y0: float, y1: float, y_label: str) -> list[str]:
    out = [
        f'<line x1="{left}" y1="{top + h}" x2="{left + w}" y2="{top + h}" stroke="black"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + h}" stroke="black"/>',
        f'<text x="14" y="{top + h / 2:.1f}" transform="rotate(-90 14 {top + h / 2:.1f})" '
        f'text-anchor="middle">{escape(y_label)}</text>',
    ]
    for i in range(5):
        v = y0 + (y1 - y0) * i / 4
        y = top + h - h * i / 4
        out.append(
            f'<line x1="{left - 4}" y1="{y:.1f}" x2="{left + w}" y2="{y:.1f}" stroke="#eeeeee"/>'
            f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{_num(v)}</text>'
        )
    return out


def _legend(names: list[str], x: float, y: float) -> list[str]:
    return [
        f'<rect x="{x}" y="{y + 16 * i}" width="10" height="10" fill="{COLOURS[i % len(COLOURS)]}"/>'
        f'<text x="{x + 15}" y="{y + 9 + 16 * i}">{escape(n)}</text>'
        for i, n in enumerate(names)
    ]


# ---- HTML helpers (pure) --------------------------------------------------------------------------------
def table(header: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{_cell(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _cell(v: Any) -> str:
    if v is None:
        return "&ndash;"
    if isinstance(v, float):
        return "n/a" if not math.isfinite(v) else escape(f"{v:.4g}")
    return escape(str(v))


def _q(m: dict[str, Any] | None, key: str = "roc_auc") -> float | None:
    v = (m or {}).get(key)
    return float(v) if isinstance(v, (int, float)) else None


# ---- sections (pure; each raises Missing when its input is absent) ------------------------------------
def section_lineage(inp: ReportInputs) -> str:
    s, state = inp.summary, inp.registry_state
    serving = state.get("serving") or {}
    rows = []
    for role, version in (
        ("prod (deployed)", s.get("prod_model") or state.get("prod_model")),
        ("registered this run", s.get("registered")),
        ("challenger", ((serving.get("challenger") or {}).get("model_version"))),
    ):
        if not version:
            continue
        info = inp.models.get(version) or {}
        data = next((d for d in inp.data_versions if d.get("version") == info.get("data_version")), {})
        rows.append(
            [
                role,
                version,
                info.get("data_version"),
                info.get("parent_model") or "(none: trained from scratch)",
                data.get("parent") or "(none)",
                (info.get("code_commit") or "")[:12] or None,
                (info.get("params_hash") or "")[:12] or None,
                info.get("run_id"),
            ]
        )
    if not rows:
        raise Missing("no model is deployed or registered yet")
    html = table(
        [
            "role",
            "model version",
            "data version",
            "parent model",
            "parent data version",
            "code commit",
            "params",
            "run",
        ],
        rows,
    )
    links = [f'<a href="{escape(link, quote=True)}">model card {escape(v)}</a>' for v, link in inp.model_cards.items()]
    weight = serving.get("challenger_weight")
    note = (
        f"<p>Serving: champion {escape(str((serving.get('champion') or {}).get('model_version')))}"
        + (
            f", challenger {escape(str(serving['challenger']['model_version']))} at {int(weight or 0)}%"
            if serving.get("challenger")
            else ""
        )
        + f"; current data version {escape(str(state.get('current_data')))}.</p>"
    )
    return html + note + (f"<p>{' &middot; '.join(links)}</p>" if links else "")


def section_labeling(inp: ReportInputs) -> str:
    lab = inp.summary.get("labeling")
    if not lab:
        raise Missing("the run did not reach weak labeling")
    lfs = lab.get("lf_table") or []
    if not lfs:
        raise Missing("the labeling step recorded no LF analysis")
    chart = bar_chart(
        [r["lf"] for r in lfs],
        {
            "coverage": [r.get("coverage") for r in lfs],
            "dev accuracy": [r.get("dev_accuracy") for r in lfs],
        },
        f"labeling functions: coverage of the batch and accuracy on gold dev (using {lab.get('chosen')})",
        y_max=1.0,
    )
    q = lab.get("quality_dev") or {}
    return (
        chart + f"<p>{int(lab.get('n_lfs') or len(lfs))} LFs, coverage {float(lab.get('coverage') or 0):.1%}; "
        f"labels from {escape(str(lab.get('chosen')))}; on gold dev: label model ROC AUC "
        f"{_cell(_q(q.get('label_model')))}, majority vote {_cell(_q(q.get('majority_vote')))}.</p>"
        + table(
            ["LF", "coverage", "overlaps", "conflicts", "dev accuracy"],
            [[r["lf"], r.get("coverage"), r.get("overlaps"), r.get("conflicts"), r.get("dev_accuracy")] for r in lfs],
        )
    )


def section_label_balance(inp: ReportInputs) -> str:
    versions = [d for d in inp.data_versions if d.get("labeling_stats")]
    if not versions:
        raise Missing(inp.missing.get("data_versions") or "no data version has been made yet")
    names = [d["version"] for d in versions]
    stats = [d["labeling_stats"] for d in versions]
    chart = bar_chart(
        names,
        {
            "spam share of the labeled batch": [s.get("spam_share") for s in stats],
            "LF coverage": [s.get("coverage") for s in stats],
            "conflict rate": [s.get("conflict_rate") for s in stats],
        },
        f"label balance across the newest {len(names)} data versions (the batch each version added)",
        y_max=1.0,
    )
    rows = [
        [d["version"], d.get("total_rows"), d.get("label_source"), d.get("parent"), d.get("run_id")] for d in versions
    ]
    return chart + table(["data version", "rows", "labels from", "parent", "run"], rows)


def section_training(inp: ReportInputs) -> str:
    rows = [r for r in inp.train_metrics if "step" in r]
    if not rows:
        raise Missing(inp.missing.get("train_metrics") or "the run did not train")
    steps = [float(r["step"]) for r in rows]
    loss = line_chart(
        steps,
        {"loss": [r.get("loss") for r in rows], "loss std (fluctuation)": [r.get("loss_std") for r in rows]},
        "training loss",
        "optimizer step",
    )
    speed = line_chart(
        steps, {"samples/s": [r.get("samples_per_s") for r in rows]}, "training throughput", "optimizer step"
    )
    t = inp.summary.get("train") or {}
    extra = (
        f"<p>{t.get('rows')} rows, {t.get('epochs')} epochs x {t.get('world_size')} processes on "
        f"{escape(str(t.get('device')))}, final loss {_cell(t.get('final_loss'))}, "
        f"warm start from {escape(str(t.get('warm_start') or '(none)'))}.</p>"
        if t
        else ""
    )
    return loss + speed + extra


def section_utilization(inp: ReportInputs) -> str:
    """Per task: the one-per-task figures (means, maxima, peaks) as a table, the mean and max CPU as bars;
    the sampled series (percentages) of the two most sampled tasks as curves; a metric recorded without a
    value (no GPU) as its reason, once."""
    if inp.monitoring is None:
        raise Missing(f"not available: {inp.missing.get('monitoring', 'the metrics store could not be read')}")
    hw = inp.monitoring.get("hardware") or []
    if not hw:
        raise Missing("not available: the metrics store holds no hardware rows for this run")
    notes = sorted(
        {
            f"{r.get('name')}: {r.get('subject') or 'no value'}"
            for r in hw
            if r.get("value") is None or str(r.get("subject") or "").startswith("not available")
        }
    )
    per_task: dict[str, dict[str, list[float]]] = {}
    for r in hw:
        if r.get("value") is not None:
            per_task.setdefault(str(r.get("task")), {}).setdefault(str(r.get("name")), []).append(float(r["value"]))
    once = sorted({n for t in per_task.values() for n, vs in t.items() if len(vs) == 1})
    sampled = sorted({n for t in per_task.values() for n, vs in t.items() if len(vs) > 1 and "percent" in n})
    tasks = sorted(per_task, key=lambda t: -max((len(v) for v in per_task[t].values()), default=0))
    parts = [f'<p class="missing">{escape(n)}</p>' for n in notes]
    if {"cpu_percent_mean", "cpu_percent_max"} & set(once):
        parts.append(
            bar_chart(
                tasks,
                {
                    n: [(per_task[t].get(n) or [None])[0] for t in tasks]
                    for n in ("cpu_percent_mean", "cpu_percent_max")
                },
                "CPU utilization per task (% of one core, summed over its processes)",
                "%",
            )
        )
    for t in tasks[:2]:
        series = {n: per_task[t][n] for n in sampled if len(per_task[t].get(n, [])) > 1}
        if series:
            n = max(len(v) for v in series.values())
            parts.append(line_chart([float(i) for i in range(n)], series, f"{t}: sampled utilization", "sample"))
    if once:
        parts.append(table(["task", *once], [[t, *[(per_task[t].get(n) or [None])[0] for n in once]] for t in tasks]))
    return "".join(parts)


def section_compression(inp: ReportInputs) -> str:
    c = inp.summary.get("compression")
    if not c:
        raise Missing("the run did not reach compression")
    parts = []
    if inp.pareto_svg:
        data = base64.b64encode(inp.pareto_svg.encode()).decode()
        parts.append(f'<img alt="compression candidates: size vs latency" src="data:image/svg+xml;base64,{data}"/>')
    else:
        parts.append(f"<p class=missing>Plot missing: {escape(inp.missing.get('pareto_svg', 'no plot recorded'))}</p>")
    rows = (inp.candidates or {}).get("rows") or []
    if rows:
        parts.append(
            table(
                ["candidate", "bytes", "batch-1 ms", "dev ROC AUC", "chosen", "why not"],
                [
                    [
                        r.get("name"),
                        r.get("size_bytes"),
                        r.get("latency_b1_ms"),
                        _q(r.get("overall")),
                        "yes" if r.get("chosen") else "",
                        r.get("why_not"),
                    ]
                    for r in rows
                ],
            )
        )
    parts.append(
        f"<p>Chosen {escape(str(c.get('chosen')))} (chain {escape(' -> '.join(map(str, c.get('chain') or [])))}): "
        f"{_cell(c.get('bytes'))} B vs fp32 {_cell(c.get('fp32_bytes'))} B.</p>"
    )
    return "".join(parts)


def section_canary(inp: ReportInputs) -> str:
    c = inp.summary.get("canary")
    if not c:
        raise Missing("the run did not reach the canary")
    steps = c.get("steps") or []
    if not steps:
        raise Missing("; ".join(c.get("reasons") or []) or "no canary: the first model is promoted directly")
    labels = [f"{s.get('weight')}%" for s in steps]
    m = [s.get("metrics") or {} for s in steps]
    auc = [((x.get("quality") or {}).get("roc_auc") or {}) for x in m]
    p99 = bar_chart(
        labels,
        {
            f"champion {c.get('champion')}": [(x.get("champion") or {}).get("p99_ms") for x in m],
            f"challenger {c.get('model_version')}": [(x.get("challenger") or {}).get("p99_ms") for x in m],
        },
        "canary: p99 latency per weight step",
        "ms",
    )
    online = bar_chart(
        labels,
        {
            f"champion {c.get('champion')}": [a.get("champion") for a in auc],
            f"challenger {c.get('model_version')}": [a.get("challenger") for a in auc],
            "score PSI": [x.get("psi") for x in m],
        },
        "canary: online ROC AUC and score PSI per weight step",
    )
    rows = [
        [
            s.get("weight"),
            (x.get("champion") or {}).get("requests"),
            (x.get("challenger") or {}).get("requests"),
            (x.get("challenger") or {}).get("errors"),
            x.get("psi"),
            f"[{_cell(a.get('ci_low'))}, {_cell(a.get('ci_high'))}]" if a else None,
            "pass" if s.get("passed") else "FAIL: " + "; ".join(s.get("reasons") or []),
        ]
        for s, x, a in zip(steps, m, auc)
    ]
    verdict = "PROMOTE" if c.get("passed") else "ROLL BACK"
    return (
        f"<p>{escape(str(c.get('model_version')))} vs champion {escape(str(c.get('champion')))}: <b>{verdict}</b></p>"
        + p99
        + online
        + table(["weight %", "champion req", "challenger req", "errors", "PSI", "AUC diff CI", "verdict"], rows)
    )


def section_costs(inp: ReportInputs) -> str:
    if inp.monitoring is None:
        raise Missing(f"not available: {inp.missing.get('monitoring', 'the metrics store could not be read')}")
    costs = inp.monitoring.get("costs") or []
    if not costs:
        raise Missing("not available: the cost ledger holds no lines for this run")
    billed = [c for c in costs if c.get("kind", "compute") in BILLED_KINDS]
    by_task: dict[str, dict[str, float]] = {}
    for c in billed:
        item = by_task.setdefault(str(c.get("task") or "?"), {})
        item[str(c.get("item"))] = item.get(str(c.get("item")), 0.0) + float(c.get("amount") or 0.0)
    items = sorted({i for t in by_task.values() for i in t})
    tasks = sorted(by_task, key=lambda t: -sum(by_task[t].values()))
    parts = []
    if tasks:
        parts.append(
            bar_chart(tasks, {i: [by_task[t].get(i) for t in tasks] for i in items}, "billed cost per task", "USD")
        )
    totals = {k: sum(float(c.get("amount") or 0.0) for c in costs if c.get("kind", "compute") == k) for k in KINDS}
    parts.append(
        "<p>"
        + "; ".join(f"{escape(k)} {v:.4f} USD" for k, v in totals.items() if v or k in BILLED_KINDS)
        + f" &middot; billed total <b>{sum(totals[k] for k in BILLED_KINDS):.4f} USD</b></p>"
    )
    per_task = {t: {k: 0.0 for k in KINDS} for t in sorted({str(c.get("task") or "?") for c in costs})}
    for c in costs:
        row, kind = per_task[str(c.get("task") or "?")], c.get("kind", "compute")
        row[kind] = row.get(kind, 0.0) + float(c.get("amount") or 0.0)
    parts.append(
        table(
            ["task", *KINDS, "billed"],
            [[t, *[v[k] for k in KINDS], sum(v[k] for k in BILLED_KINDS)] for t, v in per_task.items()],
        )
    )
    priced = [c for c in costs if c.get("kind") != "compute"]  # labor, storage, avoided, waste: how each was priced
    if priced:
        parts.append(
            table(
                ["task", "kind", "item", "quantity", "unit", "unit price", "amount (USD)"],
                [
                    [
                        c.get("task"),
                        c.get("kind"),
                        c.get("item"),
                        c.get("quantity"),
                        c.get("unit"),
                        c.get("unit_price"),
                        c.get("amount"),
                    ]
                    for c in priced
                ],
            )  # fmt: skip
        )
    return "".join(parts)


def section_gates(inp: ReportInputs) -> str:
    gates = inp.summary.get("gates") or {}
    if not gates:
        raise Missing("no gate was reached")
    return table(
        ["gate", "result", "detail"],
        [
            [k, "pass" if g.get("passed") else "FAIL", (g.get("summary") or "ok").splitlines()[0]]
            for k, g in gates.items()
        ],
    )


SECTIONS: list[tuple[str, str, Callable[[ReportInputs], str]]] = [
    ("lineage", "Lineage of what is deployed", section_lineage),
    ("gates", "Gates", section_gates),
    ("labeling", "Labeling: LF coverage and dev accuracy", section_labeling),
    ("balance", "Label balance across data versions", section_label_balance),
    ("training", "Training: loss and throughput", section_training),
    ("utilization", "Utilization", section_utilization),
    ("compression", "Compression candidates", section_compression),
    ("canary", "Canary comparison", section_canary),
    ("costs", "Cost breakdown", section_costs),
]

STYLE = """
body{font-family:sans-serif;margin:1.5em auto;max-width:60em;color:#222}
h1{font-size:1.4em} h2{font-size:1.15em;border-bottom:1px solid #ccc;padding-top:.6em}
table{border-collapse:collapse;font-size:.85em;margin:.5em 0}
td,th{border:1px solid #ddd;padding:2px 6px;text-align:left}
.missing{color:#8a6d3b;background:#fcf8e3;padding:4px 8px} .alert{color:#a94442;background:#f2dede;padding:4px 8px}
.outcome{font-size:1.1em} svg,img{display:block;margin:.5em 0;max-width:100%}
"""


def render_report(inp: ReportInputs) -> str:
    """The report's HTML (pure). A section that fails or lacks its input says why in its place."""
    s = inp.summary
    body = [
        f"<h1>Sluice run {escape(inp.run_id)}</h1>",
        f'<p class="outcome">Outcome: <b id="outcome">{escape(str(s.get("outcome")))}</b> &middot; branch '
        f'<b id="branch">{escape(branch_of(s.get("outcome"), s.get("failed_steps")))}</b> &middot; data version '
        f"{escape(str(s.get('data_version')))} &middot; prod model {escape(str(s.get('prod_model')))}</p>",
    ]
    alerts = (inp.monitoring or {}).get("alerts") or []
    for a in alerts:
        body.append(
            f'<p class="alert">ALERT {escape(str(a.get("severity") or ""))} {escape(str(a.get("rule")))}: '
            f"{escape(str(a.get('message')))} ({escape(str(a.get('task') or ''))})</p>"
        )
    if inp.monitoring is not None and not alerts:
        body.append("<p>No alerts for this run.</p>")
    for key, title, build in SECTIONS:
        body.append(f'<h2 id="{key}">{escape(title)}</h2>')
        try:
            body.append(build(inp))
        except Missing as why:
            body.append(f'<p class="missing">Missing: {escape(str(why))}</p>')
        except Exception as exc:  # noqa: BLE001 - one malformed input must not lose the rest of the report
            body.append(f'<p class="missing">Could not be built: {escape(type(exc).__name__)}: {escape(str(exc))}</p>')
    body.append(f"<p><small>Written {escape(time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime()))}.</small></p>")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>Sluice run {escape(inp.run_id)}</title><style>{STYLE}</style></head>"
        f"<body>{''.join(body)}</body></html>\n"
    )


# ---- I/O --------------------------------------------------------------------------------------------------
def read_monitoring(settings: Any, run_id: str) -> dict[str, list[dict[str, Any]]]:
    """This run's alerts, costs and hardware metrics from the metrics store (tasks/monitoring/store.py)."""
    try:
        from tasks.monitoring.store import MetricsStore
    except ImportError as exc:
        raise Missing(f"the metrics store is not part of this checkout ({exc})") from None
    store = MetricsStore.open(settings)
    return {
        "alerts": store.alerts(run_id=run_id),
        "costs": store.costs(run_id=run_id),
        "hardware": store.metrics(run_id, layer="hardware"),
    }


def read_data_versions(reg: Any, versions: list[str]) -> list[dict[str, Any]]:
    """The records of these (tagged) data versions, in one `git show` rather than one per version: the
    registry keeps each as data/versions/<version>.json in the commit its tag names."""
    if not versions:
        return []
    text = reg.git("show", *[f"{v}:data/versions/{v}.json" for v in versions])
    decoder, out, pos = json.JSONDecoder(), [], 0
    while len(out) < len(versions):
        while text[pos].isspace():
            pos += 1
        obj, pos = decoder.raw_decode(text, pos)
        out.append(obj)
    return out


def gather(settings: Any, run_id: str, summary: dict[str, Any]) -> ReportInputs:
    """Read what the report shows; an input that cannot be read is noted in `missing` with why."""
    from tasks.registry import Registry

    inp = ReportInputs(run_id=run_id, summary=summary)
    run_dir = settings.layout.run_dir(run_id)

    def attempt(key: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except Missing as why:
            inp.missing[key] = str(why)
        except Exception as exc:  # noqa: BLE001 - noted, shown in the section that needs it
            inp.missing[key] = f"{type(exc).__name__}: {exc}"
        return None

    reg = Registry(settings)
    inp.registry_state = attempt("registry", reg.state) or {}
    versions = (attempt("data_versions", lambda: reg.tags("data")) or [])[-BALANCE_VERSIONS:]
    inp.data_versions = attempt("data_versions", lambda: read_data_versions(reg, versions)) or []
    wanted = {summary.get("prod_model"), summary.get("registered"), inp.registry_state.get("prod_model")}
    challenger = ((inp.registry_state.get("serving") or {}).get("challenger") or {}).get("model_version")
    for v in sorted({w for w in (*wanted, challenger) if w}):
        info = attempt(f"model:{v}", lambda v=v: reg.model_version_info(v))
        if info:
            inp.models[v] = info
            card = model_card_link(settings, v, run_dir)
            if card:
                inp.model_cards[v] = card
    metrics = run_dir / "train" / "metrics.jsonl"
    if metrics.is_file():
        inp.train_metrics = attempt("train_metrics", lambda: train_lines(metrics)) or []
    else:
        inp.missing["train_metrics"] = f"no training metrics in this run folder ({metrics.name} absent)"
    c = summary.get("compression") or {}
    if c.get("table") and Path(c["table"]).is_file():
        inp.candidates = attempt("candidates", lambda: read_json(Path(c["table"])))
    if c.get("plot") and Path(c["plot"]).is_file():
        inp.pareto_svg = attempt("pareto_svg", lambda: Path(c["plot"]).read_text())
    elif c:
        inp.missing["pareto_svg"] = "the compress step recorded no plot file"
    inp.monitoring = attempt("monitoring", lambda: read_monitoring(settings, run_id))
    return inp


def model_card_link(settings: Any, version: str, run_dir: Path) -> str | None:
    """A relative link from the run folder to the model card's HTML (tasks/monitoring/model_card.py)."""
    import os

    from tasks.monitoring.model_card import card_paths

    html = card_paths(settings, version)["html"]
    return os.path.relpath(html, run_dir) if html.is_file() else None


def write_report(settings: Any, run_id: str, summary: dict[str, Any], refresh_cards: bool = True) -> Path:
    """Build runs/<id>/report.html (atomically; a re-run replaces it) and return its path. First the model
    cards of the versions it names are written again (a card's stage moves after registration)."""
    if refresh_cards:
        refresh_model_cards(settings, [summary.get("registered"), summary.get("prod_model")])
    path = settings.layout.run_dir(run_id) / REPORT_NAME
    atomic_write_text(path, render_report(gather(settings, run_id, summary)))
    return path


def refresh_model_cards(settings: Any, versions: list[str | None]) -> None:
    from tasks.core.log import log
    from tasks.monitoring.model_card import write_model_card

    for v in sorted({v for v in versions if v}):
        try:
            write_model_card(settings, v)
        except Exception as exc:  # noqa: BLE001 - the report links what exists and says what does not
            log(f"model card of {v} not written: {type(exc).__name__}: {exc}")
