"""The gold store: feedback labels become gold-vN versions; test rows, bad labels and repeats are refused
with a reason; a contradicting label is kept and flagged; a killed transaction leaves nothing."""

import json
import os
import subprocess
import sys

from tasks.core.settings import REPO_ROOT
from tasks.registry import TEST_REFUSAL, Registry


def cand(row_id, label, ts, request_id=None, who="ops@example.com"):
    return {
        "row_id": row_id,
        "label": label,
        "who": who,
        "at": f"t{ts}",
        "ts": ts,
        "request_id": request_id or f"req-{row_id}-{ts}",
        "row": 0,
        "served_version": "model-v1",
        "replica": "r0",
        "raw": {"email_id": row_id, "num_char": 1.5},
    }


def test_feedback_labels_become_a_tagged_gold_version_with_source_who_and_when(settings):
    reg = Registry(settings)
    out = reg.add_gold([cand(1, 1, 10.0), cand(2, 0, 11.0)], classes=(0, 1), test_ids=[99])
    assert out["gold_version"] == "gold-v1" and out["refused"] == [] and out["conflicts"] == []
    assert reg.gold_versions() == ["gold-v1"]
    labels = reg.gold_labels()
    assert [(lab["row_id"], lab["label"], lab["source"], lab["who"]) for lab in labels] == [
        (1, 1, "feedback", "ops@example.com"),
        (2, 0, "feedback", "ops@example.com"),
    ]
    assert labels[0]["raw"] == {"email_id": 1, "num_char": 1.5} and labels[0]["at"] == "t10.0"
    assert reg.gold_version_info("gold-v1")["accepted"] == 2
    # a second version adds; the first stays as it was, at its tag
    reg.add_gold([cand(3, 1, 12.0)], classes=(0, 1), test_ids=[])
    assert reg.gold_versions() == ["gold-v1", "gold-v2"]
    assert len(reg.gold_labels("gold-v1")) == 2 and len(reg.gold_labels()) == 3
    agreed, conflicted = reg.gold_rows()
    assert sorted(agreed) == ["1", "2", "3"] and conflicted == {}
    audit = [json.loads(line) for line in (reg.root / "audit.jsonl").read_text().splitlines()]
    assert [a["gold_version"] for a in audit if a["action"] == "gold"] == ["gold-v1", "gold-v2"]
    # data versions are untouched: gold tags are their own series
    assert reg.tags("data") == [] and reg.state()["current_data"] is None


def test_test_rows_and_bad_labels_are_refused_with_a_reason_and_recorded(settings):
    reg = Registry(settings)
    out = reg.add_gold(
        [cand(1, 1, 1.0), cand(7, 0, 2.0), cand(2, 2, 3.0), cand(3, True, 4.0), cand(None, 1, 5.0)],
        classes=(0, 1),
        test_ids=["7"],  # ids compare as text: the test parquet's int 7 and a served "7" are one row
        refused=[{"request_id": "gone", "row": 0, "ts": 0.5, "label": 1, "reason": "expired: ..."}],
    )
    reasons = {r.get("row_id"): r["reason"] for r in out["refused"] if "row_id" in r}
    assert reasons[7] == TEST_REFUSAL
    assert reasons[2] == "label 2 is outside the classes [0, 1]"
    assert reasons[3] == "label True is outside the classes [0, 1]"
    assert reasons[None].startswith("no row id")
    assert [lab["row_id"] for lab in out["accepted"]] == [1]  # every candidate is accepted or refused
    assert len(out["refused"]) == 5
    recorded = reg.gold_refused()
    assert len(recorded) == 5 and {r["reason"] for r in recorded} >= {TEST_REFUSAL, "expired: ..."}
    assert all("raw" not in r for r in recorded)  # a refused row's raw data is not kept
    assert reg.gold_version_info("gold-v1")["refused_by_reason"][TEST_REFUSAL] == 1
    agreed, _ = reg.gold_rows()
    assert list(agreed) == ["1"]  # the test row is not gold anywhere


