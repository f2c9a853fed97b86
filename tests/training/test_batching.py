import pytest
import torch

from tasks.training.batching import equal_splits, rank_slice, rebalance, seeded_permutation


def test_permutation_is_a_function_of_seed_and_epoch():
    assert torch.equal(seeded_permutation(50, 7, 3), seeded_permutation(50, 7, 3))
    assert not torch.equal(seeded_permutation(50, 7, 3), seeded_permutation(50, 7, 4))
    assert sorted(seeded_permutation(50, 7, 3).tolist()) == list(range(50))


def test_splits_cover_the_global_batch_exactly():
    assert equal_splits(64, 2) == [32, 32] and equal_splits(10, 3) == [4, 3, 3]
    assert [rank_slice([4, 3, 3], r) for r in range(3)] == [(0, 4), (4, 7), (7, 10)]


@pytest.mark.parametrize(
    "seconds, expected",
    [
        ([1.0, 1.0], [32, 32]),
        ([1.0, 2.0], [43, 21]),  # the rank twice as slow per sample gets half the rows
        ([1.0, 1e6], [63, 1]),  # never below one row
    ],
)
def test_rebalance_follows_throughput(seconds, expected):
    new = rebalance([32, 32], seconds, 64)
    assert new == expected and sum(new) == 64
