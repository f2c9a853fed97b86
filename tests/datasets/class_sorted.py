"""Dataset `toy_sorted`: the toy sensor readings exported sorted by class (every healthy reading, then every
faulty one, ids in that order) and declaring no time column. Replayed in source order, its nightly batches
would each hold one class; it asks the demo feed to shuffle them (`replay_order = "shuffle"`)."""

import pandas as pd

from tests.toy import dataset as toy

NAME = "toy_sorted"
LF_MODULE, RAW_CONTRACT, LABELED_CONTRACT = toy.LF_MODULE, toy.RAW_CONTRACT, toy.LABELED_CONTRACT
ID_COLUMN, GOLD_COLUMN = toy.ID_COLUMN, toy.GOLD_COLUMN
TIME_COLUMN = None  # no column orders the rows in time
RAW_COLUMNS, FEATURE_NAMES, featurize = toy.RAW_COLUMNS, toy.FEATURE_NAMES, toy.featurize
replay_order = "shuffle"


def load_source() -> pd.DataFrame:
    df = toy.load_source().sort_values(GOLD_COLUMN, kind="stable").reset_index(drop=True)
    return df.assign(**{ID_COLUMN: range(len(df))})
