"""measure, pareto_front, choose, gate and the emails slices."""

import numpy as np
import pandas as pd

from tasks.compression.chain import apply_chain
from tasks.compression.search import choose, gate, gate_reasons, measure, pareto_front, probe_inputs, quality_shortfalls
from tasks.plugins.emails import slices


def _row(name, size, lat, auc, slice_auc=None, baseline=False):
    return {
        "name": name,
        "size_bytes": size,
        "latency_b1_ms": lat,
        "baseline": baseline,
        "overall": {"roc_auc": auc},
        "slices": {"a": {"roc_auc": slice_auc if slice_auc is not None else auc}},
    }


def test_pareto_front():
    rows = [
        _row("big_fast", 100, 1.0, 0.9),
        _row("small_slow", 10, 5.0, 0.9),
        _row("dominated", 100, 6.0, 0.9),
        _row("mid", 50, 2.0, 0.9),
    ]
    assert [r["name"] for r in pareto_front(rows)] == ["big_fast", "small_slow", "mid"]


def test_choose_smallest_passing_with_reasons():
    rows = [
        _row("fp32", 100, 1.0, 0.90, baseline=True),
        _row("int8", 30, 0.5, 0.895),
        _row("tiny_bad", 5, 0.2, 0.80),
        _row("slice_bad", 10, 0.3, 0.90, slice_auc=0.7),
        _row("slow_small", 20, 3.0, 0.90),
        _row("tie", 20, 2.0, 0.90),
    ]
    chosen, reasons = choose(rows, floor_ratio=0.99)
    assert chosen["name"] == "tie"  # smallest passing; ties: the faster
    assert "overall: ROC AUC 0.8000 < 0.99 x 0.9000" in reasons["tiny_bad"]
    assert "slice a: ROC AUC 0.7000" in reasons["slice_bad"]
    assert "off the Pareto front: tie" in reasons["slow_small"]
    assert "larger than tie" in reasons["int8"] and "off the Pareto front: int8" in reasons["fp32"]
    assert set(reasons) == {r["name"] for r in rows} - {"tie"}
    chosen, reasons = choose(rows, floor_ratio=0.99, latency_budget_ms=1.5)
    assert chosen["name"] == "int8" and "over the budget 1.5 ms" in reasons["tie"]


def test_undefined_slice_auc_is_skipped():
    ref = _row("fp32", 1, 1, 0.9, slice_auc=float("nan"))
    assert quality_shortfalls(_row("x", 1, 1, 0.9, slice_auc=float("nan")), ref, 0.99) == []


def test_gate_reasons_pure():
    assert gate_reasons(1e-6, 1e-4, [], 0, 10) == []
    reasons = gate_reasons(1e-2, 1e-4, ["overall: ROC AUC 0.5 < 0.99 x 0.9"], 3, 10)
    assert "differs from torch by 1.00e-02" in reasons[0] and "quality floor" in reasons[1]
    assert "3 of 10 probe rows" in reasons[2]


def test_measure_and_gate_on_a_real_candidate(baseline, trained, data, held_out):
    X, y = held_out
    masks = {"first_half": np.arange(len(X)) < len(X) // 2, "second_half": np.arange(len(X)) >= len(X) // 2}
    cand = apply_chain(trained, ["int8_dynamic"], data, baseline.onnx_path.parent, parent=baseline)
    ref, row = measure(baseline, X, y, masks, repeats=5), measure(cand, X, y, masks, repeats=5)
    assert ref["baseline"] and ref["max_abs_diff_parent"] == 0.0 and row["chain"] == ["int8_dynamic"]
    assert 0 < row["max_abs_diff_parent"] < 0.1 and row["size_bytes"] == cand.onnx_path.stat().st_size
    assert row["latency_b1_ms"] > 0 and row["latency_b256_ms"] > 0 and row["nonfinite"] == 0
    assert set(row["slices"]) == set(masks) and row["slices"]["first_half"]["n"] == 200
    assert ref["overall"]["roc_auc"] > 0.85
    assert gate(cand, row, ref, data.X, atol=1e-4, floor_ratio=0.95) == []
    assert len(probe_inputs(X[:3])) == 12
    strict = gate(cand, row, {**ref, "overall": {"roc_auc": 1.0}}, data.X, atol=1e-4, floor_ratio=1.0)
    assert any("quality floor: overall" in r for r in strict)


def test_emails_slices():
    df = pd.DataFrame({"format": [1, 0, 1, 0], "number": ["none", "small", "big", "small"]})
    s = slices(df)
    assert set(s) == {"format=html", "format=plain", "number=none", "number=small", "number=big"}
    assert s["format=html"].tolist() == [True, False, True, False]
    assert s["number=small"].tolist() == [False, True, False, True] and s["number=big"].dtype == bool
