"""The labeling queue on a real PostgreSQL server (tests/postgres.py) when SLUICE_DATABASE_URL names one: the
same behaviour as on SQLite (test_queue.py), writers that take turns, concurrent fills that queue a row once;
and a queue.sqlite written by the queue's plain-sqlite3 code (before SQLAlchemy) that keeps opening."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
import time

import pytest

from tasks.core.settings import REPO_ROOT, Settings
from tasks.labeling.queue import QueueError, QueueStore, queue_path
from tasks.registry import Registry
from tests.labeling.test_queue import _items


@pytest.mark.postgres
def test_the_queue_lives_in_postgresql_when_the_database_url_names_one(
    settings, params, emails, postgres_url, monkeypatch
):
    monkeypatch.setenv("SLUICE_DATABASE_URL", postgres_url)
    pg = Settings.from_env()
    items, _ = _items(emails, params)
    store, reg = QueueStore.open(pg), Registry(pg)
    assert store.url == postgres_url and store.path is None
    assert store.next_item("alice") is None and store.counts()["items"] == 0  # an empty queue, created on first use
    assert store.add_items("night-1", items) == 6 and store.add_items("night-1", items) == 0  # a retry adds none
    assert store.row_ids() == {it["row_id"] for it in items} and store.row_ids(but_run="night-1") == set()
    first = store.next_item("alice")
    assert first["rank"] == 0 and first["raw"] == items[0]["raw"] and first["weight"] == 1 / items[0]["inclusion"]

    r = store.record_label(reg, first["id"], 1, who="alice", classes=(0, 1))
    assert r["gold_version"] == "gold-v1" and r["message"] == f"item {first['id']} labeled 1: gold-v1"
    r = store.record_label(reg, first["id"], 0, who="bob", classes=(0, 1))
    assert r["conflict"] and r["message"].startswith("conflict: alice labeled it 1 (gold-v1)")
    assert store.counts("bob") == {"items": 6, "labeled": 1, "conflicted": 1, "yours": 1}
    assert not store.record_label(reg, first["id"], 1, who="alice", classes=(0, 1))["recorded"]  # the same click
    with pytest.raises(QueueError, match="undo that label"):
        store.record_label(reg, first["id"], 0, who="alice", classes=(0, 1))

    second = store.next_item("alice")
    assert store.skip(second["id"], who="alice")["message"] == f"item {second['id']} skipped"
    assert store.next_item("alice")["id"] != second["id"] and store.next_item("bob")["id"] == second["id"]
    assert store.undo(reg, who="alice", trained_through=None)["message"].endswith("skip undone")
    assert store.undo(reg, who="bob", trained_through=None)["gold_version"] == "gold-v3"
    assert [lab["who"] for lab in reg.gold_labels()] == ["alice"] and store.counts()["conflicted"] == 0
    assert [a["who"] for a in QueueStore.open(pg).answers(first["id"])] == ["alice", "bob"]  # reopened: all kept
    assert not queue_path(pg.layout).exists()  # no SQLite file under SLUICE_HOME


@pytest.mark.postgres
def test_writers_take_turns_on_postgresql(settings, params, emails, postgres_url):
    """SQLite's BEGIN IMMEDIATE, on PostgreSQL: a write waits for the one in progress (so a read-then-write such as
    "has this person labeled this item already?" is never raced by a second click)."""
    items, _ = _items(emails, params, n=2)
    store = QueueStore.open(postgres_url)
    store.add_items("night-1", items)
    done = threading.Event()
    with store._db(write=True):
        t = threading.Thread(target=lambda: (QueueStore.open(postgres_url).skip(1, who="bob"), done.set()))
        t.start()
        time.sleep(1.0)
        assert not done.is_set()  # waiting for the open write transaction
    t.join(30)
    assert done.is_set() and [a["who"] for a in store.answers()] == ["bob"]


FILLER = """
import json, sys
from tasks.labeling.queue import QueueStore
url, items = sys.argv[1], json.loads(sys.stdin.read())
print(sum(QueueStore.open(url).add_items("night-1", items) for _ in range(3)))
"""


@pytest.mark.postgres
def test_concurrent_fills_queue_each_row_once(settings, params, emails, postgres_url):
    import json

    items, _ = _items(emails, params, n=6)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", FILLER, postgres_url],
            cwd=REPO_ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for _ in range(4)
    ]
    added = [int(p.communicate(json.dumps(items), timeout=120)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert sum(added) == 6 and QueueStore.open(postgres_url).counts()["items"] == 6


OLD_SCHEMA = """
CREATE TABLE IF NOT EXISTS items (
    id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL, row_id TEXT NOT NULL, raw TEXT NOT NULL,
    lf_votes TEXT NOT NULL, label_prob REAL, model_score REAL, score REAL NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('chosen', 'random')),
    inclusion REAL NOT NULL CHECK (inclusion > 0 AND inclusion <= 1), rank INTEGER NOT NULL,
    created_at TEXT NOT NULL, UNIQUE (run_id, row_id)
);
CREATE TABLE IF NOT EXISTS answers (
    id INTEGER PRIMARY KEY AUTOINCREMENT, item_id INTEGER NOT NULL REFERENCES items (id),
    action TEXT NOT NULL CHECK (action IN ('label', 'skip')), label INTEGER, who TEXT NOT NULL, at TEXT NOT NULL,
    request_id TEXT, gold_version TEXT, undone_at TEXT, undone_by TEXT, undone_version TEXT
);
CREATE INDEX IF NOT EXISTS answers_item ON answers (item_id);
"""


def test_a_queue_sqlite_from_the_sqlite3_code_keeps_opening(settings, params, emails):
    """The schema of the queue before SQLAlchemy (copied here as it was): its rows read, and new ones go in."""
    items, _ = _items(emails, params, n=2)
    path = queue_path(settings.layout)
    path.parent.mkdir(parents=True)
    with sqlite3.connect(path) as db:
        db.executescript(OLD_SCHEMA)
        db.execute(
            "INSERT INTO items (run_id, row_id, raw, lf_votes, label_prob, model_score, score, kind, inclusion, rank, "
            "created_at) VALUES ('night-0', 'r0', ?, ?, 0.5, NULL, 1.0, 'chosen', 0.5, 0, '2026-01-01T00:00:00+00:00')",
            ('{"a": 1}', '{"lf": 1}'),
        )
        db.execute("INSERT INTO answers (item_id, action, who, at) VALUES (1, 'skip', 'alice', 'then')")
    store = QueueStore.open(settings)
    assert store.path == path
    old = store.item(1)
    assert (old["raw"], old["lf_votes"], old["weight"], old["labels"]) == ({"a": 1}, {"lf": 1}, 2.0, [])
    assert store.next_item("alice") is None and store.next_item("bob")["id"] == 1
    assert store.add_items("night-1", items) == 2 and store.counts()["items"] == 3
    assert store.skip(2, who="bob")["item_id"] == 2 and [a["id"] for a in store.answers()] == [1, 2]
