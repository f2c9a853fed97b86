"""deploy: move the registry's prod and serving pointers to a model version (the previous prod is archived).

A challenger that failed a gate is not deployed: see tasks/reject_model.py.
"""
from __future__ import annotations

from tasks.core.records import DeployRecord, RegisterRecord
from tasks.core.steps import StepContext, step
from tasks.registry import Registry


@step(help={"model_version": "deploy this version (default: the one this run registered)"})
def deploy(ctx: StepContext, register: RegisterRecord | None = None, *, model_version: str | None = None) -> DeployRecord:
    version = model_version or (register.model_version if register else None)
    if not version:
        raise ValueError("deploy needs a model version: pass --model-version or run register first")
    result = Registry(ctx.settings).promote(version, reason=f"nightly run {ctx.run_id} passed every gate")
    return DeployRecord(**{k: result.get(k) for k in DeployRecord.model_fields if k in result})


if __name__ == "__main__":
    raise SystemExit(deploy.main())
