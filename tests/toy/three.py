"""Dataset `toy3`: the toy's sensor readings with three classes, `state`: 0 ok (about 70%),
1 overheating (about 15%: hot), 2 loose (about 15%: shaking). Proof that K classes run the nightly DAG."""

from pathlib import Path

import numpy as np
import pandas as pd

from tests.toy import dataset, fault

NAME = "toy3"
CLASS_NAMES = ("ok", "overheating", "loose")
LF_MODULE = "tests.toy.three_lfs"
RAW_CONTRACT = str(Path(__file__).with_name("raw.json"))  # the toy's readings: the same raw columns
LABELED_CONTRACT = str(Path(__file__).with_name("three_labeled.json"))
ID_COLUMN, TIME_COLUMN, GOLD_COLUMN = "reading_id", "taken_at", "state"
RAW_COLUMNS = [ID_COLUMN, TIME_COLUMN, "temperature", "vibration", "site"]
FEATURE_NAMES = ["temperature", "vibration", "site_north"]


def load_source() -> pd.DataFrame:
    rng = np.random.default_rng(13)
    n = 1500
    state = rng.choice(3, n, p=[0.7, 0.15, 0.15])
    return pd.DataFrame(
        {
            ID_COLUMN: np.arange(n),
            TIME_COLUMN: pd.date_range("2026-01-01", periods=n, freq="h").strftime("%Y-%m-%dT%H:%M:%SZ"),
            "temperature": rng.normal(60, 5, n) + 15 * (state == 1),
            "vibration": rng.gamma(2, 1, n) + 4 * (state == 2),
            "site": rng.choice(["north", "south"], n),
            GOLD_COLUMN: state,
        }
    )


def featurize(df: pd.DataFrame) -> np.ndarray:
    """The toy's features of the same readings; a scenario's planted fault names reading ids."""
    fault.check(df[ID_COLUMN], "reading(s) of the planted ids")
    return dataset.featurize(df)
