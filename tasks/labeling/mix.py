"""What the end model trains on: the gold labels that exist, the weak labels of the other rows.

Each labeled row carries `label` (the class, -1 where no LF voted and no gold label exists),
`label_prob` (the training target: the gold 0/1, or the label model's P(class 1); with K > 2
classes, `label_prob_0` .. `label_prob_<K-1>` instead: the gold one-hot, or the label model's
probability of each class: `prob_columns`),
`label_source` (gold | weak | none) and `label_weight` (the row's weight in the noise-aware
loss: 1 for gold, `weak_weight` for weak, 0 for rows nothing labels). Gold wins where both
exist. `mix` picks what trains: weak_plus_gold, weak_only (gold labels ignored, as before
they existed) or gold_only (weak rows kept for the record at weight 0). Pure functions.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd

from tasks.labeling.lf import ABSTAIN

MIXES = ("weak_plus_gold", "weak_only", "gold_only")
SOURCES = ("gold", "weak", "none")


def prob_columns(classes: int) -> list[str]:
    """The training target's columns of a labeled partition: binary `label_prob` (P(class 1)), else
    one per class."""
    return ["label_prob"] if classes == 2 else [f"label_prob_{k}" for k in range(classes)]


def label_columns(classes: int) -> list[str]:
    """The columns the labeling adds to a batch's raw columns."""
    return ["label", *prob_columns(classes), "label_source", "label_weight"]


def gold_budget_mask(ids, budget: float, seed: int) -> np.ndarray:
    """Which rows carry a gold label at a budget (fraction of rows): a seeded hash of each row id, so a
    row's draw never depends on the batch it arrived in, and the same rows stay gold on a re-run."""
    if not 0 <= budget <= 1:
        raise ValueError(f"gold budget must be in [0, 1], got {budget}")
    draws = np.array(
        [int.from_bytes(hashlib.blake2b(f"{seed}:{i}".encode(), digest_size=8).digest(), "big") for i in ids],
        dtype=np.float64,
    )
    return draws / 2.0**64 < budget if len(draws) else np.zeros(0, bool)


def training_labels(weak_prob: np.ndarray, gold: np.ndarray, mix: str, weak_weight: float) -> pd.DataFrame:
    """The label columns of a batch (`label_columns`) from the weak labels and the gold label (nan where
    none exists). `weak_prob`: P(class 1) per row when binary, else [n, K] (nan where every LF abstained)."""
    if mix not in MIXES:
        raise ValueError(f"mix must be one of {MIXES}, got {mix!r}")
    if not 0 <= weak_weight <= 1:
        raise ValueError(f"weak weight must be in [0, 1], got {weak_weight}")
    weak_prob, gold = np.asarray(weak_prob, np.float64), np.asarray(gold, np.float64)
    if len(weak_prob) != len(gold) or gold.ndim != 1:
        raise ValueError(f"weak and gold labels differ in length: {weak_prob.shape} vs {gold.shape}")
    multi = weak_prob.ndim == 2
    covered, has_gold = ~np.isnan(weak_prob).any(axis=1) if multi else ~np.isnan(weak_prob), ~np.isnan(gold)
    if mix == "weak_only":
        has_gold = np.zeros_like(has_gold)
    weak = covered & ~has_gold
    source = np.where(has_gold, "gold", np.where(weak, "weak", "none"))
    if multi:
        k = weak_prob.shape[1]
        hard = np.eye(k)[np.where(has_gold, gold, 0).astype(int)]  # a gold row's one-hot target
        prob = np.where(has_gold[:, None], hard, weak_prob)
        weak_label = np.nan_to_num(weak_prob).argmax(axis=1)
        targets = {f"label_prob_{c}": prob[:, c] for c in range(k)}
    else:
        prob = np.where(has_gold, gold, weak_prob)
        weak_label = weak_prob >= 0.5
        targets = {"label_prob": prob}
    label = np.where(has_gold, gold, np.where(weak, weak_label, ABSTAIN)).astype(np.int64)
    weight = np.where(has_gold, 1.0, np.where(weak, 0.0 if mix == "gold_only" else weak_weight, 0.0))
    return pd.DataFrame({"label": label, **targets, "label_source": source, "label_weight": weight})


def label_counts(labels: pd.DataFrame) -> dict[str, dict[str, float]]:
    """Per source: rows, rows that train (weight > 0) and their total weight in the loss."""
    out = {}
    for src in SOURCES:
        rows = labels["label_source"] == src
        trains = rows & (labels["label_weight"] > 0)
        out[src] = {
            "rows": int(rows.sum()),
            "training_rows": int(trains.sum()),
            "weight": float(labels.loc[trains, "label_weight"].sum()),
        }
    return out


def replayed_gold(batch: pd.DataFrame, ds, budget: float, seed: int, held_out: np.ndarray) -> np.ndarray:
    """The gold labels that exist for a demo batch: the rows `gold_budget_mask` draws, their labels
    replayed from the dataset's source (nan for every other row, for rows the source lacks, and for
    `held_out` rows: the gold test set's labels are never handed to training)."""
    ids = batch[ds.ID_COLUMN]
    gold = np.full(len(batch), np.nan)
    mask = gold_budget_mask(ids.to_numpy(), budget, seed) & ~np.asarray(held_out, bool)
    if mask.any():
        truth = ds.load_source().drop_duplicates(ds.ID_COLUMN).set_index(ds.ID_COLUMN)[ds.GOLD_COLUMN]
        gold[mask] = truth.reindex(ids[mask].to_numpy()).to_numpy(dtype=np.float64)
    return gold


def hold_out(labels: pd.DataFrame, held_out: np.ndarray) -> pd.DataFrame:
    """Rows of the gold test set (a landing batch may carry some) never train: source none, weight 0
    (their LF label stays, for the contract's view of the batch)."""
    out = labels.copy()
    held_out = np.asarray(held_out, bool)
    out.loc[held_out, "label_source"] = "none"
    out.loc[held_out, "label_weight"] = 0.0
    return out
