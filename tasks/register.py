"""register: the compressed model becomes an immutable model version (stage: candidate).

Lineage recorded with it: data version, code commit, params hash, parent (the prod
model it was compared with), metrics. A retry returns the version already made.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from tasks.core.params import load_params
from tasks.registry import Registry, code_commit
from tasks.core.settings import Settings
from tasks.core.files import read_json
from tasks.core.steps import record_step, step_cli


def register(run_id: str, settings: Settings, train_result: dict[str, Any], evaluate_result: dict[str, Any],
             compress_result: dict[str, Any]) -> dict[str, Any]:
    artifacts = {"model.pt": Path(train_result["model"]), "model.fp32.onnx": Path(compress_result["fp32_path"]),
                 "model.int8.onnx": Path(compress_result["int8_path"])}
    lineage = {
        "data_version": train_result["data_version"], "code_commit": code_commit(),
        "params_hash": load_params().digest(), "parent_model": evaluate_result["champion_version"],
        "metrics": {"torch": evaluate_result["challenger"], "onnx_fp32": compress_result["fp32"],
                    "onnx_int8": compress_result["int8"]},
        "train": {k: train_result[k] for k in ("rows", "epochs", "world_size", "final_loss")},
        "sizes": {k: compress_result[k] for k in ("torch_bytes", "fp32_bytes", "int8_bytes")},
    }
    result = Registry(settings).register_model(run_id, artifacts, lineage)
    keep = ("model_version", "created", "data_version", "code_commit", "params_hash", "parent_model")
    return record_step(settings.layout.run_dir(run_id), "register", {k: result.get(k) for k in keep})


def main(argv: list[str] | None = None) -> int:
    def run(a, s):
        steps = s.layout.run_dir(a.run_id) / "steps"
        return register(a.run_id, s, read_json(steps / "train.json"), read_json(steps / "evaluate.json"),
                        read_json(steps / "compress.json"))
    return step_cli(__doc__.splitlines()[0], lambda p: None, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
