"""deploy: move the registry's prod and serving pointers to a model version (the previous prod is archived).

Also `reject_model`: a challenger that failed a gate is not deployed; prod stays, and
the data pointer goes back to the version prod was trained on (tasks.rollback), so
data and model stay together. Serving (canary, A/B) builds on these pointers.
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
    from tasks.rollback import rollback_to_prod_lineage

    reasons = gate_result.get("reasons") or ["unknown"]
    rolled = rollback_to_prod_lineage(settings, f"nightly run {run_id}: challenger rejected at {gate}: "
                                                f"{'; '.join(reasons)}", who="nightly_pipeline")
    state = Registry(settings).state()
    log(f"challenger rejected at {gate}: {'; '.join(reasons)}; prod stays {state['prod_model'] or '(none)'}, "
        f"data pointer {state['current_data']}")
    return record_step(settings.layout.run_dir(run_id), "reject_model",
                       {"gate": gate, "reasons": reasons, "prod_model": state["prod_model"],
                        "current_data": state["current_data"], "rolled_back": rolled.get("changed", False)})


def main(argv: list[str] | None = None) -> int:
    def run(a, s):
        version = a.model_version or read_json(s.layout.run_dir(a.run_id) / "steps/register.json")["model_version"]
        return deploy(a.run_id, s, version)
    return step_cli(__doc__.splitlines()[0],
                    lambda p: p.add_argument("--model-version", help="default: the version this run registered"),
                    run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
