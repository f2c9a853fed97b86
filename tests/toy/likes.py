"""Dataset `likes`: the coffee reviews of `moods` at two classes, `liked`: 0 bad (about 40%), 1 good, one
review in twenty rated against its words (so a model's test ROC AUC stays below 1 and a gate can be set
past it). The binary TEXT dataset that runs the whole nightly DAG (lexicon LFs, contracts, a token model,
canaries on long-running servers): the K = 2 text scenarios of tests/e2e/scenarios.py. Its raw batches
have the columns of moods', so they share its raw contract."""

from pathlib import Path

import pandas as pd

# moods' columns, so its texts (with the fault switch) and its one feature, re-exported as this plug-in's
from tests.toy.moods import featurize as featurize
from tests.toy.moods import texts as texts
from tests.toy.text import BAD, GOOD, lexicon_reviews

NAME = "likes"
WORDS = (BAD, GOOD)
LF_MODULE = "tests.toy.likes_lfs"
RAW_CONTRACT = str(Path(__file__).with_name("moods_raw.json"))
LABELED_CONTRACT = str(Path(__file__).with_name("labeled.json"))  # the binary toy's: labels -1, 0, 1
ID_COLUMN, TIME_COLUMN, GOLD_COLUMN = "review_id", None, "liked"
TEXT_COLUMN = "text"
RAW_COLUMNS = [ID_COLUMN, TEXT_COLUMN]
FEATURE_NAMES = ["n_chars"]  # a dense model's one feature; the token plug-ins read `texts`


def load_source(n: int = 1500, seed: int = 23) -> pd.DataFrame:
    return lexicon_reviews(WORDS, [0.4, 0.6], n, seed, GOLD_COLUMN, id_prefix="l", mislabeled=0.05)
