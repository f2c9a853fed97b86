"""tune_plan: the first task of a tuning run (dags/tuning.py): check the search space and the cost
ceiling, open (or resume) the study, and plan the trial slots the run maps over.

Refused here, before any trial trains: a space whose values `train` would refuse (naming the
parameter), a data version the registry lacks, a study resumed on another data version, and a cost
ceiling below one trial's cost (the cheapest finished trial's, or `tuning.trial_seconds_estimate`
of the trial's resources at the ledger's prices). A re-triggered run with the same study name
resumes it from its journal: finished trials are kept and only the rest are planned.
"""

from __future__ import annotations

from tasks.core.context import StepContext
from tasks.core.params import ParamsError
from tasks.core.records import TunePlanRecord
from tasks.runner import step

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"


@step(help={"data_version": "the data version the trials train on", "study_name": "the study (a new or a resumed one)"})
def tune_plan(ctx: StepContext, *, data_version: str = "", study_name: str = "") -> TunePlanRecord:
    import re

    import optuna

    from tasks.core.settings import redact
    from tasks.core.tuning_config import check_space
    from tasks.registry import Registry
    from tasks.tuning.study import journal_path, open_study, spent
    from tasks.tuning.trial import resources_for, trial_cost

    p = ctx.params.tuning
    if not re.match(NAME_PATTERN, study_name or ""):
        raise ParamsError(f"study name {study_name!r}: letters, digits, '.', '_', '-' (at most 64), e.g. weekly-1")
    try:
        check_space(p.space, ctx.params.train)
    except ValueError as exc:
        raise ParamsError(f"tuning.space.{exc}") from None
    Registry(ctx.settings).data_version_info(data_version)  # refuses a missing or malformed version
    dev = dev_set(ctx)
    study = open_study(ctx.settings.home, study_name, p, p.seed, ctx.params.train.epochs, ctx.settings.tuning_storage)
    recorded = study.user_attrs.get("data_version")
    if recorded and recorded != data_version:
        raise ParamsError(
            f"study {study_name!r} tunes on {recorded}, not {data_version}: trials on other data are not comparable; "
            f"name a new study"
        )
    study.set_user_attr("data_version", data_version)
    trials = study.get_trials(deepcopy=False)
    finished = [t for t in trials if t.state in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)]
    costs = [t.user_attrs["cost"] for t in finished if t.user_attrs.get("cost")]
    floor = (
        min(costs)
        if costs
        else trial_cost(p.trial_seconds_estimate, resources_for(ctx.settings, ctx.params), ctx.params.cost)
    )
    if p.cost_ceiling and p.cost_ceiling < floor:
        raise ParamsError(
            f"tuning cost_ceiling {p.cost_ceiling:g} {ctx.params.cost.currency} is below one trial's cost "
            f"({floor:.6f}: {'the cheapest finished trial' if costs else 'trial_seconds_estimate at ledger prices'})"
        )
    remaining = max(0, p.n_trials - len(finished))
    storage = redact(ctx.settings.tuning_storage) or str(journal_path(ctx.settings.home, study_name))
    return TunePlanRecord(
        study=study_name,
        data_version=data_version,
        storage=storage,
        dev=dev,
        n_trials=p.n_trials,
        parallelism=p.parallelism,
        cost_ceiling=p.cost_ceiling,
        seed=p.seed,
        finished=len(finished),
        spent=spent(study),
        trial_cost_floor=floor,
        slots=list(range(remaining)),
    )


def dev_set(ctx: StepContext) -> str:
    """The gold dev set the trials score: its path here; on the kubernetes backend a copy at
    SLUICE_TRAIN_OUT_URI/tuning/dev.parquet, which pods read (they share no disk with Airflow)."""
    path = ctx.settings.layout.gold / "dev.parquet"
    if not path.exists():
        raise FileNotFoundError(f"no gold dev set at {path}: the first nightly run's ingest writes it")
    if ctx.settings.train_backend != "kubernetes":
        return str(path)
    import fsspec

    uri = f"{ctx.settings.train_out_uri.rstrip('/')}/tuning/dev.parquet"
    with fsspec.open(uri, "wb") as out:
        out.write(path.read_bytes())
    return uri


if __name__ == "__main__":
    raise SystemExit(tune_plan.main())
