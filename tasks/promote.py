"""promote: the challenger becomes the champion: the registry's prod pointer moves to it (the
previous prod is archived) and the server answers every request with it.

Reached when the canary analysis passed, or directly when there was no champion yet.

Compare-and-set: promoting the version this run registered happens only if the prod model is
still the champion deploy_canary saw and the current data is still the version it was trained
on; otherwise (an operator's rollback in between) it is refused and nothing changes. With
`--model-version` (an operator's promotion of another version) nothing is compared.
"""

from __future__ import annotations

from tasks.core.context import StepContext
from tasks.core.records import CanaryRecord, DeployRecord, RegisterRecord
from tasks.registry import ANY, Registry
from tasks.runner import step


@step(help={"model_version": "promote this version (default: the one this run registered)"})
def promote(
    ctx: StepContext,
    register: RegisterRecord | None = None,
    deploy_canary: CanaryRecord | None = None,
    *,
    model_version: str | None = None,
) -> DeployRecord:
    version = model_version or (register.model_version if register else None)
    if not version:
        raise ValueError("promote needs a model version: pass --model-version or run register first")
    ours = register is not None and version == register.model_version
    expect_champion = deploy_canary.champion if ours and deploy_canary is not None else ANY
    expect_data = register.data_version if ours else ANY
    result = Registry(ctx.settings).promote(  # the file the version is served from: the registry's served_artifact
        version,
        reason=f"nightly run {ctx.run_id} passed every gate",
        who="nightly_pipeline",
        expect_champion=expect_champion,
        expect_data=expect_data,
    )
    return DeployRecord(**{k: result.get(k) for k in DeployRecord.model_fields if k in result})


if __name__ == "__main__":
    raise SystemExit(promote.main())
