"""The run report: `runs/<id>/report.html`, one self-contained file (inline SVG plots, no script, no
CDN, nothing fetched when it is opened), written by the `report` step on every branch.

Sections: outcome and branch, alerts, the lineage of what is deployed, labeling (LF coverage and dev
accuracy), label balance across data versions, training (loss and throughput), utilization, the
compression candidates, the canary, the costs. Each section is built on its own: one whose input is
absent (the run stopped before it, the metrics store holds nothing) says why it is missing; one
whose input is malformed says what failed; neither stops the others.

`gather` reads the inputs (run folder, registry and metrics store; the serving state and the data versions
through the read model, tasks/reports/pipeline_state.py); `render_report` is pure: each section's
function turns the inputs into plain values and charts (tasks/rendering/plots.py), its macro in
tasks/rendering/templates/report_sections.html lays them out (autoescaped: every string from data is
escaped), report.html puts them on the shared base page.
"""

from __future__ import annotations

import base64
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from tasks.core.files import atomic_write_text, read_json
from tasks.labeling.drift import class_shares
from tasks.monitoring.feed import train_lines
from tasks.rendering import plots
from tasks.rendering.html import cell, macro, render
from tasks.reports.pipeline_state import REPORT_NAME, branch_of, data_versions, serving

BALANCE_VERSIONS = 20  # the label balance plot shows the newest data versions, this many
BILLED_KINDS = ("compute", "storage", "labor")  # the ledger's kinds that are paid (tasks/monitoring/store.py)
CHART_ITEMS = 6  # the cost chart's series: the largest items, the rest as one
KINDS = (*BILLED_KINDS, "avoided", "waste")  # avoided: labor weak labels saved; waste: idle accelerator time


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


# ---- helpers (pure) ------------------------------------------------------------------------------------
def _q(m: dict[str, Any] | None, key: str = "roc_auc") -> float | None:
    v = (m or {}).get(key)
    return float(v) if isinstance(v, (int, float)) else None


