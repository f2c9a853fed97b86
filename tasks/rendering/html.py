"""The Jinja2 environment every Sluice page is rendered with: templates/ beside this file (base.html
holds the shared CSS; report.html, model_card.html, sluice_page.html extend it; macros.html has the
table and the notes), autoescape on for every template, undefined names an error (a template that
names a key its caller did not pass fails its test instead of printing nothing). Templates that are
not HTML (haproxy.cfg.j2) go through `render_text`: the same folder, nothing escaped.

Filters: `cell` (a table cell: None as a dash, floats to 4 significant digits, NaN as n/a), `usd`.
Values that are markup already (the charts of plots.py) are `Markup`; everything else is escaped.
"""

from __future__ import annotations

import math
from functools import cache
from pathlib import Path
from typing import Any

import jinja2

TEMPLATES = Path(__file__).resolve().parent / "templates"
DASH = "\u2013"


def cell(v: Any) -> str:
    """A value as a table cell shows it (escaped by autoescape, unless it is Markup)."""
    if v is None:
        return DASH
    if isinstance(v, str):  # Markup (a link) stays markup
        return v
    if isinstance(v, float):
        return "n/a" if not math.isfinite(v) else f"{v:.4g}"
    return str(v)


def usd(v: Any) -> str:
    return DASH if v is None else f"{float(v):,.4f}"


@cache
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["cell"] = cell
    env.filters["usd"] = usd
    return env


@cache
def text_environment() -> jinja2.Environment:
    """For the templates that are not HTML (haproxy.cfg.j2): the same folder, autoescape off."""
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=False,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


def render_text(template: str, **context: Any) -> str:
    """A template that is not HTML (under templates/), rendered with `context`, nothing escaped."""
    return text_environment().get_template(template).render(**context)


def render(template: str, **context: Any) -> str:
    """The named template (under templates/) rendered with `context`."""
    return environment().get_template(template).render(**context)


def macro(template: str, name: str) -> Any:
    """A macro of a template (under templates/), to render one piece on its own: `macro(...)(data)`."""
    return getattr(environment().get_template(template).module, name)
