"""The one plotting module: what a chart draws (bar heights, gaps, points in their groups), what it
guarantees (one self-contained <svg>, the same bytes for the same figures, data escaped)."""

import re

import pytest

from tasks.rendering.plots import Point, bar_chart, line_chart, scatter_chart


def _bar_heights(svg: str) -> dict[str, float]:
    """Hover text -> the bar's height in SVG units (its path is a rectangle: M x y0 L x y0 L x y1 ...)."""
    out = {}
    for tip, d in re.findall(r"<g id=\"[^\"]+\"><title>([^<]+)</title>\s*<path d=\"([^\"]+)\"", svg):
        ys = [float(y) for y in re.findall(r"[ML] [-\d.]+ ([-\d.]+)", d)]
        out[tip] = max(ys) - min(ys)
    return out


def test_bars_are_drawn_to_scale_and_none_draws_no_bar():
    svg = bar_chart(["a<b", "c"], {"x": [0.5, None], "y": [1.0, 0.25]}, "t & u", y_max=1.0)
    heights = _bar_heights(svg)
    assert set(heights) == {"a&lt;b x: 0.5", "a&lt;b y: 1", "c y: 0.25"}  # escaped; no bar for None
    assert heights["a&lt;b y: 1"] == pytest.approx(2 * heights["a&lt;b x: 0.5"], rel=1e-4)
    assert heights["c y: 0.25"] == pytest.approx(heights["a&lt;b x: 0.5"] / 2, rel=1e-4)
    assert 'aria-label="t &amp; u"' in svg and ">a&lt;b</text>" in svg


def test_stacked_bars_sum_per_group():
    svg = bar_chart(["n1", "n2"], {"gold": [10, 20], "weak": [30, None]}, "labels", stacked=True)
    h = _bar_heights(svg)
    assert h["n1 weak: 30"] == pytest.approx(3 * h["n1 gold: 10"], rel=1e-4)
    assert h["n2 gold: 20"] == pytest.approx(2 * h["n1 gold: 10"], rel=1e-4) and "n2 weak" not in str(h)


def test_a_line_has_a_gap_where_a_value_is_missing():
    svg = line_chart([1, 2, 3, 4], {"loss": [1.0, None, 0.5, 0.25]}, "loss", "step")
    (d,) = re.findall(r"<title>loss: 3 points, last 0.25</title>\s*<path d=\"([^\"]+)\"", svg)
    assert [c for c in d if c in "ML"] == ["M", "M", "L"]  # point 1 alone, then 3 to 4
    with pytest.raises(ValueError, match="no points to plot"):
        line_chart([1, 2], {"loss": [None, float("nan")]}, "loss", "step")


def test_days_as_labels_keep_their_order_and_every_kth_is_written():
    days = [f"2026-11-{d:02d}" for d in range(1, 31)]
    svg = line_chart(days, {"p99": [float(d) for d in range(30)]}, "p99", "day")
    written = re.findall(r">(2026-11-\d\d)</text>", svg)
    assert written == days[::3]  # 30 labels, at most 12 written


def test_scatter_points_carry_their_group_and_hover_text():
    points = [Point(2000, 0.02, "chosen", "fp16", "fp16: 2,000 B"), Point(8000, 0.01, "kept", "<x>", "x")]
    svg = scatter_chart(
        points, {"chosen": "#228833", "kept": "#4477aa"}, "c", "bytes", "ms", front=[(2000, 0.02), (8000, 0.01)],
        log_x=True, emphasis="chosen",
    )  # fmt: skip
    assert re.search(r'<g id="c[0-9a-f]+-chosen-0"><title>fp16: 2,000 B</title>', svg)
    assert re.search(r'<g id="c[0-9a-f]+-kept-1"><title>x</title>', svg) and ">&lt;x&gt;</text>" in svg
    assert re.findall(r">(Pareto front|chosen|kept)</text>", svg) == ["Pareto front", "chosen", "kept"]
    assert ">2,000</text>" in svg and ">5,000</text>" in svg  # log axis ticks written in full


def test_a_chart_is_one_self_contained_deterministic_svg():
    args = (["a", "b"], {"x": [1.0, 2.0]}, "t")
    svg = bar_chart(*args)
    assert svg.startswith("<svg ") and svg.rstrip().endswith("</svg>") and svg.count("<svg") == 1
    assert "<script" not in svg and "<metadata" not in svg and "<?xml" not in svg
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", svg)
    assert "<text" in svg  # text stays text (svg.fonttype none), not glyph paths
    assert bar_chart(*args) == svg  # same figures, same bytes (svg.hashsalt, no date)
    assert bar_chart(["a", "b"], {"x": [1.0, 3.0]}, "t") != svg
    assert not re.search(r'id="(figure|axes|patch)_\d+"', svg)  # no ids that repeat across a page's charts
