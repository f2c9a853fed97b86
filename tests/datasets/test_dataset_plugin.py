"""A second dataset plugs in through params.yaml alone: the whole nightly DAG runs on it."""

import json

import pytest
import yaml

from tasks.core.settings import REPO_ROOT
from tasks.datasets import DatasetError, load_dataset
from tasks.registry import Registry
from tests.airflow_helpers import dags_test, migrate


def test_incomplete_dataset_module_is_named():
    with pytest.raises(DatasetError, match=r"lacks \['NAME'"):
        load_dataset("tests.toy.lfs")
    with pytest.raises(DatasetError, match="cannot be imported"):
        load_dataset("tests.no_such_dataset")
    assert load_dataset().NAME == "emails"


@pytest.mark.extended
@pytest.mark.slow
def test_nightly_pipeline_on_another_dataset(settings, tmp_path, monkeypatch):
    params = yaml.safe_load((REPO_ROOT / "params.yaml").read_text())
    params["dataset"]["module"] = "tests.toy.dataset"
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    monkeypatch.setenv("SLUICE_PARAMS", str(tmp_path / "params.yaml"))
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT))  # so Airflow's task processes find tests.toy
    migrate(settings)
    run_id, state, proc = dags_test(settings, {"epochs": 10})
    assert state == "success", proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((settings.layout.run_dir(run_id) / "summary.json").read_text())
    assert summary["outcome"] == "deployed model-v1", summary
    info = Registry(settings).data_version_info("data-v1")
    assert info["dataset"] == "toy" and info["partitions"][0]["path"] == "data/toy/batch-0001.parquet"
    assert info["contracts"] == {
        "toy_raw": info["contracts"]["toy_raw"],
        "toy_labeled": info["contracts"]["toy_labeled"],
    }
    assert summary["test"]["challenger"]["roc_auc"] > 0.9  # the toy faults are easy to see


def _three_class_params(tmp_path, monkeypatch):
    params = yaml.safe_load((REPO_ROOT / "params.yaml").read_text())
    params["dataset"]["module"] = "tests.toy.three"
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    monkeypatch.setenv("SLUICE_PARAMS", str(tmp_path / "params.yaml"))
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT))  # so Airflow's task processes find tests.toy
    return tmp_path / "params.yaml"


def _first_three_class_night(settings) -> dict:
    migrate(settings)
    run_id, state, proc = dags_test(settings, {"epochs": 10})
    assert state == "success", proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((settings.layout.run_dir(run_id) / "summary.json").read_text())
    assert summary["outcome"] == "deployed model-v1", summary
    return summary


# The first three-class night (labels, logits, gates and the model card at K = 3) is night 1 of the
# scenario tests/e2e/test_scenarios.py::test_an_mlp_on_three_classes_held_back_then_rolled_back_by_its_canary.


@pytest.mark.extended
@pytest.mark.slow
def test_a_second_three_class_night_runs_the_canary_on_replicas_and_promotes(settings, tmp_path, monkeypatch):
    """The second night's challenger is judged by the canary on the served K probabilities: online macro
    ROC AUC and F1 from the replayed feedback, PSI over the predicted class mix."""
    import httpx

    from ops.model_server import ServerProcess

    params = _three_class_params(tmp_path, monkeypatch)
    _first_three_class_night(settings)
    with ServerProcess(settings.home, params).start() as server:  # the canary needs a server (make run starts one)
        run_id, state, proc = dags_test(settings, {"epochs": 10})
        served = httpx.get(server.url + "/v1/serving").json()
    assert state == "success", proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((settings.layout.run_dir(run_id) / "summary.json").read_text())
    assert summary["outcome"] == "deployed model-v2", summary
    assert served["variants"]["champion"]["model_version"] == "model-v2"
    verdict = json.loads((settings.layout.run_dir(run_id) / "steps" / "canary_analysis.json").read_text())
    assert verdict["passed"], verdict
