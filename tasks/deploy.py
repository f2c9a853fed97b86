"""deploy: move the registry's prod pointer to a model version (the previous prod is archived).

Also records `reject_model`: a challenger that failed a gate leaves prod untouched.
Serving (canary, A/B) builds on this pointer.
"""
from __future__ import annotations

from typing import Any

from tasks.registry import Registry
from tasks.settings import Settings
from tasks.stepio import log, read_json, record_step, step_cli


def deploy(run_id: str, settings: Settings, model_version: str) -> dict[str, Any]:
    result = Registry(settings).promote(model_version, reason=f"nightly run {run_id} passed every gate")
    return record_step(settings.layout.run_dir(run_id), "deploy", result)


def reject_model(run_id: str, settings: Settings, gate: str, gate_result: dict[str, Any]) -> dict[str, Any]:
    prod = Registry(settings).state()["prod_model"]
    reasons = gate_result.get("reasons") or ["unknown"]
    log(f"challenger rejected at {gate}: {'; '.join(reasons)}; prod stays {prod or '(none)'}")
    return record_step(settings.layout.run_dir(run_id), "reject_model",
                       {"gate": gate, "reasons": reasons, "prod_model": prod})


def main(argv: list[str] | None = None) -> int:
    def run(a, s):
        version = a.model_version or read_json(s.layout.run_dir(a.run_id) / "steps/register.json")["model_version"]
        return deploy(a.run_id, s, version)
    return step_cli(__doc__.splitlines()[0],
                    lambda p: p.add_argument("--model-version", help="default: the version this run registered"),
                    run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
