import numpy as np
import torch

from tasks.compress import count_ops, export_onnx, quantize_int8
from tasks.datasets.emails import FEATURE_NAMES, featurize
from tasks.evaluation.scoring import gold_quality, predict_onnx, predict_torch
from tasks.training.model import SpamMLP, save_model


def test_export_quantize_parity_and_quality(emails, tmp_path):
    train, test = emails.iloc[:3000], emails.iloc[3000:]
    x, y = torch.from_numpy(featurize(train)), torch.tensor(train["spam"].to_numpy(), dtype=torch.float32)
    torch.manual_seed(0)
    model = SpamMLP(len(FEATURE_NAMES), (32, 16))
    model.set_scaling(x.mean(0), x.std(0))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(150):
        opt.zero_grad()
        torch.nn.functional.binary_cross_entropy_with_logits(model(x), y).backward()
        opt.step()
    save_model(model, str(tmp_path / "model.pt"))

    fp32 = export_onnx(tmp_path / "model.pt", tmp_path / "model.fp32.onnx")
    int8 = quantize_int8(fp32, tmp_path / "model.int8.onnx")
    p_torch = predict_torch(tmp_path / "model.pt", test)
    p_fp32, p_int8 = predict_onnx(fp32, test), predict_onnx(int8, test)
    assert np.max(np.abs(p_fp32 - p_torch)) < 1e-5
    # Structure: every Linear became an integer MatMul fed by a dynamic quantizer.
    ops = count_ops(int8)
    assert ops.get("MatMulInteger") == 3 and ops.get("DynamicQuantizeLinear") == 3 and "MatMul" not in ops
    assert int8.stat().st_size < fp32.stat().st_size
    q32, q8 = gold_quality(p_fp32, test), gold_quality(p_int8, test)
    assert q32["roc_auc"] > 0.85 and abs(q32["roc_auc"] - q8["roc_auc"]) < 0.02
    # Dynamic batch: one row at a time gives the same answers as the whole batch (fp32).
    one = np.array([predict_onnx(fp32, test.iloc[[i]])[0] for i in range(5)])
    np.testing.assert_allclose(one, p_fp32[:5], rtol=1e-5, atol=1e-7)
