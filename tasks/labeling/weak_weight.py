"""How much the weak labels are trusted, chosen on gold folds, judged out of fold.

For each fold of the judging gold rows, the labeling is rebuilt from the other folds only (the
LFs that learn from gold, the label model and its choice), a model is trained with the weak rows
at each candidate weight, and the pooled out-of-fold scores are judged by ROC AUC: no gold row
judges labels or a model it helped make. Weight 0 is the model without weak labels.

The choice must not flip on noise (a few gold rows a night make the folds' ROC AUCs differ by
less than their spread): the cross-validation is repeated (`weak_weight_repeats`, reshuffled
folds) and the scores averaged, then the one-standard-error rule. Every candidate whose pooled out-of-fold
ROC AUC is within `weak_weight_se` standard errors of the best one's (the standard error of the
paired difference, by a bootstrap of the judging rows) is as good as the best; among those, the
label model's own dev quality says which way to lean: toward the weak labels (the largest such
weight) when its dev ROC AUC reaches `trust_label_model_auc`, away from them (the smallest) when
it does not.

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

from tasks.core.log import log
from tasks.core.params import TrainParams, WeakLabelParams
from tasks.labeling.label_model import label_batch
from tasks.labeling.lf import apply_lfs, apply_lfs_dev

CANDIDATES = (0.0, 0.3, 1.0)
FOLDS = 3
# Fewer gold rows of a class than this and the folds cannot judge (a held-out fold with one or two
# rows of a class ranks one example): the weak labels are kept at full weight, the choice says why.
MIN_GOLD_PER_CLASS = 10


@dataclass
class WeightChoice:
    weight: float
    fold_auc: dict[str, float] = field(default_factory=dict)  # candidate weight (as text) -> out-of-fold ROC AUC
    folds: int = 0
    reason: str = ""
    fold_se: dict[str, float] = field(default_factory=dict)  # candidate -> bootstrap SE of (best - it)

    @property
    def gain(self) -> float | None:
        """Out-of-fold ROC AUC at the chosen weight minus without weak labels (weight 0)."""
        if not self.fold_auc:
            return None
        return self.fold_auc[f"{self.weight:g}"] - self.fold_auc["0"]


def fit_and_predict(x: np.ndarray, targets: np.ndarray, x_judge: np.ndarray, tp: TrainParams) -> np.ndarray:
    """Train the end model (the engine's model and noise-aware loss, in memory) on (soft target(s),
    weight) rows (weight-0 rows left out) and return its probabilities on the judging rows."""
    import torch

    from tasks.models import predict_proba
    from tasks.training.loop import fit_in_memory

    keep = targets[:, -1] > 0
    model, _ = fit_in_memory(torch.from_numpy(x[keep]), torch.from_numpy(targets[keep].astype(np.float32)), tp)
    return predict_proba(model, x_judge)


def proxy_fit_predict(x: np.ndarray, targets: np.ndarray, x_judge: np.ndarray) -> np.ndarray:
    """The judge model: a standardized logistic regression trained on (soft target(s), weight) rows, a
    row of weight w copied once per class, class c at weight w * P(c) (binary: a positive of weight
    w*p and a negative of weight w*(1-p)). Returns P(class 1) [n] when binary, else [n, K]."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    keep = targets[:, -1] > 0
    x, w = x[keep], targets[keep, -1].astype(np.float64)
    probs = targets[keep, :-1].astype(np.float64)
    if probs.shape[1] == 1:  # binary: P(class 1)
        probs = np.concatenate([1 - probs, probs], axis=1)
    k = probs.shape[1]
    order = np.arange(k)[::-1]  # the last class's copies first (binary: positives, then negatives)
    xx, yy = np.tile(x, (k, 1)), np.repeat(order, len(x))
    ww = (w[:, None] * probs[:, order]).T.reshape(-1)
    nz = ww > 0
    if len(np.unique(yy[nz])) < k:
        return no_ranking(len(x_judge), k)  # a class with nothing to learn from
    share = np.bincount(yy[nz], weights=ww[nz], minlength=k) / ww[nz].sum()
    ww = ww * share[0] / share[yy]  # the end model's class balancing (binary: the positive side by (1-s)/s)
    scaler = StandardScaler().fit(x)
    clf = LogisticRegression(max_iter=1000).fit(scaler.transform(xx[nz]), yy[nz], sample_weight=ww[nz])
    out = clf.predict_proba(scaler.transform(x_judge))
    return out[:, 1] if k == 2 else out


