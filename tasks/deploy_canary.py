"""deploy_canary: the registered challenger goes beside the champion at the first weight of
params.yaml `canary.steps`; the model server picks the change up from the registry.

With no champion yet there is nothing to compare with: the first model is promoted directly.
"""
from __future__ import annotations

from tasks.compression.served import served_artifact
from tasks.core.log import log
from tasks.core.records import CanaryRecord, RegisterRecord
from tasks.core.steps import StepContext, step
from tasks.registry import Registry


@step
def deploy_canary(ctx: StepContext, register: RegisterRecord) -> CanaryRecord:
    registry, version = Registry(ctx.settings), register.model_version
    champion = registry.state()["prod_model"]
    if champion is None or champion == version:
        registry.promote(version, reason=f"nightly run {ctx.run_id}: first model, no champion to compare with",
                         who="nightly_pipeline", artifact=served_artifact(registry, version))
        log(f"no champion yet: {version} promoted directly")
        return CanaryRecord(model_version=version, champion=None, weight=100, promoted_directly=True)
    weight = ctx.params.canary.steps[0]
    registry.start_canary(version, weight, reason=f"nightly run {ctx.run_id}: canary of {version} vs {champion}",
                          who="nightly_pipeline", artifact=served_artifact(registry, version))
    log(f"canary: {version} beside champion {champion} at {weight}% of traffic")
    return CanaryRecord(model_version=version, champion=champion, weight=weight, promoted_directly=False)


if __name__ == "__main__":
    raise SystemExit(deploy_canary.main())
