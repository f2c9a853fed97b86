"""What a model's ONNX artifact says of itself, read without the compression package: its metadata
(`sluice.compression`: chain, lineage, a text model's tokenizer) and the input array it takes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

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
