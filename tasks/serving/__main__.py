"""python -m tasks.serving: the model server (Open Inference Protocol v2 + /v1/predict).

Listens on --host/--port (default: params.yaml serving.host / serving.port; port 0 takes a free
one), writes {"host", "port", "url", "pid", "started_at", "replica"} atomically to
$SLUICE_HOME/serving/address.json once it accepts connections (with --replica NAME, one of several
behind the balancer: serving/replicas/NAME.json, and the balancer's address is address.json), loads
the registry's serving state in the background (GET /v2/health/ready says when every variant is
loaded and warmed), follows it every serving.poll_s, and on SIGTERM or SIGINT drains (readiness 503
for serving.drain_s, then the requests in flight finish) and stops cleanly.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any


def parse_args(argv: list[str] | None, default_host: str, default_port: int) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tasks.serving", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--host", default=default_host, help=f"bind address (default {default_host})")
    parser.add_argument(
        "--port",
        type=int,
        default=default_port,
        help=f"port, 0 for a free one (default {default_port}, from params serving.port)",
    )
    parser.add_argument(
        "--replica",
        default="",
        help="this replica's name behind the balancer (its address file and its prediction-log chunks); "
        "default: none, the one server (its chunks are keyed <hostname>-<pid>)",
    )
    parser.add_argument(
        "--log-level",
        default="warning",
        choices=["critical", "error", "warning", "info", "debug"],
        help="uvicorn's log level (the server's own lines always go to stderr)",
    )
    args = parser.parse_args(argv)
    if not 0 <= args.port <= 65535:
        parser.error(f"--port must be in 0..65535, got {args.port}")
    if args.replica and not all(c.isalnum() or c in "-_." for c in args.replica):
        parser.error(f"--replica must be letters, digits, '-', '_' or '.', got {args.replica!r}")
    return args


def bind(host: str, port: int) -> socket.socket:
    """Bind before anything slow, so the port is ours and known; uvicorn then serves on it."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.set_inheritable(True)
    return sock


def build_context(params: Any, settings: Any, replica: str = "") -> Any:
    """The ServingContext: the dataset plug-in and its row model, the registry's variants (nothing
    loaded yet: the follower loads them), metrics, the shared prediction log, the limits, the
    request-id signer."""
    from tasks.datasets import load_dataset
    from tasks.registry import Registry
    from tasks.registry.follow import RemoteRegistry
    from tasks.serving.context import ServingContext
    from tasks.serving.metrics import ServerMetrics
    from tasks.serving.paths import prediction_log, request_key_file
    from tasks.serving.predlog import PredictionLog
    from tasks.serving.requestid import RequestIds, load_key
    from tasks.serving.selftest import SelfTest, sample_rows
    from tasks.serving.v1_models import load_row_model
    from tasks.serving.variants import Variants

    sp = params.serving
    dataset = load_dataset(params.dataset.module)
    # A replica on a cluster has no registry on its disk: it follows the one at SLUICE_REGISTRY_URL.
    registry = RemoteRegistry(settings) if settings.registry_url else Registry(settings)
    metrics = ServerMetrics(str(settings.home))
    replica = replica or f"{socket.gethostname()}-{os.getpid()}"
    retention_s = sp.log_retention_h * 3600
    key = load_key(Path(settings.serving_key_file) if settings.serving_key_file else request_key_file(settings.home))
    predlog = PredictionLog(prediction_log(settings), replica, sp.log_flush_s, sp.log_flush_rows, retention_s)
    row_model = load_row_model(dataset)
    self_test = SelfTest(dataset, row_model, lambda: sample_rows(dataset, settings.home), sp.max_rows)
    return ServingContext(
        dataset=dataset,
        row_model=row_model,
        variants=Variants(
            registry.serving, registry.read_model_artifact, len(dataset.FEATURE_NAMES), metrics, self_test=self_test
        ),
        metrics=metrics,
        predlog=predlog,
        max_rows=sp.max_rows,
        max_body_bytes=sp.max_body_bytes,
        request_ids=RequestIds(key, retention_s),
        replica=replica,
    )


def url_of(host: str, port: int) -> str:
    return f"http://{f'[{host}]' if ':' in host else host}:{port}"


def announce(address_file: Path, host: str, port: int, model_name: str, replica: str = "") -> None:
    """Once the server accepts connections: its address, atomically (what clients and tests wait for)."""
    from tasks.core.files import atomic_write_json
    from tasks.core.log import log

    url = url_of(host, port)
    started = datetime.now(timezone.utc).isoformat()
    atomic_write_json(
        address_file,
        {"host": host, "port": port, "url": url, "pid": os.getpid(), "started_at": started, "replica": replica},
    )
    log(f"serving: listening on {url} (model {model_name!r}); address in {address_file}")


def withdraw(address_file: Path) -> None:
    """Remove the address file if it is still this process's (another server may have replaced it)."""
    from tasks.core.files import read_json

    try:
        if read_json(address_file).get("pid") == os.getpid():
            address_file.unlink()
    except (OSError, ValueError):
        pass


def serve(
    ctx: Any, sock: socket.socket, address_file: Path, poll_s: float, log_level: str, drain_s: float = 0.0
) -> None:
    """Serve on `sock` until SIGTERM or SIGINT (then drain for `drain_s`), following the serving state
    every `poll_s`."""
    import uvicorn

    from tasks.core.log import log
    from tasks.serving.app import create_app
    from tasks.serving.scoring import shadow_worker
    from tasks.serving.uvicorn_server import GracefulServer
    from tasks.serving.variants import Follower

    host, port = sock.getsockname()[:2]
    follower = Follower(ctx.variants, poll_s)
    stop_shadow = threading.Event()
    shadow = threading.Thread(target=shadow_worker, args=(ctx, stop_shadow), name="serving-shadow", daemon=True)
    config = uvicorn.Config(
        create_app(ctx), log_level=log_level, access_log=False, timeout_graceful_shutdown=5, lifespan="off"
    )

    def drain() -> None:
        ctx.draining = True
        log(f"serving: draining for {drain_s:g} s (readiness answers 503), then stopping")

    server = GracefulServer(
        config,
        on_started=lambda: announce(address_file, host, port, ctx.model_name, ctx.replica),
        drain_s=drain_s,
        on_drain=drain,
    )
    follower.start()
    shadow.start()
    t0 = time.monotonic()
    try:
        server.run(sockets=[sock])
    finally:
        follower.stop()
        stop_shadow.set()
        follower.join(timeout=5)
        shadow.join(timeout=5)
        ctx.predlog.close()
        withdraw(address_file)
        log(f"serving: stopped after {time.monotonic() - t0:.1f} s")


def main(argv: list[str] | None = None) -> int:
    from tasks.core.params import load_params
    from tasks.core.settings import Settings
    from tasks.serving.paths import address_file, replica_address_file

    params = load_params()
    args = parse_args(argv, params.serving.host, params.serving.port)
    settings = Settings.from_env()
    sock = bind(args.host, args.port)
    where = replica_address_file(settings.home, args.replica) if args.replica else address_file(settings.home)
    sp = params.serving
    serve(build_context(params, settings, args.replica), sock, where, sp.poll_s, args.log_level, sp.drain_s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
