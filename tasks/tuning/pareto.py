"""Quality against cost: the study's Pareto front, the chosen trial, and the plot (tasks/rendering/plots.py
draws it; each point's hover text is the trial, its state, value, cost and params). Pure apart from the
write."""

from __future__ import annotations

from pathlib import Path

from tasks.compression.search import pareto_front
from tasks.core.files import atomic_write_text
from tasks.rendering.plots import COLOURS, Point, scatter_chart

GROUPS = {"chosen": COLOURS[2], "Pareto front": COLOURS[0], "completed": "#88aacc", "pruned (last value)": COLOURS[-1]}


def scored(rows: list[dict]) -> list[dict]:
    """Completed trials with a value and a cost, with `neg_auc` (the front's keys are lower-is-better)."""
    return [
        {**r, "neg_auc": -r["value"]}
        for r in rows
        if r["state"] == "COMPLETE" and r.get("value") is not None and r.get("cost") is not None
    ]


def front(rows: list[dict]) -> list[dict]:
    """Completed trials no other beats on both dev ROC AUC (higher) and cost (lower), by cost."""
    return sorted(pareto_front(scored(rows), keys=("neg_auc", "cost")), key=lambda r: r["cost"])


def choose(rows: list[dict], within: float) -> dict | None:
    """The cheapest completed trial whose dev ROC AUC is within `within` of the best (on the front by
    construction); None when no trial completed."""
    done = scored(rows)
    if not done:
        return None
    best = max(r["value"] for r in done)
    return min((r for r in done if r["value"] >= best - within), key=lambda r: (r["cost"], -r["value"], r["number"]))


def _point(r: dict, chosen: int | None, front_numbers: set[int]) -> Point:
    group = (
        "chosen"
        if r["number"] == chosen
        else "Pareto front"
        if r["number"] in front_numbers
        else "completed"
        if r["state"] == "COMPLETE"
        else "pruned (last value)"
    )
    tip = f"trial {r['number']} ({r['state']}): ROC AUC {r['value']:.4f}, cost {r['cost']:.5f}, {r['params']}"
    return Point(r["cost"], r["value"], group, str(r["number"]), tip)


def pareto_svg(rows: list[dict], chosen: int | None, path: Path, title: str) -> Path:
    """x: a trial's cost; y: its dev ROC AUC (pruned trials at their last reported value, grey)."""
    on_front = front(rows)
    numbers = {r["number"] for r in on_front}
    pts = [r for r in rows if r.get("value") is not None and r.get("cost") is not None]
    svg = scatter_chart(
        [_point(r, chosen, numbers) for r in pts],
        GROUPS,
        title,
        "trial cost (ledger prices)",
        "gold dev ROC AUC",
        front=[(r["cost"], r["value"]) for r in on_front],
        front_label=None,  # its points are the "Pareto front" group
        emphasis="chosen",
    )
    atomic_write_text(Path(path), svg)
    return Path(path)
