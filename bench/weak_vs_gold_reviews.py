"""The labeling benchmark (bench/weak_vs_gold.py) on the `reviews` text plug-in (tasks/datasets/reviews.py):
the labels saved where weak supervision has text to read. Records carry the suffix `_reviews`
(`label_savings_at_95_reviews`, goal >= 0.8).

Committed settings: SPLITS splits (the emails run takes 5). One split of the text plug-in costs several
times one of the emails (its classifier LF refits a TF-IDF model per fold and per budget, and the end
model reads 2,053 features), and the run must stay a few minutes on 2 shared cores."""

from __future__ import annotations

from bench.record import Record
from bench.weak_vs_gold import REVIEWS
from bench.weak_vs_gold import run as run_on

SPLITS = 2


def run(splits: int = SPLITS) -> list[Record]:
    return run_on(splits, dataset=REVIEWS, suffix="_reviews")
