"""Self-training of the end model on its confident predictions, for the rows nothing labels.

After a first fit on the gold and weak rows, the model predicts the rows every LF abstained on
(no gold label either); those it predicts with confidence max(p, 1 - p) >= `threshold` join the
training rows as soft pseudo-labels (target p) at `weight` in the noise-aware loss, and the model
is refit; `rounds` times, each round relabeling from the latest fit. Rows marked not `eligible`
(the gold test set) never get a pseudo-label.

The fits are the caller's `fit_predict(x, targets, x_judge) -> P(spam)`: the end model trained in
memory (`weak_weight.fit_and_predict`, the engine's model and noise-aware loss) in the benchmark,
the fast judge model (`weak_weight.proxy_fit_predict`) when judging on gold folds. Both are seeded,
so the result is deterministic. `judge_self_training` judges it the way the weak weight is judged:
out of fold on gold rows, the labeling rebuilt from the other folds, no row judging labels it trained.

Only the `self_train_kK` benchmark (bench/weak_vs_gold.py) uses it (the pipeline does not apply
self-training: no switch in params.yaml), so it lives under bench/, not tasks/labeling/.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pandas as pd

from tasks.core.params import WeakLabelParams
from tasks.labeling.weak_weight import FOLDS, MIN_GOLD_PER_CLASS, fold_training_set, gold_folds, proxy_fit_predict

THRESHOLD = 0.9
WEIGHT = 0.5
ROUNDS = 1

FitPredict = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]


@dataclass
class SelfTraining:
    scores: np.ndarray  # P(spam) of the last fit on the scoring rows
    pseudo: np.ndarray  # [n_unlabeled, 2] the last round's pseudo-labels (target, weight; weight 0: not added)
    added: list[int] = field(default_factory=list)  # rows added per round


def pseudo_targets(prob: np.ndarray, threshold: float, weight: float, eligible: np.ndarray | None = None) -> np.ndarray:
    """(soft target p, `weight`) for rows predicted with confidence >= `threshold` and eligible;
    (p, 0) for the others (they do not train)."""
    if not 0.5 <= threshold <= 1:
        raise ValueError(f"self-training threshold must be in [0.5, 1], got {threshold}")
    if not 0 <= weight <= 1:
        raise ValueError(f"self-training weight must be in [0, 1], got {weight}")
    prob = np.asarray(prob, np.float64)
    keep = np.maximum(prob, 1 - prob) >= threshold
    if eligible is not None:
        keep &= np.asarray(eligible, bool)
    return np.stack([prob, np.where(keep, weight, 0.0)], axis=1).astype(np.float32)


def self_train(
    x: np.ndarray,
    targets: np.ndarray,
    x_unlabeled: np.ndarray,
    x_score: np.ndarray,
    fit_predict: FitPredict,
    *,
    threshold: float = THRESHOLD,
    weight: float = WEIGHT,
    rounds: int = ROUNDS,
    eligible: np.ndarray | None = None,
    first: np.ndarray | None = None,
) -> SelfTraining:
    """Fit on (x, targets), pseudo-label the confident rows of `x_unlabeled`, refit on both; `rounds`
    refits. `first`: the first fit's P(spam) on [x_unlabeled; x_score] when the caller has it already."""
    if rounds < 1:
        raise ValueError(f"self-training rounds must be >= 1, got {rounds}")
    n = len(x_unlabeled)
    both = np.concatenate([x_unlabeled, x_score])
    prob = fit_predict(x, targets, both) if first is None else np.asarray(first)
    pseudo, added = np.zeros((n, 2), np.float32), []
    for _ in range(rounds):
        pseudo = pseudo_targets(prob[:n], threshold, weight, eligible)
        added.append(int((pseudo[:, 1] > 0).sum()))
        if not added[-1]:
            break  # nothing confident: the fit stays as it is
        prob = fit_predict(np.concatenate([x, x_unlabeled]), np.concatenate([targets, pseudo]), both)
    return SelfTraining(prob[n:], pseudo, added)


@dataclass
class SelfTrainJudgement:
    fold_auc: dict[str, float] = field(default_factory=dict)  # "off" / "on" -> out-of-fold ROC AUC
    added: list[int] = field(default_factory=list)  # pseudo-labels added per fold (last round)
    reason: str = ""

    @property
    def gain(self) -> float | None:
        return self.fold_auc["on"] - self.fold_auc["off"] if self.fold_auc else None


def judge_self_training(
    judge: pd.DataFrame,
    y_judge: np.ndarray,
    pool: pd.DataFrame,
    make_lfs: Callable,
    featurize: Callable,
    wp: WeakLabelParams,
    weak_weight: float,
    *,
    train_on_judge_folds: bool,
    fit_predict: FitPredict = proxy_fit_predict,
    threshold: float = THRESHOLD,
    weight: float = WEIGHT,
    rounds: int = ROUNDS,
    folds: int = FOLDS,
) -> SelfTrainJudgement:
    """Pooled out-of-fold ROC AUC on `folds` stratified folds of `judge`, with and without
    self-training on the pool rows every LF abstained on (the same folds as `choose_weak_weight`:
    per fold, the LFs and label model learn from the in-fold gold only)."""
    from sklearn.metrics import roc_auc_score

    y_judge = np.asarray(y_judge).astype(int)
    smallest = int(np.bincount(y_judge, minlength=2).min())
    if smallest < MIN_GOLD_PER_CLASS:
        return SelfTrainJudgement(reason=f"{smallest} gold row(s) of a class: too few to judge")
    x_judge, x_pool = featurize(judge), featurize(pool)
    no_rows = np.zeros((0, x_pool.shape[1]), np.float32), np.zeros((0, 2), np.float32)
    oof = {arm: np.full(len(judge), 0.5) for arm in ("off", "on")}
    added = []
    for in_fold, out_fold, weak in gold_folds(judge, y_judge, pool, make_lfs, wp, folds):
        covered = ~np.isnan(weak)
        gold_in = (x_judge[in_fold], y_judge[in_fold]) if train_on_judge_folds else None
        x, t = fold_training_set(*no_rows, x_pool, weak, weak_weight, gold_in)
        if not (t[:, 1] > 0).any():
            continue  # nothing to train on: a coin (0.5) both ways
        first = fit_predict(x, t, np.concatenate([x_pool[~covered], x_judge[out_fold]]))
        oof["off"][out_fold] = first[(~covered).sum() :]
        st = self_train(
            x,
            t,
            x_pool[~covered],
            x_judge[out_fold],
            fit_predict,
            threshold=threshold,
            weight=weight,
            rounds=rounds,
            first=first,
        )
        oof["on"][out_fold] = st.scores
        added.append(st.added[-1] if st.added else 0)
    auc = {arm: float(roc_auc_score(y_judge, p)) for arm, p in oof.items()}
    return SelfTrainJudgement(auc, added, "out-of-fold ROC AUC on gold folds, with and without self-training")
