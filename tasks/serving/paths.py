"""Where the model server keeps its files: `$SLUICE_HOME/serving/` (the one place that names it).

    serving/address.json         {"host", "port", "url", "pid", "started_at"} while the server runs
    serving/predlog/             the shared prediction log's chunks (predlog.py), unless SLUICE_PREDLOG_URI
    serving/replicas/<name>.json each replica's address, when replicas run behind the balancer
    serving/balancer/            the balancer's haproxy.cfg, its runtime socket, its address
    serving/request_id.key       the key the replicas sign request ids with (requestid.py)

`server_url` reads the address file: the canary's replay, the canary step and the tools find the
running server through it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tasks.serving.predlog import LogStore

SERVING_DIR = "serving"
ADDRESS_NAME = "address.json"


def serving_dir(home: Path | str) -> Path:
    return Path(home) / SERVING_DIR


def address_file(home: Path | str) -> Path:
    """Written atomically by `python -m tasks.serving` once it accepts connections."""
    return serving_dir(home) / ADDRESS_NAME


def replica_address_file(home: Path | str, replica: str) -> Path:
    return serving_dir(home) / "replicas" / f"{replica}.json"


def balancer_dir(home: Path | str) -> Path:
    return serving_dir(home) / "balancer"


def request_key_file(home: Path | str) -> Path:
    return serving_dir(home) / "request_id.key"


def prediction_log_root(home: Path | str) -> Path:
    """The shared prediction log's local folder (the default store)."""
    return serving_dir(home) / "predlog"


def prediction_log(settings: Any) -> LogStore:
    """The shared prediction log's store for these Settings: SLUICE_PREDLOG_URI, else the local folder."""
    return LogStore(settings.predlog_uri or prediction_log_root(settings.home), settings.s3_endpoint_url)


def server_url(home: Path | str | None = None) -> str:
    """The running server's base URL from its address file ({"url"}, else {"host", "port"});
    `home` None: $SLUICE_HOME."""
    if home is None:
        from tasks.core.settings import Settings

        home = Settings.from_env().home
    path = address_file(home)
    try:
        address = json.loads(path.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(
            f"{path} does not exist: is the model server running (python -m tasks.serving)?"
        ) from None
    if address.get("url"):
        return str(address["url"]).rstrip("/")
    host = str(address["host"])
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{int(address['port'])}"


def replica_urls(home: Path | str) -> dict[str, str]:
    """{replica: its own URL} when the address file is a balancer's (serving.replicas > 1), else {}."""
    try:
        address = json.loads(address_file(home).read_text())
    except (OSError, ValueError):
        return {}
    replicas = address.get("replicas")
    return {str(k): str(v) for k, v in replicas.items()} if isinstance(replicas, dict) else {}
