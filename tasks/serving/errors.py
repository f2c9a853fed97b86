"""The server's errors: every one is a JSON body {"error": "<what was wrong>"} (the shape Triton's and
KServe's clients read), with a 4xx status for anything the caller can fix, and each counted in
`sluice_request_errors_total{endpoint, variant, code}`.

    ApiError                 raised by the routes: status, message, the variant it counts against
    RequestValidationError   a body the route's pydantic model refuses: 422, or 400 for malformed
                             JSON and on the Open Inference Protocol's infer routes (its status
                             for a bad request); the message names each problem's place
    HTTPException            FastAPI's own (unknown path, wrong method): its status, in the same shape
    anything else            500 naming the exception's type, logged
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from tasks.core.log import log


class ErrorBody(BaseModel):
    """Every error's body, as the OpenAPI document declares it."""

    error: str


class ApiError(HTTPException):
    """A refusal with its status and message; `variant` is the one it counts against ("none": before a choice).

    An HTTPException, so FastAPI passes it through unchanged when it is raised while a body is read."""

    def __init__(self, status: int, message: str, variant: str = "none"):
        super().__init__(status_code=status, detail=message)
        self.status, self.message, self.variant = status, message, variant


def endpoint_of(path: str) -> str:
    """The `endpoint` label of a request path."""
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


def _count(request: Request, variant: str, status: int | str) -> None:
    request.app.state.ctx.metrics.errors.labels(endpoint_of(request.url.path), variant, str(status)).inc()


async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
    _count(request, exc.variant, exc.status)
    # The variant a failure counts against, as on a success: a client (the canary's replay) counts
    # each arm's failures without reading the log.
    headers = {"X-Sluice-Variant": exc.variant} if exc.variant != "none" else None
    return JSONResponse({"error": exc.message}, status_code=exc.status, headers=headers)


async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
    status, message = describe_validation(list(exc.errors()))
    if endpoint_of(request.url.path) == "infer":
        status = 400  # the Open Inference Protocol's status for a request it cannot take
    _count(request, "none", status)
    return JSONResponse({"error": message}, status_code=status)


async def _http_error(request: Request, exc: HTTPException) -> JSONResponse:
    cause = exc.__cause__
    if isinstance(cause, UnicodeDecodeError):  # FastAPI's "There was an error parsing the body"
        _count(request, "none", 400)
        message = f"the body is not UTF-8 (JSON must be): {cause.reason} at byte {cause.start}"
        return JSONResponse({"error": message}, status_code=400)
    return JSONResponse({"error": str(exc.detail)}, status_code=exc.status_code, headers=exc.headers)


async def _internal(request: Request, exc: Exception) -> JSONResponse:
    _count(request, "none", 500)
    log(f"serving: internal error on {request.url.path}: {type(exc).__name__}: {exc}")
    return JSONResponse({"error": f"internal error: {type(exc).__name__}"}, status_code=500)


def install_error_handlers(app: FastAPI) -> None:
    """The handlers above; they count through `app.state.ctx.metrics`."""
    from starlette.exceptions import HTTPException as StarletteHTTPException

    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(RequestValidationError, _invalid)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _internal)
