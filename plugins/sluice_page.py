"""The Sluice page in the Airflow UI: an Airflow 3 plugin (AIRFLOW__CORE__PLUGINS_FOLDER points at this
folder, set by ops/airflow_env.py).

- `fastapi_apps`: Sluice's app mounted by the api-server under /sluice (the page, its JSON API, the run
  reports and model cards), behind Airflow's own authentication (plugins/sluice_ui/app.py);
- `external_views`: "Sluice" in the UI's navigation, showing /sluice/ inside the UI (a same-origin
  frame, so the login's cookie goes with it).

Light at import: Airflow imports plugins in its processes, so this file imports only Airflow's plugin
base class and the standard library. The real app (FastAPI, the registry, the metrics store) is built
on the first request the api-server hands it.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

from airflow.plugins_manager import AirflowPlugin

URL_PREFIX = "/sluice"


class LazyApp:
    """An ASGI app that builds the real one (sluice_ui.app.create_app) on its first request."""

    def __init__(self) -> None:
        self._app = None
        self._lock = threading.Lock()

    def _build(self):
        with self._lock:
            if self._app is None:
                here = str(Path(__file__).resolve().parent)
                if here not in sys.path:
                    sys.path.insert(0, here)
                from sluice_ui.app import create_app

                self._app = create_app()
        return self._app

    async def __call__(self, scope, receive, send) -> None:
        app = self._app or self._build()
        await app(scope, receive, send)


class SluicePlugin(AirflowPlugin):
    name = "sluice"
    fastapi_apps = [{"app": LazyApp(), "url_prefix": URL_PREFIX, "name": "Sluice"}]
    # url_route: the UI shows `href` in a frame at /plugin/sluice; href is relative to the UI's base URL.
    external_views = [{"name": "Sluice", "href": "sluice/", "url_route": "sluice", "destination": "nav"}]
