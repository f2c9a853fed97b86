"""Turn a label matrix into training labels: Snorkel's LabelModel vs majority vote.

Both are scored on the gold dev set every run (ROC AUC and F1 on the spam class);
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
    prob: np.ndarray  # P(spam) per batch row (nan where every LF abstained)
    label: np.ndarray  # 0/1, or -1 where every LF abstained
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
    L: np.ndarray, L_dev: np.ndarray, y_dev: np.ndarray, lfs: list[LabelingFunction], p: WeakLabelParams
) -> LabelingOutcome:
    from snorkel.labeling.model import LabelModel, MajorityLabelVoter

    if L.shape[1] < 3:
        raise ValueError(f"the label model needs at least 3 labeling functions, got {L.shape[1]}")
    prior = float(np.clip(y_dev.mean(), 0.01, 0.99))  # class balance from gold dev labels
    lm = LabelModel(cardinality=2, verbose=False)
    lm.fit(
        np.vstack([L, L_dev]),
        n_epochs=p.label_model_epochs,
        lr=p.label_model_lr,
        seed=p.seed,
        class_balance=[1 - prior, prior] if p.class_balance_prior else None,  # None: Snorkel's uniform prior
        progress_bar=False,
    )
    mv = MajorityLabelVoter(cardinality=2)

    methods = {"label_model": lm, "majority_vote": mv}
    quality = {name: classification_metrics(y_dev, m.predict_proba(L_dev)[:, 1]) for name, m in methods.items()}
    # Higher dev ROC AUC wins; F1 breaks ties. Majority vote is the baseline to beat.
    chosen = max(quality, key=lambda k: (np.nan_to_num(quality[k]["roc_auc"]), quality[k]["f1"], k == "majority_vote"))

    covered = (L != ABSTAIN).any(axis=1)
    prob = methods[chosen].predict_proba(L)[:, 1].astype(np.float64)
    prob[~covered] = np.nan
    label = np.where(covered, (prob >= 0.5).astype(int), ABSTAIN)
    return LabelingOutcome(
        chosen=chosen,
        prob=prob,
        label=label,
        quality=quality,
        lf_table=lf_table(L, lfs, L_dev, y_dev),
        coverage=float(covered.mean()) if len(L) else 0.0,
        abstained_rows=int((~covered).sum()),
    )
