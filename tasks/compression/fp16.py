"""float16 conversion with onnxconverter-common, inputs and outputs kept float32."""

from __future__ import annotations

from pathlib import Path

from tasks.compression.config import Fp16Config


def convert_fp16(src: Path, dst: Path, cfg: Fp16Config) -> Path:
    import onnx
    from onnxconverter_common import float16

    dst = Path(dst)
    tmp = dst.with_name(f".{dst.name}.tmp")
    model = float16.convert_float_to_float16(onnx.load(str(src)), keep_io_types=cfg.keep_io_types)
    onnx.save(model, str(tmp))
    tmp.replace(dst)
    return dst
