"""The search's Pareto plot as a self-contained SVG (no plotting library: matplotlib is not a
dependency). x: file size (log scale), y: batch-1 latency; the chosen candidate, the others that
keep the quality floor (the Pareto front joined by a line) and those that do not."""

from __future__ import annotations

import math
from html import escape
from pathlib import Path

from tasks.compression.search import pareto_front
from tasks.core.files import atomic_write_text

W, H, PAD_L, PAD_R, PAD_T, PAD_B = 760, 440, 70, 190, 40, 50


def _kept(row: dict, reasons: dict[str, str]) -> bool:
    why = reasons.get(row["name"], "")
    return not why or why.startswith(("off the Pareto front", "on the front"))


def pareto_svg(
    rows: list[dict], chosen: str | None, reasons: dict[str, str], path: Path, title: str = "compression candidates"
) -> Path:
    xs = [math.log10(max(r["size_bytes"], 1)) for r in rows]
    ys = [r["latency_b1_ms"] for r in rows]
    x0, x1 = min(xs) - 0.05, max(xs) + 0.05
    y0, y1 = 0.0, max(ys) * 1.1 or 1.0

    def px(x: float) -> float:
        return PAD_L + (x - x0) / (x1 - x0) * (W - PAD_L - PAD_R)

    def py(y: float) -> float:
        return H - PAD_B - (y - y0) / (y1 - y0) * (H - PAD_T - PAD_B)

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="11">',
        f'<rect width="{W}" height="{H}" fill="white"/>',
        f'<text x="{PAD_L}" y="22" font-size="14">{escape(title)}</text>',
        f'<line x1="{PAD_L}" y1="{H - PAD_B}" x2="{W - PAD_R}" y2="{H - PAD_B}" stroke="black"/>',
        f'<line x1="{PAD_L}" y1="{PAD_T}" x2="{PAD_L}" y2="{H - PAD_B}" stroke="black"/>',
        f'<text x="{(PAD_L + W - PAD_R) / 2}" y="{H - 12}" text-anchor="middle">ONNX file size (bytes, log)</text>',
        f'<text x="16" y="{(PAD_T + H - PAD_B) / 2}" transform="rotate(-90 16 {(PAD_T + H - PAD_B) / 2})" '
        f'text-anchor="middle">batch-1 latency (ms, 1 thread)</text>',
    ]
    for e in range(math.floor(x0), math.ceil(x1) + 1):
        for m in (1, 2, 5):
            v = math.log10(m) + e
            if x0 <= v <= x1:
                out.append(
                    f'<line x1="{px(v):.1f}" y1="{H - PAD_B}" x2="{px(v):.1f}" y2="{H - PAD_B + 4}" stroke="black"/>'
                    f'<text x="{px(v):.1f}" y="{H - PAD_B + 16}" text-anchor="middle">{m * 10**e:,.0f}</text>'
                )
    for i in range(5):
        v = y0 + (y1 - y0) * i / 4
        out.append(f'<text x="{PAD_L - 6}" y="{py(v) + 4:.1f}" text-anchor="end">{v:.3g}</text>')
    kept = [r for r in rows if _kept(r, reasons)]
    front = sorted(pareto_front(kept), key=lambda r: r["size_bytes"])
    if len(front) > 1:
        pts = " ".join(f"{px(math.log10(r['size_bytes'])):.1f},{py(r['latency_b1_ms']):.1f}" for r in front)
        out.append(f'<polyline points="{pts}" fill="none" stroke="#4477aa" stroke-dasharray="4 3"/>')
    for r, x, y in zip(rows, xs, ys):
        colour = "#228833" if r["name"] == chosen else "#4477aa" if _kept(r, reasons) else "#bbbbbb"
        radius = 7 if r["name"] == chosen else 4
        out.append(
            f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="{radius}" fill="{colour}">'
            f"<title>{escape(r['name'])}: {r['size_bytes']:,} B, {r['latency_b1_ms']:.3f} ms, ROC AUC "
            f"{r['overall']['roc_auc']:.4f}{' - ' + escape(reasons[r['name']]) if r['name'] in reasons else ''}"
            f"</title></circle>"
        )
        out.append(f'<text x="{px(x) + 8:.1f}" y="{py(y) - 6:.1f}" font-size="9">{escape(r["name"])}</text>')
    lx = W - PAD_R + 20
    for i, (colour, text) in enumerate(
        (("#228833", "chosen"), ("#4477aa", "keeps the quality floor"), ("#bbbbbb", "rejected (floor, budget, NaN)"))
    ):
        out.append(
            f'<circle cx="{lx}" cy="{PAD_T + 20 + 18 * i}" r="5" fill="{colour}"/>'
            f'<text x="{lx + 10}" y="{PAD_T + 24 + 18 * i}">{text}</text>'
        )
    out.append("</svg>")
    atomic_write_text(Path(path), "\n".join(out))
    return Path(path)
