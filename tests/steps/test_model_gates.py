import pytest

from tasks.compress import compression_gate
from tasks.evaluate import model_gate

Q = lambda auc: {"roc_auc": auc, "f1": 0.5, "accuracy": 0.9}  # noqa: E731
OPS = {"MatMulInteger": 3, "DynamicQuantizeLinear": 3}


def test_model_gate_floor_and_regression():
    assert model_gate(Q(0.85), None, 0.7, 0.02) == []
    assert model_gate(Q(0.85), Q(0.86), 0.7, 0.02) == []
    (reason,) = model_gate(Q(0.80), Q(0.86), 0.7, 0.02)
    assert "trails the prod champion" in reason
    (reason,) = model_gate(Q(0.65), None, 0.7, 0.02)
    assert "below the floor" in reason


def test_model_gate_rejects_nan_auc():
    assert model_gate(Q(float("nan")), None, 0.7, 0.02)


@pytest.mark.parametrize("parity, int8_auc, ops, fragment", [
    (1e-3, 0.85, OPS, "differs from torch"),
    (1e-7, 0.80, OPS, "drops more than"),
    (1e-7, 0.85, {"MatMul": 3}, "no quantized operator"),
])
def test_compression_gate_names_the_failure(parity, int8_auc, ops, fragment):
    (reason,) = compression_gate(parity, Q(0.85), Q(int8_auc), 1e-4, 0.02, ops)
    assert fragment in reason


def test_compression_gate_passes():
    assert compression_gate(1e-7, Q(0.85), Q(0.845), 1e-4, 0.02, OPS) == []
