"""ONNX export (dynamo exporter, dynamic batch axis, one self-contained file), onnxruntime's
offline graph optimization, the metadata every artifact carries, and opening sessions.

Optimization levels: "basic" keeps standard ONNX ops (constant folding, redundant nodes
removed): the input every ONNX-side technique gets, since quantizers and the fp16
converter know only standard ops. "extended" also fuses Gemm+Relu into com.microsoft
FusedGemm: fine for an fp32 model served by onnxruntime, so it is used when no ONNX-side
technique follows. Layout optimizations (ORT_ENABLE_ALL) are machine-specific and never
saved offline.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from tasks.core.files import atomic_write_with
from tasks.models.artifact import (  # noqa: F401 - re-exported: the compression package's names for them
    METADATA_KEY,
    model_input,
    open_session,
    predict,
    read_metadata,
    unknown_ops,
)

Optimization = Literal["none", "basic", "extended"]


def export_onnx(
    model, path: Path, optimization: Optimization = "basic", metadata: dict[str, Any] | None = None
) -> Path:
    """Export `model` through its plug-in's export wrapper (raw inputs -> probabilities) to `path`,
    with the plug-in's input and output names; batch axis dynamic."""
    import torch

    from tasks.models import plugin_of, served_output

    plugin = plugin_of(model)
    path = Path(path)
    raw = path.with_name(f".{path.name}.raw")
    wrapped = plugin.export_wrapper(model).eval()
    example = plugin.example_input(model, 4)
    with torch.no_grad():
        probabilities = wrapped(example)  # [n]: binary; [n, K]: K classes
    classes = 2 if probabilities.ndim == 1 else int(probabilities.shape[1])
    torch.onnx.export(
        wrapped,
        (example,),
        str(raw),
        input_names=[plugin.INPUT],
        output_names=[served_output(plugin, classes)],
        dynamo=True,
        external_data=False,
        dynamic_shapes=(dynamic_axes(plugin, model),),
        verbose=False,
    )
    try:
        optimize(raw, path, optimization, metadata)
    finally:
        raw.unlink(missing_ok=True)
    return path


def dynamic_axes(plugin, model) -> dict:
    """The batch axis, and for token models the sequence axis too (up to the model's max length)."""
    import torch

    axes = {0: torch.export.Dim("batch")}
    if plugin.BATCH_FORMAT == "tokens":
        axes[1] = torch.export.Dim("sequence", min=2, max=model.arch["max_len"])
    return axes


def optimize(src: Path, dst: Path, level: Optimization, metadata: dict[str, Any] | None = None) -> Path:
    """onnxruntime's offline optimizer (SessionOptions.optimized_model_filepath) at `level`."""
    import onnxruntime as ort

    def write(tmp: Path) -> None:
        if level == "none":
            tmp.write_bytes(Path(src).read_bytes())
        else:
            opts = ort.SessionOptions()
            opts.graph_optimization_level = {
                "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
                "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
            }[level]
            opts.optimized_model_filepath = str(tmp)
            opts.intra_op_num_threads = 1
            ort.InferenceSession(str(src), opts, providers=["CPUExecutionProvider"])
        write_metadata(tmp, {**(metadata or {}), "optimization": level})

    atomic_write_with(Path(dst), write)
    return Path(dst)


def write_metadata(path: Path, metadata: dict[str, Any]) -> None:
    """Store `metadata` (JSON) under METADATA_KEY in the model's metadata_props, replacing an earlier one;
    drop the exporter's per-node debug records (source stack traces of the build machine, fx node text),
    which are most of a small model's file and nothing a served artifact needs."""
    import onnx

    model = onnx.load(str(path))
    for node in model.graph.node:
        del node.metadata_props[:]
        node.doc_string = ""
    for value in [*model.graph.value_info, *model.graph.initializer, *model.graph.input, *model.graph.output]:
        del value.metadata_props[:]
    kept = [p for p in model.metadata_props if p.key != METADATA_KEY]
    del model.metadata_props[:]
    model.metadata_props.extend(kept)
    model.metadata_props.add(key=METADATA_KEY, value=json.dumps(metadata, sort_keys=True, default=str))
    onnx.save(model, str(path))


def count_ops(path: Path) -> dict[str, int]:
    import onnx

    counts: dict[str, int] = {}
    for node in onnx.load(str(path)).graph.node:
        counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return counts
