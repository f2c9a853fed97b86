"""What a model's ONNX artifact says of itself, read without the compression package: its metadata
(`sluice.compression`: chain, lineage, a text model's tokenizer), the input array it takes, and an
onnxruntime session that scores it (the one way every layer opens and runs a served file)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from tasks.core.errors import CompressionError

METADATA_KEY = "sluice.compression"


def model_input(X: np.ndarray) -> np.ndarray:
    """X as a model's input array: features as float32, token ids (integers) as int64."""
    X = np.asarray(X)
    return np.ascontiguousarray(X, dtype=np.int64 if X.dtype.kind in "iu" else np.float32)


def read_metadata(path: Path) -> dict[str, Any]:
    import onnx

    for p in onnx.load(str(path), load_external_data=False).metadata_props:
        if p.key == METADATA_KEY:
            return json.loads(p.value)
    return {}


def unknown_ops(path: Path) -> list[str]:
    """Ops of the default ONNX domain that the ONNX standard does not define (onnxruntime cannot run them)."""
    import onnx
    from onnx import defs

    model = onnx.load(str(path), load_external_data=False)
    return sorted(
        {
            f"{n.domain or 'ai.onnx'}::{n.op_type}"
            for n in model.graph.node
            if n.domain in ("", "ai.onnx") and not defs.has(n.op_type)
        }
    )


def open_session(path: Path, threads: int = 0):
    """An onnxruntime CPU session with `threads` intra-op threads (0, the default: onnxruntime's own
    choice, every core; latency is timed on 1, as a replica's thread serves it); CompressionError naming
    the cause if it cannot load. The thread count changes no output: onnxruntime splits a batch's work,
    not a sum (tested bit for bit on the MLP's and a transformer's fp32 exports; int8 checked by hand)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    try:
        return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - ORT raises several types; all mean "cannot run this model"
        bad = unknown_ops(Path(path))
        cause = f"unknown operator(s) {bad}" if bad else f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
        raise CompressionError(f"onnxruntime cannot run {Path(path).name}: {cause}") from exc


def predict(session, X: np.ndarray) -> np.ndarray:
    """The probabilities of rows X (features [n, f] or token ids [n, length]) as float64: binary,
    P(class 1) [n]; K classes, [n, K]."""
    name = session.get_inputs()[0].name
    out = session.run(None, {name: model_input(X)})[0].astype(np.float64)
    return out if out.ndim == 2 and out.shape[1] > 1 else out.reshape(-1)
