"""
### nightly_pipeline

Every night: the next unlabeled landing batch becomes a served, compressed model,
through a gate at every step.

`ingest` -> `validate_raw` (contract) -> `weak_label` (Snorkel; beside the next step, `fill_queue` puts
the batch's most useful rows into the labeling queue) -> `validate_labeled`
(contract) -> `snapshot` (DVC data version) -> `train` (torchrun) -> `evaluate`
(vs prod) -> `compress` (ONNX int8) -> `register` -> `deploy_canary` (challenger beside the
champion at the first canary weight) -> `canary_analysis` (live traffic, step by step) ->
`promote` | `rollback_canary` -> `report`.

A failed data gate quarantines the batch (kept, with its report) and keeps the
current data version; a failed model gate or canary keeps the prod model (and puts the
data pointer back to its lineage). Both end green on
their branch, and `report` says why. `run_failed` turns the run red only when a
step itself failed.

**Params**: `batch` (a landing file to take instead of the oldest), `epochs`
(override `params.yaml` train.epochs), `params_overlay` (override train.params_overlay: none,
latest or tuned-vN, a tuning study's result; see dags/tuning.py).

**Training backend** (`SLUICE_TRAIN_BACKEND`, read when the file is parsed): `local`
runs torchrun processes inside the `train` task; `kubernetes` runs `plan_train` ->
`train_pods` (a KubernetesPodOperator, or an Indexed Job with its rendezvous Service
for several nodes, per params.yaml `scaling`) -> `train`, which fetches the pods'
outputs. The steps after `train` see no difference.

This file only wires tasks and branches: every step is declared once in `tasks/<step>.py`
(its upstream records and options), and `_run` calls it inside the task, so parsing
stays light and the same step runs as `python -m tasks.<step>`.

**Schedule**: 02:00 UTC, or a `sluice_serving_drift` event of `monitor_serving` (AssetOrTimeSchedule).
Such a run has no conf: the events' extras (why it drifted) reach the summary. With no new batch it
retrains on the current data version (`drift_retrain` -> `train`, or -> `plan_train` on kubernetes).

**Assets**: `snapshot` emits `sluice_data_version` and `register` emits `sluice_model_version`, the
version in the event's extra (`tasks/core/assets.py`, `docs/assets.md`): schedule a DAG on them.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import AssetOrTimeSchedule, Param, TriggerRule, dag, task

from tasks.core.assets import DATA_VERSIONS, MODEL_VERSIONS, SERVING_DRIFT, drift_causes  # airflow.sdk only
from tasks.core.schedules import cron  # airflow only

DAG_ID = "nightly_pipeline"


def _train_backend() -> str:
    from tasks.core.settings import Settings  # light: pydantic, which Airflow has loaded already

    return Settings.from_env().train_backend


def _run(step: str, context: dict, **options):
    """Run a declared step (tasks.<module>[:<step>]): upstream records from XCom, its record back
    to XCom. The DAG's `epochs` Param overrides params.yaml train.epochs for the whole run."""
    from tasks.runner import run_airflow_task

    params = context["params"]
    overrides = {"train": {"epochs": params.get("epochs"), "params_overlay": params.get("params_overlay")}}
    return run_airflow_task(step, context, overrides, **options)


