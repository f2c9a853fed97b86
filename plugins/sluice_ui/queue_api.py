"""The labeling queue on the Sluice page: the page a person works through and the REST endpoint a
script uses (the same routes; tasks/labeling/queue.py does the work).

    GET  /sluice/queue                           the page: one row at a time, its LF votes and scores,
                                                 a key per class, s to skip, u to undo
    GET  /sluice/queue/queue.js                  its script (the page's policy allows only this one)
    GET  /sluice/api/queue/next                  the next item for the user, the counts, the CSRF token
    GET  /sluice/api/queue/items/<id>            one item with its labels (a conflict shows both)
    POST /sluice/api/queue/items/<id>/label      {"label": 1}: gold with who and when (a registry version)
    POST /sluice/api/queue/items/<id>/skip       {}
    POST /sluice/api/queue/undo                  {}: the user's last answer taken back

Who labeled is the Airflow user of the request's token (`get_user`, the same dependency as every
route of the app): a body that names `who` (or anything but `label`) is refused (422).

Cross-site requests. A browser sends the login's cookie with a request another site makes, so a
write authenticated by the cookie must prove it comes from this page: the `X-Sluice-CSRF` header
must carry the token derived from the session (an HMAC of the session's JWT under the api-server's
secret key; a page of another site cannot read it, nor set a custom header without a CORS preflight
this app never grants), the body must be JSON, and a request a browser marks as coming from another
origin (`Origin`, `Sec-Fetch-Site`) is refused (403). A script that sends `Authorization: Bearer`
(the REST API's token, never sent by a browser on its own) needs no CSRF token.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlsplit

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse
from pydantic import BaseModel, ConfigDict, StrictInt

from tasks.core.files import json_safe
from tasks.core.settings import Settings

CSRF_HEADER = "X-Sluice-CSRF"
COOKIE = "_token"  # Airflow's login cookie (airflow.api_fastapi.auth.managers.base_auth_manager)
HERE = Path(__file__).resolve().parent
PAGE_POLICY = "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'unsafe-inline'; img-src data:"
_FALLBACK_KEY = secrets.token_bytes(32)  # outside an api-server (no secret key configured): this process's own


class LabelBody(BaseModel):
    model_config = ConfigDict(extra="forbid")  # `who` in the body: 422, the token says who
    label: StrictInt


class EmptyBody(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _key() -> bytes:
    secret = os.environ.get("AIRFLOW__API__SECRET_KEY") or os.environ.get("AIRFLOW__API_AUTH__JWT_SECRET")
    return secret.encode() if secret else _FALLBACK_KEY


def csrf_token(session: str) -> str:
    """The CSRF token of a session (its JWT): an HMAC under the api-server's secret key."""
    return hmac.new(_key(), b"sluice-queue-csrf\0" + session.encode(), hashlib.sha256).hexdigest()


def _bearer(request: Request) -> str | None:
    auth = request.headers.get("authorization", "")
    return auth[7:].strip() if auth.lower().startswith("bearer ") else None


def cross_site_refusal(request: Request) -> str | None:
    """Why a write may not be done (None: it may). See the module doc."""
    if _bearer(request):
        return None  # a script's token: a browser never sends it on its own
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return f"cross-site request refused (Sec-Fetch-Site: {site})"
    origin = request.headers.get("origin")
    if origin is not None:
        host = request.headers.get("x-forwarded-host") or request.headers.get("host") or ""
        if urlsplit(origin).netloc != host:
            return f"cross-site request refused (Origin {origin} is not this site)"
    if not (request.headers.get("content-type") or "").startswith("application/json"):
        return "a write must be JSON (Content-Type: application/json)"
    session = request.cookies.get(COOKIE) or ""
    sent = request.headers.get(CSRF_HEADER) or ""
    if not session or not hmac.compare_digest(sent, csrf_token(session)):
        return f"missing or wrong {CSRF_HEADER} header: reload the page"
    return None


