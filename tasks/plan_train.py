"""plan_train: the Kubernetes backend's training plan for this run (what the pods get), at run time.

The pod or Indexed Job operators' templated fields read this record from XCom
(tasks/training/kubernetes.py); `train` (tasks.train.collect) then fetches the pods' outputs.
"""

from __future__ import annotations

from tasks.core.context import StepContext
from tasks.core.records import SnapshotRecord, TrainPlanRecord
from tasks.runner import step


@step
def plan_train(ctx: StepContext, snapshot: SnapshotRecord) -> TrainPlanRecord:
    from tasks.training.kubernetes import KubernetesTraining, plan_training, pod_requests
    from tasks.tuning.overlay import apply_overlay

    # train.params_overlay: the tuned-vN resolved now, its values in the pods' params (the record names it).
    p, _, _ = apply_overlay(ctx.settings, ctx.params.train)
    plan = plan_training(ctx.run_id, ctx.settings, snapshot.data_version, p)
    return TrainPlanRecord(**plan, requests=pod_requests(KubernetesTraining.from_env()))


if __name__ == "__main__":
    raise SystemExit(plan_train.main())
