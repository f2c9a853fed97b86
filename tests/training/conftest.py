"""Fixtures shared by the training tests."""

import numpy as np
import pytest

from tasks.registry import Registry


@pytest.fixture
def data_version(settings, emails, tmp_path):
    """A registry data version of 600 real rows; gold labels stand in for weak ones."""
    df = emails.iloc[:600].drop(columns=["spam"]).copy()
    df["label"] = emails["spam"].iloc[:600].to_numpy()
    df.loc[df.index[:30], "label"] = -1  # some rows every LF abstained on
    df["label_prob"] = df["label"].clip(lower=0).astype(float)
    df.loc[df["label"] == -1, "label_prob"] = np.nan
    path = tmp_path / "part.parquet"
    df.to_parquet(path, index=False)
    return Registry(settings).snapshot({"batch-0001": path}, {"rows_by_batch": {"batch-0001": len(df)}})["data_version"]
