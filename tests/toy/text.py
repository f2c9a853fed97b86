"""Dataset `toy_text`: short synthetic product reviews, a gold `liked` flag (tests of the token
model plug-ins). Its features are only the text's length: the text models read `texts`."""

import numpy as np
import pandas as pd

NAME = "toy_text"
LF_MODULE = "tests.toy.lfs"
RAW_CONTRACT = LABELED_CONTRACT = "unused"
ID_COLUMN, TIME_COLUMN, GOLD_COLUMN = "review_id", None, "liked"
TEXT_COLUMN = "text"
RAW_COLUMNS = [ID_COLUMN, TEXT_COLUMN]
FEATURE_NAMES = ["n_chars"]
GOOD = ["great taste", "love it", "best coffee ever", "highly recommend", "delicious and fresh"]
BAD = ["stale and awful", "waste of money", "disappointed", "tastes bad", "never again"]
FILLER = ["the", "a", "box", "bag", "price", "arrived", "today"]


def load_source(n: int = 600, seed: int = 3) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    liked = rng.integers(0, 2, n)
    text = [
        " ".join([*rng.choice(GOOD if y else BAD, size=2), *rng.choice(FILLER, size=int(rng.integers(1, 6)))])
        for y in liked
    ]
    return pd.DataFrame({ID_COLUMN: np.arange(n), TEXT_COLUMN: text, GOLD_COLUMN: liked})


def lexicon_reviews(words, shares, n, seed, gold_column, id_prefix, mislabeled: float = 0.0) -> pd.DataFrame:
    """Reviews of K = len(words) classes drawn with `shares`: two phrases of the review's class, one phrase
    of another class in about one review in six (so lexicon LFs conflict and the labels are not free), and
    one to five filler words; ids `<id_prefix><i>`; a `mislabeled` share of the rows then given another
    class as gold (its words say one thing, its rating another: no model ranks them all). The toy text
    datasets that run whole nights draw theirs here (tests/toy/moods.py, tests/toy/likes.py)."""
    rng = np.random.default_rng(seed)
    k = len(words)
    gold = rng.choice(k, n, p=shares)
    text = []
    for g in gold:
        phrases = list(rng.choice(words[g], size=2))
        if rng.random() < 1 / 6:
            phrases.append(rng.choice(words[rng.choice([c for c in range(k) if c != g])]))
        phrases += list(rng.choice(FILLER, size=int(rng.integers(1, 6))))
        text.append(" ".join(rng.permutation(phrases)))
    if mislabeled:
        flip = rng.random(n) < mislabeled
        gold[flip] = (gold[flip] + rng.integers(1, k, flip.sum())) % k
    return pd.DataFrame({ID_COLUMN: [f"{id_prefix}{i}" for i in range(n)], TEXT_COLUMN: text, gold_column: gold})


def texts(df: pd.DataFrame) -> list[str]:
    return df[TEXT_COLUMN].astype(str).tolist()


def featurize(df: pd.DataFrame) -> np.ndarray:
    return df[TEXT_COLUMN].str.len().to_numpy(np.float32)[:, None]
