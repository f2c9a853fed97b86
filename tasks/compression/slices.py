"""Slices of the emails dataset's gold rows that every compressed candidate must hold up on.

Takes the raw gold frame (tasks/datasets/emails.py columns). The dataset has no `html`
column: its `format` flag (1: HTML, 0: plain text) is that split. To move into the dataset
plug-in interface later (a SLICES hook beside `featurize`).
"""
from __future__ import annotations

import numpy as np
import pandas as pd


def slices(df: pd.DataFrame) -> dict[str, np.ndarray]:
    """name -> boolean mask over df's rows: format=html/plain and number=none/small/big."""
    out = {"format=html": df["format"].to_numpy() == 1, "format=plain": df["format"].to_numpy() == 0}
    number = df["number"].astype(str).to_numpy()
    for value in ("none", "small", "big"):
        out[f"number={value}"] = number == value
    return {k: np.asarray(v, dtype=bool) for k, v in out.items()}
