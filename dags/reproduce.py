"""
### reproduce

Rebuilds a registered model version from its record and says whether it comes out the same:
the recorded code commit is checked out in a temporary git worktree, the model is trained with
the recorded params, data version, warm start (the parent's weights read through the registry,
or the parent reproduced first with `depth` > 0), world size and device, exported and compressed
with the recorded chain, then weights, ONNX outputs on the gold test set and metrics are compared.

The verdict (identical / within tolerance / differs, and which input differed: library version,
device, world size, a dirty recorded checkout) goes into the registry's audit log. What is
served never changes. A record that cannot be reproduced (params edited after registration, a
missing data version, a commit unknown to this repository) fails the run at once, naming why;
a reproduction that differs beyond the tolerance fails the run after recording its verdict.

**Params** (validated when the run is triggered): `model_version` (e.g. `model-v3`), `depth`
(warm-start parents to reproduce first, default 0).

Trigger from the UI (Trigger DAG w/ config) or the REST API:
`POST /api/v2/dags/reproduce/dagRuns {"logical_date": null, "conf": {"model_version": "model-v3"}}`
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import Param, dag, task

from tasks.core.versions import MODEL_VERSION_PATTERN  # stdlib only


@dag(
    dag_id="reproduce",
    schedule=None,
    catchup=False,
    is_paused_upon_creation=False,  # an audit question must not wait for someone to unpause it
    max_active_runs=1,
    # A retry after a crash starts the reproduction over (nothing served changes); a record that
    # cannot be reproduced fails at once (no retry).
    default_args={"retries": 1, "retry_delay": timedelta(seconds=30), "owner": "sluice"},
    tags=["sluice", "reproduce"],
    doc_md=__doc__,
    params={
        "model_version": Param(
            "model-v1",
            type="string",
            pattern=MODEL_VERSION_PATTERN,
            description="Model version to reproduce (e.g. model-v3).",
        ),
        "depth": Param(
            0,
            type="integer",
            minimum=0,
            maximum=20,
            description="Warm-start parents to reproduce first (0: read the parent's weights).",
        ),
    },
)
def reproduce():
    @task(execution_timeout=timedelta(hours=3))
    def reproduce_model(**context):
        from airflow.sdk.exceptions import AirflowFailException

        from tasks.runner import run_airflow_task

        params, who = context["params"], getattr(context["dag_run"], "triggering_user_name", None) or "airflow"
        rec = run_airflow_task(
            "tasks.reproduce", context, model_version=params["model_version"], depth=params["depth"], who=who
        )
        if not rec.passed:  # recorded in the audit log; the run is red
            raise AirflowFailException(rec.summary)
        return rec.summary

    reproduce_model()


reproduce()
