"""plan_train: the Kubernetes backend's training plan for this run (what the pods get), at run time.

The pod or Indexed Job operators' templated fields read this record from XCom
(tasks/training/kubernetes.py); `train` (tasks.train.collect) then fetches the pods' outputs.
"""

from __future__ import annotations

from tasks.core.context import StepContext
from tasks.core.records import DriftRetrainRecord, SnapshotRecord, TrainPlanRecord
from tasks.runner import step


@step
def plan_train(
    ctx: StepContext, snapshot: SnapshotRecord | None = None, drift_retrain: DriftRetrainRecord | None = None
) -> TrainPlanRecord:
    """On this run's snapshot; in a drift-triggered run with no new batch, on the current data version.
    Refused, before any pod exists, where the API server cannot run the plan (tasks/training/k8s_server.py)."""
    from tasks.core.errors import StepError
    from tasks.training.k8s_server import ServerRefused, preflight
    from tasks.training.kubernetes import KubernetesTraining, plan_training, pod_requests, run_manifests
    from tasks.tuning.overlay import apply_overlay

    source = snapshot or drift_retrain
    if source is None:
        raise StepError(f"plan_train needs this run's snapshot or drift_retrain record ({ctx.run_id} has neither)")
    # train.params_overlay: the tuned-vN resolved now, its values in the pods' params (the record names it).
    p, _, _ = apply_overlay(ctx.settings, ctx.params.train)
    plan = plan_training(ctx.run_id, ctx.settings, source.data_version, p, ctx.params.dataset.module)
    cfg = KubernetesTraining.from_env(settings=ctx.settings, scaling=ctx.params.scaling)
    # Ask the API server what it runs and dry-run every object of the run before any pod exists.
    try:
        server = preflight(cfg, run_manifests(cfg, plan))
    except ServerRefused as e:
        raise StepError(str(e)) from None
    return TrainPlanRecord(**plan, requests=pod_requests(cfg), **server)


if __name__ == "__main__":
    raise SystemExit(plan_train.main())
