"""The labeling queue (tasks/labeling/queue.py) on a real registry: a label is gold with who and when,
two people's different labels are both kept (the conflict shown), skip and undo; then the nightly's
fill_queue step fills it from a real batch, and the next night's weak_label trains on its labels."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from tasks.core.context import StepContext
from tasks.datasets import load_dataset
from tasks.labeling.feedback import trained_through
from tasks.labeling.queue import QueueError, QueueStore, build_items
from tasks.registry import Registry


def _items(emails, params, n=6):
    ds = load_dataset()
    batch = emails.head(40).drop(columns=[ds.GOLD_COLUMN]).reset_index(drop=True)
    rng = np.random.default_rng(0)
    L = rng.choice([-1, 0, 1], size=(len(batch), 4))
    prob = rng.random(len(batch))
    items, account = build_items(
        batch, L, ["a", "b", "c", "d"], prob, None, ds.featurize(batch), id_column=ds.ID_COLUMN,
        raw_columns=list(ds.RAW_COLUMNS), params=params.queue.replace(k=n, random_share=0.5), seed=1,
        eligible=np.ones(len(batch), bool),
    )  # fmt: skip
    return items, account


def test_labels_are_gold_with_who_and_when_conflicts_kept_skip_and_undo(settings, params, emails):
    items, account = _items(emails, params)
    assert (account["chosen"], account["random"], account["signals"]) == (3, 3, ["conflict", "entropy"])
    assert [it["kind"] for it in items] == ["chosen", "random", "chosen", "random", "chosen", "random"]
    store, reg = QueueStore.open(settings.layout), Registry(settings)
    assert store.add_items("night-1", items) == 6 and store.add_items("night-1", items) == 0  # a retry adds none
    first = store.next_item("alice")
    assert first["rank"] == 0 and first["lf_votes"] == items[0]["lf_votes"] and first["raw"] == items[0]["raw"]

    r = store.record_label(reg, first["id"], 1, who="alice", classes=(0, 1))
    assert r["gold_version"] == "gold-v1" and not r["conflict"] and r["message"] == "item 1 labeled 1: gold-v1"
    (gold,) = reg.gold_labels()
    assert (gold["source"], gold["who"], gold["label"], gold["row_id"]) == ("queue", "alice", 1, first["row_id"])
    assert gold["at"] and gold["raw"] == first["raw"] and gold["queue"]["kind"] == "chosen"
    audit = json.loads((reg.root / "audit.jsonl").read_text().splitlines()[-1])
    assert (audit["action"], audit["who"], audit["gold_version"]) == ("gold", "alice", "gold-v1")
    assert store.next_item("bob")["id"] == 2  # a labeled item leaves the queue for everyone

    # bob labels the same item (say, by the REST endpoint) the other way: both kept, the conflict named
    r = store.record_label(reg, first["id"], 0, who="bob", classes=(0, 1))
    assert r["conflict"] and r["gold_version"] == "gold-v2"
    assert r["message"].startswith("conflict: alice labeled it 1 (gold-v1); your label 0 is kept beside it")
    assert [x["who"] for x in r["item"]["labels"]] == ["alice", "bob"] and r["item"]["conflict"]
    agreed, conflicted = reg.gold_rows()
    assert first["row_id"] not in agreed and len(conflicted[first["row_id"]]) == 2  # trains nowhere
    assert store.counts("bob") == {"items": 6, "labeled": 1, "conflicted": 1, "yours": 1}

    # refused, nothing written: outside the classes, an unknown item, alice changing her own label
    versions = reg.gold_versions()
    for call, why in (
        (lambda: store.record_label(reg, 2, 3, who="alice", classes=(0, 1)), "outside the classes"),
        (lambda: store.record_label(reg, 99, 1, who="alice", classes=(0, 1)), "does not exist"),
        (lambda: store.record_label(reg, first["id"], 0, who="alice", classes=(0, 1)), "undo that label"),
    ):
        with pytest.raises(QueueError, match=why):
            call()
    assert reg.gold_versions() == versions and len(store.answers()) == 2
    again = store.record_label(reg, first["id"], 1, who="alice", classes=(0, 1))  # the same click twice
    assert not again["recorded"] and again["message"].startswith("already recorded")

    # skip, undo the skip: the item is back; undo a label: retracted in a new gold version, audited
    assert store.skip(2, who="alice")["message"] == "item 2 skipped"
    assert store.next_item("alice")["id"] == 3 and store.next_item("bob")["id"] == 2
    assert store.undo(reg, who="alice", trained_through=None)["message"] == "item 2: skip undone"
    assert store.next_item("alice")["id"] == 2
    u = store.undo(reg, who="bob", trained_through=None)
    assert u["message"] == "item 1: label 0 retracted (gold-v3)"
    assert [lab["who"] for lab in reg.gold_labels()] == ["alice"]  # bob's label left out from gold-v3 on
    assert [lab["who"] for lab in reg.gold_labels("gold-v2")] == ["alice", "bob"]  # nothing deleted
    (gone,) = reg.gold_retracted()
    assert (gone["labeled_by"], gone["who"], gone["reason"]) == ("bob", "bob", "undo in the labeling queue")
    assert first["row_id"] in reg.gold_rows()[0]  # no conflict any more
    with pytest.raises(QueueError, match="has trained already"):
        store.undo(reg, who="alice", trained_through="gold-v1")  # in a data version: cannot be undone
    with pytest.raises(QueueError, match="nothing to undo"):
        store.undo(reg, who="carol", trained_through=None)


def test_a_failed_gold_write_leaves_no_answer(settings, params, emails):
    """The queue's answer and the gold version are one unit: the registry refusing the write (here a gold
    test row) leaves no answer behind, and the refusal is recorded by the gold store with its reason."""
    items, _ = _items(emails, params, n=2)
    store, reg = QueueStore.open(settings.layout), Registry(settings)
    store.add_items("night-1", items)
    item = store.next_item("alice")
    with pytest.raises(QueueError, match="gold, test"):
        store.record_label(reg, item["id"], 1, who="alice", classes=(0, 1), test_ids=[item["row_id"]])
    assert store.answers() == [] and reg.gold_labels() == []
    assert [r["reason"] for r in reg.gold_refused()] == ["gold, test"]
    assert store.next_item("alice")["id"] == item["id"]


@pytest.mark.slow
def test_fill_queue_from_a_real_night_and_ten_labels_train_the_next(settings, params, emails, tmp_path):
    from tasks.datasets.demo_feed import DemoFeed
    from tasks.fill_queue import fill_queue
    from tasks.ingest import ingest
    from tasks.weak_label import weak_label
    from tests.helpers.server import write_onnx

    ds = load_dataset()
    reg = Registry(settings)
    onnx = write_onnx(tmp_path / "m1" / "model.int8.onnx", len(ds.FEATURE_NAMES), seed=1)
    reg.register_model("run-0", {"model.int8.onnx": onnx}, {"data_version": "data-v1"})
    reg.promote("model-v1", "test")  # a prod model: the uncertainty signal is used
    DemoFeed(settings.layout, params.demo, ds).ensure_gold()
    changes = {"weak_label": {"weak_weight": 0.5}, "queue": {"k": 30, "random_share": 0.2}}
    ctx = StepContext.create("night-1", settings, changes)
    ing = ingest(ctx)
    wl1 = weak_label(ctx, ingest=ing)
    rec = fill_queue(ctx, ingest=ing, weak_label=wl1)
    assert (rec.added, rec.chosen, rec.random, rec.model_version) == (30, 24, 6, "model-v1")
    assert rec.signals == ["conflict", "entropy", "uncertainty"]
    assert rec.random_inclusion == pytest.approx(6 / (rec.eligible - 24))
    assert rec.mean_score_chosen > rec.mean_score_batch  # the rule picks the uncertain rows
    from tasks.core.context import load_records
    from tasks.reports.run_summary import build_summary, render_text

    summary = build_summary("night-1", load_records(ctx.run_dir), reg.state(), [])
    assert "  labeling queue 30 row(s) queued: 24 chosen by conflict+entropy+uncertainty, 6 at random" in (
        render_text(summary)
    )
    store = QueueStore.open(settings.layout)
    test_ids = set(pd.read_parquet(settings.layout.gold / "test.parquet")[ds.ID_COLUMN])
    item = store.next_item("alice")
    assert item["model_score"] is not None and 0 <= item["label_prob"] <= 1 and item["row_id"] not in test_ids

    truth = emails.set_index(emails[ds.ID_COLUMN].astype(str))[ds.GOLD_COLUMN]
    given = {}
    for _ in range(10):
        item = store.next_item("alice")
        given[item["row_id"]] = int(truth[item["row_id"]])
        store.record_label(reg, item["id"], given[item["row_id"]], who="alice", classes=(0, 1), test_ids=test_ids)
    assert [lab["source"] for lab in reg.gold_labels()] == ["queue"] * 10 and trained_through(reg) is None
    # a retried fill_queue (say, killed after the queue's commit) chooses the same rows: none added
    again = fill_queue(ctx, ingest=ing, weak_label=wl1)
    assert (again.added, again.chosen, again.random) == (0, 24, 6) and store.counts()["items"] == 30

    ctx2 = StepContext.create("night-2", settings, changes)
    ing2 = ingest(ctx2)
    wl = weak_label(ctx2, ingest=ing2)
    report = json.loads((ctx2.run_dir / "feedback_gold.json").read_text())
    assert report["used_through"] == "gold-v10" and wl.feedback_gold_version == "gold-v10"
    assert report["dev_rows"] + report["batch_rows_gold"] + report["appended_rows"] == 10
    kinds = {lab["row_id"]: lab["queue"]["kind"] for lab in reg.gold_labels()}
    assert set(kinds.values()) == {"chosen", "random"} and report["dev_rows"] <= list(kinds.values()).count("random")
    labeled = pd.read_parquet(wl.labeled)
    ids = labeled[ds.ID_COLUMN].astype(str)
    trains = labeled[ids.isin(given) & (labeled["label_source"] == "gold")]
    assert len(trains) == 10 - report["dev_rows"] > 0
    assert all(int(r["label"]) == given[str(r[ds.ID_COLUMN])] for _, r in trains.iterrows())
    assert (trains["label_weight"] == 1).all()
    assert {i for i, k in kinds.items() if k == "chosen"} <= set(trains[ds.ID_COLUMN].astype(str))  # they only train
    rec2 = fill_queue(ctx2, ingest=ing2, weak_label=wl)  # the labeled rows, and every row queued, never again
    with store._db() as db:
        queued = [r[0] for r in db.exec_driver_sql("SELECT row_id FROM items")]
    assert len(queued) == len(set(queued)) == 30 + rec2.added


def test_what_a_kill_between_the_queue_and_the_gold_store_leaves_is_settled(settings, params, emails):
    """The two states a kill can leave between the queue's answer (written pending first) and its gold
    version: the gold version made but the answer not told (it gets the version), or the answer pending
    with no gold version (it goes). And an undo cut off after its retraction committed."""
    items, _ = _items(emails, params, n=4)
    store, reg = QueueStore.open(settings.layout), Registry(settings)
    store.add_items("night-1", items)
    one = store.next_item("alice")
    pending = "INSERT INTO answers (item_id, action, label, who, at, request_id) VALUES (?, 'label', ?, ?, 'then', ?)"
    with store._db(write=True) as db:  # killed after the gold version was made, before the answer named it
        db.exec_driver_sql(pending, (one["id"], 1, "alice", "queue-1-dead0001"))
    two = store.next_item("bob")
    with store._db(write=True) as db:  # killed before the gold write
        db.exec_driver_sql(pending, (two["id"], 0, "bob", "queue-2-dead0002"))
    lost = {"row_id": one["row_id"], "label": 1, "who": "alice", "at": "then", "ts": 1.0, "row": 0,
            "request_id": "queue-1-dead0001", "source": "queue", "raw": one["raw"]}  # fmt: skip
    made = reg.add_gold([lost], classes=(0, 1), test_ids=[], who="alice")["accepted"][0]["gold_version"]
    assert store.counts()["labeled"] == 2  # pending answers count until settled

    r = store.record_label(reg, 3, 0, who="carol", classes=(0, 1))  # any next write settles first
    assert r["gold_version"] == "gold-v2"
    by_request = {a["request_id"]: a for a in store.answers()}
    assert by_request["queue-1-dead0001"]["gold_version"] == made == "gold-v1"
    assert "queue-2-dead0002" not in by_request and store.next_item("bob")["id"] == two["id"]  # back in the queue
    assert all(a["gold_version"] for a in store.answers())

    # carol's undo: the retraction commits, then the process dies before the answer says so
    (live,) = [a for a in store.answers() if a["who"] == "carol"]
    gone = reg.retract_gold([live["request_id"]], who="carol", reason="undo in the labeling queue")["gold_version"]
    u = store.undo(reg, who="carol", trained_through=None)
    assert u["gold_version"] == gone and reg.gold_versions()[-1] == gone  # found, not retracted twice
    assert [a["undone_version"] for a in store.answers() if a["who"] == "carol"] == [gone]


def test_a_label_whose_mirror_push_fails_is_recorded_and_says_so(settings, params, emails, tmp_path, monkeypatch):
    """SLUICE_REGISTRY_GIT_REMOTE unreachable: the gold version is committed (the mirror push comes after the
    commit; the next write pushes again), so the answer is recorded with it, and the message says so."""
    from tasks.core.settings import Settings

    items, _ = _items(emails, params, n=2)
    store = QueueStore.open(settings.layout)
    store.add_items("night-1", items)
    Registry(settings).ensure()
    broken = Settings.from_env(
        {"SLUICE_HOME": str(settings.home), "SLUICE_REGISTRY_GIT_REMOTE": str(tmp_path / "gone.git")}
    )
    reg = Registry(broken)
    r = store.record_label(reg, 1, 1, who="alice", classes=(0, 1))
    assert r["recorded"] and r["gold_version"] == "gold-v1" and "git mirror was not reached" in r["message"]
    assert [(a["who"], a["gold_version"]) for a in store.answers()] == [("alice", "gold-v1")]
    u = store.undo(reg, who="alice", trained_through=None)
    assert u["gold_version"] == "gold-v2" and reg.gold_labels() == []
