"""The demo dataset's raw schema and the model's feature vector (pure functions).

The OpenIntro `email` data: one row per email, counts and flags extracted from it,
no text. `featurize` is the one mapping from raw rows to model inputs; training,
evaluation, ONNX export and serving all call it.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

ID_COLUMN = "email_id"
TIME_COLUMN = "time"
GOLD_COLUMN = "spam"          # gold label: only in the gold dev/test sets, never in landing batches

# column -> kind; the raw contract (data_contracts/raw_batch.json) checks the same list.
BINARY_COLUMNS = ["to_multiple", "from", "sent_email", "format", "re_subj", "exclaim_subj", "urgent_subj"]
COUNT_COLUMNS = ["cc", "image", "attach", "dollar", "inherit", "viagra", "password", "line_breaks", "exclaim_mess"]
FLOAT_COLUMNS = ["num_char"]   # thousands of characters
CATEGORY_COLUMNS = {"winner": ["no", "yes"], "number": ["none", "small", "big"]}
RAW_COLUMNS = [ID_COLUMN, TIME_COLUMN, *BINARY_COLUMNS, *COUNT_COLUMNS, *FLOAT_COLUMNS, *CATEGORY_COLUMNS]

FEATURE_NAMES = (
    BINARY_COLUMNS
    + [f"log1p_{c}" for c in COUNT_COLUMNS + FLOAT_COLUMNS]
    + ["winner_yes"]
    + [f"number_{v}" for v in CATEGORY_COLUMNS["number"]]
)


def featurize(df: pd.DataFrame) -> np.ndarray:
    """Raw email rows -> float32 matrix [n, len(FEATURE_NAMES)] (unscaled; the model normalizes)."""
    parts = [df[c].to_numpy(dtype=np.float32)[:, None] for c in BINARY_COLUMNS]
    parts += [np.log1p(np.clip(df[c].to_numpy(dtype=np.float32), 0, None))[:, None]
              for c in COUNT_COLUMNS + FLOAT_COLUMNS]
    parts.append((df["winner"].astype(str) == "yes").to_numpy(dtype=np.float32)[:, None])
    number = df["number"].astype(str)
    parts += [(number == v).to_numpy(dtype=np.float32)[:, None] for v in CATEGORY_COLUMNS["number"]]
    x = np.concatenate(parts, axis=1) if len(df) else np.zeros((0, len(FEATURE_NAMES)), np.float32)
    assert x.shape[1] == len(FEATURE_NAMES)
    return x
