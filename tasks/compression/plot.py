"""The search's Pareto plot (tasks/rendering/plots.py draws it): x the file size (log scale), y the
batch-1 latency; the chosen candidate, the others that keep the quality floor (the Pareto front joined
by a line) and those that do not. Each point's hover text names it, its size, latency, ROC AUC and why
it was not chosen."""

from __future__ import annotations

from pathlib import Path

from tasks.compression.search import pareto_front
from tasks.core.files import atomic_write_text
from tasks.rendering.plots import COLOURS, Point, scatter_chart

GROUPS = {"chosen": COLOURS[2], "keeps the quality floor": COLOURS[0], "rejected (floor, budget, NaN)": COLOURS[-1]}


def _kept(row: dict, reasons: dict[str, str]) -> bool:
    why = reasons.get(row["name"], "")
    return not why or why.startswith(("off the Pareto front", "on the front"))


def _point(row: dict, chosen: str | None, reasons: dict[str, str]) -> Point:
    group = (
        "chosen"
        if row["name"] == chosen
        else ("keeps the quality floor" if _kept(row, reasons) else "rejected (floor, budget, NaN)")
    )
    why = f" - {reasons[row['name']]}" if row["name"] in reasons else ""
    tip = (
        f"{row['name']}: {row['size_bytes']:,} B, {row['latency_b1_ms']:.3f} ms, ROC AUC "
        f"{row['overall']['roc_auc']:.4f}{why}"
    )
    return Point(max(row["size_bytes"], 1), row["latency_b1_ms"], group, row["name"], tip)


def pareto_svg(
    rows: list[dict], chosen: str | None, reasons: dict[str, str], path: Path, title: str = "compression candidates"
) -> Path:
    """Write the plot of these candidate rows (the search's table) to `path` (an SVG file); returns it."""
    front = sorted(pareto_front([r for r in rows if _kept(r, reasons)]), key=lambda r: r["size_bytes"])
    svg = scatter_chart(
        [_point(r, chosen, reasons) for r in rows],
        GROUPS,
        title,
        "ONNX file size (bytes, log)",
        "batch-1 latency (ms, 1 thread)",
        front=[(max(r["size_bytes"], 1), r["latency_b1_ms"]) for r in front],
        log_x=True,
        emphasis="chosen",
    )
    atomic_write_text(Path(path), svg)
    return Path(path)