def no_ranking(n: int, classes: int) -> np.ndarray:
    """Scores that rank nothing: 0.5 (binary), or 1/K for every class."""
    return np.full(n, 0.5) if classes == 2 else np.full((n, classes), 1.0 / classes)


def roc_auc(y: np.ndarray, scores: np.ndarray) -> float:
    """ROC AUC of P(class 1) [n], or the macro one-vs-rest ROC AUC of [n, K] probabilities."""
    from sklearn.metrics import roc_auc_score

    if scores.ndim == 1:
        return float(roc_auc_score(y, scores))
    return float(roc_auc_score(y, scores, multi_class="ovr", labels=list(range(scores.shape[1]))))


def fit_and_score(
    x: np.ndarray, targets: np.ndarray, x_judge: np.ndarray, y_judge: np.ndarray, tp: TrainParams
) -> float:
    """`fit_and_predict`'s ROC AUC on the judging rows."""
    return roc_auc(y_judge, fit_and_predict(x, targets, x_judge, tp))


def gold_targets(y: np.ndarray, classes: int = 2) -> np.ndarray:
    """Gold rows' targets at weight 1: (0/1, 1) when binary, (one-hot, 1) for K classes."""
    y = np.asarray(y)
    hard = y.astype(np.float32)[:, None] if classes == 2 else np.eye(classes, dtype=np.float32)[y.astype(int)]
    return np.concatenate([hard, np.ones((len(y), 1), np.float32)], axis=1)


def weak_targets(prob: np.ndarray, weight: float) -> np.ndarray:
    """Covered rows only (prob not nan): the label model's P(class 1) [n], or [n, K], at `weight`."""
    prob = prob[~covered_nan(prob)]
    prob = (prob[:, None] if prob.ndim == 1 else prob).astype(np.float32)  # [n, 1] or [n, K]
    return np.concatenate([prob, np.full((len(prob), 1), weight, np.float32)], axis=1)


def covered_nan(prob: np.ndarray) -> np.ndarray:
    """Rows every LF abstained on (their weak probabilities nan), of [n] or [n, K]."""
    return np.isnan(prob) if prob.ndim == 1 else np.isnan(prob).any(axis=1)


