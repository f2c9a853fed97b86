"""Pruning: the measured sparsity is the config's ratio; structured pruning really shrinks the layers."""

import copy

import numpy as np
import pytest

from tasks.compression.mlp import layer_shapes, param_count
from tasks.compression.pruning import prune_structured, prune_unstructured, sparsity
from tasks.core.compression_config import PruneConfig, PruneStructuredConfig
from tasks.core.errors import CompressionError
from tests.compression.conftest import torch_prob


@pytest.mark.parametrize("ratio", [0.3, 0.75])
def test_unstructured_sparsity_equals_the_ratio(trained, rows, ratio, params):
    model, info = prune_unstructured(
        copy.deepcopy(trained), PruneConfig(ratio=ratio, fine_tune_epochs=1, seed=params.compress.seed), rows[0][:200]
    )
    measured = sparsity(model)
    for frac, (n_in, n_out) in zip(measured["per_layer"], layer_shapes(model)):
        assert frac == round(ratio * n_in * n_out) / (n_in * n_out)  # exact: torch prunes round(amount x numel)
    assert measured["overall"] == pytest.approx(ratio, abs=2e-3) and info["sparsity"] == measured["overall"]
    names = [n for n, _ in model.named_parameters()]
    assert not any(n.endswith("weight_orig") for n in names)  # the reparametrization is removed
    assert not hasattr(model.net[0], "weight_mask")


def test_unstructured_fine_tune_keeps_pruned_weights_at_zero(trained, rows, params):
    cfg = PruneConfig(ratio=0.5, fine_tune_epochs=3, seed=params.compress.seed)
    model, _ = prune_unstructured(copy.deepcopy(trained), cfg, rows[0])
    assert sparsity(model)["overall"] == pytest.approx(0.5, abs=2e-3)


def test_structured_pruning_shrinks_layers_and_params(trained, rows, held_out, params):
    cfg = PruneStructuredConfig(ratio=0.5, fine_tune_epochs=20, fine_tune_lr=3e-3, seed=params.compress.seed)
    model, info = prune_structured(copy.deepcopy(trained), cfg, rows[0])
    assert layer_shapes(model) == [(20, 16), (16, 8), (8, 1)]
    assert param_count(model) == 20 * 16 + 16 + 16 * 8 + 8 + 8 + 1 == info["params"]
    assert info["params_before"] == param_count(trained) == 20 * 32 + 32 + 32 * 16 + 16 + 16 + 1
    assert model.arch["hidden"] == [16, 8]
    # the pruned, fine-tuned model still ranks like the original on held-out rows
    a, b = torch_prob(model, held_out[0]), torch_prob(trained, held_out[0])
    spearman = np.corrcoef(np.argsort(np.argsort(a)), np.argsort(np.argsort(b)))[0, 1]
    assert spearman > 0.9, spearman


def test_structured_pruning_keeps_the_strongest_neurons(trained, rows, params):
    cfg = PruneStructuredConfig(ratio=0.75, fine_tune_epochs=0, seed=params.compress.seed)
    model, _ = prune_structured(copy.deepcopy(trained), cfg, rows[0])
    norms = trained.net[0].weight.detach().norm(dim=1)
    kept = model.net[0].weight.detach().norm(dim=1)
    assert sorted(kept.tolist()) == pytest.approx(sorted(norms.topk(8).values.tolist()))
    assert layer_shapes(model) == [(20, 8), (8, 4), (4, 1)]


def test_ratio_out_of_range_is_an_error(params):
    rest = {"fine_tune_epochs": params.compress.fine_tune_epochs, "seed": params.compress.seed}
    for bad in (0.0, 1.0, -0.2, 2):
        with pytest.raises(ValueError, match="ratio"):
            PruneConfig(ratio=bad, **rest)
        with pytest.raises(ValueError, match="ratio"):
            PruneStructuredConfig(ratio=bad, **rest)


def test_structured_pruning_refuses_a_factorized_model(trained, rows, params):
    from tasks.compression.lowrank import low_rank
    from tasks.core.compression_config import LowRankConfig

    seed = params.compress.seed
    factored, _ = low_rank(copy.deepcopy(trained), LowRankConfig(rank=4, fine_tune_epochs=0, seed=seed), rows[0])
    with pytest.raises(CompressionError, match="not a plain Linear/ReLU stack"):
        prune_structured(factored, params.compress.chain(["prune_structured(0.5)"])[0], rows[0])
