"""Scoring a request, whatever route it came by: which variant answers (the sticky split, shadow, a
pinned version), the model's scores, the prediction log, the metrics, the shadow mirror.

Routes take the current Snapshot once per request and finish on it, so a swap in the follower
thread never fails a request in flight. Models here are small MLPs (tens of microseconds per
batch), so scoring runs inline on the event loop: a thread hop would cost more than the model.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any, Optional

import numpy as np

from tasks.core.log import log
from tasks.registry.serving import CHALLENGER, CHAMPION
from tasks.serving.context import ServingContext
from tasks.serving.errors import ApiError
from tasks.serving.metrics import top_scores
from tasks.serving.predlog import error_record, prediction_records
from tasks.serving.split import choose_variant
from tasks.serving.variants import FeaturizeError, LoadedModel, ScoreError, Snapshot

KEY_HEADER = "x-sluice-key"  # the sticky split's key (else /v1/predict's body `key`; none: at random)
Answer = tuple[str, LoadedModel, Optional[LoadedModel]]
"""(the variant that answers, its model, the model that scores a mirror of the request or None)."""


def snapshot(ctx: ServingContext, model_name: str) -> Snapshot:
    """What is served now, for a request to `model_name`: 404 for another model, 503 before a first load."""
    name = ctx.model_name
    if model_name != name:
        raise ApiError(404, f"unknown model {model_name!r}; this server serves {name!r}")
    snap = ctx.variants.current
    if snap.champion is None:
        last = ctx.variants.last_error
        raise ApiError(503, f"model {name!r} is not ready: no version loaded yet" + (f" ({last})" if last else ""))
    return snap


def pick(snap: Snapshot, key: Optional[str]) -> Answer:
    """The split's choice for a request with sticky key `key` (None: at random)."""
    d = snap.desired
    choice = choose_variant(key, d.challenger_weight, snap.challenger is not None)
    if d.mode == "shadow":
        return CHAMPION, snap.champion, (snap.challenger if choice == CHALLENGER else None)
    return choice, snap.models[choice], None


def pinned(snap: Snapshot, version: str, name: str) -> Answer:
    """The variant serving `version` (no split, no mirror); 404 for a version not served."""
    found = snap.by_version(version)
    if found is None:
        served = ", ".join(f"{m.spec.model_version} ({v})" for v, m in snap.models.items())
        raise ApiError(404, f"unknown version {version!r} of model {name!r}; serving {served}")
    return (*found, None)


def rows_frame(dataset: Any, rows: list[Any]) -> Any:
    """Validated raw rows (the /v1 row model's instances) -> the DataFrame the plug-in featurizes."""
    import pandas as pd

    return pd.DataFrame([r.model_dump() for r in rows], columns=list(dataset.RAW_COLUMNS))


def model_inputs(ctx: ServingContext, answer: Answer, df: Any, t0: float, inputs: list[Any]) -> np.ndarray:
    """Raw rows -> the answering model's input. Rows the contract took that cannot be featurized are
    the server's failure: logged as the variant's error (the canary counts it) and answered 500."""
    variant, model, _ = answer
    try:
        return model.rows_to_inputs(ctx.dataset, df)
    except FeaturizeError as exc:
        request_id = ctx.request_ids.issue(len(df))
        version, ms = model.spec.model_version, (time.perf_counter() - t0) * 1000
        ctx.predlog.append([error_record(request_id, variant, version, ms, False, "predict", str(exc), inputs)])
        log(f"serving: {variant} {version} failed: {exc}")
        raise ApiError(500, f"model {version}: {exc}", variant) from exc


def score(
    ctx: ServingContext,
    x: np.ndarray,
    answer: Answer,
    endpoint: str,
    t0: float,
    inputs: Optional[list[Any]] = None,
    rows: Any = None,
) -> tuple[str, np.ndarray]:
    """Score `x` with the answering model -> (request id, scores): logged with each row's input
    (`inputs`, else the feature vectors), counted, mirrored (with the raw `rows`, a DataFrame, when the
    request had them: a challenger that reads other inputs than the champion encodes them itself).
    The request id is signed (requestid.py),
    so feedback for it is taken by any replica. A model that fails or gives a non-finite score is a
    500 naming it, never an answer."""
    variant, model, shadow = answer
    request_id = ctx.request_ids.issue(len(x))
    if inputs is None:
        inputs = x.tolist()
    try:
        scores = model.predict(x)  # a NaN or infinite score raises ScoreError: never served
    except Exception as exc:  # noqa: BLE001 - logged against the variant, answered as a 500
        message = f"{type(exc).__name__}: {str(exc)[:300]}"
        version, ms = model.spec.model_version, (time.perf_counter() - t0) * 1000
        ctx.predlog.append([error_record(request_id, variant, version, ms, False, endpoint, message, inputs)])
        log(f"serving: {variant} {version} failed: {message}")
        what = "gave a non-finite score" if isinstance(exc, ScoreError) else "failed to score the request"
        raise ApiError(500, f"model {version} {what}", variant) from exc
    seconds = time.perf_counter() - t0
    ctx.metrics.observe(endpoint, variant, seconds, scores)
    ctx.predlog.append(
        prediction_records(
            request_id, scores, variant, model.spec.model_version, seconds * 1000, False, endpoint, inputs
        )
    )
    if shadow is not None:
        try:
            ctx.shadow_queue.put_nowait((x, request_id, shadow, endpoint, rows))
        except queue.Full:
            ctx.metrics.shadow_dropped.inc()
    return request_id, scores


def shadow_worker(ctx: ServingContext, stop: threading.Event) -> None:
    """Scores mirrored traffic with the challenger, after the champion has answered."""
    while not stop.is_set():
        try:
            x, request_id, model, endpoint, rows = ctx.shadow_queue.get(timeout=0.2)
        except queue.Empty:
            continue
        version = model.spec.model_version
        try:
            t0 = time.perf_counter()
            if model.takes_tokens != (x.dtype.kind in "iu") or x.shape[1] != model.n_features:
                if rows is None:  # an OIP tensor made for the champion's inputs
                    raise ValueError("the challenger reads other inputs than the champion: shadowed on /v1 rows only")
                x = model.rows_to_inputs(ctx.dataset, rows)
            scores = model.predict(x)
            seconds = time.perf_counter() - t0
            ctx.metrics.shadow.inc()
            for s in top_scores(scores):
                ctx.metrics.score.labels(CHALLENGER).observe(s)
            ctx.predlog.append(
                prediction_records(request_id, scores, CHALLENGER, version, seconds * 1000, True, endpoint)
            )
        except Exception as exc:  # noqa: BLE001 - a failing shadow must not affect serving
            ctx.metrics.errors.labels(endpoint, CHALLENGER, "shadow").inc()
            message = f"{type(exc).__name__}: {exc}"
            ctx.predlog.append([error_record(request_id, CHALLENGER, version, 0.0, True, endpoint, message)])
            log(f"serving: shadow scoring failed: {message}")
