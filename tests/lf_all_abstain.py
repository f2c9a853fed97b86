"""An LF module (weak_label.lf_module) whose LFs never vote: the labeled contract must stop it."""

import numpy as np

from tasks.labeling.lf import ABSTAIN, labeling_function


def _silent(name):
    @labeling_function(name=name)
    def lf(df):
        return np.full(len(df), ABSTAIN)

    return lf


def make_lfs(dev, y_dev):
    return [_silent(f"lf_silent_{i}") for i in range(3)]
