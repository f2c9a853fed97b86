"""
### nightly_pipeline

Every night: the next unlabeled landing batch becomes a served, compressed model,
through a gate at every step.

`ingest` -> `validate_raw` (contract) -> `weak_label` (Snorkel) -> `validate_labeled`
(contract) -> `snapshot` (DVC data version) -> `train` (torchrun) -> `evaluate`
(vs prod) -> `compress` (ONNX int8) -> `register` -> `deploy` -> `report`.

A failed data gate quarantines the batch (kept, with its report) and keeps the
current data version; a failed model gate keeps the prod model. Both end green on
their branch, and `report` says why. `run_failed` turns the run red only when a
step itself failed.

**Params**: `batch` (a landing file to take instead of the oldest), `epochs`
(override `params.yaml` train.epochs).

**Training backend** (`SLUICE_TRAIN_BACKEND`, read when the file is parsed): `local`
runs torchrun processes inside the `train` task; `kubernetes` runs `plan_train` ->
`train_pods` (a KubernetesPodOperator, or an Indexed Job with its rendezvous Service
for several nodes, per params.yaml `scaling`) -> `train`, which fetches the pods'
outputs. The steps after `train` see no difference.

This file only wires tasks: every step's logic is a module in `tasks/`, imported
inside the task so parsing stays light.
"""
from __future__ import annotations

from datetime import timedelta

from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import Param, TriggerRule, dag, task
from airflow.timetables.trigger import CronTriggerTimetable

DAG_ID = "nightly_pipeline"


def _train_backend() -> str:
    from tasks.core.settings import Settings     # light: stdlib only

    return Settings.from_env().train_backend


def _settings():
    from tasks.core.settings import Settings

    return Settings.from_env()


def _result(ti, task_id: str) -> dict:
    """The step record an upstream task pushed (XCom key 'result': a small dict of references)."""
    return ti.xcom_pull(task_ids=task_id, key="result")


def _push(ti, result: dict) -> dict:
    ti.xcom_push(key="result", value=result)
    return result