def add_queue_routes(app: FastAPI, current: Callable[[], Settings], user_dep: Any) -> None:
    """The queue's routes on the Sluice app; `user_dep` is Airflow's `get_user` dependency."""
    from tasks.datasets import class_names, load_dataset
    from tasks.labeling.feedback import trained_through
    from tasks.labeling.queue import QueueError, QueueStore
    from tasks.registry import Registry

    def who(user: Any = Depends(user_dep)) -> str:
        name = user.get_name() if hasattr(user, "get_name") else str(user)
        if not name:
            raise HTTPException(403, "the token names no user")
        return name

    def guard(request: Request) -> None:
        why = cross_site_refusal(request)
        if why:
            raise HTTPException(403, why)

    def store() -> QueueStore:
        return QueueStore.open(current())

    def classes() -> dict[int, str]:
        ds = load_dataset(_dataset_module(current()))
        return dict(enumerate(class_names(ds)))

    def test_ids() -> set[str]:
        import pandas as pd

        ds = load_dataset(_dataset_module(current()))
        path = current().layout.gold / "test.parquet"
        return set(pd.read_parquet(path, columns=[ds.ID_COLUMN])[ds.ID_COLUMN].astype(str)) if path.is_file() else set()

    def refused(exc: QueueError) -> HTTPException:
        return HTTPException(404 if "does not exist" in str(exc) else 409, str(exc))

    def session_of(request: Request) -> str:
        return _bearer(request) or request.cookies.get(COOKIE) or ""

    @app.get("/queue", response_class=HTMLResponse)
    def queue_page(request: Request, name: str = Depends(who)) -> HTMLResponse:
        from tasks.rendering.html import render

        root = request.scope.get("root_path", "").rstrip("/")
        html = render("labeling_queue.html", root=root, user=name, classes=classes(), csrf_header=CSRF_HEADER)
        return HTMLResponse(html, headers={"Content-Security-Policy": PAGE_POLICY, "X-Frame-Options": "SAMEORIGIN"})

    @app.get("/queue/queue.js")
    def queue_script() -> FileResponse:
        return FileResponse(HERE / "queue.js", media_type="text/javascript; charset=utf-8")

    @app.get("/api/queue/next")
    def next_item(request: Request, name: str = Depends(who)) -> JSONResponse:
        s = store()
        return JSONResponse(
            json_safe(
                {
                    "user": name,
                    "item": s.next_item(name),
                    "counts": s.counts(name),
                    "classes": classes(),
                    "csrf": csrf_token(session_of(request)),
                }
            )
        )

    @app.get("/api/queue/items/{item_id}")
    def get_item(item_id: int, name: str = Depends(who)) -> JSONResponse:
        try:
            return JSONResponse(json_safe(store().item(item_id)))
        except QueueError as exc:
            raise refused(exc) from None

    @app.post("/api/queue/items/{item_id}/label", dependencies=[Depends(guard)])
    def label(item_id: int, body: LabelBody, name: str = Depends(who)) -> JSONResponse:
        reg = Registry(current())
        try:
            out = store().record_label(reg, item_id, body.label, who=name, classes=classes(), test_ids=test_ids())
        except QueueError as exc:
            raise refused(exc) from None
        return JSONResponse(json_safe(out))

    @app.post("/api/queue/items/{item_id}/skip", dependencies=[Depends(guard)])
    def skip(item_id: int, body: EmptyBody, name: str = Depends(who)) -> JSONResponse:
        try:
            return JSONResponse(store().skip(item_id, who=name))
        except QueueError as exc:
            raise refused(exc) from None

    @app.post("/api/queue/undo", dependencies=[Depends(guard)])
    def undo(body: EmptyBody, name: str = Depends(who)) -> JSONResponse:
        reg = Registry(current())
        try:
            return JSONResponse(json_safe(store().undo(reg, who=name, trained_through=trained_through(reg))))
        except QueueError as exc:
            raise refused(exc) from None


def _dataset_module(settings: Settings) -> str:
    from tasks.core.params import load_params

    return load_params(settings=settings).dataset.module
