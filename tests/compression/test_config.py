"""Technique configs, short forms, chain order and the search config: validation errors name the cause."""

import pytest
from pydantic import ValidationError

from tasks.core.compression_config import (
    DEFAULT_CANDIDATES,
    CompressionSearchConfig,
    Int8StaticConfig,
    LowRankConfig,
    PruneConfig,
    check_chain,
    parse_chain,
    parse_technique,
)
from tasks.core.errors import CompressionError


def test_short_forms_parse_into_configs(params):
    d = params.compress.chain_defaults()  # params.yaml compress: fine_tune_epochs, calibration_rows, seed
    assert parse_technique("prune_structured(0.5)", d).ratio == 0.5
    assert parse_technique("lowrank(8)", d).rank == 8
    assert parse_technique("distil(32,16)", d).hidden == (32, 16)
    assert parse_technique("distil([8])", d).hidden == (8,)
    assert parse_technique({"kind": "int8_static", "calibration_rows": 64}, d).calibration_rows == 64
    assert parse_technique("prune(0.8)", d).label == "prune(0.8)"
    assert parse_technique("prune(0.8)", d).fine_tune_epochs == params.compress.fine_tune_epochs


def test_what_params_yaml_gives_a_chain_entry_has_no_default_here():
    with pytest.raises(
        CompressionError, match=r"'prune\(0.8\)': fine_tune_epochs, seed not given: params.yaml compress"
    ):
        parse_technique("prune(0.8)")
    with pytest.raises(CompressionError, match="calibration_rows, seed not given"):
        parse_technique("int8_static")
    assert parse_technique("int8_dynamic").per_channel  # nothing of the file's: its short form is whole


@pytest.mark.parametrize("spec", ["prune(0)", "prune(1)", "prune(1.5)", "prune_structured(-0.1)"])
def test_ratio_out_of_range_is_an_error(spec, params):
    with pytest.raises(CompressionError, match="ratio"):
        parse_technique(spec, params.compress.chain_defaults())


def test_rank_and_unknown_things_are_errors(params):
    with pytest.raises(CompressionError, match="rank"):
        parse_technique("lowrank(0)", params.compress.chain_defaults())
    with pytest.raises(CompressionError, match="unknown kind 'quantum'"):
        parse_technique("quantum")
    with pytest.raises(CompressionError, match="takes no argument"):
        parse_technique("fp16(3)")
    with pytest.raises(CompressionError, match="extra_forbidden|Extra inputs"):
        parse_technique({"kind": "prune", "ratio": 0.5, "sparsity": 0.5}, params.compress.chain_defaults())


def test_configs_are_frozen_and_refuse_unknown_keys(params):
    fine_tune = {"fine_tune_epochs": params.compress.fine_tune_epochs, "seed": params.compress.seed}
    cfg = PruneConfig(ratio=0.3, **fine_tune)
    with pytest.raises(ValidationError):
        cfg.ratio = 0.4
    with pytest.raises(ValidationError):
        LowRankConfig(rank=4, energy=0.9, **fine_tune)
    with pytest.raises(ValidationError):
        Int8StaticConfig(calibration_rows=1, seed=params.compress.seed)


def test_wrong_order_names_the_order(params):
    d = params.compress.chain_defaults()
    with pytest.raises(
        CompressionError,
        match=r"out of order: prune\(0.5\) must come before int8_dynamic.*order: "
        r"distil -> prune_structured -> lowrank -> prune -> export",
    ):
        parse_chain(["int8_dynamic", "prune(0.5)"], d)
    with pytest.raises(CompressionError, match="distil.* must come before prune_structured"):
        parse_chain(["prune_structured(0.5)", "distil(8)"], d)
    with pytest.raises(CompressionError, match="both change the precision"):
        parse_chain(["fp16", "int8_dynamic"], d)
    with pytest.raises(CompressionError, match="appears 2 times"):
        check_chain(parse_chain(["prune(0.5)"], d) * 2)
    assert len(parse_chain(["distil(8)", "prune_structured(0.5)", "lowrank(2)", "prune(0.5)", "int8_static"], d)) == 5


def test_search_config_defaults_and_errors(params):
    # params.yaml's compress section (less the step's own tune_rows) with the full candidate list
    base = {k: v for k, v in params.compress.model_dump().items() if k != "tune_rows"}
    cfg = CompressionSearchConfig.model_validate({**base, "candidates": DEFAULT_CANDIDATES})
    chains = cfg.chains()
    assert len(chains) == len(cfg.candidates) >= 8
    assert all(
        c.fine_tune_epochs == cfg.fine_tune_epochs for ch in chains for c in ch if hasattr(c, "fine_tune_epochs")
    )
    custom = CompressionSearchConfig.model_validate(
        {**base, "candidates": [["prune(0.5)", "int8_dynamic"]], "fine_tune_epochs": 0, "calibration_rows": 32}
    )
    assert custom.chains()[0][0].fine_tune_epochs == 0
    with pytest.raises(ValidationError, match=r"candidates\n.*candidate 0 .*: chain .* out of order"):
        CompressionSearchConfig.model_validate({**base, "candidates": [["int8_dynamic", "prune(0.5)"]]})
    with pytest.raises(ValidationError, match="floor_ratio"):
        CompressionSearchConfig.model_validate({**base, "floor_ratio": 1.5})
    with pytest.raises(ValidationError, match="extra"):
        CompressionSearchConfig.model_validate({**base, "candidatez": []})
    with pytest.raises(ValidationError):
        cfg.floor_ratio = 0.5
