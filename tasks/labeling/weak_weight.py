"""How much the weak labels are trusted, chosen on gold folds, judged out of fold.

For each fold of the judging gold rows, the labeling is rebuilt from the other folds only (the
LFs that learn from gold, the label model and its choice), a model is trained with the weak rows
at each candidate weight, and the pooled out-of-fold scores are judged by ROC AUC: no gold row
judges labels or a model it helped make. Weight 0 is the model without weak labels, so a positive
weight is kept only where it beats it on the folds.

The judge model is a fast proxy of the end model: a logistic regression on the same features
with the same targets (soft labels as two weighted rows, the noise-aware loss of a linear model),
because the choice refits it folds x candidates times, nightly and per budget in the benchmark;
the benchmark then measures the chosen weight with the real end model on its test set.

Two callers: the weak_label step (judges: the gold dev set, never trained on; the model trains on
the batch's own gold rows plus its weak rows) and the benchmark (judges: the k% gold rows, which
the end model also trains on, in fold).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterator

import numpy as np
import pandas as pd

from tasks.core.params import TrainParams, WeakLabelParams
from tasks.labeling.label_model import label_batch
from tasks.labeling.lf import apply_lfs, apply_lfs_dev

CANDIDATES = (0.0, 0.3, 1.0)
FOLDS = 3
# Fewer gold rows of a class than this and the folds cannot judge (a held-out fold with one or two
# spam rows ranks one example): the weak labels are kept at full weight, the choice says why.
MIN_GOLD_PER_CLASS = 10


@dataclass
class WeightChoice:
    weight: float
    fold_auc: dict[str, float] = field(default_factory=dict)  # candidate weight (as text) -> out-of-fold ROC AUC
    folds: int = 0
    reason: str = ""

    @property
    def gain(self) -> float | None:
        """Out-of-fold ROC AUC at the chosen weight minus without weak labels (weight 0)."""
        if not self.fold_auc:
            return None
        return self.fold_auc[f"{self.weight:g}"] - self.fold_auc["0"]


def fit_and_predict(x: np.ndarray, targets: np.ndarray, x_judge: np.ndarray, tp: TrainParams) -> np.ndarray:
    """Train the end model (the engine's model and noise-aware loss, in memory) on (soft target,
    weight) rows (weight-0 rows left out) and return its P(spam) on the judging rows."""
    import torch

    from tasks.training.loop import fit_in_memory

    keep = targets[:, 1] > 0
    model, _ = fit_in_memory(torch.from_numpy(x[keep]), torch.from_numpy(targets[keep].astype(np.float32)), tp)
    with torch.no_grad():
        return torch.sigmoid(model(torch.from_numpy(x_judge))).numpy()


def proxy_fit_predict(x: np.ndarray, targets: np.ndarray, x_judge: np.ndarray) -> np.ndarray:
    """The judge model: a standardized logistic regression trained on (soft target, weight) rows, a
    soft target p of weight w being a positive of weight w*p and a negative of weight w*(1-p)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    keep = targets[:, 1] > 0
    x, t, w = x[keep], targets[keep, 0].astype(np.float64), targets[keep, 1].astype(np.float64)
    xx, yy, ww = np.concatenate([x, x]), np.r_[np.ones(len(x)), np.zeros(len(x))], np.r_[w * t, w * (1 - t)]
    nz = ww > 0
    if len(np.unique(yy[nz])) < 2:
        return np.full(len(x_judge), 0.5)  # one class to learn from: no ranking
    spam = float((ww * yy)[nz].sum() / ww[nz].sum())
    ww = np.where(yy == 1, ww * (1 - spam) / spam, ww)  # the end model's class balancing
    scaler = StandardScaler().fit(x)
    clf = LogisticRegression(max_iter=1000).fit(scaler.transform(xx[nz]), yy[nz], sample_weight=ww[nz])
    return clf.predict_proba(scaler.transform(x_judge))[:, 1]


def fit_and_score(
    x: np.ndarray, targets: np.ndarray, x_judge: np.ndarray, y_judge: np.ndarray, tp: TrainParams
) -> float:
    """`fit_and_predict`'s ROC AUC on the judging rows."""
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(y_judge, fit_and_predict(x, targets, x_judge, tp)))


def gold_targets(y: np.ndarray) -> np.ndarray:
    return np.stack([np.asarray(y, np.float32), np.ones(len(y), np.float32)], axis=1)


def weak_targets(prob: np.ndarray, weight: float) -> np.ndarray:
    """Covered rows only (prob not nan): the label model's P(spam) at `weight`."""
    prob = prob[~np.isnan(prob)]
    return np.stack([prob.astype(np.float32), np.full(len(prob), weight, np.float32)], axis=1)


