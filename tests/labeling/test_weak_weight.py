"""The weak rows' weight is chosen on gold folds: kept where the weak labels help, 0 where they hurt."""

import numpy as np
import pandas as pd

from tasks.core.params import load_params
from tasks.labeling.lf import HAM, SPAM, labeling_function, vote_where
from tasks.labeling.weak_weight import MIN_GOLD_PER_CLASS, choose_weak_weight, proxy_fit_predict

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


def test_weak_labels_that_help_are_kept_and_misleading_ones_get_weight_zero():
    wp = load_params().weak_label
    df = synthetic()
    gold, pool = df.iloc[:80], df.iloc[80:]  # ~16 positive gold rows: enough to judge on 3 folds
    y = gold["y"].to_numpy()
    good = choose_weak_weight(gold, y, pool, good_lfs, featurize, wp, train_on_judge_folds=True)
    assert good.folds == 3 and set(good.fold_auc) == {"0", "0.3", "1"}
    assert good.weight > 0 and good.gain > 0
    bad = choose_weak_weight(gold, y, pool, misleading_lfs, featurize, wp, train_on_judge_folds=True)
    assert bad.weight == 0 and bad.fold_auc["1"] < bad.fold_auc["0"]


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