@dag(
    dag_id=DAG_ID,
    # No start_date: once unpaused, the first run waits for the next 02:00 UTC rather than running
    # the one that already passed today (tasks.core.schedules). Or a sluice_serving_drift event (monitor_serving).
    schedule=AssetOrTimeSchedule(timetable=cron("0 2 * * *"), assets=[SERVING_DRIFT]),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 1, "retry_delay": timedelta(seconds=30), "owner": "sluice"},
    dagrun_timeout=timedelta(hours=6),
    tags=["sluice", "nightly"],
    doc_md=__doc__,
    params={
        "batch": Param(
            None,
            type=["null", "string"],
            pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
            description="Landing file (or batch id) to take; default: the oldest waiting.",
        ),
        "epochs": Param(
            None,
            type=["null", "integer"],
            minimum=1,
            maximum=1000,
            description="Training epochs; default: params.yaml train.epochs.",
        ),
        "params_overlay": Param(
            None,
            type=["null", "string"],
            pattern=r"^(none|latest|tuned-v[1-9][0-9]{0,8})$",
            description="Tuned overlay to train with (none, latest, tuned-vN); default: params.yaml "
            "train.params_overlay.",
        ),
    },
)
def nightly_pipeline():
    @task.branch
    def ingest(**context):
        from airflow.sdk.exceptions import AirflowFailException

        from tasks.runner import refuse_unknown_conf

        refuse_unknown_conf(context)  # the run's conf is merged into `params`: only declared keys
        try:
            r = _run("tasks.ingest", context, batch=context["params"]["batch"])
        except (FileNotFoundError, ValueError) as exc:  # a bad `batch` param: retrying cannot help
            raise AirflowFailException(str(exc)) from exc
        if r.status == "no_batch":  # a drift-triggered run retrains anyway, on the current data version
            return "drift_retrain" if drift_causes(context) else "no_batch"
        return "validate_raw"

    @task
    def drift_retrain(**context):
        import json

        return _run(
            "tasks.monitor_serving:drift_retrain", context, causes=json.dumps(drift_causes(context))
        ).data_version

    @task.branch
    def validate_raw(**context):
        return "weak_label" if _run("tasks.validate_raw", context).passed else "quarantine_raw"

    @task
    def weak_label(**context):
        return _run("tasks.weak_label", context).chosen

    @task
    def fill_queue(**context):  # beside validate_labeled: the labeling queue waits for no gate
        return _run("tasks.fill_queue", context).added

    @task.branch
    def validate_labeled(**context):
        return "snapshot" if _run("tasks.validate_labeled", context).passed else "quarantine_labeled"

    @task(task_id="quarantine_raw", pool="sluice_registry")
    def quarantine_raw(**context):
        return _run("tasks.quarantine", context).path

    @task(task_id="quarantine_labeled", pool="sluice_registry")
    def quarantine_labeled(**context):
        return _run("tasks.quarantine", context).path

    @task(pool="sluice_registry", outlets=[DATA_VERSIONS])
    def snapshot(**context):
        from tasks.core.assets import snapshot_extra

        r = _run("tasks.snapshot", context)
        context["outlet_events"][DATA_VERSIONS].extra = snapshot_extra(r, context["run_id"])
        return r.data_version

    @task(execution_timeout=timedelta(hours=4), trigger_rule=TriggerRule.NONE_FAILED_MIN_ONE_SUCCESS)
    def train(**context):  # after snapshot, or after drift_retrain (the other one skipped)
        return _run("tasks.train", context).model

    @task(trigger_rule=TriggerRule.NONE_FAILED_MIN_ONE_SUCCESS)
    def plan_train(**context):  # after snapshot, or after drift_retrain (the other one skipped)
        return _run("tasks.plan_train", context).name

    @task(task_id="train")
    def collect_train(**context):
        return _run("tasks.train:collect", context).model

    @task.branch
    def evaluate(**context):
        return "compress" if _run("tasks.evaluate", context).passed else "reject_model_evaluate"

    @task.branch
    def compress(**context):
        return "register" if _run("tasks.compress", context).passed else "reject_model_compress"

    @task(task_id="reject_model_evaluate", pool="sluice_registry")
    def reject_model_evaluate(**context):
        return _run("tasks.reject_model", context).gate

    @task(task_id="reject_model_compress", pool="sluice_registry")
    def reject_model_compress(**context):
        return _run("tasks.reject_model", context).gate

    @task(outlets=[MODEL_VERSIONS])
    def register(**context):
        from tasks.core.assets import register_extra

        r = _run("tasks.register", context)
        context["outlet_events"][MODEL_VERSIONS].extra = register_extra(r, context["run_id"])
        return r.model_version

    @task(pool="sluice_registry")
    def deploy_canary(**context):
        return _run("tasks.deploy_canary", context).weight

    @task.branch(execution_timeout=timedelta(minutes=30))
    def canary_analysis(**context):
        return "promote" if _run("tasks.canary_analysis", context).passed else "rollback_canary"

    @task(pool="sluice_registry")
    def promote(**context):
        return _run("tasks.promote", context).prod_model

    @task(pool="sluice_registry")
    def rollback_canary(**context):
        return _run("tasks.rollback_canary", context).champion

    @task(trigger_rule=TriggerRule.ALL_DONE, retries=0)
    def report(**context):
        import json

        ti, run_id = context["ti"], context["run_id"]
        states = ti.get_task_states(dag_id=DAG_ID, run_ids=[run_id]).get(run_id, {})
        failed = sorted(t for t, s in states.items() if s == "failed" and t != "run_failed")
        causes = json.dumps(drift_causes(context))
        return _run("tasks.report", context, failed_steps=",".join(failed), drift_causes=causes).outcome

    @task(trigger_rule=TriggerRule.ONE_FAILED, retries=0)
    def run_failed():
        """Runs only when a step failed, and fails, so the DAG run shows red (report still ran)."""
        raise RuntimeError("a pipeline step failed: see the report task's log and the failed task")

    t_ingest, t_raw, t_weak, t_lab = ingest(), validate_raw(), weak_label(), validate_labeled()
    t_snap, t_eval, t_comp = snapshot(), evaluate(), compress()
    if _train_backend() == "kubernetes":
        from tasks.training.kubernetes import KubernetesTraining, training_tasks

        t_pods, service = training_tasks(KubernetesTraining.from_env(), task_id="train_pods")
        t_plan, t_train, t_retrain = plan_train(), collect_train(), drift_retrain()
        t_snap >> t_plan >> [t_pods, *service[:1]]
        t_ingest >> t_retrain >> t_plan
        t_pods >> t_train
        # The Service's setup/teardown stay out of run_failed's upstreams (a setup's downstream tasks
        # must be all_success); a failed setup still shows there, as train_pods upstream_failed.
        train_steps = [t_retrain, t_plan, t_pods, t_train]
    else:
        t_train, t_retrain = train(), drift_retrain()
        t_snap >> t_train
        t_ingest >> t_retrain >> t_train
        train_steps = [t_retrain, t_train]
    t_reg, t_canary, t_analysis = register(), deploy_canary(), canary_analysis()
    t_promote, t_back = promote(), rollback_canary()
    no_batch = EmptyOperator(task_id="no_batch")
    q_raw, q_lab = quarantine_raw(), quarantine_labeled()
    rej_eval, rej_comp = reject_model_evaluate(), reject_model_compress()
    t_report, t_failed = report(), run_failed()
    t_queue = fill_queue()

    t_ingest >> [t_raw, no_batch]
    t_raw >> [t_weak, q_raw]
    t_weak >> t_lab >> [t_snap, q_lab]
    t_weak >> t_queue >> t_report
    t_train >> t_eval >> [t_comp, rej_eval]
    t_comp >> [t_reg, rej_comp]
    t_reg >> t_canary >> t_analysis >> [t_promote, t_back]
    [no_batch, q_raw, q_lab, rej_eval, rej_comp, t_promote, t_back] >> t_report
    [
        t_ingest,
        t_raw,
        t_weak,
        t_queue,
        t_lab,
        t_snap,
        *train_steps,
        t_eval,
        t_comp,
        t_reg,
        t_canary,
        t_analysis,
        t_promote,
        t_back,
        q_raw,
        q_lab,
        rej_eval,
        rej_comp,
        t_report,
    ] >> t_failed


nightly_pipeline()
