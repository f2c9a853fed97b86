"""Labeling functions of `likes`: two lexicon LFs per class (the label model needs three or more), each
voting its class where a review has one of its half of the class's phrases."""

from tasks.labeling.lf import labeling_function, vote_where
from tests.toy.likes import WORDS
from tests.toy.moods_lfs import has_any

BAD, GOOD = 0, 1


@labeling_function()
def lf_bad_strong(df):
    return vote_where(has_any(df, WORDS[BAD][:3]), BAD)


@labeling_function()
def lf_bad_mild(df):
    return vote_where(has_any(df, WORDS[BAD][3:]), BAD)


@labeling_function()
def lf_good_strong(df):
    return vote_where(has_any(df, WORDS[GOOD][:3]), GOOD)


@labeling_function()
def lf_good_mild(df):
    return vote_where(has_any(df, WORDS[GOOD][3:]), GOOD)


def make_lfs(dev, y_dev):
    return [lf_bad_strong, lf_bad_mild, lf_good_strong, lf_good_mild]
