"""The weak rows' weight is chosen on gold folds: kept where the weak labels help, 0 where they hurt."""

import numpy as np
import pandas as pd

from tasks.core.params import load_params
from tasks.labeling.label_model import label_batch
from tasks.labeling.lf import apply_lfs, apply_lfs_dev, labeling_function, vote_where
from tasks.labeling.weak_weight import MIN_GOLD_PER_CLASS, choose_weak_weight, one_se_choice, proxy_fit_predict
from tasks.plugins.emails.lfs import HAM, SPAM

FEATURES = [f"f{i}" for i in range(8)]


def synthetic(n=1500, seed=0):
    """8 noisy features of a latent score (about 20% positive); the LFs see the latent score, which the
    model's features only hint at: few gold rows learn the features poorly, many weak rows well."""
    rng = np.random.default_rng(seed)
    latent = rng.normal(size=n)
    df = pd.DataFrame({f: latent + rng.normal(scale=2.0, size=n) for f in FEATURES})
    df["latent"], df["y"], df["noise"] = latent, (latent > 0.85).astype(int), rng.random(n)
    return df


def featurize(df):
    return df[FEATURES].to_numpy(np.float32)


def good_lfs(dev, y_dev):
    return [
        labeling_function(name="high")(lambda df: vote_where(df["latent"] > 1.2, SPAM)),
        labeling_function(name="low")(lambda df: vote_where(df["latent"] < 0.3, HAM)),
        labeling_function(name="lowest")(lambda df: vote_where(df["latent"] < -0.5, HAM)),
    ]


def misleading_lfs(dev, y_dev):
    """Votes on a column unrelated to the label (inverted rules would not do: the label model,
    anchored by the class balance, learns an inverted LF's accuracy and turns it back)."""
    return [
        labeling_function(name="noise_high")(lambda df: vote_where(df["noise"] > 0.7, SPAM)),
        labeling_function(name="noise_low")(lambda df: vote_where(df["noise"] < 0.4, HAM)),
        labeling_function(name="noise_lowest")(lambda df: vote_where(df["noise"] < 0.2, HAM)),
    ]


def label_model_auc(gold, y, pool, make_lfs, wp):
    """The label model's dev ROC AUC, as the weak_label step hands it to the choice."""
    lfs = make_lfs(gold, y)
    return label_batch(apply_lfs(pool, lfs), apply_lfs_dev(gold, lfs), y, lfs, wp).quality["label_model"]["roc_auc"]


def test_weak_labels_that_help_are_kept_and_misleading_ones_get_weight_zero():
    wp = load_params().weak_label
    df = synthetic()
    gold, pool = df.iloc[:80], df.iloc[80:]  # ~16 positive gold rows: enough to judge on 3 folds
    y = gold["y"].to_numpy()
    auc = label_model_auc(gold, y, pool, good_lfs, wp)
    good = choose_weak_weight(gold, y, pool, good_lfs, featurize, wp, train_on_judge_folds=True, label_model_auc=auc)
    assert good.folds == 3 and set(good.fold_auc) == {"0", "0.3", "1"} and set(good.fold_se) == set(good.fold_auc)
    assert good.weight > 0 and good.gain > 0 and "the largest of them" in good.reason
    auc = label_model_auc(gold, y, pool, misleading_lfs, wp)
    assert auc < wp.trust_label_model_auc
    bad = choose_weak_weight(
        gold, y, pool, misleading_lfs, featurize, wp, train_on_judge_folds=True, label_model_auc=auc
    )
    assert bad.weight == 0 and bad.fold_auc["1"] < bad.fold_auc["0"] and "the smallest of them" in bad.reason


def test_a_difference_within_the_folds_spread_does_not_flip_the_choice():
    """Two weights 0.003 apart on a few dozen rows: within one standard error, so the label model's
    quality decides, night after night; a difference far beyond the spread still wins."""
    wp = load_params().weak_label
    rng = np.random.default_rng(3)
    y = np.r_[np.ones(15), np.zeros(15)].astype(int)
    base = y + rng.normal(scale=1.2, size=len(y))
    oof = {0.0: base, 0.3: base + rng.normal(scale=0.05, size=len(y)), 1.0: base + rng.normal(scale=0.05, size=len(y))}
    from sklearn.metrics import roc_auc_score

    auc = {w: float(roc_auc_score(y, s)) for w, s in oof.items()}
    assert max(auc.values()) - min(auc.values()) < 0.02
    assert one_se_choice(y, oof, auc, wp, 0.89, 3).weight == 1.0  # a good label model: use its labels
    assert one_se_choice(y, oof, auc, wp, 0.55, 3).weight == 0.0  # a poor one: leave them out
    far = {**oof, 1.0: -y + rng.normal(scale=0.1, size=len(y))}  # weight 1 ranks the rows backwards
    auc_far = {w: float(roc_auc_score(y, s)) for w, s in far.items()}
    assert one_se_choice(y, far, auc_far, wp, 0.89, 3).weight == 0.3  # the best near-best, not 1


def test_too_little_gold_to_judge_keeps_the_weak_labels_and_says_why():
    wp = load_params().weak_label
    df = synthetic()
    gold, pool = df.iloc[:30], df.iloc[30:]
    y = gold["y"].to_numpy()
    assert np.bincount(y).min() < MIN_GOLD_PER_CLASS
    choice = choose_weak_weight(gold, y, pool, good_lfs, featurize, wp, train_on_judge_folds=True)
    assert choice.weight == 1.0 and "too few to judge" in choice.reason and choice.gain is None


def test_the_judge_model_learns_soft_targets_as_weighted_rows():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 2)).astype(np.float32)
    p = 1 / (1 + np.exp(-3 * x[:, 0]))
    targets = np.stack([p, np.ones(400)], 1).astype(np.float32)
    score = proxy_fit_predict(x, targets, x)
    assert np.corrcoef(score, p)[0, 1] > 0.95
    ignored = targets.copy()
    ignored[:, 1] = 0  # nothing trains: no ranking
    assert (proxy_fit_predict(x, ignored, x) == 0.5).all()
