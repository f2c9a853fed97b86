"""Hierarchical allreduce on 2 simulated nodes x 2 processes (two torchrun launchers on loopback)."""

import pytest

from bench.hier_allreduce import run_two_nodes

pytestmark = pytest.mark.slow


def test_hierarchical_hook_equals_flat_and_halves_internode_bytes(tmp_path):
    ranks = run_two_nodes(tmp_path)
    assert {r["local_world_size"] for r in ranks} == {2}
    assert max(r["max_abs_diff"] for r in ranks) <= 1e-6
    assert max(r["flat_max_abs_diff"] for r in ranks) <= 1e-6
    hier = sum(r["hier_internode_bytes"] for r in ranks)
    flat = sum(r["flat_internode_bytes"] for r in ranks)
    assert flat > 0 and hier / flat == pytest.approx(1 / 2)  # 1 / local world size
    # Only the two node leaders (ranks 0 and 2) put bytes on the inter-node collective.
    assert [r["hier_internode_bytes"] > 0 for r in ranks] == [True, False, True, False]
