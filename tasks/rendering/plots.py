"""Every chart Sluice draws: matplotlib figures saved by its SVG backend, returned as `<svg>` text to
inline in a page or write to a file. No pyplot (no global figure state, no GUI backend): each chart is
its own `Figure`, drawn inside `rc_context(RC)` so nothing leaks into other matplotlib users.

What a chart guarantees:
- self-contained: text stays text (svg.fonttype none), no script, no external reference, no metadata
  block; one `<svg>` element that starts the string (an SVG file needs nothing more);
- deterministic: the same figures give the same bytes (svg.hashsalt fixed, no date);
- values on hover: each bar and point carries a `<title>` ("label series: value"), as the hand-written
  charts did; a series of a line chart carries "series: n points";
- every string from data is escaped (matplotlib's SVG writer escapes text and attributes).

The callers (the run report, the model card, the Sluice page, the two Pareto plots) hand in plain
data; nothing here reads a store or a registry.
"""

from __future__ import annotations

import hashlib
import io
import math
import re
from dataclasses import dataclass
from datetime import date
from typing import Any, Sequence

from markupsafe import Markup, escape

# Paul Tol's "bright" scheme (colour-blind safe), then grey.
COLOURS = ["#4477aa", "#ee6677", "#228833", "#ccbb44", "#66ccee", "#aa3377", "#bbbbbb"]
MAX_POINTS = 400  # per line series: a long run is drawn from every k-th point (its shape, a bounded file)
MAX_LABELLED_BARS = 16  # up to this many bars, each bar's value is written above it
MAX_TICKS = 12  # category labels under an x axis (every k-th beyond)
MIN_SLOTS = 4  # a bar chart is laid out for at least this many groups
WIDTH = 7.5  # inches (about 720 px at the browser's 96 px per inch)
RC: dict[str, Any] = {
    "svg.hashsalt": "sluice",  # fixed: clip-path and marker ids depend only on the figure
    "svg.fonttype": "none",  # text as <text> (smaller, searchable, selectable), not glyph paths
    "font.family": "sans-serif",
    "font.sans-serif": ["DejaVu Sans", "Liberation Sans", "Arial", "Helvetica"],
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.titlelocation": "left",
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "axes.grid.axis": "y",
    "axes.axisbelow": True,
    "grid.color": "#e6e6e6",
    "legend.frameon": False,
    "legend.fontsize": 8,
    "svg.image_inline": True,
}
NO_METADATA = {"Date": None, "Creator": None, "Format": None, "Type": None}
# matplotlib's own group ids (figure_1, patch_3, ...) repeat in every chart of a page: dropped.
GENERIC_ID = re.compile(r'<g id="(?:[A-Za-z.]+_\d+)">')


@dataclass(frozen=True)
class Point:
    """One point of a scatter chart: where, which legend group, a label drawn beside it, a hover text."""

    x: float
    y: float
    group: str
    label: str = ""
    tip: str = ""


def fmt(v: float) -> str:
    """A value as the charts' hover texts and bar labels write it."""
    return f"{v:.3g}" if abs(v) < 1e4 else f"{v:,.0f}"


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)


def _figure(width: float, height: float):
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def _svg(fig: Any, title: str, tips: dict[str, str]) -> Markup:
    """The figure as one `<svg>` element: prolog and metadata dropped, the title as its accessible
    name, a `<title>` (hover text) inside each group named in `tips`."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata=NO_METADATA)
    text = buf.getvalue()
    text = text[text.index("<svg") :]
    text = text.replace("<svg ", f'<svg role="img" aria-label="{escape(title)}" ', 1)
    text = GENERIC_ID.sub("<g>", text)
    for gid, tip in tips.items():
        text = text.replace(f'<g id="{gid}">', f'<g id="{gid}"><title>{escape(tip)}</title>', 1)
    return Markup(text)


def _prefix(*parts: Any) -> str:
    """An id prefix for one chart's hover groups, from its content (two charts on a page differ)."""
    return "c" + hashlib.sha256(repr(parts).encode()).hexdigest()[:8]


