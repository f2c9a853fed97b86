"""A model of K = 3 classes through the pieces that do not care how many there are: the plug-ins
build K logits from the training labels' K classes, learn on [n, K + 1] soft targets, export K
probabilities a row to ONNX, and compress (pruning, distillation, quantization) with the fine-tune
matching K-class soft targets. A binary model keeps its one logit and [n] output."""

import numpy as np
import pytest
import torch

from tasks.compression.chain import CompressionData, apply_chain
from tasks.compression.export import export_onnx, open_session, predict
from tasks.core.params import load_params
from tasks.evaluation.quality import classification_metrics
from tasks.models import model_blob, model_from_blob, predict_proba
from tasks.training.loop import fit_in_memory

K = 3


def _rows(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Three classes, each one of three feature directions the strongest (with noise)."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, K, n)
    X = rng.normal(size=(n, 6)).astype(np.float32)
    X[np.arange(n), y] += 2.5
    return X, y


def _targets(y: np.ndarray, weight: float = 1.0) -> torch.Tensor:
    """[n, K + 1]: one-hot class targets and the row weight, as training_targets gives gold rows."""
    return torch.from_numpy(np.concatenate([np.eye(K)[y], np.full((len(y), 1), weight)], 1).astype(np.float32))


@pytest.fixture(scope="module")
def trained():
    X, y = _rows(900, 0)
    p = load_params().train.replace(
        epochs=15, batch_size=64, model={"module": "tasks.plugins.mlp", "params": {"hidden": [32, 16]}}
    )
    model, losses = fit_in_memory(torch.from_numpy(X), _targets(y), p)
    return model, losses


def test_a_three_class_mlp_learns_and_predicts_a_probability_per_class(trained):
    model, losses = trained
    assert model.arch["outputs"] == K and losses[-1] < 0.5 * losses[0]
    X, y = _rows(600, 1)
    prob = predict_proba(model, X)
    assert prob.shape == (600, K)
    np.testing.assert_allclose(prob.sum(1), 1.0, atol=1e-6)
    m = classification_metrics(y, prob)
    assert m["roc_auc"] > 0.9 and m["f1"] > 0.75 and min(c["f1"] for c in m["per_class"].values()) > 0.7
    again = model_from_blob(model_blob(model))  # model.pt rebuilds the K-logit head from its arch
    np.testing.assert_array_equal(predict_proba(again, X), prob)


def test_a_binary_mlp_keeps_one_logit_and_its_arch():
    X, y = _rows(200, 2)
    y = (y == 0).astype(np.float32)
    p = load_params().train.replace(
        epochs=1, batch_size=64, model={"module": "tasks.plugins.mlp", "params": {"hidden": [4]}}
    )
    model, _ = fit_in_memory(torch.from_numpy(X), torch.from_numpy(y), p)
    assert "outputs" not in model.arch and predict_proba(model, X).shape == (200,)


def test_a_three_class_model_exports_k_probabilities_and_compresses(trained, tmp_path):
    model, _ = trained
    X, y = _rows(600, 1)
    session = open_session(export_onnx(model, tmp_path / "m.onnx"))
    out = session.get_outputs()[0]
    assert out.name == "class_probabilities" and out.shape[1] == K  # K_CLASS_OUTPUT: [batch, K] (binary: OUTPUT)
    served = predict(session, X)
    np.testing.assert_allclose(served, predict_proba(model, X), atol=1e-5)

    fp32 = classification_metrics(y, served)["roc_auc"]
    data = CompressionData(*_rows(400, 3))
    prune = {"kind": "prune_structured", "ratio": 0.5, "fine_tune_epochs": 10, "seed": 0}
    for chain in ([prune, "int8_dynamic"], [{"kind": "distil", "hidden": [8], "epochs": 30, "seed": 0}]):
        cand = apply_chain(model, chain, data, tmp_path / "c")
        prob = predict(open_session(cand.onnx_path), X)
        assert prob.shape == (600, K), cand.name
        np.testing.assert_allclose(prob.sum(1), 1.0, atol=1e-3)
        assert classification_metrics(y, prob)["roc_auc"] > fp32 - 0.03, cand.name


def test_a_three_class_transformer_learns_from_token_ids(tmp_path):
    """Class c's rows carry token 3 + c somewhere among random others (ids 6..49)."""
    rng = np.random.default_rng(0)
    y = rng.integers(0, K, 600)
    ids = rng.integers(6, 50, size=(600, 12))
    ids[np.arange(600), rng.integers(0, 12, 600)] = 3 + y
    spec = {
        "module": "tasks.plugins.transformer",
        "params": {"vocab_size": 64, "max_len": 12, "width": 16, "depth": 1, "heads": 2, "ffn": 32, "dropout": 0.0},
    }
    p = load_params().train.replace(model=spec, epochs=12, batch_size=32, lr=0.01)
    model, losses = fit_in_memory(torch.from_numpy(ids), _targets(y), p)
    assert model.arch["outputs"] == K and losses[-1] < 0.5 * losses[0]
    session = open_session(export_onnx(model, tmp_path / "t.onnx"))
    prob = predict(session, ids[:50, :7])  # another batch size, a shorter sequence
    assert prob.shape == (50, K)
    np.testing.assert_allclose(prob, predict_proba(model, ids[:50, :7]), atol=1e-5)
    assert classification_metrics(y, predict_proba(model, ids))["accuracy"] > 0.9
