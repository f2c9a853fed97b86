"""Where the model server keeps its files: `$SLUICE_HOME/serving/` (the one place that names it).

    serving/address.json         {"host", "port", "url", "pid", "started_at"} while the server runs
    serving/predictions.jsonl    the prediction log (predlog.py), with its rotated files .1 ... .N

`server_url` reads the address file: the canary's replay, the canary step and the tools find the
running server through it.
"""

from __future__ import annotations

import json
from pathlib import Path

from tasks.serving.predlog import LOG_NAME

SERVING_DIR = "serving"
ADDRESS_NAME = "address.json"


def serving_dir(home: Path | str) -> Path:
    return Path(home) / SERVING_DIR


def address_file(home: Path | str) -> Path:
    """Written atomically by `python -m tasks.serving` once it accepts connections."""
    return serving_dir(home) / ADDRESS_NAME


def prediction_log_file(home: Path | str) -> Path:
    return serving_dir(home) / LOG_NAME


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
