"""Sluice's own routes beside the protocol: /v1/predict on the dataset's raw rows (featurized by the
plug-in's own `featurize`), /v1/feedback for delayed labels, /v1/serving (what is served, read-only),
and /metrics (Prometheus). Read-only towards the registry.

/v1/predict's body model is generated at start from the plug-in (v1_models.predict_request_model),
so its route is declared by `v1_router(PredictRequest)`; the others are declared here.

(No `from __future__ import annotations` here: FastAPI reads the models from the endpoints' annotations.)
"""

import time
from typing import Any, Optional

import numpy as np
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from tasks.datasets import class_names
from tasks.serving.context import Context, ServingContext
from tasks.serving.errors import ApiError, ErrorBody
from tasks.serving.predlog import feedback_records
from tasks.serving.requestid import BadRequestId
from tasks.serving.scoring import KEY_HEADER, model_inputs, pick, rows_frame, score, snapshot
from tasks.serving.v1_models import (
    FeedbackRequest,
    FeedbackResponse,
    Prediction,
    PredictResponse,
    ServedVariant,
    ServingResponse,
)


def _errors(**described: str) -> dict[int | str, dict[str, Any]]:
    return {int(k[1:]): {"model": ErrorBody, "description": d} for k, d in described.items()}


PREDICT_ERRORS = _errors(
    e413="a body or a batch over the limit",
    e422="a row the schema refuses",
    e500="rows the schema took could not be featurized, the model failed, or it gave a non-finite score "
    "(never answered)",
    e503="no version loaded yet",
)
FEEDBACK_ERRORS = _errors(
    e404="a request id that is not one of ours, forged, or expired (the message says which)",
    e422="not one label per row",
)


def predict_rows(ctx: ServingContext, rows: list[Any], key: Optional[str]) -> JSONResponse:
    """Featurize validated raw rows with the plug-in, score them with the split's choice for `key`."""
    snap = snapshot(ctx, ctx.model_name)
    answer = pick(snap, key)
    variant, model, _ = answer
    t0 = time.perf_counter()
    df = rows_frame(ctx.dataset, rows)
    raw = [r.model_dump(mode="json") for r in rows]  # the raw rows, as the log keeps them
    x = model_inputs(ctx, answer, df, t0, raw)  # features, or a text model's ids from its own tokenizer
    request_id, scores = score(ctx, x, answer, "predict", t0, raw, rows=df)
    version = model.spec.model_version
    common = {"model_version": version, "variant": variant, "request_id": request_id}
    body = PredictResponse(
        model_name=ctx.model_name,
        **common,
        predictions=[prediction(s, common) for s in scores],
    )
    return JSONResponse(
        body.model_dump(),
        headers={"X-Request-Id": request_id, "X-Sluice-Variant": variant, "X-Sluice-Replica": ctx.replica},
    )


def prediction(s: np.ndarray, common: dict) -> Prediction:
    """One row's answer: binary, P(class 1) and the label at 0.5; K classes, the most probable class,
    its probability, and every class's."""
    if np.ndim(s) == 0:
        return Prediction(score=float(s), label=int(s >= 0.5), **common)
    top = int(np.argmax(s))
    return Prediction(score=float(s[top]), label=top, probabilities=[float(v) for v in s], **common)


def v1_router(predict_request: Any) -> APIRouter:
    """The /v1 routes, /v1/predict taking `predict_request` (the plug-in's generated body model)."""
    router = APIRouter(prefix="/v1", tags=["v1"])

    async def predict(request: Request, body: predict_request, ctx: Context) -> JSONResponse:  # type: ignore[valid-type]
        return predict_rows(ctx, body.rows, request.headers.get(KEY_HEADER) or body.key)

    router.add_api_route(
        "/predict",
        predict,
        methods=["POST"],
        response_model=PredictResponse,
        responses=PREDICT_ERRORS,
        summary="Score raw rows of the dataset",
    )
    router.add_api_route(
        "/feedback",
        feedback,
        methods=["POST"],
        responses=FEEDBACK_ERRORS,
        summary="A delayed label for a served request",
    )
    router.add_api_route("/serving", serving, methods=["GET"], summary="What is served now (read-only)")
    return router


def class_indices(labels: list[int | str], names: tuple[str, ...]) -> list[int]:
    """Feedback labels, each a class index or a class name, as indices; ApiError 422 naming the labels
    that are neither and the forms a label takes. Pure."""
    k, index = len(names), {n: i for i, n in enumerate(names)}
    outside = sorted({lab for lab in labels if isinstance(lab, int) and not 0 <= lab < k})
    unknown = sorted({lab for lab in labels if isinstance(lab, str) and lab not in index})
    if outside or unknown:  # a body the caller must fix, whatever the request id
        bad = [f"label(s) {outside} outside the {k} classes 0..{k - 1} {names}"] if outside else []
        bad += [f"unknown class name(s) {unknown}; the classes are {names}"] if unknown else []
        raise ApiError(422, "; ".join(bad) + f" (a label is a class index 0..{k - 1} or one of those names)")
    return [index[lab] if isinstance(lab, str) else lab for lab in labels]


async def feedback(body: FeedbackRequest, ctx: Context) -> FeedbackResponse:
    labels = class_indices(body.label if isinstance(body.label, list) else [body.label], class_names(ctx.dataset))
    try:
        rows = ctx.request_ids.verify(body.request_id)
    except BadRequestId as exc:
        raise ApiError(404, str(exc)) from None
    if len(labels) != rows:
        raise ApiError(
            422,
            f"request {body.request_id} scored {rows} rows; label must be "
            f"{'one label or ' if rows == 1 else ''}a list of {rows} labels, got {len(labels)}",
        )
    ctx.predlog.append(feedback_records(body.request_id, labels, body.who))
    ctx.metrics.feedback.inc(len(labels))
    return FeedbackResponse(request_id=body.request_id, labels=len(labels))


async def serving(ctx: Context) -> ServingResponse:
    snap, v = ctx.variants.current, ctx.variants
    return ServingResponse(
        model_name=ctx.model_name,
        mode=snap.desired.mode,
        challenger_weight=snap.desired.challenger_weight,
        variants={
            name: ServedVariant(model_version=m.spec.model_version, sha256=m.sha256, loaded_at=m.loaded_at)
            for name, m in snap.models.items()
        },
        pending=v.pending is not None,
        last_error=v.last_error,
    )


ops = APIRouter(tags=["ops"])


@ops.get("/metrics", response_class=Response, summary="Prometheus exposition")
async def metrics(ctx: Context) -> Response:
    body, ctype = ctx.metrics.exposition()
    return Response(body, media_type=ctype)
