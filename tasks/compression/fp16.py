"""float16 conversion with onnxconverter-common, inputs and outputs kept float32."""

from __future__ import annotations

from pathlib import Path

from tasks.core.compression_config import Fp16Config
from tasks.core.files import atomic_write_with


def convert_fp16(src: Path, dst: Path, cfg: Fp16Config) -> Path:
    import onnx
    from onnxconverter_common import float16

    dst = Path(dst)
    # Cast stays in float32: the token plug-ins' graphs Cast their masks to float32, and a converted
    # Cast keeps its `to=float` while its output is declared float16, which onnxruntime refuses to
    # load. Blocked, each keeps its type and the converter casts its output to float16 where needed.
    model = float16.convert_float_to_float16(
        onnx.load(str(src)),
        keep_io_types=cfg.keep_io_types,
        op_block_list=[*float16.DEFAULT_OP_BLOCK_LIST, "Cast"],
    )
    atomic_write_with(dst, lambda tmp: onnx.save(model, str(tmp)))
    return dst
