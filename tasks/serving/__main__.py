"""python -m tasks.serving: the model server (Open Inference Protocol v2 + /v1/predict).

Listens on --host/--port (default: params.yaml serving.host / serving.port; port 0 takes a free
one), writes {"host", "port", "url", "pid", "started_at"} atomically to
$SLUICE_HOME/serving/address.json once it accepts connections, loads the registry's serving
state in the background (GET /v2/health/ready says when every variant is loaded and warmed),
follows it every serving.poll_s, and stops cleanly on SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path


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
        "--log-level",
        default="warning",
        choices=["critical", "error", "warning", "info", "debug"],
        help="uvicorn's log level (the server's own lines always go to stderr)",
    )
    args = parser.parse_args(argv)
    if not 0 <= args.port <= 65535:
        parser.error(f"--port must be in 0..65535, got {args.port}")
    return args


def serving_dir(home: Path) -> Path:
    return home / "serving"


def bind(host: str, port: int) -> socket.socket:
    """Bind before anything slow, so the port is ours and known; uvicorn then serves on it."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.set_inheritable(True)
    return sock


def main(argv: list[str] | None = None) -> int:
    from tasks.core.params import load_params
    from tasks.core.settings import Settings

    params = load_params()
    sp = params.serving
    args = parse_args(argv, sp.host, sp.port)
    settings = Settings.from_env()

    import uvicorn

    from tasks.core.files import atomic_write_json
    from tasks.core.log import log
    from tasks.datasets import load_dataset
    from tasks.registry import Registry
    from tasks.serving.app import ServingContext, create_app, shadow_worker
    from tasks.serving.metrics import ServerMetrics
    from tasks.serving.predlog import LOG_NAME, PredictionLog
    from tasks.serving.schema import load_row_model
    from tasks.serving.variants import Follower, Variants

    sock = bind(args.host, args.port)
    host, port = sock.getsockname()[:2]
    dataset = load_dataset(params.dataset.module)
    registry = Registry(settings)
    metrics = ServerMetrics()
    variants = Variants(registry.state, registry.read_model_artifact, len(dataset.FEATURE_NAMES), metrics)
    out = serving_dir(settings.home)
    ctx = ServingContext(
        dataset=dataset,
        row_model=load_row_model(dataset),
        variants=variants,
        metrics=metrics,
        predlog=PredictionLog(out / LOG_NAME, int(sp.prediction_log_mb * 1024 * 1024), sp.prediction_log_keep),
        max_rows=sp.max_rows,
        max_body_bytes=sp.max_body_bytes,
    )
    app = create_app(ctx)
    follower = Follower(variants, sp.poll_s)
    stop_shadow = threading.Event()
    shadow = threading.Thread(target=shadow_worker, args=(ctx, stop_shadow), name="serving-shadow", daemon=True)
    address_file = out / "address.json"
    url_host = f"[{host}]" if ":" in host else host

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self):  # type: ignore[override]
            """uvicorn re-raises SIGTERM after its graceful shutdown, which kills the process before
            our cleanup runs (and exits -15); here a signal only asks for the graceful shutdown."""
            previous = {
                s: signal.signal(s, lambda signum, _frame: self.handle_exit(signum, None))
                for s in (signal.SIGTERM, signal.SIGINT)
            }
            try:
                yield
            finally:
                for s, h in previous.items():
                    signal.signal(s, h)

        async def startup(self, sockets=None):  # type: ignore[override]
            await super().startup(sockets=sockets)
            if not self.should_exit:
                atomic_write_json(
                    address_file,
                    {
                        "host": host,
                        "port": port,
                        "url": f"http://{url_host}:{port}",
                        "pid": os.getpid(),
                        "started_at": datetime.now(timezone.utc).isoformat(),
                    },
                )
                log(
                    f"serving: listening on http://{url_host}:{port} (model {dataset.NAME!r}); "
                    f"address in {address_file}"
                )

    config = uvicorn.Config(
        app, log_level=args.log_level, access_log=False, timeout_graceful_shutdown=5, lifespan="off"
    )
    server = Server(config)
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
        try:
            from tasks.core.files import read_json

            if read_json(address_file).get("pid") == os.getpid():
                address_file.unlink()
        except (OSError, ValueError):
            pass
        log(f"serving: stopped after {time.monotonic() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
