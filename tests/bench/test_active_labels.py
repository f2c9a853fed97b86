"""bench/active_labels.py's figures from its raw measurements (pure): the savings are
label_savings_at_95's computation on the two curves, the k5 ratio is per split."""

import pytest

from bench.active_labels import KS, records
from bench.weak_vs_gold import label_savings


def test_records_from_raw_curves():
    # per split: curves of test ROC AUC / full gold over KS (0.25 .. 15%)
    active = [
        [0.90, 0.93, 0.96, 0.97, 0.97, 0.98, 0.98, 0.99, 0.99],
        [0.88, 0.91, 0.94, 0.96, 0.97, 0.98, 0.98, 0.99, 0.99],
    ]
    gold = [
        [0.70, 0.74, 0.78, 0.84, 0.86, 0.88, 0.92, 0.94, 0.96],
        [0.72, 0.75, 0.77, 0.85, 0.87, 0.88, 0.91, 0.95, 0.97],
    ]
    raw = {"full": [0.94, 0.95], "active": active, "gold_only": gold, "random_mix_k5": [0.90, 0.92],
           "active_gold_positive": [[0.1] * len(KS)] * 2}  # fmt: skip
    saving, k5 = records(raw)
    mean = lambda c: [(a + b) / 2 for a, b in zip(*c)]  # noqa: E731
    expected, k_active, k_gold = label_savings(mean(active), mean(gold), KS)
    assert saving.name == "label_savings_at_95_active" and saving.value == pytest.approx(expected)
    assert 0.5 < k_active <= 1 and 10 < k_gold < 15  # interpolated between the measured budgets
    assert saving.value == pytest.approx(1 - k_active / k_gold) and saving.passed
    assert k5.name == "active_vs_random_k5"
    assert k5.details["per_split"] == [round(0.98 * 0.94 / 0.90, 4), round(0.98 * 0.95 / 0.92, 4)]
    assert k5.value == pytest.approx((0.98 * 0.94 / 0.90 + 0.98 * 0.95 / 0.92) / 2) and not k5.passed  # < 1.02


def test_the_reviews_records_carry_the_suffix_on_their_own_budgets():
    from bench import active_labels_reviews as reviews

    ks = reviews.KS
    raw = {"full": [0.74], "active": [[0.96, 0.98, 0.98, 0.96, 1.02, 0.99]],
           "gold_only": [[0.70, 0.77, 0.80, 0.89, 0.92, 0.96]], "random_mix_k5": [0.73],
           "active_gold_positive": [[0.6] * len(ks)]}  # fmt: skip
    saving, k5 = records(raw, ks, "_reviews")
    assert [saving.name, k5.name] == ["label_savings_at_95_active_reviews", "active_vs_random_k5_reviews"]
    assert saving.details["budget_weak_plus_active"] == ks[0] == 0.5  # there at the smallest budget
    assert saving.value == pytest.approx(1 - 0.5 / saving.details["budget_gold_only_random"])
    assert k5.details["per_split"] == [round(0.96 * 0.74 / 0.73, 4)]
