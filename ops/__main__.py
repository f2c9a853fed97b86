"""Operate Sluice's local Airflow: `python -m ops {up,down,status,run}`.

  up      start api-server, scheduler, dag-processor and the model server on 127.0.0.1, print their addresses
  down    stop them (SIGTERM, then SIGKILL of each process group)
  status  say whether they are running
  run     run nightly_pipeline once through the scheduler (triggered via the REST API), print the summary
  clean-state  stop them and delete SLUICE_HOME, only if it carries the marker file .sluice-home
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from datetime import datetime, timezone

from ops.airflow_env import ADMIN_USER, ensure_secrets
from ops.services import AirflowServices, ApiClient, stop_groups
from tasks.core.settings import HOME_MARKER, Settings

DAG_ID = "nightly_pipeline"


def _login_lines(settings: Settings, port: int, serve_port: int | None = None) -> str:
    password = ensure_secrets(settings.layout.airflow_home)["password"]
    return (f"Airflow UI and REST API: http://127.0.0.1:{port}\n"
            f"  login: {ADMIN_USER} / {password}   (generated into {settings.layout.airflow_home / 'passwords.json'})"
            + (f"\nModel server (Open Inference Protocol v2, /v1/predict): http://127.0.0.1:{serve_port}"
               if serve_port else ""))


def cmd_up(settings: Settings) -> int:
    running = AirflowServices.running(settings)
    if running:
        print("already running.\n" + _login_lines(settings, running["port"], running.get("serve_port")))
        return 0
    services = AirflowServices(settings).start()
    print(_login_lines(settings, services.port, services.serve_port))
    print("stop with: make down")
    return 0


def cmd_down(settings: Settings) -> int:
    state_file = settings.layout.airflow_home / "services.json"
    if not state_file.exists():
        print("not running")
        return 0
    stop_groups(json.loads(state_file.read_text())["pgids"])
    state_file.unlink()
    print("stopped")
    return 0


def cmd_status(settings: Settings) -> int:
    running = AirflowServices.running(settings)
    print(("running.\n" + _login_lines(settings, running["port"], running.get("serve_port")))
          if running else "not running")
    return 0 if running else 3


def clean_state_refusal(home: Path) -> str | None:
    """Why `home` must not be deleted, or None. Only a folder StateLayout.ensure() made (it writes the
    marker) is deleted; never a filesystem root, the user's home or a folder that holds this checkout."""
    from tasks.core.settings import REPO_ROOT

    home = Path(home)
    if home.is_symlink():
        return f"{home} is a symbolic link"
    resolved = home.resolve()
    if resolved == Path(resolved.anchor) or resolved == Path.home().resolve() or REPO_ROOT.is_relative_to(resolved):
        return f"{resolved} is a filesystem root, your home folder or holds this checkout"
    if not resolved.is_dir():
        return f"{resolved} is not a folder"
    if not (resolved / HOME_MARKER).is_file():
        return (f"{resolved} has no {HOME_MARKER} marker, so it is not known to be a Sluice home "
                f"(if it is one from before the marker, `touch {resolved / HOME_MARKER}` and run again)")
    return None


def cmd_clean_state(settings: Settings) -> int:
    home = settings.home
    if not home.exists() and not home.is_symlink():
        print(f"nothing to remove: {home} does not exist")
        return 0
    why = clean_state_refusal(home)
    if why:
        print(f"refusing to delete SLUICE_HOME: {why}", file=sys.stderr)
        return 2
    if (settings.layout.airflow_home / "services.json").exists():
        try:
            cmd_down(settings)
        except Exception as exc:  # noqa: BLE001 - a stale state file must not keep the folder
            print(f"stopping the services failed ({type(exc).__name__}: {exc}); removing the state anyway",
                  file=sys.stderr)
    shutil.rmtree(home)
    print(f"removed {home}")
    return 0


def run_pipeline(client: ApiClient, settings: Settings, conf: dict, timeout_s: float) -> tuple[str, str]:
    client.wait_for_dag(DAG_ID)
    client.unpause(DAG_ID)
    run_id = client.trigger(DAG_ID, conf, run_id=f"make_run__{datetime.now(timezone.utc):%Y%m%dT%H%M%S%f}")
    print(f"[sluice] triggered {DAG_ID} run {run_id} via the REST API", flush=True)
    t0 = time.monotonic()
    state = client.wait_for_run(DAG_ID, run_id, timeout_s, on_change=lambda task, st: print(
        f"[sluice] {time.monotonic() - t0:6.1f}s  {task:<24} {st}", flush=True))
    return run_id, state


def cmd_run(settings: Settings, conf: dict, timeout_s: float) -> int:
    running = AirflowServices.running(settings)
    if running:
        services = AirflowServices(settings, port=running["port"])
        run_id, state = run_pipeline(services.client(), settings, conf, timeout_s)
    else:
        print("[sluice] starting Airflow (api-server, scheduler, dag-processor) and the model server on 127.0.0.1",
              flush=True)
        with AirflowServices(settings, nightly_schedule=False) as services:
            run_id, state = run_pipeline(services.client(), settings, conf, timeout_s)
    summary = settings.layout.run_dir(run_id) / "summary.txt"
    print()
    print(summary.read_text() if summary.exists() else f"(no summary written: see the task logs under "
                                                        f"{settings.layout.airflow_home / 'logs'})")
    print(f"DAG run {run_id}: {state}")
    return 0 if state == "success" else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ops", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("up", help="start the Airflow services on 127.0.0.1")
    sub.add_parser("down", help="stop them")
    sub.add_parser("status", help="are they running?")
    sub.add_parser("clean-state", help=f"stop them and delete SLUICE_HOME (only with its {HOME_MARKER} marker)")
    run = sub.add_parser("run", help="run nightly_pipeline once, end to end, and print the summary")
    run.add_argument("--conf", default="{}", help='run Params as JSON, e.g. \'{"epochs": 10}\'')
    run.add_argument("--timeout", type=float, default=1800, help="seconds to wait for the run (default 1800)")
    args = parser.parse_args(argv)
    settings = Settings.from_env()
    if args.command == "clean-state":
        return cmd_clean_state(settings)          # before ensure(): it would write the marker
    settings.layout.ensure()
    if args.command == "up":
        return cmd_up(settings)
    if args.command == "down":
        return cmd_down(settings)
    if args.command == "status":
        return cmd_status(settings)
    return cmd_run(settings, json.loads(args.conf), args.timeout)


if __name__ == "__main__":
    sys.exit(main())