def _legend(fig: Any, handles: list[Any], labels: list[str]) -> None:
    """One row under the chart (the plot area keeps the figure's width whatever the names' lengths)."""
    if handles:
        fig.legend(handles, labels, loc="outside lower center", ncols=min(len(labels), 4))


def _ticks(ax: Any, at: Sequence[float], labels: Sequence[str], most: int = MAX_TICKS) -> None:
    """Category labels under the x axis: every k-th when there are more than `most`, slanted when long."""
    step = max(1, math.ceil(len(labels) / most))
    slant = sum(len(x) for x in list(labels)[::step]) > 60
    shown = list(labels)[::step]
    ax.set_xticks(list(at)[::step], shown, rotation=30 if slant else 0, ha="right" if slant else "center")


def bar_chart(
    labels: Sequence[str],
    series: dict[str, Sequence[float | None]],
    title: str,
    y_label: str = "",
    y_max: float | None = None,
    stacked: bool = False,
    width: float = WIDTH,
    height: float = 3.2,
) -> Markup:
    """Bars: one group per label, one bar per series side by side (or stacked); None or NaN: no bar."""
    import matplotlib

    labels = [str(x) for x in labels]
    prefix, tips = _prefix("bar", title, labels, list(series)), {}
    with matplotlib.rc_context(RC):
        fig = _figure(width, height)
        ax = fig.add_subplot()
        n = max(len(series), 1)
        bar_w = 0.8 if stacked else 0.8 / n
        bottom = [0.0] * len(labels)
        drawn = 0
        for si, (name, values) in enumerate(series.items()):
            vs = [float(v) if _finite(v) else math.nan for v in list(values) + [None] * (len(labels) - len(values))]
            xs = [i if stacked else i - 0.4 + bar_w * (si + 0.5) for i in range(len(labels))]
            bars = ax.bar(xs, vs, bar_w, bottom=bottom if stacked else None, label=name, color=COLOURS[si % 7])
            for gi, (bar, v) in enumerate(zip(bars, vs)):
                if not math.isnan(v):
                    bar.set_gid(f"{prefix}-{si}-{gi}")
                    tips[f"{prefix}-{si}-{gi}"] = f"{labels[gi]} {name}: {fmt(v)}"
                    drawn += 1
            if stacked:
                bottom = [b + (0.0 if math.isnan(v) else v) for b, v in zip(bottom, vs)]
            elif len(labels) * n <= MAX_LABELLED_BARS:
                ax.bar_label(bars, labels=["" if math.isnan(v) else fmt(v) for v in vs], fontsize=7, padding=2)
        _ticks(ax, range(len(labels)), labels)
        slots = max(len(labels), MIN_SLOTS)  # a chart of one or two groups keeps bars of a usual width
        ax.set_xlim(-0.5 - (slots - len(labels)) / 2, len(labels) - 0.5 + (slots - len(labels)) / 2)
        if y_max is not None:  # headroom for the value written above a full bar
            ax.set_ylim(0, y_max * 1.08)
            ax.set_yticks([y_max * i / 5 for i in range(6)])
        ax.set_ylabel(y_label)
        ax.set_title(title)
        if not drawn:
            ax.text(0.5, 0.5, "no values", transform=ax.transAxes, ha="center", color="#888888")
        if len(series) > 1 or stacked:
            _legend(fig, *ax.get_legend_handles_labels())
        return _svg(fig, title, tips)


