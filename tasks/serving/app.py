"""The app factory: the model server's FastAPI app from a ServingContext.

    v2_routes.py   Open Inference Protocol v2 (health, metadata, infer; Triton's binary extension)
    v1_routes.py   /v1/predict on raw rows, /v1/feedback, /v1/serving, /metrics
    body_limit.py  the body-size middleware
    errors.py      every error as {"error": ...}, counted

Requests and answers are pydantic models (v2_models.py, v1_models.py): FastAPI validates with them and
writes the OpenAPI document (/openapi.json, /docs) from them. No endpoint changes what is served.
"""

from __future__ import annotations

from fastapi import FastAPI

from tasks.serving.body_limit import BodyLimit
from tasks.serving.context import ServingContext
from tasks.serving.errors import install_error_handlers
from tasks.serving.v1_models import predict_request_model
from tasks.serving.v1_routes import ops, v1_router
from tasks.serving.v2_routes import infer_router
from tasks.serving.v2_routes import router as v2_router


def create_app(ctx: ServingContext) -> FastAPI:
    app = FastAPI(
        title="Sluice model server",
        version="1",
        description="Open Inference Protocol v2 + raw-row prediction for the dataset "
        f"{ctx.model_name!r}; follows the registry's serving state.",
    )
    app.state.ctx = ctx
    app.add_middleware(BodyLimit, max_bytes=ctx.max_body_bytes)
    install_error_handlers(app)
    app.include_router(v2_router)
    app.include_router(infer_router)
    app.include_router(v1_router(predict_request_model(ctx.row_model, ctx.max_rows)))
    app.include_router(ops)
    return app
