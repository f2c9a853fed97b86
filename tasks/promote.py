"""promote: the challenger becomes the champion: the registry's prod pointer moves to it (the
previous prod is archived) and the server answers every request with it.

Reached when the canary analysis passed, or directly when there was no champion yet.
"""
from __future__ import annotations

from tasks.compression.served import served_artifact
from tasks.core.records import DeployRecord, RegisterRecord
from tasks.core.steps import StepContext, step
from tasks.registry import Registry


@step(help={"model_version": "promote this version (default: the one this run registered)"})
def promote(ctx: StepContext, register: RegisterRecord | None = None, *, model_version: str | None = None) -> DeployRecord:
    version = model_version or (register.model_version if register else None)
    if not version:
        raise ValueError("promote needs a model version: pass --model-version or run register first")
    registry = Registry(ctx.settings)
    result = registry.promote(version, reason=f"nightly run {ctx.run_id} passed every gate", who="nightly_pipeline",
                              artifact=served_artifact(registry, version))
    return DeployRecord(**{k: result.get(k) for k in DeployRecord.model_fields if k in result})


if __name__ == "__main__":
    raise SystemExit(promote.main())
