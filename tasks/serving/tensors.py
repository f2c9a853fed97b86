"""Open Inference Protocol tensors in and out: Triton's binary tensor extension, the model's one FP32
input decoded and checked against the served model, the scores encoded as JSON or binary. Pure."""

from __future__ import annotations

import json
from typing import Any, Optional

import numpy as np
from fastapi.responses import JSONResponse, Response

from tasks.serving.errors import ApiError
from tasks.serving.v2_models import InferenceRequest, InferenceResponse, RequestInput, ResponseOutput

BINARY_HEADER = "inference-header-content-length"


def split_binary(body: bytes, header_length: Optional[str]) -> tuple[bytes, bytes]:
    """An OIP request body -> (JSON part, binary tail). Triton's binary extension puts the JSON
    first, `Inference-Header-Content-Length` bytes long, then the raw tensors."""
    if header_length is None:
        return body, b""
    try:
        n = int(header_length)
    except ValueError:
        raise ApiError(400, f"Inference-Header-Content-Length must be an integer, got {header_length!r}") from None
    if not 0 < n <= len(body):
        raise ApiError(400, f"Inference-Header-Content-Length {n} is outside the body's {len(body)} bytes")
    return body[:n], body[n:]


def _shape(t: RequestInput, n_features: int, max_rows: int) -> tuple[int, int]:
    shape = t.shape
    if len(shape) != 2:
        raise ApiError(400, f"input {t.name!r} must have shape [n, {n_features}], got {shape!r}")
    n, width = shape
    if width != n_features:
        raise ApiError(400, f"input {t.name!r} must have {n_features} features per row, got shape {shape}")
    if n < 1:
        raise ApiError(400, f"empty batch: input {t.name!r} has shape {shape}")
    if n > max_rows:
        raise ApiError(413, f"batch of {n} rows is over the limit of {max_rows} rows")
    return n, width


def _values(t: RequestInput, tail: bytes, n: int, width: int) -> np.ndarray:
    size = (t.parameters or {}).get("binary_data_size")
    if size is not None:
        if not isinstance(size, int) or size != n * width * 4 or len(tail) < size:
            raise ApiError(
                400,
                f"binary_data_size {size!r} does not match shape {t.shape} of FP32 "
                f"({n * width * 4} bytes; {len(tail)} bytes follow the header)",
            )
        return np.frombuffer(tail[:size], dtype="<f4").reshape(n, width)
    if t.data is None:
        raise ApiError(400, f"input {t.name!r} has neither 'data' nor binary_data_size")
    try:
        x = np.asarray(t.data, dtype=np.float32).reshape(-1)
    except (ValueError, TypeError) as exc:
        raise ApiError(400, f"input {t.name!r} data must be numbers: {exc}") from None
    if x.size != n * width:
        raise ApiError(400, f"input {t.name!r} holds {x.size} values, shape {t.shape} needs {n * width}")
    return x.reshape(n, width)


def input_features(req: InferenceRequest, tail: bytes, input_name: str, n_features: int, max_rows: int) -> np.ndarray:
    """The one FP32 input tensor [n, n_features] of an OIP request, checked against the served model."""
    if len(req.inputs) != 1:
        raise ApiError(400, f"expected 'inputs' to hold exactly one tensor named {input_name!r}")
    (t,) = req.inputs
    if t.name != input_name:
        raise ApiError(400, f"unknown input {t.name!r}; the model's input is {input_name!r}")
    if t.datatype != "FP32":
        raise ApiError(400, f"input {input_name!r} must be FP32, got {t.datatype!r}")
    n, width = _shape(t, n_features, max_rows)
    x = _values(t, tail, n, width)
    if not np.all(np.isfinite(x)):
        bad = int(np.argwhere(~np.isfinite(x))[0][0])
        raise ApiError(400, f"input {input_name!r} holds NaN or infinite values (first in row {bad})")
    return np.ascontiguousarray(x)


def check_outputs(req: InferenceRequest, output_name: str, variant: str) -> None:
    for o in req.outputs or []:
        if o.name != output_name:
            raise ApiError(400, f"unknown output {o.name!r}; the model's output is {output_name!r}", variant)


def wants_binary(req: InferenceRequest) -> bool:
    if (req.parameters or {}).get("binary_data_output"):
        return True
    return any((o.parameters or {}).get("binary_data") for o in req.outputs or [])


def infer_response(
    req: InferenceRequest, scores: np.ndarray, output_name: str, head: dict[str, Any], headers: dict[str, str]
) -> Response:
    """The scores as the request asked: JSON `data`, or Triton's binary extension (the JSON part,
    `Inference-Header-Content-Length` bytes, then the raw FP32 scores). `head`: the response's
    model_name, model_version, id, parameters."""
    out = ResponseOutput(name=output_name, datatype="FP32", shape=[len(scores)])
    if not wants_binary(req):
        out.data = [float(s) for s in scores.astype(np.float32)]
        body = InferenceResponse(**head, outputs=[out]).model_dump(exclude_none=True)
        return JSONResponse(body, headers=headers)
    raw = scores.astype("<f4").tobytes()
    out.parameters = {"binary_data_size": len(raw)}
    js = json.dumps(InferenceResponse(**head, outputs=[out]).model_dump(exclude_none=True)).encode()
    return Response(
        js + raw,
        media_type="application/octet-stream",
        headers={**headers, "Inference-Header-Content-Length": str(len(js))},
    )
