"""register: the compressed model becomes an immutable model version (stage: candidate).

Artifacts: model.pt, model.fp32.onnx and the compress step's chosen file as model.served.onnx
(the one serving loads, whatever chain made it). Lineage recorded with it: data version, code
commit, params hash, parent (the prod model it was compared with), metrics, `compression`:
the served artifact's name, the chosen chain with its configs, sizes, latency and quality (the
served ONNX file carries the chain and lineage in its `sluice.compression` metadata too), and
`reproduce`: what `python -m tasks.reproduce` rebuilds it from (`reproduce_inputs`).
A retry returns the version already made.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

from tasks.core.context import StepContext
from tasks.core.log import log
from tasks.core.records import CompressRecord, EvaluateRecord, RegisterRecord, TrainRecord
from tasks.core.versions import library_versions
from tasks.registry import SERVED_NAME, Registry, code_commit
from tasks.runner import step


@step
def register(
    ctx: StepContext, train: TrainRecord, evaluate: EvaluateRecord, compress: CompressRecord
) -> RegisterRecord:
    if not compress.path:
        raise ValueError("compress chose no model (its gate failed): nothing to register")
    artifacts = {
        "model.pt": Path(train.model),
        "model.fp32.onnx": Path(compress.fp32_path),
        SERVED_NAME: Path(compress.path),
    }
    commit = code_commit()
    lineage = {
        "data_version": train.data_version,
        "code_commit": commit,
        "params_hash": trained_params(ctx, train).digest(),
        "params_overlay": train.params_overlay,  # the tuned overlay (tuned-vN) train applied, if any
        "parent_model": evaluate.champion_version,
        "metrics": {"torch": evaluate.challenger, "onnx_fp32": compress.fp32_test, "onnx_served": compress.test},
        "train": {
            "rows": train.rows,
            "epochs": train.epochs,
            "world_size": train.world_size,
            "final_loss": train.final_loss,
        },
        "sizes": {
            "torch_bytes": compress.torch_bytes,
            "fp32_bytes": compress.fp32_bytes,
            "served_bytes": compress.bytes,
        },
        "compression": {
            "artifact": SERVED_NAME,
            "chosen": compress.chosen,
            "chain": compress.chain,
            "parent_artifact": "model.fp32.onnx",
            "parent_model": evaluate.champion_version,
            "data_version": train.data_version,
            "bytes": compress.bytes,
            "fp32_bytes": compress.fp32_bytes,
            "latency_b1_ms": compress.latency_b1_ms,
            "latency_b256_ms": compress.latency_b256_ms,
            "parity_max_abs": compress.parity_max_abs,
            "dev": compress.quality,
            "dev_slices": compress.slices,
            "fp32_dev": compress.fp32_quality,
            "test": compress.test,
        },
        "reproduce": reproduce_inputs(ctx, train, compress, commit),
    }
    result = Registry(ctx.settings).register_model(ctx.run_id, artifacts, lineage)
    write_card(ctx, result["model_version"])
    keep = ("model_version", "created", "data_version", "code_commit", "params_hash", "parent_model")
    return RegisterRecord(**{k: result.get(k) for k in keep})


def write_card(ctx: StepContext, version: str) -> None:
    """The version's model card (tasks/reports/model_card.py); the version is registered either way,
    so a card that cannot be written is a log line (the report step writes it again)."""
    from tasks.reports.model_card import write_model_card

    try:
        paths = write_model_card(ctx.settings, version)
    except Exception as exc:  # noqa: BLE001 - the registration above stands; the card is derived from it
        log(f"model card of {version} not written: {type(exc).__name__}: {exc}")
        return
    log(f"model card: {paths['html']}")


def trained_params(ctx: StepContext, train: TrainRecord):
    """The params the model was trained with: a tuned overlay's values in `train`, and the overlay named as
    resolved (tuned-vN, or none), so a reproduction trains with the same values whatever is newest then."""
    p = ctx.params.train
    return ctx.params.replace(
        train=p.replace(**(train.overlay_values or {}), params_overlay=train.params_overlay or "none")
    )


def reproduce_inputs(ctx: StepContext, train: TrainRecord, compress: CompressRecord, commit: str) -> dict[str, Any]:
    """Everything `python -m tasks.reproduce` needs to rebuild this model, not only hashes: the full
    resolved params (after overrides), the code, dataset plug-in and LF module, the data contracts'
    hashes (from the data version's record), the warm start, the library versions, device, world size."""
    from tasks.datasets import class_names, load_lfs

    data = Registry(ctx.settings).data_version_info(train.data_version)
    dataset, ds = ctx.params.dataset.module, ctx.dataset
    lfs = load_lfs(ds, data.get("lf_module") or ctx.params.weak_label.lf_module)
    return {
        "params": trained_params(ctx, train).to_dict(),
        "params_digest": trained_params(ctx, train).digest(),
        "code_commit": commit,
        "dataset": {
            "module": dataset,
            "name": ds.NAME,
            "classes": list(class_names(ds)),
            "code_commit": commit,
            "source_sha256": _source_sha256(ds),
        },
        "lf_module": {
            "module": lfs.__name__,
            "hash": data.get("lf_module_hash"),
            "code_commit": commit,
            "source_sha256": _source_sha256(lfs),
        },
        "contracts": data.get("contracts") or {},
        "data_version": train.data_version,
        "warm_start": train.warm_start,
        "device": train.device,
        "world_size": train.world_size,
        "compression": {"chosen": compress.chosen, "chain": compress.chain},
        "versions": library_versions(),
    }


def _source_sha256(module: ModuleType) -> str | None:
    """The module file's SHA-256 (a plug-in package: its __init__.py)."""
    import hashlib

    origin = getattr(module, "__file__", None)
    return hashlib.sha256(Path(origin).read_bytes()).hexdigest() if origin and Path(origin).is_file() else None


if __name__ == "__main__":
    raise SystemExit(register.main())
