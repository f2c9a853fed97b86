import numpy as np
import pandas as pd

from tasks.plugins.emails import FEATURE_NAMES, featurize
from tests.conftest import row


def test_featurize_shape_and_encodings():
    df = pd.DataFrame([row(winner="yes", number="none", cc=3), row(number="big")])
    x = featurize(df)
    assert x.shape == (2, len(FEATURE_NAMES)) and x.dtype == np.float32
    col = {n: i for i, n in enumerate(FEATURE_NAMES)}
    assert x[0, col["winner_yes"]] == 1 and x[1, col["winner_yes"]] == 0
    assert x[0, col["number_none"]] == 1 and x[1, col["number_big"]] == 1 and x[1, col["number_none"]] == 0
    assert np.isclose(x[0, col["log1p_cc"]], np.log1p(3))


def test_featurize_empty_frame():
    assert featurize(pd.DataFrame([row()]).iloc[:0]).shape == (0, len(FEATURE_NAMES))