def test_a_contradicting_label_is_kept_and_flagged_never_overwriting(settings):
    reg = Registry(settings)
    reg.add_gold([cand(5, 1, 1.0)], classes=(0, 1), test_ids=[])
    out = reg.add_gold([cand(5, 0, 2.0, who="someone-else"), cand(6, 1, 3.0)], classes=(0, 1), test_ids=[])
    (conflict,) = out["conflicts"]
    assert conflict["row_id"] == 5 and conflict["label"] == 0 and conflict["conflict"] is True
    assert conflict["conflicts_with"][0]["label"] == 1 and conflict["conflicts_with"][0]["gold_version"] == "gold-v1"
    # both labels are in the store, the first as it was
    assert [(lab["label"], lab["gold_version"]) for lab in reg.gold_labels() if lab["row_id"] == 5] == [
        (1, "gold-v1"),
        (0, "gold-v2"),
    ]
    agreed, conflicted = reg.gold_rows()
    assert sorted(agreed) == ["6"] and [lab["label"] for lab in conflicted["5"]] == [1, 0]
    assert reg.gold_version_info("gold-v2")["conflicts"][0]["row_id"] == 5
    # a label contradicting a gold label held elsewhere (the dev set) is flagged too; an agreeing one is not
    out = reg.add_gold([cand(8, 1, 4.0), cand(9, 0, 5.0)], classes=(0, 1), test_ids=[], known={"8": 0, "9": 0})
    assert [c["row_id"] for c in out["conflicts"]] == [8]
    assert out["conflicts"][0]["conflicts_with"] == [{"label": 0, "gold_version": None, "source": "gold dev set"}]


def test_the_same_feedback_read_again_is_not_added_twice(settings):
    reg = Registry(settings)
    first = [cand(1, 1, 1.0)]
    bad = {"request_id": "x", "row": 0, "ts": 2.0, "label": 1, "reason": "unknown request id: ..."}
    reg.add_gold(first, classes=(0, 1), test_ids=[], refused=[bad])
    out = reg.add_gold(first, classes=(0, 1), test_ids=[], refused=[bad])
    assert out == {"gold_version": None, "accepted": [], "refused": [], "conflicts": []}
    assert reg.gold_versions() == ["gold-v1"]
    # agreeing feedback from another request for the same row is a new label, not a conflict
    out = reg.add_gold([cand(1, 1, 3.0)], classes=(0, 1), test_ids=[])
    assert out["gold_version"] == "gold-v2" and out["conflicts"] == []
    assert list(reg.gold_rows()[0]) == ["1"]


KILLED = """
import os, sys
from tasks.core.settings import Settings
from tasks.registry import Registry
from tasks.registry.repo import RepoBase
reg = Registry(Settings.from_env())
def die(self, message, tag=None):
    os._exit(9)  # the process dies with the gold files written, before its commit point (the tag)
RepoBase._commit = die
reg.add_gold([{"row_id": 2, "label": 1, "ts": 2.0, "request_id": "b", "row": 0}], classes=(0, 1), test_ids=[])
"""


def test_a_killed_transaction_leaves_no_gold_version_and_no_file(settings):
    reg = Registry(settings)
    reg.add_gold([cand(1, 1, 1.0)], classes=(0, 1), test_ids=[])
    env = {**os.environ, "SLUICE_HOME": str(settings.home), "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.run([sys.executable, "-c", KILLED], env=env, cwd=REPO_ROOT, capture_output=True, text=True)
    assert proc.returncode == 9, proc.stderr
    assert (reg.root / "gold" / "labels" / "gold-v2.jsonl").exists()  # half-written, uncommitted
    assert reg.gold_versions() == ["gold-v1"] and [lab["row_id"] for lab in reg.gold_labels()] == [1]
    out = reg.add_gold([cand(3, 0, 3.0)], classes=(0, 1), test_ids=[])  # recovery discards the leftovers first
    assert out["gold_version"] == "gold-v2"
    assert [lab["row_id"] for lab in reg.gold_labels()] == [1, 3]  # row 2 never became gold
    assert reg.git("status", "--porcelain") == ""
