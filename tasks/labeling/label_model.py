"""Turn a label matrix into training labels: Snorkel's LabelModel vs majority vote.

Both are scored on the gold dev set every run (ROC AUC and F1: of the positive class when binary,
macro over the classes when K > 2);
the better one labels the batch, and the choice is recorded. Rows where every LF
abstains get no label (-1): they are counted and kept out of training.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tasks.core.params import WeakLabelParams
from tasks.evaluation.quality import classification_metrics
from tasks.labeling.lf import ABSTAIN, LabelingFunction


@dataclass
class LabelingOutcome:
    chosen: str  # "label_model" | "majority_vote"
    prob: np.ndarray  # P(class 1) per batch row; K > 2 classes: [n, K] (nan rows where every LF abstained)
    label: np.ndarray  # the class 0..K-1, or -1 where every LF abstained
    quality: dict[str, dict[str, float]]  # method -> metrics on the gold dev set
    lf_table: list[dict] = field(default_factory=list)
    coverage: float = 0.0  # share of batch rows with at least one vote
    abstained_rows: int = 0


def lf_table(L: np.ndarray, lfs: list[LabelingFunction], L_dev: np.ndarray, y_dev: np.ndarray) -> list[dict]:
    """Per LF: polarity, coverage/overlap/conflict on the batch, empirical accuracy on gold dev."""
    from snorkel.labeling import LFAnalysis

    batch = LFAnalysis(L.astype(np.int64))
    cov, ovl, cfl = batch.lf_coverages(), batch.lf_overlaps(), batch.lf_conflicts()
    rows = []
    for j, lf in enumerate(lfs):
        votes = L_dev[:, j]
        fired = votes != ABSTAIN
        acc = float((votes[fired] == y_dev[fired]).mean()) if fired.any() else float("nan")
        polarity = sorted(int(v) for v in np.unique(L[:, j]) if v != ABSTAIN)
        rows.append(
            {
                "lf": lf.name,
                "polarity": polarity,
                "coverage": float(cov[j]),
                "overlaps": float(ovl[j]),
                "conflicts": float(cfl[j]),
                "dev_accuracy": acc,
                "dev_votes": int(fired.sum()),
            }
        )
    return rows


def label_batch(
    L: np.ndarray,
    L_dev: np.ndarray,
    y_dev: np.ndarray,
    lfs: list[LabelingFunction],
    p: WeakLabelParams,
    classes: int = 2,
) -> LabelingOutcome:
    """Label a batch's rows from its label matrix `L` by the better of Snorkel's LabelModel (at
    cardinality `classes`) and majority vote on the gold dev set. Binary: `prob` is P(class 1) per row;
    K > 2 classes: `prob` is [n, K], a probability per class."""
    from snorkel.labeling.model import LabelModel, MajorityLabelVoter

    if L.shape[1] < 3:
        raise ValueError(f"the label model needs at least 3 labeling functions, got {L.shape[1]}")
    y_dev = np.asarray(y_dev).astype(int)
    outside = (y_dev < 0) | (y_dev >= classes)
    if outside.any():
        raise ValueError(
            f"gold dev labels {sorted(set(y_dev[outside].tolist()))[:5]} are outside the {classes} classes"
        )
    # class balance from the gold dev labels (clipped: a class dev lacks still gets some prior)
    prior = np.clip(np.bincount(y_dev, minlength=classes) / max(len(y_dev), 1), 0.01, 0.99)
    lm = LabelModel(cardinality=classes, verbose=False)
    lm.fit(
        np.vstack([L, L_dev]),
        n_epochs=p.label_model_epochs,
        lr=p.label_model_lr,
        seed=p.seed,
        class_balance=(prior / prior.sum()).tolist() if p.class_balance_prior else None,  # None: uniform
        progress_bar=False,
    )
    mv = MajorityLabelVoter(cardinality=classes)

    def proba(method, matrix: np.ndarray) -> np.ndarray:
        out = method.predict_proba(matrix).astype(np.float64)
        return out[:, 1] if classes == 2 else out

    methods = {"label_model": lm, "majority_vote": mv}
    quality = {name: classification_metrics(y_dev, proba(m, L_dev)) for name, m in methods.items()}
    # Higher dev ROC AUC wins; F1 breaks ties. Majority vote is the baseline to beat.
    chosen = max(quality, key=lambda k: (np.nan_to_num(quality[k]["roc_auc"]), quality[k]["f1"], k == "majority_vote"))

    covered = (L != ABSTAIN).any(axis=1)
    prob = proba(methods[chosen], L)
    prob[~covered] = np.nan
    if classes == 2:
        label = np.where(covered, (prob >= 0.5).astype(int), ABSTAIN)
    else:
        label = np.where(covered, np.nan_to_num(prob).argmax(axis=1), ABSTAIN)
    return LabelingOutcome(
        chosen=chosen,
        prob=prob,
        label=label,
        quality=quality,
        lf_table=lf_table(L, lfs, L_dev, y_dev),
        coverage=float(covered.mean()) if len(L) else 0.0,
        abstained_rows=int((~covered).sum()),
    )
