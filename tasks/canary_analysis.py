"""canary_analysis: judge the challenger against the champion on live traffic, step by step
(params.yaml `canary`): error rate, p99 latency, score PSI and, from feedback labels, online
ROC AUC with a bootstrap confidence interval of the difference (tasks/canary/analysis.py), each
step's weight set by the rollout (tasks/canary/rollout.py).

Pass at the last step: promote; fail at any step: rollback_canary. On the embedded default
the traffic is real HTTP from the replay client (held-out rows, their gold labels as delayed
feedback); the server must be running (`make run` and `make up` start it), else the canary fails
closed.
"""

from __future__ import annotations

from tasks.core.context import StepContext
from tasks.core.records import CanaryAnalysisRecord, CanaryRecord
from tasks.runner import step


@step
def canary_analysis(ctx: StepContext, deploy_canary: CanaryRecord) -> CanaryAnalysisRecord:
    from tasks.canary.rollout import analyse

    d = deploy_canary
    if d.promoted_directly:
        return CanaryAnalysisRecord(passed=True, reasons=[], model_version=d.model_version, champion=None, steps=[])
    rollout = analyse(ctx.settings, ctx.params, ctx.dataset, d.champion, d.model_version)
    return CanaryAnalysisRecord(
        passed=rollout.passed,
        reasons=rollout.reasons,
        model_version=d.model_version,
        champion=d.champion,
        steps=[s.to_dict() for s in rollout.steps],
        outcome=rollout.outcome,
        champion_failing=rollout.champion_failing,
    )


if __name__ == "__main__":
    raise SystemExit(canary_analysis.main())
