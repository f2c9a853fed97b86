"""Open Inference Protocol tensors in and out: Triton's binary tensor extension, the model's one input
decoded and checked against the served model (FP32 features; a text model's INT64 ids, or BYTES text
that its own tokenizer encodes), the scores encoded as JSON or binary. Pure."""

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
    return _numbers(t, tail, n * width, "<f4", 4, "FP32").astype(np.float32).reshape(n, width)


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


TEXT_INPUT = "text"  # a text model's BYTES input (Triton's convention for strings): one text per row


def model_input(req: InferenceRequest, tail: bytes, model: Any, max_rows: int) -> tuple[np.ndarray, list[Any] | None]:
    """The served model's input array from an OIP request, and what the log keeps of each row (None:
    the array's rows). Dense models take FP32 [n, n_features]; text models INT64 ids [n, length]
    (length <= max_len, padded here with id 0) or BYTES text [n] named `text`."""
    if not model.takes_tokens:
        return input_features(req, tail, model.input_name, model.n_features, max_rows), None
    if len(req.inputs) != 1:
        raise ApiError(400, f"expected 'inputs' to hold exactly one tensor: {model.input_name!r} or {TEXT_INPUT!r}")
    (t,) = req.inputs
    if t.name == TEXT_INPUT:
        if t.datatype != "BYTES":
            raise ApiError(400, f"input {TEXT_INPUT!r} must be BYTES (one text per row), got {t.datatype!r}")
        texts = _texts(t, tail, max_rows)
        return model.encoder.encode(texts), texts
    if t.name != model.input_name:
        raise ApiError(400, f"unknown input {t.name!r}; the model takes {model.input_name!r} (INT64) or {TEXT_INPUT!r}")
    if t.datatype != "INT64":
        raise ApiError(400, f"input {model.input_name!r} must be INT64 token ids, got {t.datatype!r}")
    if len(t.shape) != 2 or not 1 <= t.shape[1] <= model.n_features:
        raise ApiError(400, f"input {model.input_name!r} must have shape [n, 1..{model.n_features}], got {t.shape}")
    n, length = t.shape
    if n < 1:
        raise ApiError(400, f"empty batch: input {t.name!r} has shape {t.shape}")
    if n > max_rows:
        raise ApiError(413, f"batch of {n} rows is over the limit of {max_rows} rows")
    ids = _numbers(t, tail, n * length, "<i8", 8, "INT64").reshape(n, length).astype(np.int64)
    if ids.size and (ids.min() < 0 or ids.max() >= model.encoder.vocab_size):
        raise ApiError(400, f"input {t.name!r} holds ids outside 0..{model.encoder.vocab_size - 1}")
    return np.ascontiguousarray(np.pad(ids, ((0, 0), (0, model.n_features - length)))), None


def _numbers(t: RequestInput, tail: bytes, count: int, dtype: str, width: int, name: str) -> np.ndarray:
    """A numeric tensor's `count` values: the binary extension's bytes (`dtype`, `width` bytes each) or
    JSON `data`; INT64 values must be whole numbers."""
    size = (t.parameters or {}).get("binary_data_size")
    if size is not None:
        if not isinstance(size, int) or size != count * width or len(tail) < size:
            raise ApiError(
                400,
                f"binary_data_size {size!r} does not match shape {t.shape} of {name} "
                f"({count * width} bytes; {len(tail)} bytes follow the header)",
            )
        return np.frombuffer(tail[:size], dtype=dtype)
    if t.data is None:
        raise ApiError(400, f"input {t.name!r} has neither 'data' nor binary_data_size")
    try:
        x = np.asarray(t.data, dtype=np.float64 if name == "INT64" else np.float32).reshape(-1)
    except (ValueError, TypeError) as exc:
        raise ApiError(400, f"input {t.name!r} data must be numbers: {exc}") from None
    if x.size != count:
        raise ApiError(400, f"input {t.name!r} holds {x.size} values, shape {t.shape} needs {count}")
    if name == "INT64" and not (np.all(np.isfinite(x)) and np.all(x == np.round(x))):
        raise ApiError(400, f"input {t.name!r} must hold whole numbers (INT64 token ids)")
    return x


def _texts(t: RequestInput, tail: bytes, max_rows: int) -> list[str]:
    """A BYTES tensor's texts: JSON strings, or the binary extension's elements (a 4-byte little-endian
    length, then that many bytes), each valid UTF-8."""
    if len(t.shape) not in (1, 2) or (len(t.shape) == 2 and t.shape[1] != 1):
        raise ApiError(400, f"input {TEXT_INPUT!r} must have shape [n] or [n, 1], got {t.shape}")
    n = t.shape[0]
    if n < 1:
        raise ApiError(400, f"empty batch: input {TEXT_INPUT!r} has shape {t.shape}")
    if n > max_rows:
        raise ApiError(413, f"batch of {n} rows is over the limit of {max_rows} rows")
    size = (t.parameters or {}).get("binary_data_size")
    if size is None:
        data = t.data if isinstance(t.data, list) else None
        flat = [v for row in data for v in (row if isinstance(row, list) else [row])] if data is not None else None
        if flat is None or len(flat) != n or not all(isinstance(v, str) for v in flat):
            raise ApiError(400, f"input {TEXT_INPUT!r} must hold {n} strings in 'data' (or binary_data_size)")
        return _not_blank(flat)
    if not isinstance(size, int) or len(tail) < size:
        raise ApiError(400, f"binary_data_size {size!r} is more than the {len(tail)} bytes after the header")
    raw, out, at = tail[:size], [], 0
    for i in range(n):
        if at + 4 > len(raw):
            raise ApiError(400, f"BYTES element {i} of {TEXT_INPUT!r} is cut short (no length prefix)")
        length = int.from_bytes(raw[at : at + 4], "little")
        chunk, at = raw[at + 4 : at + 4 + length], at + 4 + length
        if len(chunk) != length:
            raise ApiError(400, f"BYTES element {i} of {TEXT_INPUT!r} is cut short ({len(chunk)} of {length} bytes)")
        try:
            out.append(chunk.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise ApiError(
                400, f"BYTES element {i} of {TEXT_INPUT!r} is not UTF-8 text: {exc.reason} at byte {exc.start}"
            ) from None
    if at != len(raw):
        raise ApiError(400, f"input {TEXT_INPUT!r} holds {len(raw) - at} bytes past its {n} elements")
    return _not_blank(out)


def _not_blank(texts: list[str]) -> list[str]:
    """Empty or whitespace-only text is refused, as /v1/predict refuses it (a text column's raw contract
    holds it to a non-space character): both routes answer the same text the same way."""
    blank = [i for i, t in enumerate(texts) if not t.strip()]
    if blank:
        raise ApiError(
            400, f"input {TEXT_INPUT!r} element(s) {blank[:10]} are empty or whitespace only: no text to score"
        )
    return texts


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
    """The scores ([n], or [n, K] class probabilities) as the request asked: JSON `data`, or Triton's
    binary extension (the JSON part, `Inference-Header-Content-Length` bytes, then the raw FP32
    scores). `head`: the response's model_name, model_version, id, parameters."""
    out = ResponseOutput(name=output_name, datatype="FP32", shape=list(scores.shape))  # [n], or [n, K]
    if not wants_binary(req):
        out.data = [float(s) for s in scores.astype(np.float32).reshape(-1)]  # row-major, as OIP lays a tensor
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
