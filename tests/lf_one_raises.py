"""An LF module (weak_label.lf_module) with an LF that raises: the step must fail naming it."""

from tasks.labeling.lf import labeling_function
from tests.lf_all_abstain import _silent


@labeling_function()
def lf_subject_says_free(df):
    return df["subject_line"].str.contains("free")  # a column this dataset does not have


def make_lfs(dev, y_dev):
    return [_silent("lf_a"), _silent("lf_b"), lf_subject_says_free]
