"""Score the gold test set with a torch checkpoint or an ONNX model (one place for both)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from tasks.datasets import load_dataset
from tasks.evaluation.quality import classification_metrics


def load_gold_test(gold_dir: Path) -> pd.DataFrame:
    return pd.read_parquet(gold_dir / "test.parquet")


def predict_torch(model_path: Path, df: pd.DataFrame) -> np.ndarray:
    from tasks.models import input_encoder, load_model, predict_proba

    model = load_model(model_path)
    return predict_proba(model, input_encoder(model, load_dataset())(df))


def predict_onnx(onnx_path: Path, df: pd.DataFrame) -> np.ndarray:
    """P(positive) of the served file for raw rows, read as the file says (its tokenizer, if any)."""
    from tasks.models import metadata_input_encoder
    from tasks.models.artifact import open_session, predict, read_metadata

    inputs = metadata_input_encoder(read_metadata(onnx_path), load_dataset())
    return predict(open_session(onnx_path, threads=1), inputs(df))


def gold_quality(prob: np.ndarray, gold: pd.DataFrame) -> dict[str, float]:
    return classification_metrics(gold[load_dataset().GOLD_COLUMN].to_numpy(), prob)
