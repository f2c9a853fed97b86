"""register: the compressed model becomes an immutable model version (stage: candidate).

Lineage recorded with it: data version, code commit, params hash, parent (the prod
model it was compared with), metrics. A retry returns the version already made.
"""
from __future__ import annotations

from pathlib import Path

from tasks.core.records import CompressRecord, EvaluateRecord, RegisterRecord, TrainRecord
from tasks.core.steps import StepContext, step
from tasks.registry import Registry, code_commit


@step
def register(ctx: StepContext, train: TrainRecord, evaluate: EvaluateRecord, compress: CompressRecord) -> RegisterRecord:
    artifacts = {"model.pt": Path(train.model), "model.fp32.onnx": Path(compress.fp32_path),
                 "model.int8.onnx": Path(compress.int8_path)}
    lineage = {
        "data_version": train.data_version, "code_commit": code_commit(),
        "params_hash": ctx.params.digest(), "parent_model": evaluate.champion_version,
        "metrics": {"torch": evaluate.challenger, "onnx_fp32": compress.fp32, "onnx_int8": compress.int8},
        "train": {"rows": train.rows, "epochs": train.epochs, "world_size": train.world_size,
                  "final_loss": train.final_loss},
        "sizes": {"torch_bytes": compress.torch_bytes, "fp32_bytes": compress.fp32_bytes,
                  "int8_bytes": compress.int8_bytes},
    }
    result = Registry(ctx.settings).register_model(ctx.run_id, artifacts, lineage)
    keep = ("model_version", "created", "data_version", "code_commit", "params_hash", "parent_model")
    return RegisterRecord(**{k: result.get(k) for k in keep})


if __name__ == "__main__":
    raise SystemExit(register.main())
