"""canary_analysis: judge the challenger against the champion on live traffic, step by step
(params.yaml `canary`): error rate, p99 latency, score PSI and, from feedback labels, online
ROC AUC with a bootstrap confidence interval of the difference (tasks/serving/canary.py).

Pass at the last step: promote; fail at any step: rollback_canary. On the embedded default
the traffic is real HTTP from the replay client (held-out rows, their gold labels as delayed
feedback); the server must be running (`make run` and `make up` start it).
"""

from __future__ import annotations

from tasks.core.context import StepContext
from tasks.core.log import log
from tasks.core.records import CanaryAnalysisRecord, CanaryRecord
from tasks.runner import step


@step
def canary_analysis(ctx: StepContext, deploy_canary: CanaryRecord) -> CanaryAnalysisRecord:
    from tasks.serving.replay import server_url
    from tasks.serving.rollout import RolloutError, run_canary

    d = deploy_canary
    if d.promoted_directly:
        return CanaryAnalysisRecord(passed=True, reasons=[], model_version=d.model_version, champion=None, steps=[])
    try:
        url = server_url(ctx.settings.home)
        rollout = run_canary(ctx.settings, ctx.params, d.champion, d.model_version, url)
    except (RolloutError, FileNotFoundError) as exc:  # no server, or it does not follow: fail closed
        log(f"canary cannot be judged: {exc}")
        return CanaryAnalysisRecord(
            passed=False,
            reasons=[f"canary cannot be judged: {exc}"],
            model_version=d.model_version,
            champion=d.champion,
            steps=[],
        )
    return CanaryAnalysisRecord(
        passed=rollout.passed,
        reasons=rollout.reasons,
        model_version=d.model_version,
        champion=d.champion,
        steps=[s.to_dict() for s in rollout.steps],
    )


if __name__ == "__main__":
    raise SystemExit(canary_analysis.main())
