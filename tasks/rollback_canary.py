"""rollback_canary: a challenger that failed the canary is retired; the champion answers all
traffic again, and the data pointer goes back to the champion's lineage (as reject_model
does), so data and model stay together. The decision and its evidence are in the audit log.
"""
from __future__ import annotations

from tasks.core.log import log
from tasks.core.records import CanaryAnalysisRecord, RollbackCanaryRecord
from tasks.core.steps import StepContext, step
from tasks.registry import Registry


@step
def rollback_canary(ctx: StepContext, canary_analysis: CanaryAnalysisRecord) -> RollbackCanaryRecord:
    a = canary_analysis
    why = f"nightly run {ctx.run_id}: canary of {a.model_version} failed: {'; '.join(a.reasons) or 'unknown'}"
    Registry(ctx.settings).rollback_canary(reason=why, who="nightly_pipeline")
    rolled = Registry(ctx.settings).rollback_to_prod_lineage(why, who="nightly_pipeline")
    state = Registry(ctx.settings).state()
    log(f"canary rolled back: {a.model_version} retired, {state['prod_model']} serves 100%, "
        f"data pointer {state['current_data']}")
    return RollbackCanaryRecord(model_version=a.model_version, champion=state["prod_model"], reasons=a.reasons,
                                current_data=state["current_data"], data_rolled_back=rolled.get("changed", False))


if __name__ == "__main__":
    raise SystemExit(rollback_canary.main())
