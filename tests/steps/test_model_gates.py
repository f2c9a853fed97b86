import pytest

from tasks.compression.search import choose, gate_reasons, quality_shortfalls
from tasks.evaluate import model_gate

Q = lambda auc: {"roc_auc": auc, "f1": 0.5, "accuracy": 0.9}  # noqa: E731


def test_model_gate_floor_and_regression():
    assert model_gate(Q(0.85), None, 0.7, 0.02) == []
    assert model_gate(Q(0.85), Q(0.86), 0.7, 0.02) == []
    (reason,) = model_gate(Q(0.80), Q(0.86), 0.7, 0.02)
    assert "trails the prod champion" in reason
    (reason,) = model_gate(Q(0.65), None, 0.7, 0.02)
    assert "below the floor" in reason


def test_model_gate_rejects_nan_auc():
    assert model_gate(Q(float("nan")), None, 0.7, 0.02)


def row(name, auc, slice_auc=None, size=100, b1=0.05, baseline=False, nonfinite=0):
    return {
        "name": name,
        "overall": Q(auc),
        "slices": {"format=html": Q(auc if slice_auc is None else slice_auc)},
        "size_bytes": size,
        "latency_b1_ms": b1,
        "baseline": baseline,
        "nonfinite": nonfinite,
    }


BASE = row("fp32", 0.90, size=1000, baseline=True)


@pytest.mark.parametrize(
    "parity, shortfalls, nonfinite, fragment",
    [
        (1e-3, [], 0, "differs from torch"),
        (1e-7, ["slice format=html: ROC AUC 0.8 < 0.99 x 0.9"], 0, "quality floor: slice format=html"),
        (1e-7, [], 3, "give NaN or inf"),
    ],
)
def test_compression_gate_names_the_failure(parity, shortfalls, nonfinite, fragment):
    (reason,) = gate_reasons(parity, 1e-4, shortfalls, nonfinite, 100)
    assert fragment in reason


def test_compression_gate_passes():
    assert gate_reasons(1e-7, 1e-4, [], 0, 100) == []


def test_choice_keeps_the_floor_overall_and_per_slice_within_the_budget():
    rows = [
        BASE,
        row("int8", 0.899, size=300),
        row("tiny", 0.85, size=50),  # tiny: overall drop
        row("sliced", 0.90, slice_auc=0.5, size=60),
        row("slow", 0.90, size=70, b1=9.0),
    ]
    chosen, why = choose(rows, 0.99, latency_budget_ms=1.0)
    assert chosen["name"] == "int8"
    assert "overall" in why["tiny"] and "slice format=html" in why["sliced"] and "budget" in why["slow"]
    assert "off the Pareto front" in why["fp32"] or "larger" in why["fp32"]
    assert quality_shortfalls(chosen, BASE, 0.99) == []
    nothing, why = choose([row("fp32", 0.9, baseline=True, b1=5.0)], 0.99, latency_budget_ms=1.0)
    assert nothing is None and "budget" in why["fp32"]
