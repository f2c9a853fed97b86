"""Dataset `moods`: short coffee reviews of three classes, `mood`: 0 bad (about 35%), 1 fine (about 15%,
the minority), 2 good (about 50%). A K-class TEXT dataset that runs the whole nightly DAG (labeled by
lexicon LFs, contracts, a token model, the canary on a long-running server): tests/e2e/test_text_canary_e2e.py.
Each review has two words of its class, one word of another class in about one review in six (so the
LFs conflict and the labels are not free), and one to five filler words."""

from pathlib import Path

import numpy as np
import pandas as pd

from tests.toy import fault
from tests.toy.text import BAD, GOOD, lexicon_reviews
from tests.toy.text3 import FINE

NAME = "moods"
CLASS_NAMES = ("bad", "fine", "good")
WORDS = (BAD, FINE, GOOD)
LF_MODULE = "tests.toy.moods_lfs"
RAW_CONTRACT = str(Path(__file__).with_name("moods_raw.json"))
LABELED_CONTRACT = str(Path(__file__).with_name("moods_labeled.json"))
ID_COLUMN, TIME_COLUMN, GOLD_COLUMN = "review_id", None, "mood"
TEXT_COLUMN = "text"
RAW_COLUMNS = [ID_COLUMN, TEXT_COLUMN]
FEATURE_NAMES = ["n_chars"]  # a dense model's one feature; the token plug-ins read `texts`


def load_source(n: int = 1500, seed: int = 17) -> pd.DataFrame:
    return lexicon_reviews(WORDS, [0.35, 0.15, 0.5], n, seed, GOLD_COLUMN, id_prefix="m")


def texts(df: pd.DataFrame) -> list[str]:
    out = df[TEXT_COLUMN].astype(str).tolist()
    fault.check(out, "review(s) with the word {planted!r}")  # off unless a scenario plants it
    return out


def featurize(df: pd.DataFrame) -> np.ndarray:
    return df[TEXT_COLUMN].str.len().to_numpy(np.float32)[:, None]
