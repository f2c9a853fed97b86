"""The Sluice page's FastAPI app, mounted by Airflow's api-server under /sluice.

Every route depends on Airflow's own authentication (`requires_authenticated` from
airflow.api_fastapi.core_api.security, which validates the JWT through the configured auth manager):
a request with no token is 401, one with an invalid token 403. The token is the `Authorization:
Bearer` header (the REST API's token) or the `_token` cookie that Airflow's login sets, which the UI's
frame sends along.

    GET /sluice/                          the page (HTML: tasks/reports/pipeline_state.py's read model,
                                          drawn by sluice_ui/page.py)
    GET /sluice/api/overview              the same read model as JSON
    GET /sluice/runs/<folder>/report.html a run's report (tasks/reports/html_report.py)
    GET /sluice/model-cards/<file>        a model card, model-vN.html or .md
    /sluice/queue, /sluice/api/queue/...  the labeling queue: the page and its REST endpoint
                                          (sluice_ui/queue_api.py: who from the token, CSRF-guarded writes)
"""

from __future__ import annotations

import re
from pathlib import Path

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse

from tasks.core.files import json_safe
from tasks.core.settings import Settings
from tasks.reports.model_card import card_dir
from tasks.reports.pipeline_state import REPORT_NAME, read_state

from .page import render_page
from .queue_api import add_queue_routes

RUN_FOLDER = re.compile(r"^[A-Za-z0-9._~-]+$")  # what safe_run_id makes (tasks/core/settings.py)
CARD_FILE = re.compile(r"^model-v[0-9]+\.(html|md)$")


def create_app(settings: Settings | None = None) -> FastAPI:
    from airflow.api_fastapi.core_api.security import get_user, requires_authenticated

    app = FastAPI(
        title="Sluice",
        description="Sluice's runs, versions, serving state, alerts and costs",
        dependencies=[Depends(requires_authenticated())],
    )

    def current() -> Settings:
        return settings or Settings.from_env()  # SLUICE_HOME from the api-server's environment

    @app.get("/", response_class=HTMLResponse)
    def page(request: Request) -> HTMLResponse:
        return HTMLResponse(render_page(read_state(current()), request.scope.get("root_path", "")))

    @app.get("/api/overview")
    def api_overview() -> JSONResponse:
        return JSONResponse(json_safe(read_state(current())))

    @app.get("/runs/{folder}/" + REPORT_NAME)
    def report(folder: str) -> FileResponse:
        if not RUN_FOLDER.match(folder) or folder in (".", ".."):
            raise HTTPException(404, "no such run")
        return _file(current().layout.runs / folder / REPORT_NAME, "this run has no report")

    @app.get("/model-cards/{name}")
    def model_card(name: str) -> FileResponse:
        if not CARD_FILE.match(name):
            raise HTTPException(404, "no such model card")
        return _file(card_dir(current()) / name, "this model version has no card")

    add_queue_routes(app, current, get_user)
    return app


def _file(path: Path, why: str) -> FileResponse:
    if not path.is_file():
        raise HTTPException(404, why)
    media = "text/markdown; charset=utf-8" if path.suffix == ".md" else "text/html; charset=utf-8"
    return FileResponse(path, media_type=media)
