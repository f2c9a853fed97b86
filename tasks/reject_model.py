"""reject_model: a challenger that failed a gate is not deployed; prod stays, and the data
pointer goes back to the version prod was trained on (Registry.rollback_to_prod_lineage), so data and
model stay together. The gate is the one whose record says it did not pass. The batches the pointer
leaves out are held and re-enter the next snapshot (tasks/registry/held.py); one rejected
`held.quarantine_after_rejections` times in a row goes to quarantine/ with every reason.

Compare-and-set, read and write in one registry transaction: the data pointer moves back only
if the prod model is still the champion `evaluate` compared with; an operator's rollback in
between is kept (the step is refused).
"""

from __future__ import annotations

from tasks.core.context import StepContext
from tasks.core.log import log
from tasks.core.records import CompressRecord, EvaluateRecord, RejectRecord, TrainRecord, failed_gate
from tasks.landing.quarantine import quarantine_rejected_batches
from tasks.registry import ANY, Registry
from tasks.runner import step


@step
def reject_model(
    ctx: StepContext,
    evaluate: EvaluateRecord | None = None,
    compress: CompressRecord | None = None,
    train: TrainRecord | None = None,
) -> RejectRecord:
    gate, reasons = failed_gate(evaluate=evaluate, compress=compress)
    registry = Registry(ctx.settings)
    rolled = registry.rollback_to_prod_lineage(
        f"nightly run {ctx.run_id}: challenger rejected at {gate}: {'; '.join(reasons)}",
        who="nightly_pipeline",
        expect_prod=evaluate.champion_version if evaluate else ANY,
        expect_data=train.data_version if train else ANY,
        quarantine_after=ctx.params.held.quarantine_after_rejections,
    )  # an operator's data rollback meanwhile stays
    quarantined = quarantine_rejected_batches(ctx.settings.layout.ensure(), registry.held())
    state = registry.state()
    log(
        f"challenger rejected at {gate}: {'; '.join(reasons)}; prod stays {state['prod_model'] or '(none)'}, "
        f"data pointer {state['current_data']}; held: {', '.join(rolled.get('held') or []) or 'none'}"
        + (f"; quarantined (rejected too often): {', '.join(quarantined)}" if quarantined else "")
    )
    return RejectRecord(
        gate=gate,
        reasons=reasons,
        prod_model=state["prod_model"],
        current_data=state["current_data"],
        rolled_back=rolled.get("changed", False),
        held=sorted(set(rolled.get("held") or []) - set(quarantined)),
        quarantined=quarantined,
    )


if __name__ == "__main__":
    raise SystemExit(reject_model.main())
