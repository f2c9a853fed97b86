"""What the routes share: the ServingContext built once at start (tasks/serving/__main__.py), given to
every route as a FastAPI dependency (`Context`)."""

from __future__ import annotations

import queue
from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import Depends, Request

from tasks.serving.metrics import ServerMetrics
from tasks.serving.predlog import PredictionLog
from tasks.serving.requestid import RequestIds
from tasks.serving.variants import Variants

SHADOW_QUEUE = 256


@dataclass
class ServingContext:
    """The dataset plug-in, its row model, the served variants, metrics, the prediction log, the limits,
    the request-id signer, this replica's name; `draining` is set on SIGTERM (readiness answers 503)."""

    dataset: Any
    row_model: Any
    variants: Variants
    metrics: ServerMetrics
    predlog: PredictionLog
    max_rows: int
    max_body_bytes: int
    request_ids: RequestIds
    replica: str
    draining: bool = False
    shadow_queue: "queue.Queue[Any]" = field(default_factory=lambda: queue.Queue(maxsize=SHADOW_QUEUE))

    @property
    def model_name(self) -> str:
        """The served model's name: the dataset plug-in's NAME."""
        return self.dataset.NAME


def serving_context(request: Request) -> ServingContext:
    return request.app.state.ctx


Context = Annotated[ServingContext, Depends(serving_context)]
