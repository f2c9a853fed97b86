"""Step records and the CLI shell shared by every step.

Each step writes its result (a small JSON-able dict) to runs/<run_id>/steps/<step>.json
so the report can read every branch's outcome, and prints it on the CLI.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Callable

from tasks.core.files import atomic_write_json, json_safe, read_json
from tasks.core.settings import Settings


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
