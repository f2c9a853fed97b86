"""The platform's generic code never names a dataset: each plug-in's words (its name, its gold column,
its class names) appear only in its own folder, tasks/plugins/<name>/. A word that is also plain English
(reviews' classes "other" and "great") is not searched; every exception below says why it must stay."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tasks.core.settings import REPO_ROOT
from tasks.datasets import class_names, load_dataset
from tests.docs.test_pages import plugin_folders  # noqa: E402

PLUGINS = sorted(plugin_folders()[0])  # the dataset plug-ins
PLAIN_ENGLISH = {"other", "great"}  # reviews' classes; "great" is also Great Expectations
GENERIC = [REPO_ROOT / "tasks", REPO_ROOT / "dags", REPO_ROOT / "plugins"]
SUFFIXES = {".py", ".html", ".j2", ".json", ".yaml", ".css", ".js"}
# (file, word): why the word must stay there
ALLOWED = {
    ("tasks/core/moved.py", "emails"): "MOVED maps the old module paths of plug-ins that moved",
    ("tasks/core/moved.py", "reviews"): "MOVED maps the old module paths of plug-ins that moved",
    ("tasks/labeling/drift.py", "spam"): "the key of class 1's share in data versions recorded before class_shares",
    ("tasks/plugins/mlp/__init__.py", "spam"): "the MLP's binary output name p_spam, which served clients rely on",
}


def words_of(plugin: str) -> set[str]:
    ds = load_dataset(f"tasks.plugins.{plugin}")
    return {w.lower() for w in (ds.NAME, ds.GOLD_COLUMN, *class_names(ds))} - PLAIN_ENGLISH


def generic_files() -> list[Path]:
    files = []
    for root in GENERIC:
        for path in root.rglob("*"):
            rel = path.relative_to(REPO_ROOT)
            if path.is_file() and path.suffix in SUFFIXES and rel.parts[:2] != ("tasks", "plugins"):
                if "__pycache__" not in rel.parts:
                    files.append(path)
    return sorted(files)


def dataset_words_in(path: Path, words: set[str]) -> list[tuple[str, int, str]]:
    """(word, line number, line) for each dataset word in the file, as a word of letters."""
    pattern = re.compile(r"(?<![A-Za-z])(" + "|".join(map(re.escape, sorted(words))) + r")(?![A-Za-z])", re.I)
    hits = []
    for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        hits += [(m.group(1).lower(), number, line.strip()) for m in pattern.finditer(line)]
    return hits


def test_the_plugins_are_found():
    assert {"emails", "reviews"} <= set(PLUGINS)
    assert {"emails", "spam", "ham", "reviews"} <= set().union(*map(words_of, PLUGINS))


@pytest.mark.parametrize("plugin", PLUGINS)
def test_no_dataset_word_in_generic_code(plugin):
    words = words_of(plugin)
    found = []
    for path in generic_files():
        rel = str(path.relative_to(REPO_ROOT))
        found += [
            f"{rel}:{n}: {w!r} in {line}" for w, n, line in dataset_words_in(path, words) if (rel, w) not in ALLOWED
        ]
    assert not found, f"{plugin}'s words in generic code (move them into tasks/plugins/{plugin}/):\n" + "\n".join(found)


def test_every_exception_is_still_needed():
    """An exception whose word left its file is removed here too, so the list never hides a new one."""
    words = set().union(*map(words_of, PLUGINS))
    for rel, word in ALLOWED:
        assert any(w == word for w, _, _ in dataset_words_in(REPO_ROOT / rel, words)), (rel, word)


def test_the_check_finds_a_planted_word(tmp_path):
    planted = tmp_path / "generic.py"
    planted.write_text('SHARE = "spam_share"  # a dataset word inside a name\nOK = "hamper"\n')
    assert [w for w, _, _ in dataset_words_in(planted, words_of("emails"))] == ["spam"]
