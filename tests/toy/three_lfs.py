"""Labeling functions of `toy3`: each votes one of its three classes, or abstains."""

from tasks.labeling.lf import labeling_function, vote_where

OK, OVERHEATING, LOOSE = 0, 1, 2


@labeling_function()
def lf_hot(df):
    return vote_where(df["temperature"] > 70, OVERHEATING)


@labeling_function()
def lf_shaking(df):
    return vote_where(df["vibration"] > 5.5, LOOSE)


@labeling_function()
def lf_cool_and_calm(df):
    return vote_where((df["temperature"] < 64) & (df["vibration"] < 3.5), OK)


@labeling_function()
def lf_calm(df):
    return vote_where(df["vibration"] < 2.5, OK)


def make_lfs(dev, y_dev):
    return [lf_hot, lf_shaking, lf_cool_and_calm, lf_calm]
