"""The Open Inference Protocol v2 routes (KServe's and Triton's REST protocol, with Triton's binary tensor
extension, so their clients work unchanged): health, metadata, inference. Read-only towards the registry.

`router` holds health and metadata; `infer_router` the two infer routes, whose route class
(`TensorRoute`) hands FastAPI only the JSON part of the body to validate as an InferenceRequest
and keeps the binary tensors that may follow it.

(No `from __future__ import annotations` here: FastAPI reads the models from the endpoints' annotations.)
"""

import time
from typing import Any, Callable, Optional

from fastapi import APIRouter, Depends, Request
from fastapi.datastructures import Headers
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute

from tasks.serving.context import Context, ServingContext
from tasks.serving.errors import ErrorBody
from tasks.serving.scoring import KEY_HEADER, pick, pinned, score, snapshot
from tasks.serving.tensors import BINARY_HEADER, check_outputs, infer_response, model_input, split_binary
from tasks.serving.v2_models import (
    InferenceRequest,
    InferenceResponse,
    ModelMetadata,
    ModelReady,
    ServerLive,
    ServerMetadata,
    ServerReady,
    TensorMetadata,
)
from tasks.serving.variants import Snapshot

PLATFORM = "onnxruntime_onnx"
MODEL_ERRORS: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorBody, "description": "unknown model or version"},
    503: {"model": ErrorBody, "description": "no version loaded yet"},
    "default": {"model": ErrorBody, "description": "any other error"},
}
INFER_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorBody, "description": "malformed JSON, or a request the protocol or the model cannot take"},
    413: {"model": ErrorBody, "description": "a body or a batch over the limit"},
    500: {"model": ErrorBody, "description": "the model failed, or gave a non-finite score (never answered)"},
    **MODEL_ERRORS,
}


class TensorRequest(Request):
    """An infer request. Its body, as FastAPI reads it, is the JSON part (under Triton's binary
    extension, the first Inference-Header-Content-Length bytes); `tail` holds the binary tensors.
    The protocol's body is JSON whatever Content-Type the client sent, so it is read as JSON."""

    async def body(self) -> bytes:
        if not hasattr(self, "_tail"):
            raw = await super().body()
            self._body, self._tail = split_binary(raw, super().headers.get(BINARY_HEADER))
        return self._body

    @property
    def tail(self) -> bytes:
        return getattr(self, "_tail", b"")

    @property
    def headers(self) -> Headers:
        if not hasattr(self, "_json_headers"):
            raw = [(k, v) for k, v in self.scope["headers"] if k != b"content-type"]
            self._json_headers = Headers(raw=[*raw, (b"content-type", b"application/json")])
        return self._json_headers


class TensorRoute(APIRoute):
    """The infer routes' class: FastAPI's own handler, given a TensorRequest (FastAPI's documented way
    to change how a route reads its request)."""

    def get_route_handler(self) -> Callable:
        handler = super().get_route_handler()

        async def tensor_handler(request: Request) -> Response:
            return await handler(TensorRequest(request.scope, request.receive))

        return tensor_handler


def loaded(model_name: str, ctx: Context) -> Snapshot:
    """The snapshot a request to `model_name` works on, taken once (404 another model, 503 none loaded)."""
    return snapshot(ctx, model_name)


router = APIRouter(prefix="/v2", tags=["v2"])
infer_router = APIRouter(prefix="/v2", tags=["v2"], responses=INFER_ERRORS, route_class=TensorRoute)


@router.get("/health/live")
async def live() -> ServerLive:
    return ServerLive(live=True)


@router.get("/health/ready", response_model=ServerReady, responses={503: {"model": ServerReady}})
async def ready(ctx: Context) -> JSONResponse:
    v = ctx.variants
    ready = v.ready and not ctx.draining  # draining (SIGTERM): the balancer takes this replica out
    error = "draining: stopping after the requests in flight" if ctx.draining else v.last_error
    untested = getattr(v.self_test, "unavailable", None)  # ready, but not proven on the served path
    body = ServerReady(
        ready=ready, serving=v.describe(), pending=v.pending is not None, last_error=error, self_test=untested
    )
    return JSONResponse(body.model_dump(), status_code=200 if ready else 503)


