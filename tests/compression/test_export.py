"""ONNX export: a dynamic batch axis, parity with torch, the config in metadata, unknown ops refused."""

import numpy as np
import pytest

from tasks.compression.export import count_ops, open_session, predict, read_metadata
from tasks.core.errors import CompressionError
from tests.compression.conftest import torch_prob


def test_batch_1_and_256_run_with_torch_parity(baseline, trained, held_out):
    X = np.resize(held_out[0], (256, held_out[0].shape[1])).astype(np.float32)
    session = open_session(baseline.onnx_path)
    assert session.get_inputs()[0].shape[0] not in (1, 4, 256)  # symbolic batch dimension
    p1, p256 = predict(session, X[:1]), predict(session, X)
    assert p1.shape == (1,) and p256.shape == (256,)
    assert np.max(np.abs(p256 - torch_prob(trained, X))) < 1e-5
    assert p1[0] == pytest.approx(p256[0], abs=1e-6)
    assert np.array_equal(predict(open_session(baseline.onnx_path, threads=1), X), p256)  # every core or one: same bits


def test_baseline_is_optimized_standard_ops_and_records_its_config(baseline):
    ops = count_ops(baseline.onnx_path)
    assert ops["Gemm"] == 3 and ops["Relu"] == 2  # basic level: standard ops only, ready for quantizers
    meta = read_metadata(baseline.onnx_path)
    assert meta["chain"] == [] and meta["optimization"] == "basic"


def test_an_operator_onnxruntime_cannot_run_is_named(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    node = helper.make_node("FrobnicateSpam", ["features"], ["p_spam"])
    graph = helper.make_graph(
        [node],
        "bad",
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, [None, 3])],
        [helper.make_tensor_value_info("p_spam", TensorProto.FLOAT, [None, 3])],
    )
    path = tmp_path / "bad.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]), str(path))
    with pytest.raises(CompressionError, match=r"onnxruntime cannot run bad.onnx: unknown operator.*FrobnicateSpam"):
        open_session(path)
