"""Labeling functions of `moods`: one lexicon LF per class, voting it where a review has one of its words."""

import re

from tasks.labeling.lf import labeling_function, vote_where
from tests.toy.moods import TEXT_COLUMN, WORDS

BAD, FINE, GOOD = 0, 1, 2


def has_any(df, words) -> object:
    """Rows whose text holds one of `words` (a lexicon LF's condition; tests/toy/likes_lfs.py shares it)."""
    return df[TEXT_COLUMN].str.contains("|".join(re.escape(w) for w in words), regex=True)


@labeling_function()
def lf_bad_words(df):
    return vote_where(has_any(df, WORDS[BAD]), BAD)


@labeling_function()
def lf_fine_words(df):
    return vote_where(has_any(df, WORDS[FINE]), FINE)


@labeling_function()
def lf_good_words(df):
    return vote_where(has_any(df, WORDS[GOOD]), GOOD)


def make_lfs(dev, y_dev):
    return [lf_bad_words, lf_fine_words, lf_good_words]
