"""No labeled batch lost to a rejected model: held, listed, back in the next snapshot; quarantined
with every reason when rejected twice in a row; left out by an operator's rollback until readmitted."""

import json

import pandas as pd

from tasks.core.context import StepContext
from tasks.core.records import EvaluateRecord
from tasks.landing.quarantine import readmit_any
from tasks.quarantine import main as quarantine_cli
from tasks.registry import Registry
from tasks.registry.held import listing
from tasks.reject_model import reject_model
from tasks.reports.pipeline_state import read_state, state_lines
from tasks.reports.run_summary import build_summary, render_text
from tests.registry.test_registry import partition


def _night(reg, tmp_path, batch, seed):
    path, df = partition(tmp_path, batch, seed=seed)
    return reg.snapshot({batch: path}, {"rows_by_batch": {batch: len(df)}}), df


def _reject(settings, run_id, why):
    gate = EvaluateRecord.model_construct(passed=False, reasons=[why], champion_version="model-v1")
    return reject_model(StepContext.create(run_id, settings), evaluate=gate)


def _prod_on_first_batch(reg, tmp_path):
    _, df1 = _night(reg, tmp_path, "batch-0001", 1)
    art = tmp_path / "model.int8.onnx"
    art.write_bytes(b"onnx")
    reg.promote(reg.register_model("r1", {"model.int8.onnx": art}, {"data_version": "data-v1"})["model_version"], "t")
    return df1


def test_a_rejected_models_batch_is_held_and_reenters_the_next_snapshot_with_its_labels(settings, tmp_path):
    reg = Registry(settings)
    df1 = _prod_on_first_batch(reg, tmp_path)
    _, df2 = _night(reg, tmp_path, "batch-0002", 2)  # data-v2: tonight's batch, its model rejected
    out = _reject(settings, "run-2", "test ROC AUC 0.61 is below the floor 0.70")
    assert out.rolled_back and out.current_data == "data-v1" and out.held == ["batch-0002"] and not out.quarantined
    held = reg.held()["batch-0002"]
    assert held["status"] == "held" and held["reenter"] and held["from_version"] == "data-v2"
    assert "below the floor" in held["rejections"][0]["reason"]
    assert any(line.startswith("batch-0002\theld") for line in listing(reg.state()))
    # The run summary (what make run prints), ops status and the Sluice page name it.
    summary = build_summary("run-2", {"reject_model": out}, reg.state(), [])
    assert summary["held"]["tonight"] == ["batch-0002"] and summary["held"]["rows_tonight"] == len(df2)
    text = render_text(summary)
    line = next(x for x in text.splitlines() if x.startswith("  held batch     batch-0002 held (from data-v2): "))
    assert "rejected at evaluate: test ROC AUC 0.61" in line and line.endswith("re-enters the next snapshot")
    status = "\n".join(state_lines(read_state(settings)))
    assert "held batches   1" in status and "batch-0002 held (from data-v2)" in status
    from tests.e2e.test_ui_sluice_page import _ui

    page = _ui().render_page(read_state(settings), "/sluice")
    assert 'id="held-batches"' in page and "batch-0002" in page
    from tasks.reports.html_report import ReportInputs, render_report

    report = render_report(ReportInputs("run-2", summary, reg.state(), [reg.data_version_info("data-v2")]))
    assert (
        "Held batches" in report
        and "Held tonight: batch-0002" in report
        and "Missing:" not in report.split("Held batches")[1].split("<h2")[0]
    )

    v3, df3 = _night(reg, tmp_path, "batch-0003", 3)  # the next night
    assert v3["data_version"] == "data-v3" and v3["reentered"] == ["batch-0002"] and v3["held"] == []
    assert [p["batch_id"] for p in v3["partitions"]] == ["batch-0001", "batch-0002", "batch-0003"]
    v2_part = reg.data_version_info("data-v2")["partitions"][1]
    assert v3["partitions"][1] == v2_part  # the stored partition itself: the labels it was validated with
    got = reg.read_data_version("data-v3")
    pd.testing.assert_frame_equal(got, pd.concat([df1, df2, df3], ignore_index=True))
    assert reg.held() == {}


