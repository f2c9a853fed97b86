"""The HTTP routes: Open Inference Protocol v2 (KServe's and Triton's REST protocol, with
Triton's binary tensor extension so their clients work unchanged), /v1/predict on raw rows,
/v1/feedback, /metrics. Read-only towards the registry: no endpoint changes what is served.

Routes take the current Snapshot once per request and finish on it, so a swap in the follower
thread never fails a request in flight. Models here are small MLPs (tens of microseconds per
batch), so scoring runs inline on the event loop: a thread hop would cost more than the model.

Every error is a JSON body {"error": "<what was wrong>"} (the shape Triton's and KServe's
clients read) with a 4xx status for anything the caller can fix.

(No `from __future__ import annotations` here: FastAPI reads the generated request models
from the endpoints' annotations at route creation.)
"""

import json
import queue
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response

from tasks.core.log import log
from tasks.serving.metrics import ServerMetrics
from tasks.serving.predlog import PredictionLog, error_record, feedback_records, prediction_records
from tasks.serving.schema import FeedbackRequest, predict_request_model
from tasks.serving.split import CHALLENGER, CHAMPION, choose_variant
from tasks.serving.variants import LoadedModel, ScoreError, Snapshot, Variants

PLATFORM = "onnxruntime_onnx"
KEY_HEADER = "x-sluice-key"
BINARY_HEADER = "inference-header-content-length"
REQUEST_INDEX_SIZE = 200_000  # request ids remembered for feedback (about 100 B each)
SHADOW_QUEUE = 256


class ApiError(Exception):
    def __init__(self, status: int, message: str, variant: str = "none"):
        super().__init__(message)
        self.status, self.message, self.variant = status, message, variant


@dataclass
class ServingContext:
    """Everything the routes need, built once at start (see tasks/serving/__main__.py)."""

    dataset: Any
    row_model: Any
    variants: Variants
    metrics: ServerMetrics
    predlog: PredictionLog
    max_rows: int
    max_body_bytes: int
    requests: "OrderedDict[str, int]" = field(default_factory=OrderedDict)
    requests_lock: threading.Lock = field(default_factory=threading.Lock)
    shadow_queue: "queue.Queue[Any]" = field(default_factory=lambda: queue.Queue(maxsize=SHADOW_QUEUE))

    def remember(self, request_id: str, rows: int) -> None:
        with self.requests_lock:
            self.requests[request_id] = rows
            while len(self.requests) > REQUEST_INDEX_SIZE:
                self.requests.popitem(last=False)

    def rows_of(self, request_id: str) -> Optional[int]:
        with self.requests_lock:
            return self.requests.get(request_id)


# ---- pure helpers -----------------------------------------------------------------------------
def endpoint_of(path: str) -> str:
    if path.endswith("/infer"):
        return "infer"
    return {"/v1/predict": "predict", "/v1/feedback": "feedback"}.get(path, "other")


def describe_validation(errors: list[dict[str, Any]]) -> tuple[int, str]:
    """FastAPI/pydantic errors -> (status, one message naming each problem's place). Pure."""
    parts, status = [], 422
    for e in errors[:10]:
        loc = [p for p in e.get("loc", ()) if p != "body"]
        if e.get("type") == "json_invalid":
            status = 400
            parts.append(
                f"malformed JSON at character {loc[0] if loc else '?'}: "
                f"{(e.get('ctx') or {}).get('error', e.get('msg'))}"
            )
            continue
        where = ""
        for p in loc:
            where += f"[{p}]" if isinstance(p, int) else (f".{p}" if where else str(p))
        msg = e.get("msg", "invalid")
        if e.get("type") == "extra_forbidden":
            msg = "unknown column" if len(loc) >= 3 and loc[0] == "rows" else "unknown field"
        elif e.get("type") == "missing":
            msg = "missing column" if len(loc) >= 3 and loc[0] == "rows" else "missing field"
        parts.append(f"{where or 'body'}: {msg}")
    if len(errors) > 10:
        parts.append(f"... and {len(errors) - 10} more")
    return status, "; ".join(parts)