@router.get("")
async def server_metadata() -> ServerMetadata:
    return ServerMetadata(name="sluice", version="1", extensions=["binary_tensor_data"])


def _metadata(ctx: ServingContext, snap: Snapshot, versions: list[str]) -> ModelMetadata:
    model = snap.champion
    return ModelMetadata(
        name=ctx.model_name,
        versions=versions,
        platform=PLATFORM,
        inputs=[
            TensorMetadata(name=model.input_name, datatype="INT64", shape=[-1, -1])
            if model.takes_tokens  # or BYTES text as `text`, one per row (tensors.TEXT_INPUT)
            else TensorMetadata(name=model.input_name, datatype="FP32", shape=[-1, model.n_features])
        ],
        outputs=[
            TensorMetadata(
                name=model.output_name, datatype="FP32", shape=[-1] if model.classes == 2 else [-1, model.classes]
            )
        ],
    )


def _versions(snap: Snapshot) -> list[str]:
    return [m.spec.model_version for m in snap.models.values()]


@router.get("/models/{model_name}", responses=MODEL_ERRORS)
async def model_metadata(ctx: Context, snap: Snapshot = Depends(loaded)) -> ModelMetadata:
    return _metadata(ctx, snap, _versions(snap))


@router.get("/models/{model_name}/versions/{version}", responses=MODEL_ERRORS)
async def version_metadata(version: str, ctx: Context, snap: Snapshot = Depends(loaded)) -> ModelMetadata:
    pinned(snap, version, ctx.model_name)
    return _metadata(ctx, snap, [version])


@router.get("/models/{model_name}/ready", responses=MODEL_ERRORS)
async def model_ready(ctx: Context, snap: Snapshot = Depends(loaded)) -> ModelReady:
    return ModelReady(name=ctx.model_name, ready=True, versions=_versions(snap))


def infer(ctx: ServingContext, snap: Snapshot, request: TensorRequest, body: InferenceRequest, version: Optional[str]):
    """Score one OIP request: the split (or the pinned version), the input decoded, the scores encoded."""
    if version is not None:
        answer = pinned(snap, version, ctx.model_name)
    else:
        answer = pick(snap, request.headers.get(KEY_HEADER))
    variant, model, _ = answer
    t0 = time.perf_counter()
    x, logged = model_input(body, request.tail, model, ctx.max_rows)
    check_outputs(body, model.output_name, variant)
    request_id, scores = score(ctx, x, answer, "infer", t0, logged)
    head = {
        "model_name": ctx.model_name,
        "model_version": model.spec.model_version,
        "id": body.id if body.id is not None else request_id,
        "parameters": {"variant": variant, "request_id": request_id},
    }
    headers = {"X-Request-Id": request_id, "X-Sluice-Variant": variant, "X-Sluice-Replica": ctx.replica}
    return infer_response(body, scores, model.output_name, head, headers)


INFERRED = {200: {"description": "JSON, or the binary extension's JSON part and raw FP32 scores"}}


@infer_router.post("/models/{model_name}/infer", response_model=InferenceResponse, responses=INFERRED)
async def infer_latest(
    request: Request, body: InferenceRequest, ctx: Context, snap: Snapshot = Depends(loaded)
) -> Response:
    return infer(ctx, snap, request, body, None)


@infer_router.post(
    "/models/{model_name}/versions/{version}/infer", response_model=InferenceResponse, responses=INFERRED
)
async def infer_version(
    request: Request, version: str, body: InferenceRequest, ctx: Context, snap: Snapshot = Depends(loaded)
) -> Response:
    return infer(ctx, snap, request, body, version)
