"""rollback: put the data and the model back, together, as one recorded operation.

    python -m tasks.rollback --data-version data-v3 --model-version model-v2 --reason "bad labels in batch 7"

Restores the current-data pointer (what the next snapshot builds on), the prod
model and the served champion (any challenger is retired) in one registry commit,
appended to audit.jsonl (who, when, from, to, reason). Versions are never deleted; a
second identical rollback changes nothing. The `rollback` DAG runs this step.
"""

from __future__ import annotations

from tasks.core.context import StepContext
from tasks.core.records import RollbackRecord
from tasks.registry import Registry, served_artifact
from tasks.runner import step


@step(
    help={
        "data_version": "e.g. data-v3 (default: keep the current data)",
        "model_version": "e.g. model-v2 (default: keep the prod model)",
        "reason": "why (required; recorded in the audit log)",
        "who": "who asked (recorded in the audit log)",
    }
)
def rollback(
    ctx: StepContext,
    *,
    data_version: str | None = None,
    model_version: str | None = None,
    reason: str = "",
    who: str = "cli",
) -> RollbackRecord:
    registry = Registry(ctx.settings)
    artifact = served_artifact(registry, model_version) if model_version else None  # the file it is served from
    out = registry.rollback(data_version, model_version, reason, who=who, artifact=artifact)
    return RollbackRecord(
        changed=out["changed"],
        before=out["from"],
        after=out["to"],
        commit=out.get("commit"),
        retired_challenger=out.get("retired_challenger"),
    )


if __name__ == "__main__":
    raise SystemExit(rollback.main())
