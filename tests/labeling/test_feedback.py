"""Feedback joined to the served raw rows: what joins becomes a gold candidate, what does not is listed
with why (unknown, expired, not a raw row), young feedback waits; the nightly split of the gold rows."""

import numpy as np
import pandas as pd

from tasks.datasets import load_dataset
from tasks.labeling.feedback import join_feedback, nightly_feedback
from tasks.registry import Registry
from tasks.serving.predlog import feedback_records, prediction_records
from tasks.serving.requestid import RequestIds, expiry_of
from tests.conftest import row

NOW = 1_000_000.0
IDS = RequestIds(b"k" * 32, ttl_s=3600)


def served(request_id, raws, ts, endpoint="predict", shadow=False):
    recs = prediction_records(request_id, [0.5] * len(raws), "champion", "model-v3", 1.0, shadow, endpoint, raws)
    for r in recs:
        r["ts"] = ts
    return recs


def fed(request_id, labels, ts, who="alice"):
    recs = feedback_records(request_id, labels, who)
    for r in recs:
        r["ts"] = ts
    return recs


def join(records, now=NOW, settle_s=60.0):
    ds = load_dataset()
    return join_feedback(
        records,
        id_column=ds.ID_COLUMN,
        raw_columns=list(ds.RAW_COLUMNS),
        now=now,
        settle_s=settle_s,
        retention_s=3600,
        expiry_of=expiry_of,
    )


def test_feedback_joins_the_raw_row_it_was_served_for_and_the_rest_is_listed_with_why():
    live = IDS.issue(2, now=NOW - 100)
    gone = IDS.issue(1, now=NOW - 7200)  # expired an hour ago: its prediction left the log
    never = IDS.issue(1, now=NOW - 100)  # valid, but no prediction of it in the log
    infer = IDS.issue(1, now=NOW - 100)
    r1, r2 = row(email_id=11), row(email_id=12)
    records = [
        *served(live, [r1, r2], NOW - 100),
        *served(live, [r1, r2], NOW - 100, shadow=True),  # the challenger's shadow records: no second candidate
        *served(infer, [[0.0] * 5], NOW - 100, endpoint="infer"),
        *fed(live, [1, 0], NOW - 90),
        *fed(gone, [1], NOW - 90),
        *fed(never, [0], NOW - 90),
        *fed(infer, [1], NOW - 90),
        *fed(live, [1, 1], NOW - 10),  # 10 s old: waits for the next run
    ]
    candidates, refused, pending = join(records)
    assert [(c["row_id"], c["label"], c["who"], c["served_version"]) for c in candidates] == [
        (11, 1, "alice", "model-v3"),
        (12, 0, "alice", "model-v3"),
    ]
    assert candidates[0]["raw"] == r1 and candidates[0]["source"] == "feedback"
    why = {r["request_id"]: r["reason"] for r in refused}
    assert why[gone].startswith("expired: ") and "retention (1 h)" in why[gone]
    assert why[never].startswith("unknown request id: ")
    assert why[infer].startswith("not a raw row: served through /v2 infer")
    assert len(refused) == 3 and len(pending) == 2  # 2 + 3 + 2 = every one of the 7 feedback records