def test_a_batch_rejected_twice_in_a_row_is_quarantined_with_both_reasons_and_readmit_brings_it_back(
    settings, tmp_path, capsys
):
    reg = Registry(settings)
    _prod_on_first_batch(reg, tmp_path)
    layout = settings.layout.ensure()
    delivered = layout.archive / "batch-0002.csv"  # what snapshot archived of the delivered file
    delivered.write_text("email_id,subject\n1,hello\n")
    _night(reg, tmp_path, "batch-0002", 2)
    first = _reject(settings, "run-2", "first: test ROC AUC 0.61 is below the floor 0.70")
    assert first.held == ["batch-0002"]
    _night(reg, tmp_path, "batch-0003", 3)  # batch-0002 re-enters beside tonight's batch
    second = _reject(settings, "run-3", "second: canary p99 regression")
    assert second.quarantined == ["batch-0002"] and second.held == ["batch-0003"]
    report = json.loads((layout.quarantine / "batch-0002" / "report.json").read_text())
    assert report["gate"] == "model" and "first:" in report["summary"] and "second:" in report["summary"]
    assert (layout.quarantine / "batch-0002" / "batch-0002.csv").read_text() == "email_id,subject\n1,hello\n"
    assert not delivered.exists()
    assert reg.held()["batch-0002"]["status"] == "quarantined"

    v4, _ = _night(reg, tmp_path, "batch-0004", 4)  # a quarantined batch does not re-enter; the held one does
    assert v4["reentered"] == ["batch-0003"] and v4["held"] == ["batch-0002"]

    assert quarantine_cli([]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(x.startswith("batch-0002\tmodel\t") and "second:" in x for x in lines)
    assert any(x.startswith("held\tbatch-0002\tquarantined") for x in lines)
    assert readmit_any(settings, "batch-0002").startswith("re-admitted to")
    assert (layout.landing / "batch-0002.csv").exists() and "batch-0002" not in reg.held()


def test_an_operators_rollback_leaves_batches_out_until_readmitted(settings, tmp_path):
    reg = Registry(settings)
    _prod_on_first_batch(reg, tmp_path)
    _night(reg, tmp_path, "batch-0002", 2)
    reg.rollback("data-v1", None, "bad upstream export in batch-0002", who="operator")
    entry = reg.held()["batch-0002"]
    assert entry["status"] == "left_out" and not entry["reenter"]
    assert entry["readmit"] == "python -m tasks.quarantine --readmit batch-0002"
    v3, _ = _night(reg, tmp_path, "batch-0003", 3)
    assert v3["reentered"] == [] and v3["held"] == ["batch-0002"]  # an operator's choice stays
    assert "re-enters the next snapshot" in readmit_any(settings, "batch-0002")
    v4, _ = _night(reg, tmp_path, "batch-0004", 4)
    assert v4["reentered"] == ["batch-0002"] and reg.held() == {}


def test_a_canary_that_could_not_judge_holds_the_batch_without_counting_a_rejection():
    """The scenario matrix's crossing (tests/e2e/test_scenarios.py): a batch rejected once, re-entered, then
    sent back by a canary that could not judge its model (the champion failing its own requests) is held
    to re-enter again, not quarantined as if rejected twice; the next real rejection is the second."""
    from tasks.registry.held import describe, hold_left_out, mark_reentered

    part = {"batch_id": "batch-0002", "path": "data/x/batch-0002.parquet"}
    state: dict = {}
    assert hold_left_out(state, [part], "data-v2", reason="evaluate: below the floor", rejected=True, limit=2) == []
    mark_reentered(state, ["batch-0002"], "data-v3")
    why = "canary of model-v2 failed: the champion itself is failing"
    assert hold_left_out(state, [part], "data-v3", reason=why, rejected=True, limit=None) == []
    entry = state["held"]["batch-0002"]
    assert (entry["status"], entry["reenter"], len(entry["rejections"])) == ("held", True, 1)
    (shown,) = describe(state)
    assert shown["why"] == f"not judged: {why}" and shown["next"] == "re-enters the next snapshot"
    mark_reentered(state, ["batch-0002"], "data-v4")
    assert hold_left_out(state, [part], "data-v4", reason="compress: no candidate", rejected=True, limit=2) == [
        "batch-0002"
    ]
    entry = state["held"]["batch-0002"]
    assert entry["status"] == "quarantined" and "not_judged" not in entry
    assert [r["reason"] for r in entry["rejections"]] == ["evaluate: below the floor", "compress: no candidate"]
