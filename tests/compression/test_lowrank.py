"""Low-rank: factor ranks, shapes and parameter counts; a rank no layer can use is an error."""

import copy

import numpy as np
import pytest

from tasks.compression.lowrank import factorize, low_rank
from tasks.compression.mlp import layer_shapes, param_count
from tasks.core.compression_config import LowRankConfig
from tasks.core.errors import CompressionError


def test_factors_have_the_rank_and_approximate_the_weight(trained):
    lin = trained.net[0]  # Linear(20, 32)
    pair = factorize(lin, 5)
    first, second = pair
    assert (first.in_features, first.out_features, second.in_features, second.out_features) == (20, 5, 5, 32)
    assert first.bias is None
    product = (second.weight @ first.weight).detach().numpy()
    assert np.linalg.matrix_rank(product, tol=1e-4) == 5
    w = lin.weight.detach().numpy().astype(np.float64)
    s = np.linalg.svd(w, compute_uv=False)
    # Eckart-Young: the error of the best rank-5 approximation is the tail of the singular values
    assert np.linalg.norm(w - product) == pytest.approx(np.sqrt((s[5:] ** 2).sum()), rel=1e-3)


def test_low_rank_model_params_and_shapes(trained, rows, params):
    cfg = LowRankConfig(rank=4, fine_tune_epochs=1, seed=params.compress.seed)
    model, info = low_rank(copy.deepcopy(trained), cfg, rows[0])
    # Linear(20,32): 4*(20+32) < 640 yes; Linear(32,16): 4*48 < 512 yes; Linear(16,1): 4*17 > 16, left dense
    assert info["factorized_layers"] == [0, 1]
    assert layer_shapes(model) == [(20, 4), (4, 32), (32, 4), (4, 16), (16, 1)]
    assert param_count(model) == (20 * 4 + 4 * 32 + 32) + (32 * 4 + 4 * 16 + 16) + (16 + 1) == info["params"]
    assert info["params"] < info["params_before"]


@pytest.mark.parametrize("rank", [11, 64])
def test_rank_out_of_range_is_an_error(trained, rows, rank, params):
    seed = params.compress.seed
    # best saving here: Linear(20, 32) needs rank < 640/52 = 12.3, Linear(32,16) rank < 10.7
    if rank == 11:
        model, info = low_rank(copy.deepcopy(trained), LowRankConfig(rank=11, fine_tune_epochs=0, seed=seed), rows[0])
        assert info["factorized_layers"] == [0]
        return
    with pytest.raises(CompressionError, match=r"lowrank rank 64 is out of range .* no layer gets smaller"):
        low_rank(copy.deepcopy(trained), LowRankConfig(rank=rank, fine_tune_epochs=0, seed=seed), rows[0])
    with pytest.raises(ValueError, match="rank"):
        LowRankConfig(rank=0, fine_tune_epochs=0, seed=seed)
