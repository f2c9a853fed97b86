"""The tuning DAG's wiring on both backends: plan -> mapped trials (bounded) -> report."""

import pytest

from tests.airflow_helpers import python_json

LOAD = """
import json, sys
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder="dags/tuning.py")
dag = bag.dags["tuning"]
tasks = {t.task_id: {"type": type(t).__name__, "down": sorted(t.downstream_task_ids),
                     "mapped": "Mapped" in type(t).__name__, "limit": t.max_active_tis_per_dag,
                     "rule": str(getattr(t.trigger_rule, "value", t.trigger_rule)), "retries": t.retries}
         for t in dag.tasks}
trial = dag.get_task("tune_trial")
print(json.dumps({"errors": {k: str(v) for k, v in bag.import_errors.items()}, "tasks": tasks,
                  "params": sorted(dag.params.keys()), "operator": trial.operator_class.__name__
                  if hasattr(trial, "operator_class") else type(trial).__name__,
                  "torch": "torch" in sys.modules}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["local", "kubernetes"])
def test_tuning_dag_maps_bounded_trials_between_plan_and_report(backend, settings, monkeypatch):
    monkeypatch.setenv("SLUICE_TRAIN_BACKEND", backend)
    out = python_json(settings, LOAD)
    assert out["errors"] == {} and out["torch"] is False
    t = out["tasks"]
    assert out["params"] == ["cost_ceiling", "data_version", "n_trials", "parallelism", "seed", "study_name"]
    assert t["tune_trial"]["mapped"], t["tune_trial"]
    assert t["tune_trial"]["limit"] == 4  # params.yaml tuning.max_parallelism
    assert t["tune_trial"]["down"] == ["tune_report"] and t["tune_report"]["rule"] == "all_done"
    if backend == "kubernetes":
        assert out["operator"] == "KubernetesPodOperator"
        assert t["tune_plan"]["down"] == ["trial_arguments"] and t["trial_arguments"]["down"] == ["tune_trial"]
    else:
        assert t["tune_plan"]["down"] == ["tune_trial"]
