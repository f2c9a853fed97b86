"""The Jinja2 environment: autoescape on, undefined names an error, the shared base self-contained."""

import jinja2
import pytest
from markupsafe import Markup

from tasks.rendering.html import cell, environment, render


def test_autoescape_is_on_and_markup_passes():
    t = environment().from_string("{{ x }}|{{ y }}|{{ x | cell }}")
    assert t.render(x="<script>alert(1)</script>", y=Markup("<b>ok</b>")) == (
        "&lt;script&gt;alert(1)&lt;/script&gt;|<b>ok</b>|&lt;script&gt;alert(1)&lt;/script&gt;"
    )


def test_an_undefined_name_fails_instead_of_printing_nothing():
    with pytest.raises(jinja2.UndefinedError):
        environment().from_string("{{ missing.key }}").render()


def test_cells():
    assert [cell(None), cell(0.123456), cell(float("nan")), cell(3), cell("a")] == ["\u2013", "0.1235", "n/a", "3", "a"]


def test_the_table_macro_and_the_base_page():
    html = render("model_card.html", title="t <1>", blocks=[("table", ["a", "b"], [["<x>", None]]), ("p", "p & q")])
    assert html.startswith("<!DOCTYPE html>") and "<title>t &lt;1&gt;</title>" in html
    assert (
        "<table><thead><tr><th>a</th><th>b</th></tr></thead><tbody><tr><td>&lt;x&gt;</td><td>\u2013</td></tr>" in html
    )
    assert "<p>p &amp; q</p>" in html and "<script" not in html
    # the shared CSS is inline and the page may fetch nothing and run no script
    assert "border-collapse" in html and "default-src 'none'" in html and "<link" not in html
