"""The labeling queue's acquisition rule (tasks/labeling/acquisition.py): signals, greedy diversity, the
random share and its importance weights."""

import numpy as np
import pytest

from tasks.labeling.acquisition import (
    CHOSEN,
    RANDOM,
    acquisition_score,
    entropy,
    greedy_diverse,
    lf_conflict,
    select,
    uncertainty,
    weighted_mean,
)

W = {"conflict": 1.0, "entropy": 1.0, "uncertainty": 1.0}


def test_signals():
    L = np.array([[1, 1, -1], [1, 0, -1], [1, 0, 0], [-1, -1, -1], [0, -1, -1]])
    assert lf_conflict(L).tolist() == pytest.approx([0.0, 1.0, 2 / 3, 0.0, 0.0])
    assert entropy(np.array([0.5, 0.0, 1.0, np.nan])).tolist() == pytest.approx([1.0, 0.0, 0.0, 1.0], abs=1e-9)
    assert uncertainty(np.array([0.5, 0.0, 1.0, 0.75])).tolist() == pytest.approx([1.0, 0.0, 0.0, 0.5])


def test_score_is_the_weighted_mean_of_the_signals_present():
    L = np.array([[1, 0, -1], [1, 1, 1]])
    prob = np.array([0.5, 0.99])
    score, parts = acquisition_score(L, prob, None, {**W, "conflict": 3.0})
    assert set(parts) == {"conflict", "entropy"}  # no prod model: uncertainty drops out of the mean
    assert score[0] == pytest.approx(1.0) and score[1] == pytest.approx(entropy(np.array([0.99]))[0] / 4)
    with_model, parts = acquisition_score(L, prob, np.array([0.0, 0.5]), W)
    assert set(parts) == set(W) and with_model[1] > score[1]
    with pytest.raises(ValueError, match="lack"):
        acquisition_score(L, prob, None, {"conflict": 1.0})
    with pytest.raises(ValueError, match="sum to 0"):
        acquisition_score(L, prob, None, {"conflict": 0.0, "entropy": 0.0, "uncertainty": 5.0})


def test_diversity_spreads_the_picks_over_near_duplicates():
    # ten near-copies of one row, all the most useful; ten others spread out, a little less useful
    rng = np.random.default_rng(0)
    dupes = np.zeros((10, 3)) + rng.normal(0, 1e-3, (10, 3))
    spread = rng.normal(0, 5, (10, 3))
    x = np.vstack([dupes, spread])
    score = np.concatenate([np.full(10, 0.9), np.full(10, 0.8)])
    greedy = greedy_diverse(score, x, 5, diversity=0.0)
    diverse = greedy_diverse(score, x, 5, diversity=0.5)
    assert all(i < 10 for i in greedy)  # by score alone: five near-copies
    assert sum(i < 10 for i in diverse) == 1  # one of the copies, then rows elsewhere
    assert diverse[0] == greedy[0] == 0


def test_select_mixes_chosen_and_random_rows_with_their_inclusion_probabilities():
    n = 200
    rng = np.random.default_rng(1)
    score, x = rng.random(n), rng.normal(size=(n, 4))
    eligible = np.ones(n, bool)
    eligible[:20] = False  # e.g. gold test rows: never queued
    s = select(score, x, k=20, random_share=0.25, diversity=0.3, seed=3, eligible=eligible)
    assert len(s.index) == 20 and len(set(s.index)) == 20 and (s.index >= 20).all()
    assert list(s.kind) == [CHOSEN] * 15 + [RANDOM] * 5
    assert (s.inclusion[:15] == 1).all() and s.inclusion[15:] == pytest.approx(5 / (180 - 15))
    assert s.weight[15:] == pytest.approx(33.0)
    again = select(score, x, k=20, random_share=0.25, diversity=0.3, seed=3, eligible=eligible)
    assert (again.index == s.index).all()  # seeded: a re-run queues the same rows
    assert len(select(score, x, k=500, random_share=0.5, diversity=0.0, seed=0).index) == n  # k capped at N
    with pytest.raises(ValueError, match="random_share"):
        select(score, x, k=5, random_share=1.5, diversity=0.0, seed=0)


def test_importance_weights_keep_the_estimate_unbiased_where_the_chosen_rows_are_not():
    """The chosen rows are the uncertain ones, so their spam share is far from the batch's; the
    Horvitz-Thompson mean over chosen + weighted random rows is right on average over the draws."""
    n = 400
    rng = np.random.default_rng(2)
    truth = (rng.random(n) < 0.3).astype(float)
    score = np.where(truth == 1, 0.9, 0.1) + rng.normal(0, 0.01, n)  # the useful rows are mostly spam
    x = rng.normal(size=(n, 2))
    estimates, naive = [], []
    for seed in range(300):
        s = select(score, x, k=40, random_share=0.5, diversity=0.0, seed=seed)
        estimates.append(weighted_mean(truth[s.index], s.inclusion, n))
        naive.append(truth[s.index].mean())
    assert np.mean(estimates) == pytest.approx(truth.mean(), abs=0.01)
    assert np.mean(naive) > truth.mean() + 0.2  # unweighted, the queue's gold overstates spam
    with pytest.raises(ValueError, match="inclusion"):
        weighted_mean(np.ones(2), np.array([1.0, 0.0]), 10)
