"""Dataset `toy`: synthetic sensor readings, a gold `faulty` flag (about 15%)."""

from pathlib import Path

import numpy as np
import pandas as pd

NAME = "toy"
LF_MODULE = "tests.toy.lfs"
RAW_CONTRACT = str(Path(__file__).with_name("raw.json"))
LABELED_CONTRACT = str(Path(__file__).with_name("labeled.json"))
ID_COLUMN, TIME_COLUMN, GOLD_COLUMN = "reading_id", "taken_at", "faulty"
RAW_COLUMNS = [ID_COLUMN, TIME_COLUMN, "temperature", "vibration", "site"]
FEATURE_NAMES = ["temperature", "vibration", "site_north"]


def load_source() -> pd.DataFrame:
    rng = np.random.default_rng(11)
    n = 1500
    faulty = (rng.random(n) < 0.15).astype(int)
    return pd.DataFrame(
        {
            ID_COLUMN: np.arange(n),
            TIME_COLUMN: pd.date_range("2026-01-01", periods=n, freq="h").strftime("%Y-%m-%dT%H:%M:%SZ"),
            "temperature": rng.normal(60, 5, n) + 15 * faulty,
            "vibration": rng.gamma(2, 1, n) + 3 * faulty,
            "site": rng.choice(["north", "south"], n),
            GOLD_COLUMN: faulty,
        }
    )


def featurize(df: pd.DataFrame) -> np.ndarray:
    return np.column_stack(
        [
            df["temperature"].to_numpy(np.float32),
            df["vibration"].to_numpy(np.float32),
            (df["site"] == "north").to_numpy(np.float32),
        ]
    ).astype(np.float32)