def gold_folds(
    judge: pd.DataFrame,
    y_judge: np.ndarray,
    pool: pd.DataFrame,
    make_lfs: Callable,
    wp: WeakLabelParams,
    folds: int,
    classes: int = 2,
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(in-fold rows, out-of-fold rows, the pool's weak P(class 1)) for each of `folds` stratified folds of
    the judging gold rows, the labeling (LFs that learn from gold, the label model) rebuilt from the
    in-fold rows only: no out-of-fold row helped make the weak labels it is judged against."""
    from sklearn.model_selection import StratifiedKFold

    y_judge = np.asarray(y_judge).astype(int)
    split = StratifiedKFold(folds, shuffle=True, random_state=wp.seed).split(np.zeros((len(y_judge), 1)), y_judge)
    for in_fold, out_fold in split:
        dev, y_dev = judge.iloc[in_fold], y_judge[in_fold]
        lfs = make_lfs(dev, y_dev)
        L, L_dev = apply_lfs(pool, lfs, classes), apply_lfs_dev(dev, lfs, classes)
        yield in_fold, out_fold, label_batch(L, L_dev, y_dev, lfs, wp, classes).prob


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
        parts_x.append(x_pool[~covered_nan(weak)])
        parts_t.append(weak_targets(weak, weak_weight))
    if gold is not None:
        parts_x.append(gold[0])
        parts_t.append(gold_targets(gold[1], base_t.shape[1] - 1 if base_t.shape[1] > 2 else 2))
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
    label_model_auc: float | None = None,
    classes: int = 2,
) -> WeightChoice:
    """The candidate weight by the one-standard-error rule (`one_se_choice`) over the ROC AUCs of the
    pooled out-of-fold scores on `folds` stratified folds of `judge`. `pool`: the rows that get weak
    labels; `fixed_gold`: gold rows the end model always trains on; `train_on_judge_folds`: the
    in-fold judging rows train it too (the benchmark, where the k% gold rows are the only gold);
    `label_model_auc`: the label model's dev ROC AUC (which way the rule leans); `classes`: K (ROC AUC is
    then the macro one-vs-rest one)."""
    y_judge = np.asarray(y_judge).astype(int)
    smallest = int(np.bincount(y_judge, minlength=classes).min())
    if smallest < MIN_GOLD_PER_CLASS:
        return WeightChoice(
            max(candidates), reason=f"{smallest} gold row(s) of a class: too few to judge, weak labels kept"
        )
    oof = mean_scores(
        out_of_fold_scores(
            judge, y_judge, pool, make_lfs, featurize, wp, train_on_judge_folds, fixed_gold, candidates, folds, classes
        )
    )
    # One ROC AUC over the pooled out-of-fold scores: steadier than a mean of small folds' AUCs.
    auc = {w: roc_auc(y_judge, oof[w]) for w in candidates}
    return one_se_choice(y_judge, oof, auc, wp, label_model_auc, folds)


def out_of_fold_scores(
    judge: pd.DataFrame,
    y_judge: np.ndarray,
    pool: pd.DataFrame,
    make_lfs: Callable,
    featurize: Callable,
    wp: WeakLabelParams,
    train_on_judge_folds: bool,
    fixed_gold: tuple[pd.DataFrame, np.ndarray] | None,
    candidates: tuple[float, ...],
    folds: int,
    classes: int = 2,
) -> list[dict[float, np.ndarray]]:
    """Each candidate weight's out-of-fold P(class 1) on every judging row (the judge model's), once per
    repeat of the cross-validation (wp.weak_weight_repeats, the folds reshuffled and the label model
    reseeded each time: seed wp.seed + repeat). Which rows share a fold moves a few dozen rows'
    ROC AUC by more than the weights' difference; the mean over repeats holds still."""
    x_judge, x_pool = featurize(judge), featurize(pool)
    fixed_x = featurize(fixed_gold[0]) if fixed_gold is not None else np.zeros((0, x_pool.shape[1]), np.float32)
    width = 2 if classes == 2 else classes + 1  # (P(class 1), weight) or (K probabilities, weight)
    fixed_t = gold_targets(fixed_gold[1], classes) if fixed_gold is not None else np.zeros((0, width), np.float32)
    repeats = []
    for r in range(wp.weak_weight_repeats):
        oof = {w: no_ranking(len(judge), classes) for w in candidates}
        reseeded = wp.replace(seed=wp.seed + r)
        for in_fold, out_fold, weak in gold_folds(judge, y_judge, pool, make_lfs, reseeded, folds, classes):
            gold_in = (x_judge[in_fold], y_judge[in_fold]) if train_on_judge_folds else None
            for w in candidates:
                x, t = fold_training_set(fixed_x, fixed_t, x_pool, weak, w, gold_in)
                if (t[:, -1] > 0).any():  # else nothing to train on: a coin (0.5)
                    oof[w][out_fold] = proxy_fit_predict(x, t, x_judge[out_fold])
        repeats.append(oof)
    return repeats


def mean_scores(repeats: list[dict[float, np.ndarray]]) -> dict[float, np.ndarray]:
    """The repeats' out-of-fold scores averaged per row and candidate."""
    return {w: np.mean([r[w] for r in repeats], axis=0) for w in repeats[0]}


