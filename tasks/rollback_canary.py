"""rollback_canary: a challenger that failed the canary is retired; the champion answers all
traffic again, and the data pointer goes back to the champion's lineage (as reject_model
does), so data and model stay together. The decision and its evidence are in the audit log. A
canary that could not judge the challenger (its champion failing its own requests) holds the batches
to re-enter without counting a rejection: the data was not at fault.

Compare-and-set: only this run's challenger is retired, and the data pointer moves back only
if the prod model is still the champion deploy_canary saw and the current data the version
this run trained on; an operator's rollback in between is kept (the step is refused).
"""

from __future__ import annotations

from tasks.canary.rollout import retire
from tasks.core.context import StepContext
from tasks.core.records import CanaryAnalysisRecord, CanaryRecord, RegisterRecord, RollbackCanaryRecord
from tasks.landing.quarantine import quarantine_rejected_batches
from tasks.registry import Registry
from tasks.runner import step


@step
def rollback_canary(
    ctx: StepContext, canary_analysis: CanaryAnalysisRecord, deploy_canary: CanaryRecord, register: RegisterRecord
) -> RollbackCanaryRecord:
    a, d = canary_analysis, deploy_canary
    why = f"nightly run {ctx.run_id}: canary of {a.model_version} failed: {'; '.join(a.reasons) or 'unknown'}"
    registry, limit = Registry(ctx.settings), ctx.params.held.quarantine_after_rejections
    if a.outcome == "cannot_judge":  # nothing was learned of the challenger or its data: held, not rejected
        limit = None
    state, rolled = retire(registry, d.model_version, d.champion, register.data_version, why, limit)
    quarantined = quarantine_rejected_batches(ctx.settings.layout.ensure(), registry.held())
    return RollbackCanaryRecord(
        model_version=a.model_version,
        champion=state["prod_model"],
        reasons=a.reasons,
        current_data=state["current_data"],
        data_rolled_back=bool(rolled.get("changed")),
        held=sorted(set(rolled.get("held") or []) - set(quarantined)),
        quarantined=quarantined,
    )


if __name__ == "__main__":
    raise SystemExit(rollback_canary.main())
