from tasks.labeling.lf import labeling_function, vote_where

HAM, SPAM = 0, 1  # the toy's classes: normal, faulty

FAULT, OK = SPAM, HAM  # the pipeline's positive / negative classes


@labeling_function()
def lf_hot(df):
    return vote_where(df["temperature"] > 70, FAULT)


@labeling_function()
def lf_shaking(df):
    return vote_where(df["vibration"] > 5, FAULT)


@labeling_function()
def lf_cool(df):
    return vote_where(df["temperature"] < 62, OK)


@labeling_function()
def lf_calm(df):
    return vote_where(df["vibration"] < 2.5, OK)


def make_lfs(dev, y_dev):
    return [lf_hot, lf_shaking, lf_cool, lf_calm]
