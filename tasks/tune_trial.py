"""tune_trial: one trial of a tuning study (a mapped task of dags/tuning.py; one pod each on the
kubernetes backend, running this same command).

Waits for one of the run's `parallelism` slots, then fails stale trials (a killed one's heartbeat
stopped: it is retried once), asks the study for parameters, trains them with the engine (torchrun;
the gold dev set scored each epoch, the Hyperband pruner and the cost ceiling may stop it), prices
what it used with the ledger's prices and tells the study. Skipped when the study has its trials or
has spent its ceiling. The study's journal is the truth; this record is the mapped task's summary.
"""

from __future__ import annotations

import json

from tasks.core.context import StepContext
from tasks.core.errors import StepError
from tasks.core.records import TunePlanRecord, TuneTrialRecord
from tasks.runner import step


@step(
    help={"index": "the mapped slot's index", "plan": "the tune_plan record as JSON (a pod, which has no run folder)"}
)
def tune_trial(
    ctx: StepContext, tune_plan: TunePlanRecord | None = None, *, index: int = 0, plan: str = ""
) -> TuneTrialRecord:
    from tasks.tuning.study import open_study
    from tasks.tuning.trial import run_trial, slot

    if tune_plan is None:
        if not plan:
            raise StepError("tune_trial needs the tune_plan record: run tune_plan first, or pass --plan JSON")
        tune_plan = TunePlanRecord.model_validate(json.loads(plan))
    p = ctx.params
    home = ctx.settings.home
    with slot(home / "tuning" / f"{tune_plan.study}.slots", tune_plan.parallelism):
        study = open_study(home, tune_plan.study, p.tuning, tune_plan.seed, p.train.epochs, ctx.settings.tuning_storage)
        out = run_trial(
            study,
            p,
            ctx.settings,
            data_version=tune_plan.data_version,
            dev=tune_plan.dev,
            out_root=ctx.run_dir / "tuning",
            seed=tune_plan.seed,
            n_trials=tune_plan.n_trials,
            cost_ceiling=tune_plan.cost_ceiling,
        )
    if "skipped" in out:
        return TuneTrialRecord(index=index, skipped=out["skipped"])
    return TuneTrialRecord(
        index=index,
        number=out["number"],
        state=out["state"],
        value=out.get("value"),
        cost=out["cost"],
        epochs=out["epochs"],
        params=out["params"],
        pruned_by=out.get("pruned_by"),
    )


if __name__ == "__main__":
    raise SystemExit(tune_trial.main())