@dag(
    dag_id=DAG_ID,
    # No start_date: once unpaused, the first run waits for the next 02:00 UTC rather than
    # running the one that already passed today.
    schedule=CronTriggerTimetable("0 2 * * *", timezone="UTC", run_immediately=False),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 1, "retry_delay": timedelta(seconds=30), "owner": "sluice"},
    dagrun_timeout=timedelta(hours=6),
    tags=["sluice", "nightly"],
    doc_md=__doc__,
    params={
        "batch": Param(None, type=["null", "string"], pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
                       description="Landing file (or batch id) to take; default: the oldest waiting."),
        "epochs": Param(None, type=["null", "integer"], minimum=1, maximum=1000,
                        description="Training epochs; default: params.yaml train.epochs."),
    },
)
def nightly_pipeline():
    @task.branch
    def ingest(ti=None, run_id=None, params=None):
        from airflow.sdk.exceptions import AirflowFailException

        from tasks.ingest import ingest as run

        try:
            r = _push(ti, run(run_id, _settings(), params["batch"]))
        except (FileNotFoundError, ValueError) as exc:   # a bad `batch` param: retrying cannot help
            raise AirflowFailException(str(exc)) from exc
        return "no_batch" if r["status"] == "no_batch" else "validate_raw"

    @task.branch
    def validate_raw(ti=None, run_id=None):
        from tasks.validate_raw import validate_raw as run

        r = _push(ti, run(run_id, _settings(), _result(ti, "ingest")))
        return "weak_label" if r["passed"] else "quarantine_raw"

    @task
    def weak_label(ti=None, run_id=None):
        from tasks.weak_label import weak_label as run

        return _push(ti, run(run_id, _settings(), _result(ti, "ingest")))["chosen"]

    @task.branch
    def validate_labeled(ti=None, run_id=None):
        from tasks.validate_labeled import validate_labeled as run

        r = _push(ti, run(run_id, _settings(), _result(ti, "weak_label")))
        return "snapshot" if r["passed"] else "quarantine_labeled"

    def quarantine(gate: str):
        @task(task_id=f"quarantine_{gate.split('_')[1]}")
        def _quarantine(ti=None, run_id=None):
            from tasks.quarantine import quarantine_batch

            return _push(ti, quarantine_batch(run_id, _settings(), _result(ti, "ingest"), gate, _result(ti, gate)))
        return _quarantine()

    @task
    def snapshot(ti=None, run_id=None):
        from tasks.snapshot import snapshot as run

        return _push(ti, run(run_id, _settings(), _result(ti, "ingest"), _result(ti, "weak_label"),
                             _result(ti, "validate_raw"), _result(ti, "validate_labeled")))["data_version"]

    @task(execution_timeout=timedelta(hours=4))
    def train(ti=None, run_id=None, params=None):
        from tasks.train import train as run

        return _push(ti, run(run_id, _settings(), _result(ti, "snapshot")["data_version"], params["epochs"]))["model"]

    @task
    def plan_train(ti=None, run_id=None, params=None):
        from tasks.training.kubernetes import plan_training

        return _push(ti, plan_training(run_id, _settings(), _result(ti, "snapshot")["data_version"],
                                       params["epochs"]))["name"]

    @task(task_id="train")
    def collect_train(ti=None, run_id=None):
        from tasks.train import collect

        return _push(ti, collect(run_id, _settings(), _result(ti, "plan_train")["out_uri"]))["model"]

    @task.branch
    def evaluate(ti=None, run_id=None):
        from tasks.evaluate import evaluate as run

        r = _push(ti, run(run_id, _settings(), _result(ti, "train")))
        return "compress" if r["passed"] else "reject_model_evaluate"

    @task.branch
    def compress(ti=None, run_id=None):
        from tasks.compress import compress as run

        r = _push(ti, run(run_id, _settings(), _result(ti, "train")))
        return "register" if r["passed"] else "reject_model_compress"

    def reject_model(gate: str):
        @task(task_id=f"reject_model_{gate}")
        def _reject(ti=None, run_id=None):
            from tasks.reject_model import reject_model as run

            return _push(ti, run(run_id, _settings(), gate, _result(ti, gate)))
        return _reject()

    @task
    def register(ti=None, run_id=None):
        from tasks.register import register as run

        return _push(ti, run(run_id, _settings(), _result(ti, "train"), _result(ti, "evaluate"),
                             _result(ti, "compress")))["model_version"]

    @task
    def deploy(ti=None, run_id=None):
        from tasks.deploy import deploy as run

        return _push(ti, run(run_id, _settings(), _result(ti, "register")["model_version"]))["prod_model"]

    @task(trigger_rule=TriggerRule.ALL_DONE, retries=0)
    def report(ti=None, run_id=None):
        from tasks.report import report as run

        states = ti.get_task_states(dag_id=DAG_ID, run_ids=[run_id]).get(run_id, {})
        failed = sorted(t for t, s in states.items() if s == "failed" and t != "run_failed")
        return run(run_id, _settings(), failed)["outcome"]

    @task(trigger_rule=TriggerRule.ONE_FAILED, retries=0)
    def run_failed():
        """Runs only when a step failed, and fails, so the DAG run shows red (report still ran)."""
        raise RuntimeError("a pipeline step failed: see the report task's log and the failed task")

    t_ingest, t_raw, t_weak, t_lab = ingest(), validate_raw(), weak_label(), validate_labeled()
    t_snap, t_eval, t_comp = snapshot(), evaluate(), compress()
    if _train_backend() == "kubernetes":
        from tasks.training.kubernetes import KubernetesTraining, training_tasks

        t_pods, service = training_tasks(KubernetesTraining.from_env(), task_id="train_pods")
        t_plan, t_train = plan_train(), collect_train()
        t_snap >> t_plan >> [t_pods, *service[:1]]
        t_pods >> t_train
        # The Service's setup/teardown stay out of run_failed's upstreams (a setup's downstream tasks
        # must be all_success); a failed setup still shows there, as train_pods upstream_failed.
        train_steps = [t_plan, t_pods, t_train]
    else:
        t_train = train()
        t_snap >> t_train
        train_steps = [t_train]
    t_reg, t_deploy = register(), deploy()
    no_batch = EmptyOperator(task_id="no_batch")
    q_raw, q_lab = quarantine("validate_raw"), quarantine("validate_labeled")
    rej_eval, rej_comp = reject_model("evaluate"), reject_model("compress")
    t_report, t_failed = report(), run_failed()

    t_ingest >> [t_raw, no_batch]
    t_raw >> [t_weak, q_raw]
    t_weak >> t_lab >> [t_snap, q_lab]
    t_train >> t_eval >> [t_comp, rej_eval]
    t_comp >> [t_reg, rej_comp]
    t_reg >> t_deploy
    [no_batch, q_raw, q_lab, rej_eval, rej_comp, t_deploy] >> t_report
    [t_ingest, t_raw, t_weak, t_lab, t_snap, *train_steps, t_eval, t_comp, t_reg, t_deploy,
     q_raw, q_lab, rej_eval, rej_comp, t_report] >> t_failed


nightly_pipeline()
