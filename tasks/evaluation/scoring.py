"""Score the gold test set with a torch checkpoint or an ONNX model (one place for both)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import numpy as np
import pandas as pd

from tasks.evaluation.quality import classification_metrics


def load_gold_test(gold_dir: Path) -> pd.DataFrame:
    return pd.read_parquet(gold_dir / "test.parquet")


def predict_torch(model_path: Path, df: pd.DataFrame, ds: ModuleType) -> np.ndarray:
    """Probabilities of the checkpoint for raw rows of dataset plug-in `ds`."""
    from tasks.models import input_encoder, load_model, predict_proba

    model = load_model(model_path)
    return predict_proba(model, input_encoder(model, ds)(df))


def predict_onnx(onnx_path: Path, df: pd.DataFrame, ds: ModuleType) -> np.ndarray:
    """Probabilities of the served file for raw rows of dataset plug-in `ds`, read as the file says (its
    tokenizer, if any)."""
    from tasks.models import metadata_input_encoder
    from tasks.models.artifact import open_session, predict, read_metadata

    inputs = metadata_input_encoder(read_metadata(onnx_path), ds)
    return predict(open_session(onnx_path, threads=1), inputs(df))


def gold_quality(prob: np.ndarray, gold: pd.DataFrame, ds: ModuleType) -> dict[str, float]:
    return classification_metrics(gold[ds.GOLD_COLUMN].to_numpy(), prob)
