"""int8 quantization with onnxruntime: dynamic (MatMulInteger) and static QDQ per-channel.

Both run `quant_pre_process` first (shape inference and a basic optimization pass, as
onnxruntime recommends). Static quantization calibrates activation ranges on a sample of
training rows stratified by class: an empty sample, or one holding a single class (its
ranges would not cover the other class's activations), is refused.

Static QDQ quantizes only Gemm/MatMul (their inputs and weights): a quantized Sigmoid
output would map P(class 1) onto 256 levels and tie many scores, costing ROC AUC.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tasks.core.compression_config import Int8DynamicConfig, Int8StaticConfig
from tasks.core.errors import CompressionError
from tasks.core.files import atomic_write_with
from tasks.models.artifact import model_input

QUANTIZED_OPS = ("Gemm", "MatMul")
# Dynamic int8 also stores embedding tables (Gather's weights) as int8: most of a text model's bytes
# (a transformer of vocabulary 4,000 and width 128: 0.76 of fp32 without them, 0.26 with; stored uint8).
DYNAMIC_OPS = (*QUANTIZED_OPS, "Gather")


def _pre_process(src: Path, dst: Path) -> Path:
    from onnxruntime.quantization.shape_inference import quant_pre_process

    quant_pre_process(str(src), str(dst), skip_symbolic_shape=True)
    return dst


def quantize_dynamic_int8(src: Path, dst: Path, cfg: Int8DynamicConfig) -> Path:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    dst = Path(dst)
    pre = _pre_process(src, dst.with_name(f".{dst.stem}.pre.onnx"))
    try:
        atomic_write_with(
            dst,
            lambda tmp: quantize_dynamic(
                str(pre),
                str(tmp),
                weight_type=QuantType.QInt8,
                per_channel=cfg.per_channel,
                reduce_range=cfg.reduce_range,
                op_types_to_quantize=list(DYNAMIC_OPS),
            ),
        )
    finally:
        pre.unlink(missing_ok=True)
    return dst


def calibration_sample(X: np.ndarray, y: np.ndarray | None, rows: int, seed: int) -> np.ndarray:
    """Up to `rows` rows of X (the model's input: features or token ids), stratified by y;
    CompressionError if empty or one-class."""
    X = model_input(X)
    if X.ndim != 2 or len(X) == 0:
        raise CompressionError(
            f"calibration set is empty (shape {X.shape}): static int8 needs rows to calibrate activation ranges on"
        )
    if y is None:
        raise CompressionError(
            "static int8 calibration needs the rows' labels (CompressionData.y) to check both classes are present"
        )
    y = np.asarray(y).astype(int).reshape(-1)
    if len(y) != len(X):
        raise CompressionError(f"calibration labels ({len(y)}) and rows ({len(X)}) differ in length")
    classes, counts = np.unique(y, return_counts=True)
    if len(classes) < 2:
        raise CompressionError(
            f"calibration set is one-class: all {len(y)} rows are class {classes[0]}; "
            "activation ranges would not cover the other class"
        )
    rng = np.random.default_rng(seed)
    if len(X) <= rows:
        return X
    picked = []
    for c, n in zip(classes, counts):
        idx = np.flatnonzero(y == c)
        k = max(1, int(round(rows * n / len(y))))
        picked.append(rng.choice(idx, size=min(k, len(idx)), replace=False))
    return X[np.sort(np.concatenate(picked))]


class ArrayDataReader:
    """onnxruntime CalibrationDataReader over a numpy array, in batches."""

    def __init__(self, X: np.ndarray, input_name: str, batch: int = 64):
        self._batches = [{input_name: model_input(X[i : i + batch])} for i in range(0, len(X), batch)]
        self._next = 0

    def get_next(self):
        if self._next >= len(self._batches):
            return None
        self._next += 1
        return self._batches[self._next - 1]

    def rewind(self) -> None:
        self._next = 0


def quantize_static_int8(src: Path, dst: Path, cfg: Int8StaticConfig, X: np.ndarray, y: np.ndarray | None) -> Path:
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    sample = calibration_sample(X, y, cfg.calibration_rows, cfg.seed)
    import onnx

    dst = Path(dst)
    pre = _pre_process(src, dst.with_name(f".{dst.stem}.pre.onnx"))
    input_name = onnx.load(str(src), load_external_data=False).graph.input[0].name  # the plug-in's INPUT
    reader = type("Reader", (ArrayDataReader, CalibrationDataReader), {})(sample, input_name)
    method = {
        "minmax": CalibrationMethod.MinMax,
        "percentile": CalibrationMethod.Percentile,
        "entropy": CalibrationMethod.Entropy,
    }[cfg.method]
    act = {"int8": QuantType.QInt8, "uint8": QuantType.QUInt8}[cfg.activation_type]
    try:
        atomic_write_with(
            dst,
            lambda tmp: quantize_static(
                str(pre),
                str(tmp),
                reader,
                quant_format=QuantFormat.QDQ,
                per_channel=cfg.per_channel,
                reduce_range=cfg.reduce_range,
                activation_type=act,
                weight_type=QuantType.QInt8,
                calibrate_method=method,
                op_types_to_quantize=list(QUANTIZED_OPS),
            ),
        )
    finally:
        pre.unlink(missing_ok=True)
    return dst