def line_chart(
    xs: Sequence[float | str | date],
    series: dict[str, Sequence[float | None]],
    title: str,
    x_label: str,
    y_label: str = "",
    width: float = WIDTH,
    height: float = 3.0,
) -> Markup:
    """One line per series over the same x values (numbers, dates, or labels kept in order); None or
    NaN is a gap. Raises ValueError when there is nothing to draw."""
    import matplotlib
    from matplotlib.ticker import MaxNLocator

    xs = list(xs)
    if not xs or not any(_finite(v) for vs in series.values() for v in vs):
        raise ValueError("no points to plot")
    if len(xs) > MAX_POINTS:
        k = math.ceil(len(xs) / MAX_POINTS)
        xs, series = xs[::k], {n: list(vs)[::k] for n, vs in series.items()}
    prefix, tips = _prefix("line", title, list(series)), {}
    with matplotlib.rc_context(RC):
        fig = _figure(width, height)
        ax = fig.add_subplot()
        categorical = isinstance(xs[0], str)
        at = list(range(len(xs))) if categorical else xs
        for si, (name, values) in enumerate(series.items()):
            vs = [float(v) if _finite(v) else math.nan for v in values]
            few = sum(not math.isnan(v) for v in vs)
            (line,) = ax.plot(
                at, vs, label=name, color=COLOURS[si % 7], lw=1.5, marker="o" if few <= 60 else None, ms=3
            )
            line.set_gid(f"{prefix}-{si}")
            last = next((v for v in reversed(vs) if not math.isnan(v)), math.nan)
            tips[f"{prefix}-{si}"] = f"{name}: {few} points, last {fmt(last)}"
        if categorical:
            _ticks(ax, at, xs)
        elif all(isinstance(x, int) or (isinstance(x, float) and x.is_integer()) for x in xs):
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps, samples: no 1.25
        ax.set_xlabel(x_label)
        ax.set_ylabel(y_label)
        ax.set_title(title)
        _legend(fig, *ax.get_legend_handles_labels())
        return _svg(fig, title, tips)


def scatter_chart(
    points: Sequence[Point],
    colours: dict[str, str],
    title: str,
    x_label: str,
    y_label: str,
    front: Sequence[tuple[float, float]] = (),
    front_label: str | None = "Pareto front",
    log_x: bool = False,
    emphasis: str | None = None,
    width: float = WIDTH,
    height: float = 4.6,
) -> Markup:
    """Points coloured by group (`colours`: group -> colour, also the legend's order), each labelled;
    `front` joined by a dashed line (in the legend as `front_label`, unless None); the `emphasis` group
    drawn larger (the chosen one)."""
    import matplotlib
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    prefix, tips = _prefix("scatter", title, [(p.x, p.y, p.group) for p in points]), {}
    with matplotlib.rc_context(RC):
        fig = _figure(width, height)
        ax = fig.add_subplot()
        ax.grid(True, axis="both")
        if len(front) > 1:
            fx, fy = zip(*sorted(front))
            ax.plot(fx, fy, ls="--", lw=1, color=COLOURS[0], label=front_label or "_")
        seen: set[str] = set()
        for i, p in enumerate(points):
            big = p.group == emphasis
            (mark,) = ax.plot(
                [p.x], [p.y], ls="", marker="o", ms=10 if big else 6, color=colours.get(p.group, COLOURS[-1]),
                label=p.group if p.group not in seen else "_", zorder=3 if big else 2,
            )  # fmt: skip
            seen.add(p.group)
            gid = f"{prefix}-{re.sub(r'[^a-z0-9]+', '-', p.group.lower())}-{i}"
            mark.set_gid(gid)
            tips[gid] = p.tip or p.label
            if p.label:
                ax.annotate(p.label, (p.x, p.y), xytext=(5, 4), textcoords="offset points", fontsize=7)
        if log_x:  # ticks at 1, 2 and 5 x 10^k, written in full (5,000 rather than 5 x 10^3)
            ax.set_xscale("log")
            ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
            ax.xaxis.set_minor_formatter(NullFormatter())
        handles, labels = ax.get_legend_handles_labels()
        order = {g: k for k, g in enumerate([front_label, *colours])}
        pairs = sorted(zip(labels, handles), key=lambda lh: order.get(lh[0], len(order)))
        _legend(fig, [h for _, h in pairs], [lab for lab, _ in pairs])
        ax.set_xlabel(x_label)
        ax.set_ylabel(y_label)
        ax.set_title(title)
        return _svg(fig, title, tips)