def gold_folds(
    judge: pd.DataFrame, y_judge: np.ndarray, pool: pd.DataFrame, make_lfs: Callable, wp: WeakLabelParams, folds: int
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(in-fold rows, out-of-fold rows, the pool's weak P(spam)) for each of `folds` stratified folds of
    the judging gold rows, the labeling (LFs that learn from gold, the label model) rebuilt from the
    in-fold rows only: no out-of-fold row helped make the weak labels it is judged against."""
    from sklearn.model_selection import StratifiedKFold

    y_judge = np.asarray(y_judge).astype(int)
    split = StratifiedKFold(folds, shuffle=True, random_state=wp.seed).split(np.zeros((len(y_judge), 1)), y_judge)
    for in_fold, out_fold in split:
        dev, y_dev = judge.iloc[in_fold], y_judge[in_fold]
        lfs = make_lfs(dev, y_dev)
        yield in_fold, out_fold, label_batch(apply_lfs(pool, lfs), apply_lfs_dev(dev, lfs), y_dev, lfs, wp).prob


def fold_training_set(
    base_x: np.ndarray,
    base_t: np.ndarray,
    x_pool: np.ndarray,
    weak: np.ndarray,
    weak_weight: float,
    gold: tuple[np.ndarray, np.ndarray] | None,
) -> tuple[np.ndarray, np.ndarray]:
    """A fold's training rows and (target, weight): `base` rows, the pool's covered rows at the weak
    weight (none at 0), and the in-fold gold rows when they train too."""
    parts_x, parts_t = [base_x], [base_t]
    if weak_weight > 0:
        parts_x.append(x_pool[~np.isnan(weak)])
        parts_t.append(weak_targets(weak, weak_weight))
    if gold is not None:
        parts_x.append(gold[0])
        parts_t.append(gold_targets(gold[1]))
    return np.concatenate(parts_x), np.concatenate(parts_t)


def choose_weak_weight(
    judge: pd.DataFrame,
    y_judge: np.ndarray,
    pool: pd.DataFrame,
    make_lfs: Callable,
    featurize: Callable,
    wp: WeakLabelParams,
    *,
    train_on_judge_folds: bool,
    fixed_gold: tuple[pd.DataFrame, np.ndarray] | None = None,
    candidates: tuple[float, ...] = CANDIDATES,
    folds: int = FOLDS,
) -> WeightChoice:
    """The candidate weight with the best ROC AUC of the pooled out-of-fold scores over `folds`
    stratified folds of `judge` (ties go to the smaller weight). `pool`: the rows that get weak labels; `fixed_gold`:
    gold rows the end model always trains on; `train_on_judge_folds`: the in-fold judging rows
    train it too (the benchmark, where the k% gold rows are the only gold)."""
    from sklearn.metrics import roc_auc_score

    y_judge = np.asarray(y_judge).astype(int)
    smallest = int(np.bincount(y_judge, minlength=2).min())
    if smallest < MIN_GOLD_PER_CLASS:
        return WeightChoice(
            max(candidates), reason=f"{smallest} gold row(s) of a class: too few to judge, weak labels kept"
        )
    x_judge, x_pool = featurize(judge), featurize(pool)
    fixed_x = featurize(fixed_gold[0]) if fixed_gold is not None else np.zeros((0, x_pool.shape[1]), np.float32)
    fixed_t = gold_targets(fixed_gold[1]) if fixed_gold is not None else np.zeros((0, 2), np.float32)
    oof = {w: np.full(len(judge), 0.5) for w in candidates}  # out-of-fold P(spam) per candidate
    for in_fold, out_fold, weak in gold_folds(judge, y_judge, pool, make_lfs, wp, folds):
        gold_in = (x_judge[in_fold], y_judge[in_fold]) if train_on_judge_folds else None
        for w in candidates:
            x, t = fold_training_set(fixed_x, fixed_t, x_pool, weak, w, gold_in)
            if (t[:, 1] > 0).any():  # else nothing to train on: a coin (0.5)
                oof[w][out_fold] = proxy_fit_predict(x, t, x_judge[out_fold])
    # One ROC AUC over the pooled out-of-fold scores: steadier than a mean of small folds' AUCs.
    auc = {w: float(roc_auc_score(y_judge, oof[w])) for w in candidates}
    best = max(sorted(candidates), key=lambda w: (auc[w], -w))
    return WeightChoice(best, {f"{w:g}": v for w, v in auc.items()}, folds, "best out-of-fold ROC AUC on gold folds")
