"""
### rollback

Puts the data and the model back together, in one recorded step: the current-data
pointer (what the next nightly snapshot builds on), the prod model stage and the
serving pointer, committed at once in the registry and appended to its audit log
(who triggered it, when, from, to, why).

**Params** (validated when the run is triggered): `data_version` (e.g. `data-v3`),
`model_version` (e.g. `model-v2`), either or both, and a `reason`. A version that
does not exist fails the run with a message naming the versions that do; nothing
changes. Running the same rollback twice is harmless. Versions are never deleted.

Trigger from the UI (Trigger DAG w/ config) or the REST API:
`POST /api/v2/dags/rollback/dagRuns {"logical_date": null, "conf": {"model_version": "model-v2", "reason": "..."}}`

**Assets**: a pointer it moves emits an event of `sluice_data_version` / `sluice_model_version`
(extra: `{"event": "rollback", "<kind>_version", "previous", "run_id"}`), through the alias
`sluice_rollback_moves`; a rollback that changes nothing emits none.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import Param, dag, task

from tasks.core.assets import ROLLBACK_MOVES  # airflow.sdk only
from tasks.core.versions import DATA_VERSION_PATTERN, MODEL_VERSION_PATTERN  # stdlib only


@dag(
    dag_id="rollback",
    schedule=None,
    catchup=False,
    is_paused_upon_creation=False,  # an emergency operation must not wait for someone to unpause it
    max_active_runs=1,
    # Idempotent, so a retry after a crash is safe; a bad version fails at once (no retry).
    default_args={"retries": 1, "retry_delay": timedelta(seconds=10), "owner": "sluice"},
    tags=["sluice", "rollback"],
    doc_md=__doc__,
    params={
        "data_version": Param(
            None,
            type=["null", "string"],
            pattern=DATA_VERSION_PATTERN,
            description="Data version to make current (e.g. data-v3); empty: keep.",
        ),
        "model_version": Param(
            None,
            type=["null", "string"],
            pattern=MODEL_VERSION_PATTERN,
            description="Model version to make prod and serve (e.g. model-v2); empty: keep.",
        ),
        "reason": Param("", type="string", minLength=3, description="Why (goes into the audit log)."),
    },
)
def rollback():
    @task(pool="sluice_registry", outlets=[ROLLBACK_MOVES])
    def rollback_versions(**context):
        from tasks.core.assets import rollback_events
        from tasks.runner import run_airflow_task

        params, who = context["params"], getattr(context["dag_run"], "triggering_user_name", None) or "airflow"
        # A bad version is refused (RegistryError) and fails the task at once: nothing changed, no retry.
        r = run_airflow_task(
            "tasks.rollback",
            context,
            data_version=params["data_version"],
            model_version=params["model_version"],
            reason=params["reason"],
            who=who,
        )
        for asset, extra in rollback_events(r, context["run_id"]):  # an asset event per pointer it moved
            context["outlet_events"][ROLLBACK_MOVES].add(asset, extra=extra)
        return r.after

    rollback_versions()


rollback()
