"""What the routes share: the ServingContext built once at start (tasks/serving/__main__.py), given to
every route as a FastAPI dependency (`Context`)."""

from __future__ import annotations

import queue
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Annotated, Any, Optional

from fastapi import Depends, Request

from tasks.serving.metrics import ServerMetrics
from tasks.serving.predlog import PredictionLog
from tasks.serving.variants import Variants

REQUEST_INDEX_SIZE = 200_000  # request ids remembered for feedback (about 100 B each)
SHADOW_QUEUE = 256


@dataclass
class ServingContext:
    """The dataset plug-in, its row model, the served variants, metrics, the prediction log, the limits."""

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

    @property
    def model_name(self) -> str:
        """The served model's name: the dataset plug-in's NAME."""
        return self.dataset.NAME

    def remember(self, request_id: str, rows: int) -> None:
        with self.requests_lock:
            self.requests[request_id] = rows
            while len(self.requests) > REQUEST_INDEX_SIZE:
                self.requests.popitem(last=False)

    def rows_of(self, request_id: str) -> Optional[int]:
        with self.requests_lock:
            return self.requests.get(request_id)


def serving_context(request: Request) -> ServingContext:
    return request.app.state.ctx


Context = Annotated[ServingContext, Depends(serving_context)]