def parse_infer_body(body: bytes, header_length: Optional[str]) -> tuple[dict[str, Any], bytes]:
    """An OIP request body -> (JSON part, binary tail). Triton's binary extension puts the JSON
    first, `Inference-Header-Content-Length` bytes long, then the raw tensors. Pure."""
    if header_length is not None:
        try:
            n = int(header_length)
        except ValueError:
            raise ApiError(400, f"Inference-Header-Content-Length must be an integer, got {header_length!r}") from None
        if not 0 < n <= len(body):
            raise ApiError(400, f"Inference-Header-Content-Length {n} is outside the body's {len(body)} bytes")
        head, tail = body[:n], body[n:]
    else:
        head, tail = body, b""
    try:
        req = json.loads(head)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ApiError(400, f"malformed JSON: {exc}") from None
    if not isinstance(req, dict):
        raise ApiError(400, "the inference request must be a JSON object")
    return req, tail


def infer_features(req: dict[str, Any], tail: bytes, input_name: str, n_features: int, max_rows: int) -> np.ndarray:
    """The one FP32 input tensor [n, n_features] of an OIP request, checked. Pure."""
    inputs = req.get("inputs")
    if not isinstance(inputs, list) or len(inputs) != 1 or not isinstance(inputs[0], dict):
        raise ApiError(400, f"expected 'inputs' to hold exactly one tensor named {input_name!r}")
    t = inputs[0]
    if t.get("name") != input_name:
        raise ApiError(400, f"unknown input {t.get('name')!r}; the model's input is {input_name!r}")
    if t.get("datatype") != "FP32":
        raise ApiError(400, f"input {input_name!r} must be FP32, got {t.get('datatype')!r}")
    shape = t.get("shape")
    if not (
        isinstance(shape, list)
        and len(shape) == 2
        and all(isinstance(d, int) and not isinstance(d, bool) for d in shape)
    ):
        raise ApiError(400, f"input {input_name!r} must have shape [n, {n_features}], got {shape!r}")
    n, width = shape
    if width != n_features:
        raise ApiError(400, f"input {input_name!r} must have {n_features} features per row, got shape {shape}")
    if n < 1:
        raise ApiError(400, f"empty batch: input {input_name!r} has shape {shape}")
    if n > max_rows:
        raise ApiError(413, f"batch of {n} rows is over the limit of {max_rows} rows")
    params = t.get("parameters") or {}
    size = params.get("binary_data_size") if isinstance(params, dict) else None
    if size is not None:
        if not isinstance(size, int) or size != n * width * 4 or len(tail) < size:
            raise ApiError(
                400,
                f"binary_data_size {size!r} does not match shape {shape} of FP32 "
                f"({n * width * 4} bytes; {len(tail)} bytes follow the header)",
            )
        x = np.frombuffer(tail[:size], dtype="<f4").reshape(n, width)
    else:
        data = t.get("data")
        if data is None:
            raise ApiError(400, f"input {input_name!r} has neither 'data' nor binary_data_size")
        try:
            x = np.asarray(data, dtype=np.float32).reshape(-1)
        except (ValueError, TypeError) as exc:
            raise ApiError(400, f"input {input_name!r} data must be numbers: {exc}") from None
        if x.size != n * width:
            raise ApiError(400, f"input {input_name!r} holds {x.size} values, shape {shape} needs {n * width}")
        x = x.reshape(n, width)
    if not np.all(np.isfinite(x)):
        bad = int(np.argwhere(~np.isfinite(x))[0][0])
        raise ApiError(400, f"input {input_name!r} holds NaN or infinite values (first in row {bad})")
    return np.ascontiguousarray(x)


def wants_binary(req: dict[str, Any]) -> bool:
    params = req.get("parameters") or {}
    if isinstance(params, dict) and params.get("binary_data_output"):
        return True
    for o in req.get("outputs") or []:
        if isinstance(o, dict) and (o.get("parameters") or {}).get("binary_data"):
            return True
    return False


