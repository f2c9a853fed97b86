"""What every step shares: atomic writes, the per-run step record, and the CLI shell.

Each step writes its result (a small JSON-able dict) to runs/<run_id>/steps/<step>.json
so the report can read every branch's outcome, and prints it on the CLI.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

from tasks.settings import Settings


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write to a temp file in the same folder, fsync, then rename over `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_bytes(path, (json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n").encode())


def atomic_write_parquet(path: Path, df: "Any") -> None:
    """DataFrame -> parquet via a temp file and rename (pandas imported by the caller)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    df.to_parquet(tmp, index=False)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_json(path: Path) -> Any:
    return json.loads(Path(path).read_text())


def json_safe(obj: Any) -> Any:
    """NaN and infinities -> None (strict JSON, as Airflow's XCom demands); numpy scalars -> Python."""
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if hasattr(obj, "item") and not isinstance(obj, (str, bytes)):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def record_step(run_dir: Path, step: str, result: dict[str, Any]) -> dict[str, Any]:
    """Save a step's result to runs/<run_id>/steps/<step>.json and return it (JSON-safe)."""
    result = json_safe(result)
    atomic_write_json(run_dir / "steps" / f"{step}.json", result)
    return result


def load_steps(run_dir: Path) -> dict[str, dict[str, Any]]:
    folder = run_dir / "steps"
    if not folder.is_dir():
        return {}
    return {p.stem: read_json(p) for p in sorted(folder.glob("*.json"))}


def log(msg: str) -> None:
    """Progress line for long steps: goes to the Airflow task log or the terminal."""
    print(f"[sluice] {msg}", file=sys.stderr, flush=True)


def step_cli(description: str, add_args: Callable[[argparse.ArgumentParser], None],
             run: Callable[[argparse.Namespace, Settings], dict[str, Any]],
             argv: list[str] | None = None) -> int:
    """The same shell for every `python -m tasks.<step>`: parse, run, print JSON result."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--run-id", required=True, help="pipeline run id (names runs/<run_id>/)")
    add_args(parser)
    args = parser.parse_args(argv)
    settings = Settings.from_env()
    result = run(args, settings)
    print(json.dumps(result, indent=2, sort_keys=True, default=str))
    if result.get("passed") is False:        # a gate said no: fail the command, so scripts stop here
        print(f"gate failed: {result.get('summary') or '; '.join(result.get('reasons') or [])}", file=sys.stderr)
        return 1
    return 0
