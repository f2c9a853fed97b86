"""The active-labels benchmark (bench/active_labels.py) on the `reviews` text plug-in
(tasks/plugins/reviews/__init__.py): records `label_savings_at_95_active_reviews` and
`active_vs_random_k5_reviews`, computed exactly as the emails figures are, on the budgets where the
reviews' curves cross 0.95 (gold alone there near 16%: bench/weak_vs_gold_reviews.py).

Committed settings: SPLITS split at the gold budgets KS. One budget of the text plug-in costs many
times one of the emails (1,029 features and a TF-IDF classifier LF refit in every weak-weight fold)."""

from __future__ import annotations

from bench.active_labels import run as run_on
from bench.record import Record
from bench.weak_vs_gold import REVIEWS

SPLITS = 1
KS = (0.5, 1, 2, 5, 10, 20)


def run(splits: int = SPLITS) -> list[Record]:
    return run_on(splits, dataset=REVIEWS, suffix="_reviews", ks=KS)