# ---- sections (pure; each returns its template macro's values, or raises Missing) --------------------
def section_lineage(inp: ReportInputs) -> dict[str, Any]:
    s, state = inp.summary, inp.registry_state
    sv = serving(state)
    rows = []
    for role, version in (
        ("prod (deployed)", s.get("prod_model") or state.get("prod_model")),
        ("registered this run", s.get("registered")),
        ("challenger", sv["challenger"]),
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
    return {"rows": rows, "serving": sv, "current_data": state.get("current_data"), "cards": inp.model_cards.items()}


def section_labeling(inp: ReportInputs) -> dict[str, Any]:
    lab = inp.summary.get("labeling")
    if not lab:
        raise Missing("the run did not reach weak labeling")
    lfs = lab.get("lf_table") or []
    if not lfs:
        raise Missing("the labeling step recorded no LF analysis")
    chart = plots.bar_chart(
        [r["lf"] for r in lfs],
        {"coverage": [r.get("coverage") for r in lfs], "dev accuracy": [r.get("dev_accuracy") for r in lfs]},
        f"labeling functions: coverage of the batch and accuracy on gold dev (using {lab.get('chosen')})",
        y_max=1.0,
    )
    q = lab.get("quality_dev") or {}
    return {
        "chart": chart,
        "n_lfs": int(lab.get("n_lfs") or len(lfs)),
        "coverage": float(lab.get("coverage") or 0),
        "chosen": lab.get("chosen"),
        "label_model_auc": _q(q.get("label_model")),
        "majority_auc": _q(q.get("majority_vote")),
        "rows": [
            [r["lf"], r.get("coverage"), r.get("overlaps"), r.get("conflicts"), r.get("dev_accuracy")] for r in lfs
        ],
    }


def class_share_series(stats: list[dict[str, Any]], classes: list[str] | None) -> dict[str, list]:
    """The label balance of each version's batch as chart series, one a class (`class_shares`); binary,
    the share of class 1 alone. Named by the run's class names when the summary has them (older
    summaries: by class number)."""
    all_shares = [class_shares(s) for s in stats]
    k = max((len(sh or []) for sh in all_shares), default=0)
    names = classes or [str(c) for c in range(k)]
    if k == 2:
        return {f"{names[1]} share of the labeled batch": [sh[1] if sh else None for sh in all_shares]}
    shares = [sh or [None] * k for sh in all_shares]
    return {
        f"{names[c] if c < len(names) else c} share": [sh[c] if c < len(sh) else None for sh in shares]
        for c in range(k)
    }


def section_label_balance(inp: ReportInputs) -> dict[str, Any]:
    versions = [d for d in inp.data_versions if d.get("labeling_stats")]
    if not versions:
        raise Missing(inp.missing.get("data_versions") or "no data version has been made yet")
    stats = [d["labeling_stats"] for d in versions]
    chart = plots.bar_chart(
        [d["version"] for d in versions],
        {
            **class_share_series(stats, inp.summary.get("classes")),
            "LF coverage": [s.get("coverage") for s in stats],
            "conflict rate": [s.get("conflict_rate") for s in stats],
        },
        f"label balance across the newest {len(versions)} data versions (the batch each version added)",
        y_max=1.0,
    )
    rows = [
        [d["version"], d.get("total_rows"), d.get("label_source"), d.get("parent"), d.get("run_id")] for d in versions
    ]
    return {"chart": chart, "rows": rows}


def section_training(inp: ReportInputs) -> dict[str, Any]:
    rows = [r for r in inp.train_metrics if "step" in r]
    if not rows:
        raise Missing(inp.missing.get("train_metrics") or "the run did not train")
    steps = [float(r["step"]) for r in rows]
    loss = {"loss": [r.get("loss") for r in rows], "loss std (fluctuation)": [r.get("loss_std") for r in rows]}
    speed = {"samples/s": [r.get("samples_per_s") for r in rows]}
    if not any(isinstance(v, (int, float)) for v in loss["loss"]):
        raise Missing("the training metrics lines hold no loss")
    return {
        "loss": plots.line_chart(steps, loss, "training loss", "optimizer step"),
        "speed": plots.line_chart(steps, speed, "training throughput", "optimizer step", "samples/s")
        if any(isinstance(v, (int, float)) for v in speed["samples/s"])
        else None,
        "train": inp.summary.get("train") or None,
    }


def section_utilization(inp: ReportInputs) -> dict[str, Any]:
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
    first = lambda t, n: (per_task[t].get(n) or [None])[0]  # noqa: E731
    cpu = None
    if {"cpu_percent_mean", "cpu_percent_max"} & set(once):
        cpu = plots.bar_chart(
            tasks,
            {n: [first(t, n) for t in tasks] for n in ("cpu_percent_mean", "cpu_percent_max")},
            "CPU utilization per task (% of one core, summed over its processes)",
            "%",
        )
    curves = []
    for t in tasks[:2]:
        series = {n: per_task[t][n] for n in sampled if len(per_task[t].get(n, [])) > 1}
        if series:
            n = max(len(v) for v in series.values())
            curves.append(plots.line_chart(list(range(n)), series, f"{t}: sampled utilization", "sample", "%"))
    rows = [[t, *[first(t, n) for n in once]] for t in tasks] if once else []
    return {"notes": notes, "cpu": cpu, "sampled": curves, "once_header": once, "once_rows": rows}


def section_compression(inp: ReportInputs) -> dict[str, Any]:
    c = inp.summary.get("compression")
    if not c:
        raise Missing("the run did not reach compression")
    uri = None
    if inp.pareto_svg:  # the compress step's own file, as an image: whatever it holds cannot run here
        uri = "data:image/svg+xml;base64," + base64.b64encode(inp.pareto_svg.encode()).decode()
    rows = [
        [r.get("name"), r.get("size_bytes"), r.get("latency_b1_ms"), _q(r.get("overall")),
         "yes" if r.get("chosen") else "", r.get("why_not")]
        for r in (inp.candidates or {}).get("rows") or []
    ]  # fmt: skip
    return {
        "plot_uri": uri,
        "plot_missing": inp.missing.get("pareto_svg", "no plot recorded"),
        "rows": rows,
        "chosen": c.get("chosen"),
        "chain": [str(x) for x in c.get("chain") or []],
        "bytes": c.get("bytes"),
        "fp32_bytes": c.get("fp32_bytes"),
    }


def section_canary(inp: ReportInputs) -> dict[str, Any]:
    c = inp.summary.get("canary")
    if not c:
        raise Missing("the run did not reach the canary")
    steps = c.get("steps") or []
    if not steps:
        raise Missing("; ".join(c.get("reasons") or []) or "no canary: the first model is promoted directly")
    labels = [f"{s.get('weight')}%" for s in steps]
    m = [s.get("metrics") or {} for s in steps]
    auc = [((x.get("quality") or {}).get("roc_auc") or {}) for x in m]
    champion, challenger = f"champion {c.get('champion')}", f"challenger {c.get('model_version')}"
    p99 = plots.bar_chart(
        labels,
        {
            champion: [(x.get("champion") or {}).get("p99_ms") for x in m],
            challenger: [(x.get("challenger") or {}).get("p99_ms") for x in m],
        },
        "canary: p99 latency per weight step",
        "ms",
    )
    online = plots.bar_chart(
        labels,
        {
            champion: [a.get("champion") for a in auc],
            challenger: [a.get("challenger") for a in auc],
            "score PSI": [x.get("psi") for x in m],
        },
        "canary: online ROC AUC and score PSI per weight step",
    )
    rows = [
        [
            s.get("weight"),
            (x.get("champion") or {}).get("requests"),
            (x.get("challenger") or {}).get("requests"),
            f"{(x.get('champion') or {}).get('errors', 0)}/{(x.get('challenger') or {}).get('errors', 0)}",
            x.get("psi"),
            f"[{cell(a.get('ci_low'))}, {cell(a.get('ci_high'))}]" if a else None,
            "pass" if s.get("passed") else "FAIL: " + "; ".join(s.get("reasons") or []),
        ]
        for s, x, a in zip(steps, m, auc)
    ]
    outcome = {"challenger_worse": "challenger worse", "cannot_judge": "cannot judge"}.get(c.get("outcome") or "")
    return {
        "version": c.get("model_version"),
        "champion": c.get("champion"),
        "passed": bool(c.get("passed")),
        "outcome": outcome,
        "champion_failing": bool(c.get("champion_failing")),
        "p99": p99,
        "online": online,
        "rows": rows,
    }


def section_costs(inp: ReportInputs) -> dict[str, Any]:
    if inp.monitoring is None:
        raise Missing(f"not available: {inp.missing.get('monitoring', 'the metrics store could not be read')}")
    costs = inp.monitoring.get("costs") or []
    if not costs:
        raise Missing("not available: the cost ledger holds no lines for this run")
    amount = lambda c: float(c.get("amount") or 0.0)  # noqa: E731
    kind = lambda c: c.get("kind", "compute")  # noqa: E731
    by_task: dict[str, dict[str, float]] = {}
    for c in costs:
        if kind(c) in BILLED_KINDS:
            item = by_task.setdefault(str(c.get("task") or "?"), {})
            item[str(c.get("item"))] = item.get(str(c.get("item")), 0.0) + amount(c)
    tasks = sorted(by_task, key=lambda t: -sum(by_task[t].values()))
    chart = plots.bar_chart(tasks, cost_series(by_task, tasks), "billed cost per task", "USD") if tasks else None
    totals = {k: sum(amount(c) for c in costs if kind(c) == k) for k in KINDS}
    per_task = {t: dict.fromkeys(KINDS, 0.0) for t in sorted({str(c.get("task") or "?") for c in costs})}
    for c in costs:
        row = per_task[str(c.get("task") or "?")]
        row[kind(c)] = row.get(kind(c), 0.0) + amount(c)
    keys = ("task", "kind", "item", "quantity", "unit", "unit_price", "amount")
    return {
        "chart": chart,
        "totals": [(k, v) for k, v in totals.items() if v or k in BILLED_KINDS],
        "billed": sum(totals[k] for k in BILLED_KINDS),
        "kinds": list(KINDS),
        "per_task": [[t, *[v[k] for k in KINDS], sum(v[k] for k in BILLED_KINDS)] for t, v in per_task.items()],
        # labor, storage, avoided, waste: how each was priced
        "priced": [[c.get(k) for k in keys] for c in costs if c.get("kind") != "compute"],
    }


def cost_series(by_task: dict[str, dict[str, float]], tasks: list[str]) -> dict[str, list[float | None]]:
    """One series per priced item, the CHART_ITEMS largest overall and the rest summed as "other items"
    (a legend of forty items reads as none; the tables below keep every line)."""
    totals: dict[str, float] = {}
    for items in by_task.values():
        for item, v in items.items():
            totals[item] = totals.get(item, 0.0) + v
    top = sorted(totals, key=lambda i: (-totals[i], i))[:CHART_ITEMS]
    series = {i: [by_task[t].get(i) for t in tasks] for i in sorted(top)}
    rest = [sum(v for i, v in by_task[t].items() if i not in top) for t in tasks]
    if len(totals) > len(top):
        series["other items"] = rest
    return series


def section_gates(inp: ReportInputs) -> dict[str, Any]:
    gates = inp.summary.get("gates") or {}
    if not gates:
        raise Missing("no gate was reached")
    return {
        "rows": [
            [k, "pass" if g.get("passed") else "FAIL", (g.get("summary") or "ok").splitlines()[0]]
            for k, g in gates.items()
        ]
    }


def section_held(inp: ReportInputs) -> dict[str, Any]:
    """The batches out of the current data after this run (the summary's `held`: tasks/registry/held.py)
    and the data versions with the batches each holds."""
    held = inp.summary.get("held")
    if held is None:
        raise Missing("this run's summary has no held batches (a summary from before they were recorded)")
    return {
        "rows": [[b["batch_id"], b["status"], b["from_version"], b["why"], b["next"]] for b in held["batches"]],
        "tonight": held["tonight"],
        "quarantined": held["quarantined_tonight"],
        "reentered": held["reentered"],
        "versions": [
            [
                v.get("version"),
                ", ".join(p["batch_id"] for p in v.get("partitions", [])),
                ", ".join(v.get("reentered") or []) or "none",
                ", ".join(v.get("held") or []) or "none",
            ]
            for v in inp.data_versions[-10:]
        ],  # fmt: skip
    }


SECTIONS: list[tuple[str, str, Callable[[ReportInputs], dict[str, Any]]]] = [
    ("lineage", "Lineage of what is deployed", section_lineage),
    ("gates", "Gates", section_gates),
    ("held", "Held batches: a rejected model's, kept and listed", section_held),
    ("labeling", "Labeling: LF coverage and dev accuracy", section_labeling),
    ("balance", "Label balance across data versions", section_label_balance),
    ("training", "Training: loss and throughput", section_training),
    ("utilization", "Utilization", section_utilization),
    ("compression", "Compression candidates", section_compression),
    ("canary", "Canary comparison", section_canary),
    ("costs", "Cost breakdown", section_costs),
]


def build_section(key: str, build: Callable[[ReportInputs], dict[str, Any]], inp: ReportInputs) -> dict[str, Any]:
    """One section's HTML (its values drawn by its macro in report_sections.html), or why it is absent."""
    try:
        return {"html": macro("report_sections.html", key)(build(inp)), "why": None}
    except Missing as why:
        return {"html": None, "why": f"Missing: {why}"}
    except Exception as exc:  # noqa: BLE001 - one malformed input must not lose the rest of the report
        return {"html": None, "why": f"Could not be built: {type(exc).__name__}: {exc}"}


def render_report(inp: ReportInputs) -> str:
    """The report's HTML (pure). A section that fails or lacks its input says why in its place."""
    s = inp.summary
    alerts = (inp.monitoring or {}).get("alerts") or []
    return render(
        "report.html",
        run_id=inp.run_id,
        outcome=s.get("outcome"),
        branch=branch_of(s.get("outcome"), s.get("failed_steps")),
        data_version=s.get("data_version"),
        prod_model=s.get("prod_model"),
        alerts=[{k: a.get(k) or "" for k in ("severity", "rule", "message", "task")} for a in alerts],
        no_alerts=inp.monitoring is not None and not alerts,
        sections=[{"key": k, "title": t, **build_section(k, b, inp)} for k, t, b in SECTIONS],
        written=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
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
    newest = attempt("data_versions", lambda: data_versions(reg, inp.registry_state, BALANCE_VERSIONS)) or []
    inp.data_versions = [d["record"] for d in reversed(newest)]
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
    """A relative link from the run folder to the model card's HTML (tasks/reports/model_card.py)."""
    import os

    from tasks.reports.model_card import card_paths

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
    from tasks.reports.model_card import write_model_card

    for v in sorted({v for v in versions if v}):
        try:
            write_model_card(settings, v)
        except Exception as exc:  # noqa: BLE001 - the report links what exists and says what does not
            log(f"model card of {v} not written: {type(exc).__name__}: {exc}")
