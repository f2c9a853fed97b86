"""deploy_canary: the registered challenger goes beside the champion at the first weight of
params.yaml `canary.steps`; the model server picks the change up from the registry.

With no champion yet there is nothing to compare with: the first model is promoted directly.

Compare-and-set: the move happens only if the registry still holds what this run saw: the
champion `evaluate` compared the challenger with, and the data version `train` trained on as
the current data. An operator's rollback in between is kept: the step is refused
(RegistryError, no retry) with the reason, and nothing changes.
"""

from __future__ import annotations

from tasks.compression.served import served_artifact
from tasks.core.context import StepContext
from tasks.core.log import log
from tasks.core.records import CanaryRecord, EvaluateRecord, RegisterRecord, TrainRecord
from tasks.registry import Registry
from tasks.runner import step


@step
def deploy_canary(
    ctx: StepContext, register: RegisterRecord, evaluate: EvaluateRecord, train: TrainRecord
) -> CanaryRecord:
    registry, version = Registry(ctx.settings), register.model_version
    champion, data = evaluate.champion_version, train.data_version  # what this run compared and trained on
    if champion is None:
        registry.promote(
            version,
            reason=f"nightly run {ctx.run_id}: first model, no champion to compare with",
            who="nightly_pipeline",
            artifact=served_artifact(registry, version),
            expect_champion=None,
            expect_data=data,
        )
        log(f"no champion yet: {version} promoted directly")
        return CanaryRecord(model_version=version, champion=None, weight=100, promoted_directly=True)
    weight = ctx.params.canary.steps[0]
    registry.start_canary(
        version,
        weight,
        reason=f"nightly run {ctx.run_id}: canary of {version} vs {champion}",
        who="nightly_pipeline",
        artifact=served_artifact(registry, version),
        expect_champion=champion,
        expect_data=data,
    )
    log(f"canary: {version} beside champion {champion} at {weight}% of traffic")
    return CanaryRecord(model_version=version, champion=champion, weight=weight, promoted_directly=False)


if __name__ == "__main__":
    raise SystemExit(deploy_canary.main())
