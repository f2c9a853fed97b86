"""
### tuning

Cost-aware automatic tuning of the train section: an Optuna study (TPE sampler, Hyperband pruner)
over `params.yaml` `tuning.space`, judged on gold dev ROC AUC (never the gold test set), each trial
priced with the cost ledger's prices.

`tune_plan` (space, data version and cost ceiling checked; the study opened, or resumed from its
journal when the study name exists: finished trials are kept) -> `tune_trial` x N (dynamically
mapped, at most `tuning.max_parallelism` at once, the run's `parallelism` kept by slot locks; each
asks the study for parameters when its slot frees, trains with the engine, reports dev ROC AUC per
epoch so Hyperband can prune it, stops before crossing the cost ceiling, records its cost) ->
`tune_report` (trial table, Pareto front of quality and cost with its SVG plot, the chosen trial,
a `tuned-vN` params overlay in the registry). The nightly pipeline trains with the newest overlay
when `params.yaml` says `train.params_overlay: latest`.

**Params** (validated when the run is triggered): `data_version`, `study_name`, `n_trials`,
`parallelism`, `cost_ceiling`, `seed` (defaults: params.yaml `tuning`).

**Backend** (`SLUICE_TRAIN_BACKEND`, read when the file is parsed): `local` trains each trial with
torchrun inside its task; `kubernetes` runs one pod per trial with the same command
(tasks/tuning/kubernetes.py; the study in PostgreSQL, SLUICE_TUNING_STORAGE).

Trigger from the UI (Trigger DAG w/ config) or the REST API:
`POST /api/v2/dags/tuning/dagRuns {"logical_date": null, "conf": {"data_version": "data-v3", "study_name": "w49"}}`
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import Param, TriggerRule, dag, task

from tasks.core.versions import DATA_VERSION_PATTERN  # stdlib only

DAG_ID = "tuning"
STUDY_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"


def _shape() -> tuple[str, int]:
    """What decides the DAG's shape: the training backend and the trial task's concurrency bound."""
    from tasks.core.params import load_params  # light: pydantic and PyYAML
    from tasks.core.settings import Settings

    return Settings.from_env().train_backend, load_params().tuning.max_parallelism


BACKEND, MAX_PARALLELISM = _shape()


def _overrides(context: dict) -> dict:
    """The run's Params over params.yaml's tuning section."""
    p = context["params"]
    keys = ("n_trials", "parallelism", "cost_ceiling", "seed")
    return {"tuning": {k: p.get(k) for k in keys}}


def _run(step: str, context: dict, **options):
    from tasks.runner import run_airflow_task

    return run_airflow_task(step, context, _overrides(context), **options)


@dag(
    dag_id=DAG_ID,
    schedule=None,  # on demand; a weekly study: schedule=CronTriggerTimetable("0 3 * * 6", timezone="UTC")
    catchup=False,
    max_active_runs=1,
    is_paused_upon_creation=False,
    default_args={"retries": 0, "owner": "sluice"},  # a failed trial is retried by the study, not by Airflow
    dagrun_timeout=timedelta(hours=12),
    tags=["sluice", "tuning"],
    doc_md=__doc__,
    params={
        "data_version": Param(
            "data-v1", type="string", pattern=DATA_VERSION_PATTERN, description="Data version the trials train on."
        ),
        "study_name": Param(
            "study-1",
            type="string",
            pattern=STUDY_PATTERN,
            description="The study; an existing name resumes it from its journal.",
        ),
        "n_trials": Param(None, type=["null", "integer"], minimum=1, maximum=1000, description="Trials in all."),
        "parallelism": Param(
            None,
            type=["null", "integer"],
            minimum=1,
            maximum=MAX_PARALLELISM,
            description=f"Trials at once (at most tuning.max_parallelism = {MAX_PARALLELISM}).",
        ),
        "cost_ceiling": Param(
            None, type=["null", "number"], minimum=0, description="What the study may spend in all (0: no ceiling)."
        ),
        "seed": Param(None, type=["null", "integer"], description="The sampler's seed."),
    },
)
def tuning():
    @task
    def tune_plan(**context):
        from airflow.sdk.exceptions import AirflowFailException

        from tasks.runner import refuse_unknown_conf

        refuse_unknown_conf(context)
        p = context["params"]
        try:
            rec = _run("tasks.tune_plan", context, data_version=p["data_version"], study_name=p["study_name"])
        except (ValueError, FileNotFoundError) as exc:  # bad space, ceiling, data version: a retry cannot help
            raise AirflowFailException(str(exc)) from exc
        return rec.slots

    @task(max_active_tis_per_dag=MAX_PARALLELISM, execution_timeout=timedelta(hours=4))
    def tune_trial(index: int, **context):
        rec = _run("tasks.tune_trial", context, index=index)
        return rec.skipped or f"trial {rec.number}: {rec.state} {rec.value} cost {rec.cost}"

    @task
    def trial_arguments(slots: list[int], **context):
        import json

        from tasks.tuning.kubernetes import trial_arguments

        plan = context["ti"].xcom_pull(task_ids="tune_plan", key="result")
        return [trial_arguments(context["run_id"], i, json.loads(json.dumps(plan))) for i in slots]

    @task(trigger_rule=TriggerRule.ALL_DONE, pool="sluice_registry")
    def tune_report(**context):
        rec = _run("tasks.tune_report", context)
        return {"overlay": rec.overlay_version, "chosen": rec.chosen and rec.chosen["number"], "plot": rec.plot}

    slots = tune_plan()
    if BACKEND == "kubernetes":
        from tasks.tuning.kubernetes import trial_pod_config, trial_pods

        trials = trial_pods(trial_pod_config(), MAX_PARALLELISM).expand(arguments=trial_arguments(slots))
    else:
        trials = tune_trial.expand(index=slots)
    trials >> tune_report()


tuning()
