"""compress: ONNX export, dynamic int8 quantization, parity and accuracy gates.

fp32 ONNX must match torch (max |dp| <= compress.parity_atol on the gold test set);
the int8 model may lose at most compress.max_roc_auc_drop of ROC AUC against fp32.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from tasks.core.log import log
from tasks.core.records import CompressRecord, TrainRecord
from tasks.core.steps import StepContext, step
from tasks.evaluation.quality import fmt_quality
from tasks.evaluation.scoring import gold_quality, load_gold_test, predict_onnx, predict_torch


def export_onnx(model_path: Path, out: Path) -> Path:
    import torch

    from tasks.training.model import SpamProbability, load_model

    model = load_model(str(model_path))
    wrapped = SpamProbability(model).eval()
    example = torch.zeros(4, model.arch["n_features"])
    tmp = out.with_name(f".{out.name}.tmp")
    torch.onnx.export(wrapped, (example,), str(tmp), input_names=["features"], output_names=["p_spam"],
                      dynamo=True, external_data=False, dynamic_shapes=({0: torch.export.Dim("batch")},),
                      verbose=False)
    tmp.replace(out)
    return out


def quantize_int8(fp32: Path, out: Path) -> Path:
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.quantization.shape_inference import quant_pre_process

    pre = out.with_name(f".{out.stem}.pre.onnx")
    quant_pre_process(str(fp32), str(pre), skip_symbolic_shape=True)
    tmp = out.with_name(f".{out.name}.tmp")
    quantize_dynamic(str(pre), str(tmp), weight_type=QuantType.QInt8)
    pre.unlink()
    tmp.replace(out)
    return out


def count_ops(path: Path) -> dict[str, int]:
    import onnx

    counts: dict[str, int] = {}
    for node in onnx.load(str(path)).graph.node:
        counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return counts


def compression_gate(parity_max_abs: float, fp32: dict, int8: dict, atol: float, max_drop: float,
                     int8_ops: dict[str, int]) -> list[str]:
    """Reasons to reject the compressed model (empty: it passes). Pure."""
    reasons = []
    if not parity_max_abs <= atol:
        reasons.append(f"fp32 ONNX differs from torch by {parity_max_abs:.2e} > {atol:.0e}")
    if not int8["roc_auc"] >= fp32["roc_auc"] - max_drop:
        reasons.append(f"int8 ROC AUC {int8['roc_auc']:.3f} drops more than {max_drop:.3f} "
                       f"below fp32's {fp32['roc_auc']:.3f}")
    if not any(op in int8_ops for op in ("MatMulInteger", "DynamicQuantizeLinear", "QLinearMatMul")):
        reasons.append(f"the int8 model holds no quantized operator (ops: {sorted(int8_ops)})")
    return reasons


@step
def compress(ctx: StepContext, train: TrainRecord) -> CompressRecord:
    p = ctx.params.compress
    out_dir = ctx.run_dir / "compress"
    out_dir.mkdir(parents=True, exist_ok=True)
    model_path = Path(train.model)
    fp32_path = export_onnx(model_path, out_dir / "model.fp32.onnx")
    int8_path = quantize_int8(fp32_path, out_dir / "model.int8.onnx")
    gold = load_gold_test(ctx.settings.layout.gold)
    p_torch, p_fp32, p_int8 = (predict_torch(model_path, gold), predict_onnx(fp32_path, gold),
                               predict_onnx(int8_path, gold))
    parity = float(np.max(np.abs(p_fp32 - p_torch))) if len(gold) else 0.0
    fp32_q, int8_q = gold_quality(p_fp32, gold), gold_quality(p_int8, gold)
    ops = count_ops(int8_path)
    reasons = compression_gate(parity, fp32_q, int8_q, p.parity_atol, p.max_roc_auc_drop, ops)
    sizes = {"torch_bytes": model_path.stat().st_size, "fp32_bytes": fp32_path.stat().st_size,
             "int8_bytes": int8_path.stat().st_size}
    log(f"ONNX fp32 {sizes['fp32_bytes']} B ({fmt_quality(fp32_q)}), int8 {sizes['int8_bytes']} B "
        f"({fmt_quality(int8_q)}), parity {parity:.1e}; {'PASS' if not reasons else 'FAIL: ' + '; '.join(reasons)}")
    return CompressRecord(passed=not reasons, reasons=reasons, parity_max_abs=parity, fp32=fp32_q, int8=int8_q,
                          **sizes, int8_ops=ops, fp32_path=str(fp32_path), int8_path=str(int8_path))


if __name__ == "__main__":
    raise SystemExit(compress.main())
