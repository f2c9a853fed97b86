"""reject_model: a challenger that failed a gate is not deployed; prod stays, and the data
pointer goes back to the version prod was trained on (tasks.rollback), so data and
model stay together.
"""
from __future__ import annotations

from typing import Any

from tasks.core.log import log
from tasks.core.settings import Settings
from tasks.core.steps import record_step
from tasks.registry import Registry


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
