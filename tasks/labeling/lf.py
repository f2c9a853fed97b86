"""Vectorized labeling functions: each maps a whole DataFrame to a vote per row.

A vote is a class index 0..K-1 (a dataset plug-in names its classes) or ABSTAIN (Snorkel's convention: -1). Working on
columns rather than rows keeps LF application to numpy speed; the resulting
label matrix is what Snorkel's LFAnalysis and LabelModel take.

A rule LF is written with column expressions that also hold for one row (a pandas
Series), so the same function runs under Snorkel's row-wise appliers too
(`LabelingFunction.to_snorkel`): one definition, two appliers, comparable.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd

from tasks.core.log import Progress

ABSTAIN = -1


@dataclass
class LabelingFunction:
    name: str
    fn: Callable[[pd.DataFrame], np.ndarray]
    doc: str = ""
    # Votes on the gold dev rows, when they must not come from `fn` itself: a model-based LF
    # fitted on the dev set votes there out of fold, so its dev accuracy is not inflated.
    dev_votes: np.ndarray | None = None

    def row(self, x: "pd.Series") -> int:
        """One row's vote (for Snorkel's row-wise appliers)."""
        return int(self.fn(x))

    def to_snorkel(self):
        from snorkel.labeling import LabelingFunction as SnorkelLF

        return SnorkelLF(name=self.name, f=self.row)

    def __call__(self, df: pd.DataFrame, classes: int = 2) -> np.ndarray:
        """The votes on `df`'s rows, each checked to be ABSTAIN or one of the `classes` classes."""
        votes = np.asarray(self.fn(df))
        if votes.shape != (len(df),):
            raise ValueError(f"LF {self.name} returned shape {votes.shape}, expected ({len(df)},)")
        bad = ~np.isin(votes, (ABSTAIN, *range(classes)))
        if bad.any():
            raise ValueError(
                f"LF {self.name} voted {np.unique(votes[bad])[:5].tolist()}: a vote is -1 (abstain) or one of "
                f"the {classes} classes 0..{classes - 1}"
            )
        return votes.astype(np.int8)


def labeling_function(name: str | None = None):
    """Decorator: `@labeling_function()` over `def lf(df) -> np.ndarray`."""

    def wrap(fn: Callable[[pd.DataFrame], np.ndarray]) -> LabelingFunction:
        return LabelingFunction(name=name or fn.__name__, fn=fn, doc=(fn.__doc__ or "").strip())

    return wrap


def vote_where(mask: pd.Series | np.ndarray, label: int) -> np.ndarray:
    """`label` where mask is true, ABSTAIN elsewhere."""
    return np.where(np.asarray(mask, dtype=bool), label, ABSTAIN).astype(np.int8)


def apply_lfs_dev(dev: pd.DataFrame, lfs: list[LabelingFunction], classes: int = 2) -> np.ndarray:
    """Label matrix of the gold dev set: out-of-fold votes where an LF provides them."""
    L = apply_lfs(dev, lfs, classes)
    for j, lf in enumerate(lfs):
        if lf.dev_votes is not None:
            L[:, j] = lf.dev_votes
    return L


def apply_lfs(df: pd.DataFrame, lfs: list[LabelingFunction], classes: int = 2) -> np.ndarray:
    """Label matrix L [n_rows, n_lfs] of votes in -1..classes-1; an LF that raises, or votes a class
    that does not exist, fails loudly with its name."""
    cols, tracker = [], Progress(f"labeling {len(df)} rows", len(lfs), unit="LF", first=False)
    for lf in lfs:
        try:
            cols.append(lf(df, classes))
        except Exception as exc:  # noqa: BLE001 - re-raised with the LF named
            raise RuntimeError(f"labeling function {lf.name!r} failed: {type(exc).__name__}: {exc}") from exc
        tracker.update(len(cols))  # 'labeling 500 rows: LF 3/11 (27%), 40 LFs/s, ETA 0 s'
    return np.column_stack(cols) if cols else np.zeros((len(df), 0), np.int8)


VOTES_FILE = "lf_votes.parquet"  # per run: the votes the labeling queue reads (tasks/fill_queue.py)
ROW_ID = "_row_id"
LABEL_MODEL_PROB = "_label_model_prob"


def votes_frame(ids: pd.Series, L: np.ndarray, names: list[str], prob: np.ndarray) -> pd.DataFrame:
    """Per batch row: its id, each LF's vote and the label model's P(positive) (nan: no LF voted); with
    K classes, its probability of each class k (`_label_model_prob_<k>`)."""
    frame = pd.DataFrame(np.asarray(L, np.int8), columns=names)
    frame.insert(0, ROW_ID, ids.astype(str).to_numpy())
    prob = np.asarray(prob, np.float64)
    if prob.ndim == 1:
        frame[LABEL_MODEL_PROB] = prob
    else:
        for k in range(prob.shape[1]):
            frame[f"{LABEL_MODEL_PROB}_{k}"] = prob[:, k]
    return frame


def votes_probabilities(votes: pd.DataFrame) -> np.ndarray:
    """The label model's probabilities a `votes_frame` holds: [n] (binary) or [n, K]."""
    if LABEL_MODEL_PROB in votes:
        return votes[LABEL_MODEL_PROB].to_numpy(np.float64)
    k = sum(1 for c in votes.columns if c.startswith(f"{LABEL_MODEL_PROB}_"))
    return votes[[f"{LABEL_MODEL_PROB}_{c}" for c in range(k)]].to_numpy(np.float64)
