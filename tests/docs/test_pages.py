"""The documentation: a short README, links that resolve, generated pages that match their sources,
and no figure in the README that the committed benchmark results do not hold."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bench import readme as bench_readme
from bench.record import Record, load_results, merge_records
from ops import settings_doc

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = [README, ROOT / "bench" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 200
# Numbers in the README that are not measurements (versions).
NOT_FIGURES = {"3.11"}

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
# A measured-looking figure: a decimal, a percentage or a multiplier (127.0.0.1 and 1.2.3 are not).
FIGURE = re.compile(r"(?<![\w.])[-+]?\d+(?:,\d{3})*(?:\.\d+)?(?:%|x\b)(?![\w.])|(?<![\w.])[-+]?\d+\.\d+(?![\w.])")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped (but - and _), spaces -> '-'."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text())
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.*)$", text, re.M)}


def relative_links(page: Path) -> list[str]:
    text = FENCE.sub("", page.read_text())
    targets = [a or b for a, b in LINK.findall(text)]
    return [t for t in targets if not re.match(r"^[a-z][a-z0-9+.-]*:", t)]  # http:, https:, mailto:


def broken_links(page: Path, root: Path = ROOT) -> list[str]:
    out = []
    for target in relative_links(page):
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            out.append(f"{page.relative_to(root)}: {target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            out.append(f"{page.relative_to(root)}: {target} (no heading with that anchor)")
    return out


def figures(text: str) -> list[str]:
    """The figures a page shows, code blocks included, less the numbers that are not measurements."""
    return [f for f in FIGURE.findall(text) if f not in NOT_FIGURES]


def unbacked_figures(text: str, entries: list[dict]) -> list[str]:
    """Figures in `text` that are no entry's value as bench/README.md shows it."""
    known = {bench_readme.fmt(float(e["value"])) for e in entries}
    return [f for f in figures(text) if f.rstrip("%x").lstrip("+") not in known]


def test_readme_is_short():
    lines = README.read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines, at most {README_MAX_LINES}"


def test_the_readme_keeps_the_two_commands_and_the_screenshot():
    text = README.read_text()
    assert "make run" in text and "make test" in text
    assert "docs/img/sluice-page.png" in text and (ROOT / "docs" / "img" / "sluice-page.png").exists()


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    assert broken_links(page) == []


def test_the_link_check_sees_a_broken_link_and_a_missing_anchor(tmp_path):
    (tmp_path / "b.md").write_text("# Title\n\n## Some `code` here\n")
    page = tmp_path / "a.md"
    page.write_text(
        "[ok](b.md#some-code-here) [web](https://example.org/x) [gone](missing.md) [bad](b.md#nope)\n"
        "```\n[in a code block](ignored.md)\n```\n"
    )
    assert broken_links(page, tmp_path) == [
        "a.md: missing.md (no such file)",
        "a.md: b.md#nope (no heading with that anchor)",
    ]


def test_bench_readme_matches_the_results_file():
    assert bench_readme.check() == []


def test_the_bench_check_names_what_differs(tmp_path):
    results, page = tmp_path / "results.json", tmp_path / "README.md"
    entries = merge_records([], [Record("a_ratio", 0.5, "ratio", "<= 1")], module="bench.a", measured="2026-12-02")
    results.write_text(json.dumps(entries))
    page.write_text(bench_readme.render(entries))
    assert bench_readme.check(results, page) == []
    page.write_text(bench_readme.render(entries).replace("| 0.5 |", "| 0.4 |"))
    errors = bench_readme.check(results, page)
    assert errors and "does not match" in errors[0] and any("0.4" in e for e in errors[1:])
    entries[0]["passed"] = False  # hand-edited: the goal says otherwise
    results.write_text(json.dumps(entries))
    assert bench_readme.check(results, page) == ["results.json: a_ratio: passed is False but 0.5 <= 1 is True"]


def test_the_bench_page_shows_missed_goals_plainly():
    entries = load_results()
    page = bench_readme.render(entries)
    missed = [e["name"] for e in entries if not e["passed"]]
    section = page.split("## Goals missed", 1)[1].split("\n## ", 1)[0] if missed else ""
    assert all(f"`{name}`" in section for name in missed)


