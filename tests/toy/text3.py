"""Dataset `toy_text3`: the toy reviews with three classes, `mood`: 0 bad, 1 fine (lukewarm words), 2
good. A served text model of K classes reads it (tests/serving/test_k_class_serving.py)."""

from pathlib import Path

import numpy as np
import pandas as pd

from tests.toy.text import BAD, FILLER, GOOD

NAME = "toy_text3"
CLASS_NAMES = ("bad", "fine", "good")
LF_MODULE = "tests.toy.lfs"  # not labeled nightly: only served
RAW_CONTRACT = str(Path(__file__).with_name("text3_raw.json"))
LABELED_CONTRACT = "unused"
ID_COLUMN, TIME_COLUMN, GOLD_COLUMN = "review_id", None, "mood"
TEXT_COLUMN = "text"
RAW_COLUMNS = [ID_COLUMN, TEXT_COLUMN]
FEATURE_NAMES = ["n_chars"]
FINE = ["it is ok", "fine I guess", "nothing special", "average coffee", "does the job"]


def load_source(n: int = 900, seed: int = 5) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    mood = rng.integers(0, 3, n)
    words = (BAD, FINE, GOOD)
    text = [" ".join([*rng.choice(words[m], size=2), *rng.choice(FILLER, size=int(rng.integers(1, 6)))]) for m in mood]
    return pd.DataFrame({ID_COLUMN: np.arange(n), TEXT_COLUMN: text, GOLD_COLUMN: mood})


def texts(df: pd.DataFrame) -> list[str]:
    return df[TEXT_COLUMN].astype(str).tolist()


def featurize(df: pd.DataFrame) -> np.ndarray:
    return df[TEXT_COLUMN].str.len().to_numpy(np.float32)[:, None]
