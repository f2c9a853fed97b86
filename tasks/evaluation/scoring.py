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
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(onnx_path), opts, providers=["CPUExecutionProvider"])
    from tasks.models import metadata_input_encoder
    from tasks.models.artifact import model_input, read_metadata

    inputs = metadata_input_encoder(read_metadata(onnx_path), load_dataset())
    name = sess.get_inputs()[0].name
    return sess.run(None, {name: model_input(inputs(df))})[0].reshape(-1).astype(np.float64)


def gold_quality(prob: np.ndarray, gold: pd.DataFrame) -> dict[str, float]:
    return classification_metrics(gold[load_dataset().GOLD_COLUMN].to_numpy(), prob)