def test_a_new_record_replaces_its_entry_by_name_and_keeps_what_it_measures():
    old = merge_records(
        [], [Record("x", 1.0, "s", "<= 2"), Record("y", 3.0, "s", "<= 2")], module="bench.m", measured="2026-01-01"
    )
    old[0]["measures"] = "seconds to do x"
    new = merge_records(old, [Record("x", 2.5, "s", "<= 2", {"runs": 3})], module="bench.m", measured="2026-02-02")
    assert [e["name"] for e in new] == ["x", "y"]
    assert new[0] | {"notes": ""} == {
        "name": "x",
        "module": "bench.m",
        "value": 2.5,
        "unit": "s",
        "goal": "<= 2",
        "passed": False,
        "measured": "2026-02-02",
        "source": "python -m bench",
        "measures": "seconds to do x",
        "notes": "",
        "details": {"runs": 3},
    }
    assert new[1] == old[1]


def test_settings_page_matches_the_settings_fields():
    assert settings_doc.check() == []


def test_the_settings_page_has_every_field():
    page = settings_doc.render()
    from tasks.core.settings import Settings

    for name in Settings.model_fields:
        assert f"`SLUICE_{name.upper()}`" in page


def test_readme_figures_come_from_the_results_file():
    assert unbacked_figures(README.read_text(), load_results()) == []


def test_the_figure_check_sees_a_figure_the_file_lacks():
    entries = [{"value": 0.741}, {"value": 313.0}]
    text = "Python 3.11 on 127.0.0.1: 0.741 and 313x, but 0.75 and 12% are not measured here"
    assert figures(text) == ["0.741", "313x", "0.75", "12%"]
    assert unbacked_figures(text, entries) == ["0.75", "12%"]


def test_the_scenario_table_matches_the_matrix():
    from tasks.core.files import stale_page
    from tests.e2e.scenarios import PAGE, page_with_table

    want = page_with_table(PAGE.read_text())
    assert not stale_page(PAGE, want, "tests/e2e/scenarios.py", "python -m tests.e2e.scenarios")


def architecture_claims(page: str) -> tuple[set[str], set[str], set[str]]:
    """docs/architecture.md's layout block: the steps it lists under `tasks/<step>.py`, and the dataset
    and model plug-ins named on its `tasks/plugins/<name>/` lines."""
    block = page.split("tasks/<step>.py", 1)[1].split("thin:", 1)[0]
    steps = set(re.findall(r"[a-z_]+", block.split("\n", 1)[1]))
    named = {
        kind: re.search(rf"{kind} \(([^)]*)\)", page.split("tasks/plugins/<name>/", 1)[-1])
        for kind in ("Datasets", "Models")
    }
    datasets, models = ({*re.findall(r"[a-z_]+", m.group(1))} if m else set() for m in named.values())
    return steps, datasets, models


def plugin_folders() -> tuple[set[str], set[str]]:
    """The dataset and the model plug-ins in tasks/plugins/ (a dataset module has a GOLD_COLUMN)."""
    import importlib

    names = [p.parent.name for p in (ROOT / "tasks" / "plugins").glob("*/__init__.py")]
    datasets = {n for n in names if hasattr(importlib.import_module(f"tasks.plugins.{n}"), "GOLD_COLUMN")}
    return datasets, set(names) - datasets


def test_the_architecture_page_lists_every_step_and_plugin_the_code_has():
    """The steps are the modules in tasks/ that declare one with @step; the plug-ins, the folders in
    tasks/plugins/, datasets and models apart."""
    steps = {p.stem for p in (ROOT / "tasks").glob("*.py") if re.search(r"^@step\b", p.read_text(), re.M)}
    datasets, models = plugin_folders()
    listed_steps, listed_datasets, listed_models = architecture_claims((ROOT / "docs" / "architecture.md").read_text())
    assert len(steps) > 20 and listed_steps == steps, (sorted(steps - listed_steps), sorted(listed_steps - steps))
    assert datasets and listed_datasets == datasets, (sorted(datasets), sorted(listed_datasets))
    assert models and listed_models == models, (sorted(models), sorted(listed_models))
    # the check can fail: a page that leaves a step out
    page = "tasks/<step>.py  x\n  ingest train\n  thin: y\ntasks/plugins/<name>/  Datasets (emails): x. Models (mlp): y"
    assert architecture_claims(page) == ({"ingest", "train"}, {"emails"}, {"mlp"})