# ---- the app ----------------------------------------------------------------------------------
class BodyLimit:
    """Refuses bodies over `max_bytes` (413) before they are read whole: by Content-Length, and by
    counting for chunked bodies. Pure ASGI so it sees the bytes before FastAPI buffers them."""

    class TooLarge(BaseException):
        """BaseException: FastAPI turns any Exception raised while reading a body into a 400."""

    def __init__(self, app: Any, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    async def _refuse(self, send: Any) -> None:
        body = json.dumps({"error": f"request body over the limit of {self.max_bytes} bytes"}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        for k, v in scope.get("headers", []):
            if k == b"content-length":
                try:
                    too_big = int(v) > self.max_bytes
                except ValueError:
                    too_big = False
                if too_big:
                    return await self._refuse(send)
        seen, started = 0, False

        async def limited_receive() -> Any:
            nonlocal seen
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > self.max_bytes:
                    raise BodyLimit.TooLarge()
            return msg

        async def tracking_send(msg: Any) -> None:
            nonlocal started
            started = started or msg["type"] == "http.response.start"
            await send(msg)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except BodyLimit.TooLarge:
            if not started:
                await self._refuse(send)


def create_app(ctx: ServingContext) -> FastAPI:
    ds, m, variants = ctx.dataset, ctx.metrics, ctx.variants
    name = ds.NAME
    PredictRequest = predict_request_model(ctx.row_model, ctx.max_rows)
    columns = list(ds.RAW_COLUMNS)
    app = FastAPI(
        title="Sluice model server",
        version="1",
        description="Open Inference Protocol v2 + raw-row prediction for the dataset "
        f"{name!r}; follows the registry's serving state.",
    )
    app.add_middleware(BodyLimit, max_bytes=ctx.max_body_bytes)
    app.state.ctx = ctx

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        m.errors.labels(endpoint_of(request.url.path), exc.variant, str(exc.status)).inc()
        return JSONResponse({"error": exc.message}, status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        status, message = describe_validation(list(exc.errors()))
        m.errors.labels(endpoint_of(request.url.path), "none", str(status)).inc()
        return JSONResponse({"error": message}, status_code=status)

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> JSONResponse:
        m.errors.labels(endpoint_of(request.url.path), "none", "500").inc()
        log(f"serving: internal error on {request.url.path}: {type(exc).__name__}: {exc}")
        return JSONResponse({"error": f"internal error: {type(exc).__name__}"}, status_code=500)

    def check_model(model_name: str) -> Snapshot:
        if model_name != name:
            raise ApiError(404, f"unknown model {model_name!r}; this server serves {name!r}")
        snap = variants.current
        if snap.champion is None:
            raise ApiError(
                503,
                f"model {name!r} is not ready: no version loaded yet"
                + (f" ({variants.last_error})" if variants.last_error else ""),
            )
        return snap

    def pick(snap: Snapshot, key: Optional[str]) -> tuple[str, LoadedModel, Optional[LoadedModel]]:
        """(variant, model that answers, model that scores a mirror or None)."""
        d = snap.desired
        choice = choose_variant(key, d.challenger_weight, snap.challenger is not None)
        if d.mode == "shadow":
            return CHAMPION, snap.champion, (snap.challenger if choice == CHALLENGER else None)
        return choice, snap.models[choice], None

    def serve(
        x: np.ndarray, variant: str, model: LoadedModel, shadow: Optional[LoadedModel], endpoint: str, t0: float
    ) -> tuple[str, np.ndarray]:
        request_id = uuid.uuid4().hex
        try:
            scores = model.predict(x)  # a NaN or infinite score raises ScoreError: never served
        except Exception as exc:  # noqa: BLE001 - logged against the variant, answered as a 500
            message = f"{type(exc).__name__}: {str(exc)[:300]}"
            ctx.predlog.append(
                [
                    error_record(
                        request_id,
                        variant,
                        model.spec.model_version,
                        (time.perf_counter() - t0) * 1000,
                        False,
                        endpoint,
                        message,
                    )
                ]
            )
            log(f"serving: {variant} {model.spec.model_version} failed: {message}")
            what = "gave a non-finite score" if isinstance(exc, ScoreError) else "failed to score the request"
            raise ApiError(500, f"model {model.spec.model_version} {what}", variant) from exc
        seconds = time.perf_counter() - t0
        m.observe(endpoint, variant, seconds, scores)
        ctx.predlog.append(
            prediction_records(request_id, scores, variant, model.spec.model_version, seconds * 1000, False, endpoint)
        )
        ctx.remember(request_id, len(scores))
        if shadow is not None:
            try:
                ctx.shadow_queue.put_nowait((x, request_id, shadow, endpoint))
            except queue.Full:
                m.shadow_dropped.inc()
        return request_id, scores

    # ---- Open Inference Protocol v2 -------------------------------------------------------
    @app.get("/v2/health/live", tags=["v2"])
    async def live() -> dict:
        return {"live": True}

    @app.get("/v2/health/ready", tags=["v2"])
    async def ready() -> JSONResponse:
        ok = variants.ready
        return JSONResponse(
            {
                "ready": ok,
                "serving": variants.describe(),
                "pending": variants.pending is not None,
                "last_error": variants.last_error,
            },
            status_code=200 if ok else 503,
        )

    @app.get("/v2", tags=["v2"])
    async def server_metadata() -> dict:
        return {"name": "sluice", "version": "1", "extensions": ["binary_tensor_data"]}

    def metadata(snap: Snapshot, versions: list[str]) -> dict:
        model = snap.champion
        return {
            "name": name,
            "versions": versions,
            "platform": PLATFORM,
            "inputs": [{"name": model.input_name, "datatype": "FP32", "shape": [-1, model.n_features]}],
            "outputs": [{"name": model.output_name, "datatype": "FP32", "shape": [-1]}],
        }

    @app.get("/v2/models/{model_name}", tags=["v2"])
    async def model_metadata(model_name: str) -> dict:
        snap = check_model(model_name)
        return metadata(snap, [mm.spec.model_version for mm in snap.models.values()])

    @app.get("/v2/models/{model_name}/versions/{version}", tags=["v2"])
    async def version_metadata(model_name: str, version: str) -> dict:
        snap = check_model(model_name)
        pinned(snap, version)
        return metadata(snap, [version])

    @app.get("/v2/models/{model_name}/ready", tags=["v2"])
    async def model_ready(model_name: str) -> JSONResponse:
        snap = check_model(model_name)
        return JSONResponse(
            {"name": name, "ready": True, "versions": [mm.spec.model_version for mm in snap.models.values()]}
        )

    def pinned(snap: Snapshot, version: str) -> tuple[str, LoadedModel]:
        found = snap.by_version(version)
        if found is None:
            served = ", ".join(f"{mm.spec.model_version} ({v})" for v, mm in snap.models.items())
            raise ApiError(404, f"unknown version {version!r} of model {name!r}; serving {served}")
        return found

    infer_doc = {
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {
                    "schema": {
                        "type": "object",
                        "required": ["inputs"],
                        "properties": {
                            "id": {"type": "string"},
                            "parameters": {"type": "object"},
                            "inputs": {
                                "type": "array",
                                "minItems": 1,
                                "maxItems": 1,
                                "items": {
                                    "type": "object",
                                    "required": ["name", "datatype", "shape", "data"],
                                    "properties": {
                                        "name": {"type": "string"},
                                        "datatype": {"type": "string"},
                                        "shape": {"type": "array", "items": {"type": "integer"}},
                                        "data": {"type": "array", "items": {"type": "number"}},
                                        "parameters": {"type": "object"},
                                    },
                                },
                            },
                            "outputs": {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "required": ["name"],
                                    "properties": {"name": {"type": "string"}, "parameters": {"type": "object"}},
                                },
                            },
                        },
                    }
                }
            },
        }
    }

    async def infer(request: Request, model_name: str, version: Optional[str]) -> Response:
        snap = check_model(model_name)
        if version is not None:
            variant, model = pinned(snap, version)
            shadow = None
        else:
            variant, model, shadow = pick(snap, request.headers.get(KEY_HEADER))
        req, tail = parse_infer_body(await request.body(), request.headers.get(BINARY_HEADER))
        t0 = time.perf_counter()
        x = infer_features(req, tail, model.input_name, model.n_features, ctx.max_rows)
        for o in req.get("outputs") or []:
            if not isinstance(o, dict) or o.get("name") != model.output_name:
                raise ApiError(
                    400,
                    f"unknown output {o.get('name') if isinstance(o, dict) else o!r}; "
                    f"the model's output is {model.output_name!r}",
                    variant,
                )
        request_id, scores = serve(x, variant, model, shadow, "infer", t0)
        out = {"name": model.output_name, "datatype": "FP32", "shape": [len(scores)]}
        head = {
            "model_name": name,
            "model_version": model.spec.model_version,
            "id": str(req.get("id", request_id)),
            "parameters": {"variant": variant, "request_id": request_id},
            "outputs": [out],
        }
        headers = {"X-Request-Id": request_id, "X-Sluice-Variant": variant}
        if wants_binary(req):
            raw = scores.astype("<f4").tobytes()
            out["parameters"] = {"binary_data_size": len(raw)}
            js = json.dumps(head).encode()
            return Response(
                js + raw,
                media_type="application/octet-stream",
                headers={**headers, "Inference-Header-Content-Length": str(len(js))},
            )
        out["data"] = [float(s) for s in scores.astype(np.float32)]
        return JSONResponse(head, headers=headers)

    @app.post("/v2/models/{model_name}/infer", tags=["v2"], openapi_extra=infer_doc)
    async def infer_latest(request: Request, model_name: str) -> Response:
        return await infer(request, model_name, None)

    @app.post("/v2/models/{model_name}/versions/{version}/infer", tags=["v2"], openapi_extra=infer_doc)
    async def infer_version(request: Request, model_name: str, version: str) -> Response:
        return await infer(request, model_name, version)

    # ---- raw rows, feedback, metrics ------------------------------------------------------
    async def predict(request: Request, body: PredictRequest) -> JSONResponse:  # type: ignore[valid-type]
        snap = check_model(name)
        key = request.headers.get(KEY_HEADER) or body.key
        variant, model, shadow = pick(snap, key)
        t0 = time.perf_counter()
        import pandas as pd

        df = pd.DataFrame([r.model_dump() for r in body.rows], columns=columns)
        try:
            x = np.ascontiguousarray(ds.featurize(df), dtype=np.float32)
        except Exception as exc:  # noqa: BLE001 - the plug-in's own error, reported to the caller
            raise ApiError(422, f"rows could not be featurized: {type(exc).__name__}: {exc}", variant) from exc
        if x.shape != (len(df), model.n_features) or not np.all(np.isfinite(x)):
            raise ApiError(422, "rows featurize to non-finite or misshaped features", variant)
        request_id, scores = serve(x, variant, model, shadow, "predict", t0)
        version = model.spec.model_version
        return JSONResponse(
            {
                "request_id": request_id,
                "model_name": name,
                "model_version": version,
                "variant": variant,
                "predictions": [
                    {
                        "score": float(s),
                        "label": int(s >= 0.5),
                        "model_version": version,
                        "variant": variant,
                        "request_id": request_id,
                    }
                    for s in scores
                ],
            },
            headers={"X-Request-Id": request_id, "X-Sluice-Variant": variant},
        )

    app.post("/v1/predict", tags=["v1"], summary="Score raw rows of the dataset")(predict)

    @app.post("/v1/feedback", tags=["v1"], summary="A delayed label for a served request")
    async def feedback(body: FeedbackRequest) -> dict:
        rows = ctx.rows_of(body.request_id)
        if rows is None:
            raise ApiError(
                404,
                f"unknown request id {body.request_id!r} (not served by this server, "
                f"or older than its last {REQUEST_INDEX_SIZE:,} requests)",
            )
        labels = body.label if isinstance(body.label, list) else [body.label]
        if len(labels) != rows:
            raise ApiError(
                422,
                f"request {body.request_id} scored {rows} rows; label must be "
                f"{'one label or ' if rows == 1 else ''}a list of {rows} labels, got {len(labels)}",
            )
        ctx.predlog.append(feedback_records(body.request_id, labels))
        m.feedback.inc(len(labels))
        return {"request_id": body.request_id, "labels": len(labels)}

    @app.get("/v1/serving", tags=["v1"], summary="What is served now (read-only)")
    async def serving() -> dict:
        snap = variants.current
        return {
            "model_name": name,
            "mode": snap.desired.mode,
            "challenger_weight": snap.desired.challenger_weight,
            "variants": {
                v: {"model_version": mm.spec.model_version, "sha256": mm.sha256, "loaded_at": mm.loaded_at}
                for v, mm in snap.models.items()
            },
            "pending": variants.pending is not None,
            "last_error": variants.last_error,
        }

    @app.get("/metrics", tags=["ops"])
    async def metrics() -> Response:
        body, ctype = m.exposition()
        return Response(body, media_type=ctype)

    return app


def shadow_worker(ctx: ServingContext, stop: threading.Event) -> None:
    """Scores mirrored traffic with the challenger, after the champion has answered."""
    while not stop.is_set():
        try:
            x, request_id, model, endpoint = ctx.shadow_queue.get(timeout=0.2)
        except queue.Empty:
            continue
        try:
            t0 = time.perf_counter()
            scores = model.predict(x)
            seconds = time.perf_counter() - t0
            ctx.metrics.shadow.inc()
            for s in scores:
                ctx.metrics.score.labels(CHALLENGER).observe(float(s))
            ctx.predlog.append(
                prediction_records(
                    request_id, scores, CHALLENGER, model.spec.model_version, seconds * 1000, True, endpoint
                )
            )
        except Exception as exc:  # noqa: BLE001 - a failing shadow must not affect serving
            ctx.metrics.errors.labels(endpoint, CHALLENGER, "shadow").inc()
            ctx.predlog.append(
                [
                    error_record(
                        request_id,
                        CHALLENGER,
                        model.spec.model_version,
                        0.0,
                        True,
                        endpoint,
                        f"{type(exc).__name__}: {exc}",
                    )
                ]
            )
            log(f"serving: shadow scoring failed: {type(exc).__name__}: {exc}")
