"""Self-training: pseudo-labels only for confident, eligible rows, at their weight, deterministic."""

import functools

import numpy as np
import pandas as pd
import pytest

from bench.self_training import judge_self_training, pseudo_targets, self_train
from tasks.core.params import load_params
from tasks.labeling.lf import labeling_function, vote_where
from tasks.labeling.weak_weight import fit_and_predict, gold_targets, proxy_fit_predict
from tasks.plugins.emails.lfs import HAM, SPAM


def data(n=600, seed=0):
    """Two features, the label a noisy function of the first: confident predictions far from 0."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 2)).astype(np.float32)
    y = (x[:, 0] + rng.normal(scale=0.5, size=n) > 1.0).astype(int)
    return x, y


class Recording:
    """The real judge model, remembering what each fit trained on."""

    def __init__(self):
        self.fits = []

    def __call__(self, x, targets, x_judge):
        self.fits.append((x.copy(), targets.copy(), x_judge.copy()))
        return proxy_fit_predict(x, targets, x_judge)


def test_pseudo_labels_only_for_rows_over_the_threshold_at_the_weight():
    prob = np.array([0.95, 0.05, 0.5, 0.89, 0.11, 0.9, 0.1])
    t = pseudo_targets(prob, 0.9, 0.4)
    assert t[:, 0] == pytest.approx(prob)  # soft targets: the model's P(spam)
    assert (t[:, 1] > 0).tolist() == [True, True, False, False, False, True, True]
    assert t[t[:, 1] > 0, 1] == pytest.approx(0.4)
    with pytest.raises(ValueError, match="threshold must be in"):
        pseudo_targets(prob, 0.4, 0.5)
    with pytest.raises(ValueError, match="weight must be in"):
        pseudo_targets(prob, 0.9, 1.5)


def test_self_training_adds_the_confident_unlabeled_rows_at_the_weight_and_refits():
    x, y = data()
    x_lab, y_lab, x_unl, x_test = x[:200], y[:200], x[200:500], x[500:]
    fit = Recording()
    st = self_train(x_lab, gold_targets(y_lab), x_unl, x_test, fit, threshold=0.9, weight=0.3)
    assert len(fit.fits) == 2  # the first fit and one refit
    first = proxy_fit_predict(x_lab, gold_targets(y_lab), x_unl)  # the first fit's predictions (deterministic)
    confident = np.maximum(first, 1 - first) >= 0.9
    assert 0 < confident.sum() < len(x_unl) and st.added == [int(confident.sum())]
    assert ((st.pseudo[:, 1] > 0) == confident).all() and st.pseudo[confident, 1] == pytest.approx(0.3)
    x_refit, t_refit, _ = fit.fits[1]
    assert len(x_refit) == len(x_lab) + len(x_unl)  # the labeled rows plus the unlabeled ones (weight 0 unless kept)
    assert t_refit[len(x_lab) :, 1] == pytest.approx(st.pseudo[:, 1])
    assert t_refit[: len(x_lab), 1] == pytest.approx(1.0)  # the gold rows keep their weight
    assert st.scores.shape == (len(x_test),)


def test_gold_test_rows_never_get_a_pseudo_label_nor_train():
    x, y = data()
    x_lab, y_lab, x_unl, x_test = x[:200], y[:200], x[200:500], x[500:]
    eligible = np.ones(len(x_unl), bool)
    eligible[::2] = False  # rows of the gold test set that landed among the unlabeled ones
    fit = Recording()
    st = self_train(x_lab, gold_targets(y_lab), x_unl, x_test, fit, threshold=0.8, weight=1.0, eligible=eligible)
    assert st.added[0] > 0 and (st.pseudo[~eligible, 1] == 0).all()
    for x_trained, _, _ in fit.fits:  # the scoring (test) rows are never among the training rows
        assert not (x_trained[:, None, :] == x_test[None, :, :]).all(-1).any()


def test_self_training_the_end_model_is_deterministic_with_a_seed():
    x, y = data(300)
    tp = load_params().train.replace(epochs=3, hidden=(8,))
    run = functools.partial(self_train, x[:100], gold_targets(y[:100]), x[100:250], x[250:], threshold=0.7, weight=0.5)
    a = run(functools.partial(fit_and_predict, tp=tp))
    b = run(functools.partial(fit_and_predict, tp=tp))
    assert np.array_equal(a.scores, b.scores) and np.array_equal(a.pseudo, b.pseudo) and a.added == b.added
    c = run(functools.partial(fit_and_predict, tp=tp.replace(seed=tp.seed + 1)))
    assert not np.array_equal(a.scores, c.scores)


def test_judged_out_of_fold_on_gold_with_the_labeling_rebuilt_per_fold():
    wp = load_params().weak_label
    rng = np.random.default_rng(1)
    n = 900
    latent = rng.normal(size=n)
    df = pd.DataFrame({"f0": latent + rng.normal(scale=0.7, size=n), "f1": rng.normal(size=n)})
    df["latent"], df["y"] = latent, (latent > 0.85).astype(int)
    featurize = lambda d: d[["f0", "f1"]].to_numpy(np.float32)  # noqa: E731
    seen = []

    def make_lfs(dev, y_dev):
        seen.append(len(dev))
        return [  # abstain in the middle band: the rows self-training pseudo-labels
            labeling_function(name="high")(lambda d: vote_where(d["latent"] > 1.2, SPAM)),
            labeling_function(name="low")(lambda d: vote_where(d["latent"] < 0.3, HAM)),
            labeling_function(name="lowest")(lambda d: vote_where(d["latent"] < -0.5, HAM)),
        ]

    gold, pool = df.iloc[:90], df.iloc[90:].drop(columns=["y"])
    judged = judge_self_training(
        gold, gold["y"].to_numpy(), pool, make_lfs, featurize, wp, 1.0, train_on_judge_folds=True, threshold=0.8
    )
    assert seen == [60, 60, 60]  # the LFs of each fold learn from the other folds' gold only
    assert set(judged.fold_auc) == {"off", "on"} and judged.gain is not None and len(judged.added) == 3
    assert all(0.5 < v <= 1 for v in judged.fold_auc.values())
    few = judge_self_training(
        gold.iloc[:20], gold["y"].to_numpy()[:20], pool, make_lfs, featurize, wp, 1.0, train_on_judge_folds=True
    )
    assert few.gain is None and "too few to judge" in few.reason
