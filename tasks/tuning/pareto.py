"""Quality against cost: the study's Pareto front, the chosen trial, and the plot (self-contained SVG,
as tasks/compression/plot.py draws its own; matplotlib is not a dependency). Pure apart from the write."""

from __future__ import annotations

from html import escape
from pathlib import Path

from tasks.compression.search import pareto_front
from tasks.core.files import atomic_write_text

W, H, PAD_L, PAD_R, PAD_T, PAD_B = 760, 440, 70, 190, 40, 50


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


def pareto_svg(rows: list[dict], chosen: int | None, path: Path, title: str) -> Path:
    """x: a trial's cost; y: its dev ROC AUC (pruned trials at their last reported value, grey)."""
    pts = [r for r in rows if r.get("value") is not None and r.get("cost") is not None]
    xs = [r["cost"] for r in pts] or [0.0, 1.0]
    ys = [r["value"] for r in pts] or [0.5, 1.0]
    x0, x1 = 0.0, max(xs) * 1.1 or 1.0
    y0, y1 = min(ys) - 0.01, max(ys) + 0.01

    def px(x: float) -> float:
        return PAD_L + (x - x0) / (x1 - x0) * (W - PAD_L - PAD_R)

    def py(y: float) -> float:
        return H - PAD_B - (y - y0) / (y1 - y0) * (H - PAD_T - PAD_B)

    mid_y = (PAD_T + H - PAD_B) / 2
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="11">',
        f'<rect width="{W}" height="{H}" fill="white"/>',
        f'<text x="{PAD_L}" y="22" font-size="14">{escape(title)}</text>',
        f'<line x1="{PAD_L}" y1="{H - PAD_B}" x2="{W - PAD_R}" y2="{H - PAD_B}" stroke="black"/>',
        f'<line x1="{PAD_L}" y1="{PAD_T}" x2="{PAD_L}" y2="{H - PAD_B}" stroke="black"/>',
        f'<text x="{(PAD_L + W - PAD_R) / 2}" y="{H - 12}" text-anchor="middle">trial cost (ledger prices)</text>',
        f'<text x="16" y="{mid_y}" transform="rotate(-90 16 {mid_y})" text-anchor="middle">gold dev ROC AUC</text>',
    ]
    for i in range(5):
        xv, yv = x0 + (x1 - x0) * i / 4, y0 + (y1 - y0) * i / 4
        out.append(f'<text x="{px(xv):.1f}" y="{H - PAD_B + 16}" text-anchor="middle">{xv:.3g}</text>')
        out.append(f'<text x="{PAD_L - 6}" y="{py(yv) + 4:.1f}" text-anchor="end">{yv:.3f}</text>')
    on_front = front(rows)
    if len(on_front) > 1:
        line = " ".join(f"{px(r['cost']):.1f},{py(r['value']):.1f}" for r in on_front)
        out.append(f'<polyline points="{line}" fill="none" stroke="#4477aa" stroke-dasharray="4 3"/>')
    front_numbers = {r["number"] for r in on_front}
    for r in pts:
        colour = (
            "#228833"
            if r["number"] == chosen
            else "#4477aa"
            if r["number"] in front_numbers
            else "#88aacc"
            if r["state"] == "COMPLETE"
            else "#bbbbbb"
        )
        out.append(
            f'<circle cx="{px(r["cost"]):.1f}" cy="{py(r["value"]):.1f}" r="{7 if r["number"] == chosen else 4}" '
            f'fill="{colour}"><title>trial {r["number"]} ({r["state"]}): ROC AUC {r["value"]:.4f}, cost '
            f"{r['cost']:.5f}, {escape(str(r['params']))}</title></circle>"
        )
        out.append(f'<text x="{px(r["cost"]) + 7:.1f}" y="{py(r["value"]) - 5:.1f}" font-size="9">{r["number"]}</text>')
    lx = W - PAD_R + 20
    legend = (
        ("#228833", "chosen"),
        ("#4477aa", "Pareto front"),
        ("#88aacc", "completed"),
        ("#bbbbbb", "pruned (last value)"),
    )
    for i, (colour, text) in enumerate(legend):
        out.append(
            f'<circle cx="{lx}" cy="{PAD_T + 20 + 18 * i}" r="5" fill="{colour}"/>'
            f'<text x="{lx + 10}" y="{PAD_T + 24 + 18 * i}">{text}</text>'
        )
    out.append("</svg>")
    atomic_write_text(Path(path), "\n".join(out))
    return Path(path)
