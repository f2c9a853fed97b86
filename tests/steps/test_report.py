"""The run summary names why a step was refused (a store said no and changed nothing)."""

from tasks.core.context import load_refusals, record_refusal
from tasks.reports.run_summary import build_summary, outcome_of


def test_a_refused_step_shows_its_reason_in_the_outcome(tmp_path):
    record_refusal(tmp_path, "deploy_canary", "the prod model is model-v1, not model-v2 (moved by a rollback)")
    refused = load_refusals(tmp_path)
    assert refused == {"deploy_canary": "the prod model is model-v1, not model-v2 (moved by a rollback)"}
    summary = build_summary("r", {}, {"prod_model": "model-v1"}, ["deploy_canary"], refused)
    assert summary["outcome"] == (
        "FAILED at deploy_canary (deploy_canary refused: the prod model is model-v1, "
        "not model-v2 (moved by a rollback))"
    )


def test_a_failure_without_a_refusal_stays_plain():
    assert outcome_of({}, ["train"], {}) == "FAILED at train"
