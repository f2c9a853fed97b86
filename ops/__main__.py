"""Operate Sluice's local Airflow: `python -m ops {up,down,status,run}`.

up      start api-server, scheduler, dag-processor and the model server on 127.0.0.1, print their addresses
        (when they are up already: restart any part whose process died, saying which and why)
down    stop them (SIGTERM, then SIGKILL of each process group), saying what it found: each part alive,
        dead, or dead with orphans left in its group (killed); a pid now another program's is never signalled
status  say whether each part is running and healthy (exit 0), some are not (exit 1), or none is (exit 3);
        then the data version, the champion and challenger (weights), the last run's outcome, its open
        alerts and yesterday's cost
run     run nightly_pipeline once through the scheduler (triggered via the REST API), print the summary;
        meanwhile a part that dies is restarted (the api-server too), and so is a scheduler or dag-processor
        that is alive but unhealthy (hung: no heartbeat) for --restart-hung-after seconds (60), saying so once
clean-state  stop them and delete SLUICE_HOME, only if it carries the marker file .sluice-home
demo-params NAME OUT [--model M]  write params.yaml's values with the plug-in tasks/plugins/NAME's demo.yaml over
        them to OUT (what `make run DEMO=reviews` runs with: the text demo, in a SLUICE_HOME of its own); --model:
        the model plug-in tasks/plugins/M's demo.yaml over that (make run DEMO=reviews MODEL=bert)
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import httpx

from ops.airflow_env import ADMIN_USER, ensure_secrets
from ops.services import AirflowServices, ApiClient, RunWatch, params_mismatch
from tasks.core.processes import ProcessGroupError
from tasks.core.settings import HOME_MARKER, Settings

DAG_ID = "nightly_pipeline"


def _login_lines(settings: Settings, port: int, serve_port: int | None = None) -> str:
    password = ensure_secrets(settings.layout.airflow_home)["password"]
    return (
        f"Airflow UI and REST API: http://127.0.0.1:{port}\n"
        f"  login: {ADMIN_USER} / {password}   (generated into {settings.layout.airflow_home / 'passwords.json'})"
        + f"\nSluice page (runs, versions, canary, alerts, costs): http://127.0.0.1:{port}/sluice/"
        + (
            f"\nModel server (Open Inference Protocol v2, /v1/predict): http://127.0.0.1:{serve_port}"
            if serve_port
            else ""
        )
    )


def _restarted(services: AirflowServices, part: str) -> str:
    n = services.restarts.get(part, 0)
    return f" (restarted {n} time{'s' if n > 1 else ''} since start)" if n else ""


def _replica_lines(settings: Settings) -> list[str]:
    """Behind the balancer: each replica alive and ready or not (asked itself), and the restarts since
    the services started (the watchdog's ledger, tasks/serving/restarts.py)."""
    from tasks.serving.paths import replica_urls
    from tasks.serving.restarts import read_restarts

    behind = replica_urls(settings.home)
    if not behind:
        return []
    restarts = read_restarts(settings.home, since=(AirflowServices.recorded(settings) or {}).get("started_at"))
    lines = [f"  model-server replicas behind haproxy: {len(behind)}, restarts since start: {len(restarts)}"]
    for name, url in sorted(behind.items()):
        try:
            r = httpx.get(f"{url}/v2/health/ready", timeout=5)
            body = r.json()
            ok = r.status_code == 200
            how = f"ready, serving {body.get('serving')}" if ok else f"NOT READY: {body.get('last_error')}"
        except (httpx.HTTPError, ValueError) as exc:
            how = f"NOT ANSWERING ({type(exc).__name__})"
        lines.append(f"    replica {name:<6} {how}")
    lines += [
        f"    restart: {e.get('replica')} exited ({e.get('exit_code')}), replaced by {e.get('replaced_by')} "
        f"at {datetime.fromtimestamp(e.get('ts', 0), timezone.utc):%Y-%m-%d %H:%M:%S} UTC"
        for e in restarts[-5:]
    ]
    return lines


def _recorded(settings: Settings) -> AirflowServices | None:
    """The services recorded in services.json, or None when nothing is."""
    return AirflowServices.attach(settings) if AirflowServices.recorded(settings) else None


def cmd_up(settings: Settings) -> int:
    recorded = _recorded(settings)
    if recorded and any(p.leader() == "alive" for p in recorded.parts.values()):
        mismatch = params_mismatch(settings, AirflowServices.recorded(settings) or {})
        if mismatch:  # a part restarted now would read the caller's file beside parts reading theirs
            print(f"[sluice] already running, and {mismatch}", file=sys.stderr)
            return 2
        restarted = recorded.heal()
        problems = recorded.check()
        head = ("restarted " + ", ".join(restarted)) if restarted else "already running"
        print(
            head
            + (
                "; some parts are not healthy:\n"
                + "\n".join(f"  {n}: {w}" for n, w in problems.items())
                + "\n  (`make down && make up` starts everything afresh)"
                if problems
                else "."
            )
            + "\n"
            + _login_lines(settings, recorded.port, recorded.serve_port)
        )
        return 1 if problems else 0
    if recorded:  # every part died: clean up what they left (orphans), then start afresh
        for line in recorded.stop():
            print(f"[sluice] found {line}")
    services = AirflowServices(settings).start()
    print(_login_lines(settings, services.port, services.serve_port))
    print("stop with: make down")
    return 0


def cmd_down(settings: Settings) -> int:
    recorded = _recorded(settings)
    if recorded is None:
        print("not running")
        return 0
    for line in recorded.stop():
        print(line)
    print("stopped")
    return 0


def cmd_status(settings: Settings) -> int:
    """The services' state (the exit code: 0 running, 1 degraded, 3 down), then the pipeline's."""
    code = _services_status(settings)
    from tasks.reports.pipeline_state import read_state, state_lines

    try:
        print("\n" + "\n".join(state_lines(read_state(settings))))
    except Exception as exc:  # noqa: BLE001 - the services' answer stands; say what could not be read
        print(f"\npipeline: could not be read ({type(exc).__name__}: {exc})")
    return code


def _services_status(settings: Settings) -> int:
    recorded = _recorded(settings)
    if recorded is None:
        print("not running")
        return 3
    problems = recorded.check()
    if len(problems) == len(recorded.parts) and all(p.leader() != "alive" for p in recorded.parts.values()):
        print(
            "not running (every recorded part is dead):\n"
            + "\n".join(f"  {n}: {w}" for n, w in problems.items())
            + "\n  `make up` starts them; `make down` cleans up what they left"
        )
        return 3
    if problems:
        print(
            "degraded:\n"
            + "\n".join(
                f"  {n}: {problems.get(n, 'alive and healthy')}{_restarted(recorded, n)}" for n in recorded.parts
            )
            + "\n  `make up` restarts a dead part\n"
            + "\n".join([*_replica_lines(settings), _login_lines(settings, recorded.port, recorded.serve_port)])
        )
        return 1
    replicas = _replica_lines(settings)
    degraded = any("NOT " in line for line in replicas)  # a replica down is not "running"
    print(("degraded (a replica is not ready):\n" if degraded else "running.\n") + "\n".join(
        f"  {n:<13} alive and healthy{_restarted(recorded, n)}" for n in recorded.parts
    ))  # fmt: skip
    print("\n".join([*replicas, _login_lines(settings, recorded.port, recorded.serve_port)]))
    return 1 if degraded else 0


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
        return (
            f"{resolved} has no {HOME_MARKER} marker, so it is not known to be a Sluice home "
            f"(if it is one from before the marker, `touch {resolved / HOME_MARKER}` and run again)"
        )
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
            print(
                f"stopping the services failed ({type(exc).__name__}: {exc}); removing the state anyway",
                file=sys.stderr,
            )
    shutil.rmtree(home)
    print(f"removed {home}")
    return 0


def run_pipeline(
    client: ApiClient,
    settings: Settings,
    conf: dict,
    timeout_s: float,
    services: AirflowServices | None = None,
    hung_after_s: float | None = 60,
) -> tuple[str, str]:
    """Trigger the nightly run and wait for it. With `services`, a part that dies meanwhile is restarted,
    and a scheduler or dag-processor that is alive but unhealthy for `hung_after_s` too (RunWatch)."""
    client.wait_for_dag(DAG_ID)
    client.unpause(DAG_ID)
    run_id = client.trigger(DAG_ID, conf, run_id=f"make_run__{datetime.now(timezone.utc):%Y%m%dT%H%M%S%f}")
    print(f"[sluice] triggered {DAG_ID} run {run_id} via the REST API", flush=True)
    t0 = time.monotonic()
    # The health endpoint is read often enough to act within hung_after_s of its verdict.
    health_every_s = min(10.0, max(1.0, hung_after_s / 3)) if hung_after_s else 10.0
    state = client.wait_for_run(
        DAG_ID,
        run_id,
        timeout_s,
        on_change=lambda task, st: print(f"[sluice] {time.monotonic() - t0:6.1f}s  {task:<24} {st}", flush=True),
        watch=RunWatch(services, hung_after_s) if services else None,
        health_every_s=health_every_s,
    )
    return run_id, state


def cmd_run(settings: Settings, conf: dict, timeout_s: float, hung_after_s: float | None = 60) -> int:
    recorded = _recorded(settings)
    alive = recorded is not None and any(p.leader() == "alive" for p in recorded.parts.values())
    mismatch = params_mismatch(settings, AirflowServices.recorded(settings) or {}) if alive else None
    if mismatch:
        print(f"[sluice] refusing to run: {mismatch}", file=sys.stderr)
        return 2
    try:
        if alive:
            recorded.heal(say=lambda line: print(line, flush=True))  # restarts a part that died, saying so
            run_id, state = run_pipeline(recorded.client(), settings, conf, timeout_s, recorded, hung_after_s)
        else:
            if recorded:
                for line in recorded.stop():
                    print(f"[sluice] found {line}", flush=True)
            print(
                "[sluice] starting Airflow (api-server, scheduler, dag-processor) and the model server on 127.0.0.1",
                flush=True,
            )
            with AirflowServices(settings, nightly_schedule=False) as services:
                run_id, state = run_pipeline(services.client(), settings, conf, timeout_s, services, hung_after_s)
    except ProcessGroupError as exc:  # ServiceError too (a subclass)
        print(f"[sluice] {exc}", file=sys.stderr)
        return 1
    except httpx.TransportError as exc:
        print(
            f"[sluice] lost the Airflow API ({type(exc).__name__}: {exc}); were the services stopped "
            f"(make down)? `make status` says what is running",
            file=sys.stderr,
        )
        return 1
    summary = settings.layout.run_dir(run_id) / "summary.txt"
    print()
    print(
        summary.read_text()
        if summary.exists()
        else f"(no summary written: see the task logs under {settings.layout.airflow_home / 'logs'})"
    )
    html = summary.with_name("report.html")
    if html.exists():
        print(f"run report     {html}")
    print(f"DAG run {run_id}: {state}")
    return 0 if state == "success" else 1


def _demo_yaml(path: Path) -> dict:
    """A demo.yaml's {section: {dotted key: value}} (empty when there is none)."""
    import yaml

    from tasks.core.params import ParamsError

    own = yaml.safe_load(path.read_text()) or {} if path.exists() else {}
    if not isinstance(own, dict) or not all(isinstance(v, dict) for v in own.values()):
        raise ParamsError(f"{path}: expected {{section: {{key: value}}}}, got {own!r}")
    return own


def cmd_demo_params(name: str, out: Path, model: str | None = None) -> int:
    """params.yaml's values with the demo's own laid over them, written to `out`: the plug-in
    tasks/plugins/<name>/ (checked on load) as the dataset, and its folder's demo.yaml (what its demo
    chooses: model, compression candidates, floors; {section: {dotted key: value}}, as `--set` gives
    them) over the rest. Nothing another demo chooses reaches it: a value it does not set is params.yaml's.
    `model`: a model plug-in tasks/plugins/<model>/ whose demo.yaml (its params, pretrained weights,
    compression candidates) is laid over that in turn."""
    import yaml

    from tasks.core.params import ParamsError, load_params, with_overrides
    from tasks.core.plugins import ModelPluginError, load_model_plugin
    from tasks.core.settings import REPO_ROOT
    from tasks.datasets import DatasetError, load_dataset

    module = f"tasks.plugins.{name}"
    try:
        if not name.isidentifier():
            raise DatasetError(f"{name!r} is not a module name")
        demo_file = Path(load_dataset(module).__file__).with_name("demo.yaml")
        own = _demo_yaml(demo_file)
        values = with_overrides(
            yaml.safe_load((REPO_ROOT / "params.yaml").read_text()),
            {**own, "dataset": {**own.get("dataset", {}), "module": module}},
        )
        if model:
            if not model.isidentifier():
                raise ModelPluginError(f"{model!r} is not a module name")
            model_file = Path(load_model_plugin(f"tasks.plugins.{model}").__file__).with_name("demo.yaml")
            if not model_file.exists():
                raise ModelPluginError(f"tasks.plugins.{model} has no demo.yaml")
            values = with_overrides(values, _demo_yaml(model_file))
            demo_file = f"{demo_file.relative_to(REPO_ROOT)} and {model_file.relative_to(REPO_ROOT)}"
        else:
            demo_file = demo_file.relative_to(REPO_ROOT)
    except DatasetError as exc:
        print(f"[sluice] DEMO={name}: not a dataset plug-in ({exc})", file=sys.stderr)
        return 2
    except ModelPluginError as exc:
        print(f"[sluice] MODEL={model}: not a model plug-in with a demo ({exc})", file=sys.stderr)
        return 2
    except (ParamsError, yaml.YAMLError) as exc:
        print(f"[sluice] DEMO={name}: {exc}", file=sys.stderr)
        return 2
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        f"# params.yaml with {demo_file} over it (python -m ops demo-params {name}"
        + (f" --model {model}" if model else "")
        + "); "
        "edit those, not this file\n" + yaml.safe_dump(values, sort_keys=False)
    )
    try:
        load_params(out)  # the same validation every step applies
    except ParamsError as exc:
        out.unlink()
        print(f"[sluice] DEMO={name}: {exc}", file=sys.stderr)
        return 2
    print(f"[sluice] demo {name}: params in {out}", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ops", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("up", help="start the Airflow services on 127.0.0.1")
    sub.add_parser("down", help="stop them")
    sub.add_parser("status", help="are they running? and the versions, last run, alerts, cost")
    sub.add_parser("clean-state", help=f"stop them and delete SLUICE_HOME (only with its {HOME_MARKER} marker)")
    run = sub.add_parser("run", help="run nightly_pipeline once, end to end, and print the summary")
    run.add_argument("--conf", default="{}", help="run Params as JSON, e.g. '{\"epochs\": 10}'")
    run.add_argument("--timeout", type=float, default=1800, help="seconds to wait for the run (default 1800)")
    run.add_argument(
        "--restart-hung-after",
        type=float,
        default=60,
        metavar="SECONDS",
        help="restart a scheduler or dag-processor that is alive but unhealthy (no heartbeat) this long "
        "(default 60; 0: never, only say so)",
    )
    demo = sub.add_parser("demo-params", help="params.yaml with another demo dataset plug-in (make run DEMO=NAME)")
    demo.add_argument("name", help="a dataset plug-in under tasks/plugins/, e.g. reviews")
    demo.add_argument("out", type=Path, help="the params file to write")
    demo.add_argument("--model", help="a model plug-in under tasks/plugins/ with a demo.yaml, e.g. bert")
    args = parser.parse_args(argv)
    if args.command == "demo-params":
        return cmd_demo_params(args.name, args.out, args.model)
    settings = Settings.from_env()
    if args.command == "clean-state":
        return cmd_clean_state(settings)  # before ensure(): it would write the marker
    settings.layout.ensure()
    if args.command == "up":
        return cmd_up(settings)
    if args.command == "down":
        return cmd_down(settings)
    if args.command == "status":
        return cmd_status(settings)
    return cmd_run(settings, json.loads(args.conf), args.timeout, args.restart_hung_after or None)


if __name__ == "__main__":
    sys.exit(main())
