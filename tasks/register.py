"""register: the compressed model becomes an immutable model version (stage: candidate).

Artifacts: model.pt, model.fp32.onnx and the compress step's chosen file as model.served.onnx
(the one serving loads, whatever chain made it). Lineage recorded with it: data version, code
commit, params hash, parent (the prod model it was compared with), metrics, and `compression`:
the served artifact's name, the chosen chain with its configs, sizes, latency and quality (the
served ONNX file carries the chain and lineage in its `sluice.compression` metadata too).
A retry returns the version already made.
"""
from __future__ import annotations

from pathlib import Path

from tasks.compression.served import SERVED_NAME
from tasks.core.records import CompressRecord, EvaluateRecord, RegisterRecord, TrainRecord
from tasks.core.steps import StepContext, step
from tasks.registry import Registry, code_commit


@step
def register(ctx: StepContext, train: TrainRecord, evaluate: EvaluateRecord, compress: CompressRecord) -> RegisterRecord:
    if not compress.path:
        raise ValueError("compress chose no model (its gate failed): nothing to register")
    artifacts = {"model.pt": Path(train.model), "model.fp32.onnx": Path(compress.fp32_path),
                 SERVED_NAME: Path(compress.path)}
    lineage = {
        "data_version": train.data_version, "code_commit": code_commit(),
        "params_hash": ctx.params.digest(), "parent_model": evaluate.champion_version,
        "metrics": {"torch": evaluate.challenger, "onnx_fp32": compress.fp32_test, "onnx_served": compress.test},
        "train": {"rows": train.rows, "epochs": train.epochs, "world_size": train.world_size,
                  "final_loss": train.final_loss},
        "sizes": {"torch_bytes": compress.torch_bytes, "fp32_bytes": compress.fp32_bytes,
                  "served_bytes": compress.bytes},
        "compression": {
            "artifact": SERVED_NAME, "chosen": compress.chosen, "chain": compress.chain,
            "parent_artifact": "model.fp32.onnx", "parent_model": evaluate.champion_version,
            "data_version": train.data_version, "bytes": compress.bytes, "fp32_bytes": compress.fp32_bytes,
            "latency_b1_ms": compress.latency_b1_ms, "latency_b256_ms": compress.latency_b256_ms,
            "parity_max_abs": compress.parity_max_abs, "dev": compress.quality, "dev_slices": compress.slices,
            "fp32_dev": compress.fp32_quality, "test": compress.test,
        },
    }
    result = Registry(ctx.settings).register_model(ctx.run_id, artifacts, lineage)
    keep = ("model_version", "created", "data_version", "code_commit", "params_hash", "parent_model")
    return RegisterRecord(**{k: result.get(k) for k in keep})


if __name__ == "__main__":
    raise SystemExit(register.main())
