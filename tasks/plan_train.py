"""plan_train: the Kubernetes backend's training plan for this run (what the pods get), at run time.

The pod or Indexed Job operators' templated fields read this record from XCom
(tasks/training/kubernetes.py); `train` (tasks.train.collect) then fetches the pods' outputs.
"""

from __future__ import annotations

from tasks.core.records import SnapshotRecord, TrainPlanRecord
from tasks.core.steps import StepContext, step


@step
def plan_train(ctx: StepContext, snapshot: SnapshotRecord) -> TrainPlanRecord:
    import json

    from tasks.core.params import TrainParams
    from tasks.training.kubernetes import plan_training
    from tasks.training.local import params_json
    from tasks.tuning.overlay import apply_overlay

    plan = plan_training(ctx.run_id, ctx.settings, snapshot.data_version, ctx.params.train.epochs)
    # train.params_overlay: the tuned-vN resolved now, its values in the pods' params (the record names it).
    p, _, _ = apply_overlay(ctx.settings, TrainParams.model_validate(json.loads(plan["params"])))
    return TrainPlanRecord(**{**plan, "params": params_json(p)})


if __name__ == "__main__":
    raise SystemExit(plan_train.main())
