"""Quality metrics used everywhere (gates, summaries, reports).

Only 9% of demo emails are spam: accuracy alone rewards "always ham" (about 91%),
so every quality figure carries ROC AUC and F1 on the spam class beside it.
"""

from __future__ import annotations

import numpy as np


def classification_metrics(y_true: np.ndarray, prob: np.ndarray, threshold: float = 0.5) -> dict[str, float]:
    """ROC AUC, F1/precision/recall of the positive class, and accuracy."""
    from sklearn.metrics import accuracy_score, f1_score, precision_score, recall_score, roc_auc_score

    y_true = np.asarray(y_true).astype(int)
    prob = np.asarray(prob, dtype=np.float64)
    if y_true.shape != prob.shape:
        raise ValueError(f"labels {y_true.shape} and probabilities {prob.shape} differ in shape")
    pred = (prob >= threshold).astype(int)
    both_classes = len(np.unique(y_true)) == 2
    return {
        "roc_auc": float(roc_auc_score(y_true, prob)) if both_classes else float("nan"),
        "f1": float(f1_score(y_true, pred, zero_division=0)),
        "precision": float(precision_score(y_true, pred, zero_division=0)),
        "recall": float(recall_score(y_true, pred, zero_division=0)),
        "accuracy": float(accuracy_score(y_true, pred)),
        "n": int(len(y_true)),
        "positives": int(y_true.sum()),
    }


def _fmt(v: float | None) -> str:
    return "n/a" if v is None or v != v else f"{v:.3f}"


def fmt_quality(m: dict[str, float] | None) -> str:
    if not m:
        return "n/a"
    return f"ROC AUC {_fmt(m['roc_auc'])}  F1 {_fmt(m['f1'])}  acc {_fmt(m['accuracy'])}"
