"""deploy_canary: the registered challenger goes beside the champion at the first weight of
params.yaml `canary.steps`; the model server picks the change up from the registry. The rollout
(tasks/canary/rollout.py) owns this weight and every later one.

With no champion yet there is nothing to compare with: the first model is promoted directly.

Compare-and-set: the move happens only if the registry still holds what this run saw: the
champion `evaluate` compared the challenger with, and the data version `train` trained on as
the current data. An operator's rollback in between is kept: the step is refused
(RegistryError, no retry) with the reason, and nothing changes.
"""

from __future__ import annotations

from dataclasses import asdict

from tasks.canary.rollout import start
from tasks.core.context import StepContext
from tasks.core.records import CanaryRecord, EvaluateRecord, RegisterRecord, TrainRecord
from tasks.registry import Registry
from tasks.runner import step


@step
def deploy_canary(
    ctx: StepContext, register: RegisterRecord, evaluate: EvaluateRecord, train: TrainRecord
) -> CanaryRecord:
    # what this run compared the challenger with, and trained it on
    champion, data = evaluate.champion_version, train.data_version
    release = start(Registry(ctx.settings), ctx.params.canary, register.model_version, champion, data, ctx.run_id)
    return CanaryRecord(**asdict(release))


if __name__ == "__main__":
    raise SystemExit(deploy_canary.main())
