"""An LF on a pretrained encoder's sentence embeddings, for any text dataset: a logistic regression fitted
on the gold dev rows' embeddings, and whether the label model gains from it, measured every run.

`embedding_lf(dev, y_dev, texts, embed, p)` votes the most probable of the K classes where its
probability reaches `vote_at`, and abstains below. On the dev rows themselves it votes out of fold (each
fold predicted by a model fitted on the other folds), as a dataset's dev-fitted classifier LF does, so
its dev accuracy and the label model's dev quality are not inflated by memorized labels; elsewhere it
votes by the fit on every dev row. `texts(df)` is the dataset's texts (what a training embeds, the
cache's keys); `embed(texts) -> [n, d]` a FrozenTrunk's (tasks/training/inputs.py
`pretrained_frozen_trunk`): the labeling step and a frozen training share one content-addressed cache.

`with_embedding_lf` is the keep-if-it-helps rule the weak_label step applies: the label model is fitted
with and without the LF, and the LF is kept only when the label model's dev ROC AUC (the LF's dev votes
out of fold) with it exceeds the one without it by more than `min_gain`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pandas as pd

from tasks.core.params import EmbeddingLFParams, WeakLabelParams
from tasks.labeling.label_model import LabelingOutcome, label_batch
from tasks.labeling.lf import ABSTAIN, LabelingFunction, apply_lfs, apply_lfs_dev

NAME = "lf_embedding"


def can_fit(y_dev: np.ndarray, p: EmbeddingLFParams, classes: int) -> bool:
    """Every class has at least `min_per_class` (and `folds`) gold dev rows."""
    y = np.asarray(y_dev).astype(int)
    counts = np.bincount(y, minlength=classes) if len(y) else np.zeros(classes, int)
    return len(counts) == classes and int(counts.min()) >= max(p.min_per_class, p.folds)


def _model(p: EmbeddingLFParams):
    from sklearn.linear_model import LogisticRegression

    return LogisticRegression(C=p.c, class_weight="balanced", max_iter=2000)


def votes_of(prob: np.ndarray, vote_at: float) -> np.ndarray:
    """The most probable class per row where its probability reaches `vote_at`, else ABSTAIN."""
    prob = np.asarray(prob, np.float64)
    best = prob.argmax(axis=1)
    return np.where(prob[np.arange(len(prob)), best] >= vote_at, best, ABSTAIN).astype(np.int8)


def out_of_fold_proba(x: np.ndarray, y: np.ndarray, p: EmbeddingLFParams, classes: int, seed: int) -> np.ndarray:
    """[n, K] probabilities of each row by a model fitted on the other folds only."""
    from sklearn.model_selection import StratifiedKFold

    oof = np.zeros((len(y), classes))
    for train_idx, test_idx in StratifiedKFold(p.folds, shuffle=True, random_state=seed).split(x, y):
        oof[test_idx] = _model(p).fit(x[train_idx], y[train_idx]).predict_proba(x[test_idx])
    return oof


def embedding_lf(
    dev: pd.DataFrame,
    y_dev: np.ndarray,
    texts: Callable[[pd.DataFrame], list[str]],
    embed: Callable[[list[str]], np.ndarray],
    p: EmbeddingLFParams,
    classes: int = 2,
    seed: int = 0,
) -> LabelingFunction | None:
    """The embedding LF fitted on `dev` (None when some class has too few gold rows: `can_fit`)."""
    y = np.asarray(y_dev).astype(int)
    if not can_fit(y, p, classes):
        return None
    x = np.asarray(embed(texts(dev)), np.float64)
    oof = out_of_fold_proba(x, y, p, classes, seed)
    model = _model(p).fit(x, y)

    def fn(df):
        if isinstance(df, pd.Series):  # one row (Snorkel's row-wise appliers)
            return int(fn(df.to_frame().T)[0])
        if not len(df):
            return np.zeros(0, np.int8)
        return votes_of(model.predict_proba(np.asarray(embed(texts(df)), np.float64)), p.vote_at)

    return LabelingFunction(
        name=NAME,
        fn=fn,
        doc="logistic regression on the gold dev rows' sentence embeddings (out-of-fold votes on dev)",
        dev_votes=votes_of(oof, p.vote_at),
    )


@dataclass
class EmbeddingLFChoice:
    """What the step decided about the embedding LF, for its record and the run summary."""

    kept: bool
    reason: str
    auc_with: float | None = None
    auc_without: float | None = None
    details: dict = field(default_factory=dict)

    def report(self) -> dict:
        return {
            "kept": self.kept,
            "reason": self.reason,
            "label_model_dev_auc_with": self.auc_with,
            "label_model_dev_auc_without": self.auc_without,
            **self.details,
        }


def with_embedding_lf(
    batch: pd.DataFrame,
    dev: pd.DataFrame,
    y_dev: np.ndarray,
    lfs: list[LabelingFunction],
    L: np.ndarray,
    L_dev: np.ndarray,
    out: LabelingOutcome,
    lf: LabelingFunction | None,
    p: WeakLabelParams,
    classes: int = 2,
) -> tuple[list[LabelingFunction], np.ndarray, np.ndarray, LabelingOutcome, EmbeddingLFChoice]:
    """(LFs, L, L_dev, outcome, choice): with the embedding LF `lf` added when the label model's dev ROC
    AUC gains more than `min_gain` from it, else the labeling without it, as it was."""
    without = float(out.quality["label_model"]["roc_auc"])
    if lf is None:
        return lfs, L, L_dev, out, EmbeddingLFChoice(False, "too few gold dev rows of some class", None, without)
    col, col_dev = apply_lfs(batch, [lf], classes), apply_lfs_dev(dev, [lf], classes)
    L2, L2_dev, lfs2 = np.hstack([L, col]), np.hstack([L_dev, col_dev]), [*lfs, lf]
    out2 = label_batch(L2, L2_dev, y_dev, lfs2, p, classes)
    with_ = float(out2.quality["label_model"]["roc_auc"])
    fired = col_dev[:, 0] != ABSTAIN
    details = {
        "dev_coverage": float(fired.mean()) if len(fired) else 0.0,
        "dev_accuracy_out_of_fold": float((col_dev[fired, 0] == np.asarray(y_dev)[fired]).mean())
        if fired.any()
        else None,
        "batch_coverage": float((col[:, 0] != ABSTAIN).mean()) if len(col) else 0.0,
    }
    gain = np.nan_to_num(with_, nan=-1.0) - np.nan_to_num(without, nan=-1.0)
    if gain > p.embedding_lf.min_gain:
        reason = f"kept: label model dev ROC AUC {with_:.3f} with it, {without:.3f} without"
        return lfs2, L2, L2_dev, out2, EmbeddingLFChoice(True, reason, with_, without, details)
    reason = f"dropped: label model dev ROC AUC {with_:.3f} with it, {without:.3f} without"
    if p.embedding_lf.min_gain:
        reason += f" (a gain must exceed {p.embedding_lf.min_gain:g})"
    return lfs, L, L_dev, out, EmbeddingLFChoice(False, reason, with_, without, details)