def paired_se(y: np.ndarray, oof: dict[float, np.ndarray], best: float, rounds: int, seed: int) -> dict[float, float]:
    """Bootstrap standard error of ROC AUC(best) - ROC AUC(w) for each candidate w, resampling the
    judging rows (the same rows for both: a paired difference)."""
    rng = np.random.default_rng(seed)
    diffs: dict[float, list[float]] = {w: [] for w in oof}
    classes = 2 if oof[best].ndim == 1 else oof[best].shape[1]
    while len(diffs[best]) < rounds:
        idx = rng.integers(0, len(y), len(y))
        if len(np.unique(y[idx])) < classes:
            continue  # a resample without every class has no ROC AUC
        top = roc_auc(y[idx], oof[best][idx])
        for w, scores in oof.items():
            diffs[w].append(top - roc_auc(y[idx], scores[idx]))
    return {w: float(np.std(d, ddof=1)) for w, d in diffs.items()}


def one_se_choice(
    y: np.ndarray,
    oof: dict[float, np.ndarray],
    auc: dict[float, float],
    wp: WeakLabelParams,
    label_model_auc: float | None,
    folds: int,
) -> WeightChoice:
    """The one-standard-error rule over the candidates' pooled out-of-fold ROC AUCs, leaning toward
    the weak labels when the label model's dev ROC AUC reaches wp.trust_label_model_auc."""
    best = max(sorted(auc), key=lambda w: (auc[w], -w))
    se = paired_se(y, oof, best, wp.weak_weight_bootstrap, wp.seed)
    near = [w for w in auc if auc[best] - auc[w] <= wp.weak_weight_se * se[w]]
    trusted = label_model_auc is not None and label_model_auc >= wp.trust_label_model_auc
    chosen = max(near) if trusted else min(near)
    lean = (
        f"label model dev ROC AUC {label_model_auc:.3f} >= {wp.trust_label_model_auc:g}: the largest"
        if trusted
        else (
            f"label model dev ROC AUC {label_model_auc:.3f} < {wp.trust_label_model_auc:g}: the smallest"
            if label_model_auc is not None
            else "no label model dev ROC AUC: the smallest"
        )
    )
    reason = (
        f"best out-of-fold ROC AUC {auc[best]:.4f} at {best:g}; within {wp.weak_weight_se:g} SE of it: "
        f"{', '.join(f'{w:g}' for w in sorted(near))}; {lean} of them"
    )
    return WeightChoice(
        chosen, {f"{w:g}": v for w, v in auc.items()}, folds, reason, {f"{w:g}": v for w, v in se.items()}
    )


def nightly_weak_weight(
    batch: pd.DataFrame,
    gold: np.ndarray,
    dev: pd.DataFrame,
    y_dev: np.ndarray,
    make_lfs: Callable,
    featurize: Callable,
    p: WeakLabelParams,
    label_model_auc: float,
    classes: int = 2,
) -> WeightChoice:
    """weak_label.weak_weight, or with `auto` the weight chosen on gold dev folds: the labeling rebuilt
    from the other folds, the end model trained on the batch's gold rows plus its weak rows, judged
    on the held-out dev fold (the dev set itself is never trained on by the nightly model)."""
    if p.mix == "gold_only":
        return WeightChoice(0.0, reason="mix gold_only")
    if p.weak_weight != "auto":
        return WeightChoice(float(p.weak_weight), reason="weak_label.weak_weight")
    if p.mix == "weak_only":
        return WeightChoice(1.0, reason="mix weak_only")
    has_gold = ~np.isnan(gold)
    fixed = (batch[has_gold], gold[has_gold].astype(int)) if has_gold.any() else None
    choice = choose_weak_weight(
        dev,
        y_dev,
        batch[~has_gold],
        make_lfs,
        featurize,
        p,
        train_on_judge_folds=False,
        fixed_gold=fixed,
        label_model_auc=label_model_auc,
        classes=classes,
    )
    log(
        f"weak weight {choice.weight:g} on {choice.folds} gold dev folds: ROC AUC by weight {choice.fold_auc}, "
        f"SE of the difference from the best {choice.fold_se}; {choice.reason}"
    )
    return choice
