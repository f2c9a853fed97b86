import numpy as np
import pandas as pd
import pytest

from tasks.core.params import load_params
from tasks.labeling.label_model import label_batch
from tasks.labeling.lf import ABSTAIN, apply_lfs, labeling_function
from tasks.plugins.emails import lfs as email_lfs
from tasks.plugins.emails.lfs import HAM, SPAM
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
    (email_lfs.lf_no_numbers_cold, row(number="none"), SPAM),
    (email_lfs.lf_few_lines_cold, row(line_breaks=12), SPAM),
]


@pytest.mark.parametrize("lf, fires, vote", CASES, ids=[c[0].name for c in CASES])
def test_each_lf_fires_on_its_evidence_and_abstains_otherwise(lf, fires, vote):
    df = pd.DataFrame([fires, row()])
    assert list(lf(df)) == [vote, ABSTAIN]


def test_every_lf_is_covered_by_a_case():
    assert {c[0].name for c in CASES} == {lf.name for lf in email_lfs.LFS + email_lfs.DEV_REFINED_LFS}


def test_refined_spam_rules_need_a_cold_sender():
    """The dev-refined rules hold back on a known correspondent, a reply or a group mail."""
    for contact in ({"sent_email": 1}, {"re_subj": 1}):
        assert email_lfs.lf_no_numbers_cold(pd.DataFrame([row(number="none", **contact)]))[0] == ABSTAIN
    for contact in ({"sent_email": 1}, {"re_subj": 1}, {"to_multiple": 1}):
        assert email_lfs.lf_few_lines_cold(pd.DataFrame([row(line_breaks=12, **contact)]))[0] == ABSTAIN


def test_too_little_gold_leaves_the_classifier_lf_out(emails):
    from tasks.plugins.emails.lfs import make_lfs

    dev = pd.concat([emails[emails["spam"] == 1].iloc[:3], emails[emails["spam"] == 0].iloc[:50]])
    y = dev["spam"].to_numpy()
    assert np.bincount(y)[1] < email_lfs.MODEL_FOLDS  # a tiny gold budget: too few spam to vote out of fold
    assert all(lf.name != "lf_dev_classifier" for lf in make_lfs(dev, y))


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

    with pytest.raises(RuntimeError, match=r"LF lf_two voted \[2\]: a vote is -1 \(abstain\) or one of the 2 classes"):
        apply_lfs(pd.DataFrame([row()]), [lf_two])
    assert apply_lfs(pd.DataFrame([row()]), [lf_two], classes=3).tolist() == [[2]]  # a class of a 3-class dataset


def test_label_batch_on_real_rows(emails):
    dev, batch = emails.iloc[:600], emails.iloc[600:1100]
    lfs = email_lfs.LFS
    out = label_batch(apply_lfs(batch, lfs), apply_lfs(dev, lfs), dev["spam"].to_numpy(), lfs, load_params().weak_label)
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


def test_model_lf_votes_out_of_fold_on_dev_and_confidently_elsewhere(emails):
    from tasks.labeling.lf import apply_lfs_dev
    from tasks.plugins.emails.lfs import MODEL_HAM_AT, MODEL_SPAM_AT, lf_dev_classifier, make_lfs

    dev, batch = emails.iloc[:500], emails.iloc[500:1500]
    y_dev = dev["spam"].to_numpy()
    lf = lf_dev_classifier(dev, y_dev)
    assert lf.dev_votes is not None and lf.dev_votes.shape == (len(dev),)
    # Out of fold, dev accuracy is honest: lower than the in-sample fit would claim.
    in_sample = lf(dev)
    fired_oof, fired_in = lf.dev_votes != ABSTAIN, in_sample != ABSTAIN
    acc_oof = (lf.dev_votes[fired_oof] == y_dev[fired_oof]).mean()
    acc_in = (in_sample[fired_in] == y_dev[fired_in]).mean()
    assert acc_in >= acc_oof > 0.7
    votes = lf(batch)
    assert set(np.unique(votes)) <= {ABSTAIN, HAM, SPAM} and (votes == ABSTAIN).any() and (votes != ABSTAIN).any()
    assert MODEL_HAM_AT < 0.5 < MODEL_SPAM_AT
    lfs = make_lfs(dev, y_dev)
    rules = len(email_lfs.LFS) + (len(email_lfs.DEV_REFINED_LFS) if email_lfs.USE_REFINED else 0)
    assert len(lfs) == rules + 1 and lfs[-1].name == "lf_dev_classifier"
    assert len(make_lfs(dev, y_dev, refined=False)) == len(email_lfs.LFS) + 1
    assert (apply_lfs_dev(dev, lfs)[:, -1] == lf.dev_votes).all()


def test_row_wise_and_vectorized_votes_agree(emails):
    """The same LF definitions under Snorkel's row-wise applier give the same label matrix."""
    from snorkel.labeling import PandasLFApplier

    rows = emails.iloc[:300]
    rules = email_lfs.LFS
    L_snorkel = PandasLFApplier([lf.to_snorkel() for lf in rules]).apply(rows, progress_bar=False)
    assert (L_snorkel == apply_lfs(rows, rules)).all()


def test_drift_flags():
    from tasks.labeling.drift import drift_flags, labeling_stats

    p = load_params().weak_label
    L = np.array([[0, -1], [1, 0], [-1, -1], [1, -1]])
    stats = labeling_stats(L, np.array([0, 1, -1, 1]))
    assert stats == {"coverage": 0.75, "conflict_rate": 0.25, "class_shares": [1 / 3, 2 / 3]}
    assert drift_flags(stats, None, p) == []
    assert drift_flags(stats, dict(stats), p) == []
    (flag,) = drift_flags(stats, {**stats, "coverage": 0.4}, p)
    assert flag.startswith("coverage moved 0.400 -> 0.750")
    before_class_shares = {"coverage": 0.75, "conflict_rate": 0.25, "spam_share": 0.2}  # a record of older code
    (flag,) = drift_flags(stats, before_class_shares, p)
    assert flag.startswith("class 1's share moved 0.200 -> 0.667")
