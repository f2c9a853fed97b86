"""deploy: move the registry's prod and serving pointers to a model version (the previous prod is archived).

Serving (canary, A/B) builds on these pointers. A challenger that failed a gate is
not deployed: see tasks/reject_model.py.
"""
from __future__ import annotations

from typing import Any

from tasks.registry import Registry
from tasks.core.settings import Settings
from tasks.core.files import read_json
from tasks.core.steps import record_step, step_cli


def deploy(run_id: str, settings: Settings, model_version: str) -> dict[str, Any]:
    result = Registry(settings).promote(model_version, reason=f"nightly run {run_id} passed every gate")
    return record_step(settings.layout.run_dir(run_id), "deploy", result)


def main(argv: list[str] | None = None) -> int:
    def run(a, s):
        version = a.model_version or read_json(s.layout.run_dir(a.run_id) / "steps/register.json")["model_version"]
        return deploy(a.run_id, s, version)
    return step_cli(__doc__.splitlines()[0],
                    lambda p: p.add_argument("--model-version", help="default: the version this run registered"),
                    run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
