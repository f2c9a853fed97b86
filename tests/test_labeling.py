import numpy as np
import pandas as pd
import pytest

from tasks.labeling import email_lfs
from tasks.labeling.label_model import label_batch
from tasks.labeling.lf import ABSTAIN, HAM, SPAM, apply_lfs, labeling_function
from tasks.params import load_params
from tests.conftest import row

# (LF, row that should fire it, expected vote)
CASES = [
    (email_lfs.lf_replied_before, row(sent_email=1), HAM),
    (email_lfs.lf_reply_subject, row(re_subj=1), HAM),
    (email_lfs.lf_many_recipients, row(to_multiple=1), HAM),
    (email_lfs.lf_has_cc, row(cc=2), HAM),
    (email_lfs.lf_long_message, row(num_char=20.0), HAM),
    (email_lfs.lf_no_numbers, row(number="none"), SPAM),
    (email_lfs.lf_winner, row(winner="yes"), SPAM),
    (email_lfs.lf_short_plain_text, row(num_char=0.4, format=0), SPAM),
    (email_lfs.lf_urgent_subject, row(urgent_subj=1), SPAM),
    (email_lfs.lf_no_sender, row(**{"from": 0}), SPAM),
]


@pytest.mark.parametrize("lf, fires, vote", CASES, ids=[c[0].name for c in CASES])
def test_each_lf_fires_on_its_evidence_and_abstains_otherwise(lf, fires, vote):
    df = pd.DataFrame([fires, row()])
    assert list(lf(df)) == [vote, ABSTAIN]


def test_every_lf_is_covered_by_a_case():
    assert {c[0].name for c in CASES} == {lf.name for lf in email_lfs.LFS}


def test_short_plain_text_needs_no_prior_contact():
    assert email_lfs.lf_short_plain_text(pd.DataFrame([row(num_char=0.4, format=0, sent_email=1)]))[0] == ABSTAIN


def test_failing_lf_is_named():
    @labeling_function()
    def lf_broken(df):
        return df["no_such_column"] > 0

    with pytest.raises(RuntimeError, match="lf_broken"):
        apply_lfs(pd.DataFrame([row()]), [lf_broken])


def test_lf_returning_bad_values_is_refused():
    @labeling_function()
    def lf_two(df):
        return np.full(len(df), 2)

    with pytest.raises(RuntimeError, match="outside"):
        apply_lfs(pd.DataFrame([row()]), [lf_two])


def test_label_batch_on_real_rows(emails):
    dev, batch = emails.iloc[:600], emails.iloc[600:1100]
    lfs = email_lfs.LFS
    out = label_batch(apply_lfs(batch, lfs), apply_lfs(dev, lfs), dev["spam"].to_numpy(), lfs,
                      load_params().weak_label)
    assert out.chosen in ("label_model", "majority_vote")
    assert set(out.quality) == {"label_model", "majority_vote"}
    # The chosen source is at least as good as the other on dev ROC AUC.
    other = "majority_vote" if out.chosen == "label_model" else "label_model"
    assert out.quality[out.chosen]["roc_auc"] >= out.quality[other]["roc_auc"]
    # Rows where every LF abstained are unlabeled (-1) and counted, the rest are 0/1.
    uncovered = (apply_lfs(batch, lfs) == ABSTAIN).all(axis=1)
    assert out.abstained_rows == uncovered.sum() > 0
    assert (out.label[uncovered] == -1).all() and set(out.label[~uncovered]) <= {0, 1}
    assert np.isnan(out.prob[uncovered]).all()
    # Weak labels carry real signal: well above chance on the gold dev set.
    assert out.quality[out.chosen]["roc_auc"] > 0.75
    assert len(out.lf_table) == len(lfs) and all(0 <= r["coverage"] <= 1 for r in out.lf_table)
