"""Apply a chain of techniques: torch-side ones, the ONNX export, then one ONNX-side precision change.

    chain = params.compress.chain(["prune_structured(0.5)", "int8_dynamic"])  # with compress's chain defaults
    cand = apply_chain(model, chain, CompressionData(X, y), workdir)

The model given is never changed (the chain works on a copy). Every ONNX file written
carries its chain's configs, the parent's file and each technique's figures in its
metadata (`sluice.compression`), and the Candidate returns the same as dicts.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from tasks.compression.export import export_onnx, model_input, open_session, write_metadata
from tasks.compression.finetune import one_thread
from tasks.core.compression_config import ONNX_KINDS, TechniqueBase, chain_label, chain_to_dicts, parse_chain
from tasks.core.errors import CompressionError


@dataclass(frozen=True)
class CompressionData:
    """Training rows for fine-tuning, distillation and calibration: the model's inputs (raw features,
    float32 [n, f], or token ids, int64 [n, length]). `y` (the class 0..K-1, may be weak labels) is
    optional; static int8 needs it to stratify its calibration sample."""

    X: np.ndarray
    y: np.ndarray | None = None

    def __post_init__(self) -> None:
        X = np.asarray(self.X)
        if X.ndim != 2:
            raise CompressionError(f"CompressionData.X must be 2-D [rows, features]; got shape {X.shape}")
        if X.dtype.kind in "iu":
            if X.size and X.min() < 0:
                raise CompressionError("CompressionData.X holds negative token ids")
        elif X.size and not np.isfinite(X).all():
            raise CompressionError("CompressionData.X holds NaN or inf")
        object.__setattr__(self, "X", model_input(X))
        if self.y is not None:
            y = np.asarray(self.y).reshape(-1)
            if len(y) != len(X):
                raise CompressionError(f"CompressionData.y has {len(y)} labels for {len(X)} rows")
            if len(y) and not (np.equal(np.mod(y, 1), 0).all() and y.min() >= 0):
                raise CompressionError("CompressionData.y must hold class indices 0..K-1")
            object.__setattr__(self, "y", y.astype(np.int64))


@dataclass
class Candidate:
    """One compressed model: its ONNX file, the chain that made it and where it came from."""

    name: str
    onnx_path: Path
    chain: tuple[TechniqueBase, ...]
    parent: "Candidate | None"  # the uncompressed fp32 export (None: this is it)
    torch_model: Any = None  # the model after the torch-side techniques
    fp32_path: Path | None = None  # its fp32 export, before any ONNX-side technique
    info: dict[str, Any] = field(default_factory=dict)  # figures per technique (sparsity, params, ...)

    @property
    def configs(self) -> list[dict[str, Any]]:
        return chain_to_dicts(self.chain)

    def summary(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "onnx_path": str(self.onnx_path),
            "chain": [c.label for c in self.chain],
            "configs": self.configs,
            "parent": str(self.parent.onnx_path) if self.parent else None,
            "info": self.info,
        }


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "_", name).strip("_")


def export_baseline(model, workdir: Path) -> Candidate:
    """The uncompressed model exported to fp32 ONNX: the parent of every chain."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    path = export_onnx(model, workdir / "fp32.onnx", "basic", {"chain": [], "parent": None})
    return Candidate("fp32", path, (), None, torch_model=model, fp32_path=path)


def _torch_step(model, cfg: TechniqueBase, data: CompressionData):
    from tasks.compression.distil import distil
    from tasks.compression.lowrank import low_rank
    from tasks.compression.pruning import prune_structured, prune_unstructured

    fn = {"distil": distil, "prune_structured": prune_structured, "lowrank": low_rank, "prune": prune_unstructured}[
        cfg.kind
    ]  # type: ignore[attr-defined]
    with one_thread():  # the same file from any process on any machine (a reproduction compares it)
        return fn(model, cfg, data.X)


def _onnx_step(src: Path, dst: Path, cfg: TechniqueBase, data: CompressionData) -> Path:
    from tasks.compression.fp16 import convert_fp16
    from tasks.compression.quantize import quantize_dynamic_int8, quantize_static_int8

    kind = cfg.kind  # type: ignore[attr-defined]
    if kind == "fp16":
        return convert_fp16(src, dst, cfg)  # type: ignore[arg-type]
    if kind == "int8_dynamic":
        return quantize_dynamic_int8(src, dst, cfg)  # type: ignore[arg-type]
    return quantize_static_int8(src, dst, cfg, data.X, data.y)  # type: ignore[arg-type]


def check_applies(model, configs: Sequence[TechniqueBase]) -> None:
    """Every technique of the chain is one the plug-in of the model it meets lists in COMPRESSION:
    the teacher's, and after a distillation into another plug-in (`student`), the student's."""
    from tasks.models import load_model_plugin, plugin_of

    plugin, foreign = plugin_of(model), {}
    for c in configs:
        if c.kind not in plugin.COMPRESSION:  # type: ignore[attr-defined]
            foreign.setdefault(plugin.NAME, (plugin, []))[1].append(c.kind)  # type: ignore[attr-defined]
        student = getattr(c, "student", None)
        if student is not None:
            plugin = load_model_plugin(student.module)
    if foreign:
        raise CompressionError(
            "; ".join(
                f"{kinds} do not apply to model plug-in {name} (it lists {list(p.COMPRESSION)})"
                for name, (p, kinds) in foreign.items()
            )
        )


def apply_chain(
    model,
    chain: Sequence[TechniqueBase | str | dict],
    data: CompressionData,
    workdir: Path,
    parent: Candidate | None = None,
    name: str | None = None,
) -> Candidate:
    """Apply `chain` to a copy of `model`; write <workdir>/<name>.onnx. Raises CompressionError on a bad chain.

    `parent` is the uncompressed fp32 export (export_baseline); made here if not given."""
    configs = parse_chain(list(chain))  # checks the order before any work is done
    check_applies(model, configs)
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    if parent is None:
        parent = export_baseline(model, workdir)
    if not configs:
        return parent
    name = name or chain_label(configs)
    slug = _slug(name)
    torch_side = [c for c in configs if c.kind not in ONNX_KINDS]  # type: ignore[attr-defined]
    onnx_side = [c for c in configs if c.kind in ONNX_KINDS]  # type: ignore[attr-defined]
    current = copy.deepcopy(model).eval()
    info: dict[str, Any] = {}
    for cfg in torch_side:
        current, info[cfg.label] = _torch_step(current, cfg, data)
    meta = {"parent": parent.onnx_path.name, "info": info}
    if torch_side:
        fp32 = export_onnx(
            current,
            workdir / f"{slug}.fp32.onnx",
            "basic" if onnx_side else "extended",
            {**meta, "chain": chain_to_dicts(torch_side)},
        )
    else:
        fp32 = parent.onnx_path
    final = fp32
    if onnx_side:
        final = _onnx_step(fp32, workdir / f"{slug}.onnx", onnx_side[0], data)
        write_metadata(final, {**meta, "chain": chain_to_dicts(configs)})
        open_session(final)  # fail here, naming the file, if onnxruntime cannot run it
    return Candidate(name, final, configs, parent, torch_model=current, fp32_path=fp32, info=info)
