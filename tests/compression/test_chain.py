"""apply_chain: torch-side then export then ONNX-side; configs in metadata; the input model untouched."""

import numpy as np
import pytest

from tasks.compression.chain import CompressionData, apply_chain
from tasks.compression.export import count_ops, read_metadata
from tasks.compression.mlp import param_count
from tasks.core.compression_config import parse_technique
from tasks.core.errors import CompressionError


def test_structured_prune_then_int8(baseline, trained, data, params):
    before = [p.detach().clone() for p in trained.parameters()]
    chain = params.compress.chain(["prune_structured(0.5)", "int8_dynamic"])  # the file's chain defaults
    cand = apply_chain(trained, chain, data, baseline.onnx_path.parent, parent=baseline)
    assert all(np.array_equal(a, b.detach()) for a, b in zip(before, trained.parameters()))
    assert cand.parent is baseline and cand.name == "prune_structured(0.5)+int8_dynamic"
    assert [c["kind"] for c in cand.configs] == ["prune_structured", "int8_dynamic"]
    assert param_count(cand.torch_model) == 20 * 16 + 16 + 16 * 8 + 8 + 8 + 1
    meta = read_metadata(cand.onnx_path)
    assert meta["chain"] == cand.configs and meta["parent"] == "fp32.onnx"
    assert meta["info"]["prune_structured(0.5)"]["widths"] == [16, 8]
    assert read_metadata(cand.fp32_path)["chain"] == cand.configs[:1]
    assert count_ops(cand.onnx_path)["MatMulInteger"] == 3
    assert cand.summary()["chain"] == ["prune_structured(0.5)", "int8_dynamic"]


def test_wrong_order_fails_before_any_work(trained, data, tmp_path, params):
    prune = parse_technique("prune(0.5)", params.compress.chain_defaults())
    with pytest.raises(CompressionError, match=r"out of order: prune\(0.5\) must come before int8_dynamic"):
        apply_chain(trained, ["int8_dynamic", prune], data, tmp_path)
    assert not list(tmp_path.iterdir())


def test_bad_data_is_refused():
    with pytest.raises(CompressionError, match="2-D"):
        CompressionData(np.zeros(5, np.float32))
    with pytest.raises(CompressionError, match="NaN or inf"):
        CompressionData(np.full((2, 3), np.nan, np.float32))
    with pytest.raises(CompressionError, match="3 labels for 2 rows"):
        CompressionData(np.zeros((2, 3), np.float32), np.zeros(3))
