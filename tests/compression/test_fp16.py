"""fp16: every float initializer is float16; inputs and outputs stay float32."""

import numpy as np

from tasks.compression.chain import apply_chain
from tasks.compression.export import count_ops, open_session, predict


def test_fp16_initializers_and_io(baseline, trained, data, held_out):
    import onnx
    from onnx import TensorProto

    cand = apply_chain(trained, ["fp16"], data, baseline.onnx_path.parent, parent=baseline)
    model = onnx.load(str(cand.onnx_path))
    float_inits = [i for i in model.graph.initializer if i.data_type in (TensorProto.FLOAT, TensorProto.FLOAT16)]
    assert len(float_inits) >= 8 and all(i.data_type == TensorProto.FLOAT16 for i in float_inits)
    assert model.graph.input[0].type.tensor_type.elem_type == TensorProto.FLOAT
    assert model.graph.output[0].type.tensor_type.elem_type == TensorProto.FLOAT
    assert count_ops(cand.onnx_path)["Cast"] == 2
    assert cand.onnx_path.stat().st_size < 0.75 * baseline.onnx_path.stat().st_size
    diff = predict(open_session(cand.onnx_path), held_out[0]) - predict(open_session(baseline.onnx_path), held_out[0])
    assert np.max(np.abs(diff)) < 5e-3
