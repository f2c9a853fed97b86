"""Quality metrics used everywhere (gates, summaries, reports).

A rare class makes accuracy flatter (9% of the demo's rows in class 1: "always class 0" scores
about 91%), so every quality figure carries ROC AUC and F1 on class 1 (K classes: macro) beside it.
"""

from __future__ import annotations

import numpy as np


def classification_metrics(y_true: np.ndarray, prob: np.ndarray, threshold: float = 0.5) -> dict[str, float]:
    """ROC AUC, F1/precision/recall, and accuracy.

    Binary (`prob` [n], P(class 1)): of the positive class, at `threshold`. K classes (`prob` [n, K],
    one probability per class): the prediction is the most probable class; F1, precision and recall
    are macro averages over the K classes, ROC AUC the macro one-vs-rest average (nan unless every
    class occurs in `y_true`), and `per_class` holds each class's F1, one-vs-rest ROC AUC and support.
    The keys are the same either way, so every gate reads one figure; the compress gate also holds
    each class's ROC AUC to its floor."""
    from sklearn.metrics import accuracy_score, precision_recall_fscore_support, roc_auc_score

    y_true = np.asarray(y_true).astype(int)
    prob = np.asarray(prob, dtype=np.float64)
    if prob.ndim == 2:
        return _multiclass_metrics(y_true, prob)
    if y_true.shape != prob.shape:
        raise ValueError(f"labels {y_true.shape} and probabilities {prob.shape} differ in shape")
    pred = (prob >= threshold).astype(int)
    both_classes = len(np.unique(y_true)) == 2
    precision, recall, f1, _ = precision_recall_fscore_support(y_true, pred, average="binary", zero_division=0)
    return {
        "roc_auc": float(roc_auc_score(y_true, prob)) if both_classes else float("nan"),
        "f1": float(f1),
        "precision": float(precision),
        "recall": float(recall),
        "accuracy": float(accuracy_score(y_true, pred)),
        "n": int(len(y_true)),
        "positives": int(y_true.sum()),
    }


def _multiclass_metrics(y_true: np.ndarray, prob: np.ndarray) -> dict:
    from sklearn.metrics import accuracy_score, precision_recall_fscore_support, roc_auc_score

    n, k = prob.shape
    if y_true.shape != (n,):
        raise ValueError(f"labels {y_true.shape} and probabilities {prob.shape} differ in rows")
    if k < 2:
        raise ValueError(f"probabilities of {k} class(es): K classes need K >= 2 columns")
    outside = (y_true < 0) | (y_true >= k)
    if outside.any():
        raise ValueError(f"labels {sorted(set(y_true[outside].tolist()))[:5]} are outside the {k} classes 0..{k - 1}")
    pred = prob.argmax(axis=1)
    classes = list(range(k))
    precision, recall, f1, support = precision_recall_fscore_support(
        y_true, pred, labels=classes, average=None, zero_division=0
    )
    every_class = len(np.unique(y_true)) == k
    return {
        "roc_auc": float(roc_auc_score(y_true, prob, multi_class="ovr", average="macro", labels=classes))
        if every_class
        else float("nan"),
        "f1": float(f1.mean()),
        "precision": float(precision.mean()),
        "recall": float(recall.mean()),
        "accuracy": float(accuracy_score(y_true, pred)),
        "n": int(n),
        "per_class": {
            str(c): {
                "f1": float(f1[c]),
                "roc_auc": _one_vs_rest_auc(y_true == c, prob[:, c]),
                "support": int(support[c]),
            }
            for c in classes
        },
    }


def _one_vs_rest_auc(is_class: np.ndarray, score: np.ndarray) -> float:
    """ROC AUC of one class against the rest; nan when the rows hold only one side."""
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(is_class, score)) if 0 < is_class.sum() < len(is_class) else float("nan")


def _fmt(v: float | None) -> str:
    return "n/a" if v is None or v != v else f"{v:.3f}"


def fmt_quality(m: dict[str, float] | None) -> str:
    if not m:
        return "n/a"
    return f"ROC AUC {_fmt(m['roc_auc'])}  F1 {_fmt(m['f1'])}  acc {_fmt(m['accuracy'])}"