def test_the_nightly_split_appends_new_train_rows_grows_dev_and_holds_rows_already_trained(settings, emails):
    ds = load_dataset()
    reg = Registry(settings)
    src = emails.drop(columns=[ds.GOLD_COLUMN])
    dev = emails.iloc[:5].reset_index(drop=True)
    test_ids = emails[ds.ID_COLUMN].iloc[5:10]
    served_rows = src.iloc[10:50]  # 40 served rows, then a test row
    raws = [{k: (v.item() if hasattr(v, "item") else v) for k, v in r.items()} for r in served_rows.to_dict("records")]
    rid, tid = IDS.issue(len(raws), now=NOW - 100), IDS.issue(1, now=NOW - 100)
    truth = emails[ds.GOLD_COLUMN].iloc[10:50].tolist()
    test_raw = {k: (v.item() if hasattr(v, "item") else v) for k, v in src.iloc[5].to_dict().items()}
    log = [*served(rid, raws, NOW - 100), *fed(rid, truth, NOW - 90), *served(tid, [test_raw], NOW - 100)]
    log += fed(tid, [1], NOW - 90)
    batch = src.iloc[30:60].reset_index(drop=True)  # this night's batch holds 20 of the served rows

    def night(consumed, records=log):
        return nightly_feedback(
            reg, records, ds, batch, dev, test_ids, consumed=consumed, use=True, dev_fraction=0.3, seed=7,
            now=NOW, settle_s=60, retention_s=3600, expiry_of=expiry_of,
        )  # fmt: skip

    fb = night(None)
    assert fb.report["gold_version"] == "gold-v1" and fb.used_through == "gold-v1"
    assert [r["reason"] for r in fb.report["refused"]] == ["gold, test"]
    assert len(fb.report["accepted"]) == 40
    dev_ids, extra_ids = set(fb.dev[ds.ID_COLUMN]), set(fb.extra[ds.ID_COLUMN])
    assert 0 < len(dev_ids) < 40 and len(dev_ids) + len(fb.extra) + fb.report["batch_rows_gold"] == 40
    assert not dev_ids & extra_ids and not extra_ids & set(batch[ds.ID_COLUMN])  # appended: not in the batch
    gold_in_batch = batch[ds.ID_COLUMN][~np.isnan(fb.batch_gold)]
    want = dict(zip(emails[ds.ID_COLUMN], emails[ds.GOLD_COLUMN]))
    assert all(fb.batch_gold[i] == want[batch[ds.ID_COLUMN][i]] for i in gold_in_batch.index)
    assert set(batch[ds.ID_COLUMN][fb.batch_hold]) == dev_ids & set(batch[ds.ID_COLUMN])  # dev rows never train
    assert (fb.extra[ds.GOLD_COLUMN].to_numpy() == [want[i] for i in fb.extra[ds.ID_COLUMN]]).all()
    # the next night, with gold-v1 trained already: no new version, nothing appended again, and batch
    # rows that trained as feedback gold are held out (they are in the data once)
    fb2 = night("gold-v1")
    assert fb2.report["gold_version"] is None and fb2.extra.empty and np.isnan(fb2.batch_gold).all()
    trained = set(batch[ds.ID_COLUMN]) & (set(want) - dev_ids) & set(served_rows[ds.ID_COLUMN])
    assert set(batch[ds.ID_COLUMN][fb2.batch_hold]) == trained | (dev_ids & set(batch[ds.ID_COLUMN]))
    assert len(fb2.dev) == len(fb.dev)  # the dev share stays in the dev set: it grows, never shrinks
    # not used: still versioned, nothing enters the mix
    off = nightly_feedback(
        reg, log, ds, batch, dev, test_ids, consumed=None, use=False, dev_fraction=0.3, seed=7,
        now=NOW, settle_s=60, retention_s=3600, expiry_of=expiry_of,
    )  # fmt: skip
    assert off.dev.empty and off.extra.empty and not off.batch_hold.any() and off.report["used"] is False
    assert isinstance(off.extra, pd.DataFrame)


def test_feedback_rows_come_in_a_fixed_order_whatever_the_request_ids():
    from tasks.labeling.feedback import feedback_rows

    ds = load_dataset()

    def lab(i, version):
        return {"raw": row(email_id=i), "label": i % 2, "gold_version": version}

    agreed = {"30": lab(30, "gold-v2"), "20": lab(20, "gold-v1"), "10": lab(10, "gold-v2"), "5": lab(5, "gold-v1")}
    rows = feedback_rows(agreed, {"7": []}, ds, dev_fraction=0.0, seed=7, exclude=["30"])
    assert rows.train[ds.ID_COLUMN].tolist() == [20, 5, 10]  # by version, then row id (as text)
    assert rows.dev.empty and rows.conflicted == ["7"]  # the excluded row (a test row) is left out


def test_rows_the_queue_chose_only_train_its_random_share_and_feedback_may_join_dev():
    from tasks.labeling.feedback import feedback_rows

    ds = load_dataset()

    def lab(i, kind=None):
        queue = {"kind": kind, "inclusion": 1.0 if kind == "chosen" else 0.02} if kind else None
        return {"raw": row(email_id=i), "label": i % 2, "gold_version": "gold-v1", "queue": queue}

    kinds = {i: ("chosen", "random", None)[i % 3] for i in range(60)}
    agreed = {str(i): lab(i, k) for i, k in kinds.items()}
    rows = feedback_rows(agreed, {}, ds, dev_fraction=1.0, seed=7)  # every row that may join dev does
    assert sorted(rows.dev[ds.ID_COLUMN]) == [i for i, k in kinds.items() if k != "chosen"]
    assert sorted(rows.train[ds.ID_COLUMN]) == [i for i, k in kinds.items() if k == "chosen"]
    assert "_chosen" not in rows.dev.columns and "_chosen" not in rows.train.columns


def test_feedback_rows_in_a_held_batch_count_as_trained(settings, tmp_path):
    """A rejected model's batch is held with the feedback rows it carried and re-enters with them: the
    next night must not append those rows again."""
    from tasks.labeling.feedback import trained_through
    from tests.registry.test_held import _prod_on_first_batch, _reject
    from tests.registry.test_registry import partition

    reg = Registry(settings)
    _prod_on_first_batch(reg, tmp_path)  # data-v1, before any feedback gold
    assert trained_through(reg) is None
    path, df = partition(tmp_path, "batch-0002", seed=2)
    meta = {"rows_by_batch": {"batch-0002": len(df)}, "feedback_gold_version": "gold-v2"}
    reg.snapshot({"batch-0002": path}, meta)  # data-v2 trained through gold-v2
    assert trained_through(reg) == "gold-v2"
    out = _reject(settings, "run-2", "test ROC AUC 0.61 is below the floor 0.70")
    assert out.current_data == "data-v1" and out.held == ["batch-0002"]
    assert trained_through(reg) == "gold-v2"  # held, re-entering with its rows
    # (the next nightly's data version records what its weak_label step trained through, never less than this)
