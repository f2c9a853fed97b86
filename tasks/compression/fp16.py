"""float16 conversion with onnxconverter-common, inputs and outputs kept float32."""

from __future__ import annotations

from pathlib import Path

from tasks.core.compression_config import Fp16Config
from tasks.core.files import atomic_write_with


def convert_fp16(src: Path, dst: Path, cfg: Fp16Config) -> Path:
    import onnx
    from onnxconverter_common import float16

    dst = Path(dst)
    model = float16.convert_float_to_float16(onnx.load(str(src)), keep_io_types=cfg.keep_io_types)
    atomic_write_with(dst, lambda tmp: onnx.save(model, str(tmp)))
    return dst
