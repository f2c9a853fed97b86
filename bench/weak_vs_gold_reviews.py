"""The labeling benchmark (bench/weak_vs_gold.py) on the `reviews` text plug-in (tasks/plugins/reviews/__init__.py):
the labels saved where weak supervision has text to read. Records carry the suffix `_reviews`
(`label_savings_at_95_reviews`, goal >= 0.8), computed exactly as the emails figure is.

Committed settings: SPLITS split(s) at the gold budgets KS (the emails run: 5 splits, 9 budgets). One
budget of the text plug-in costs many times one of the emails (the end model reads 1,029 features
where the emails' reads 21, and the classifier LF refits a TF-IDF model in every weak-weight fold): on
2 shared cores one split at these budgets took about 25 minutes as two processes
(`python -m bench.weak_vs_gold --dataset tasks.plugins.reviews --splits 0 --ks 1 2 5 --out a.json`,
the same with `--ks 10 20 30`, then `--merge a.json b.json --suffix _reviews --ks 1 2 5 10 20 30`)."""

from __future__ import annotations

from bench.record import Record
from bench.weak_vs_gold import REVIEWS
from bench.weak_vs_gold import run as run_on

SPLITS = 1
KS = (1, 2, 5, 10, 20, 30)


def run(splits: int = SPLITS) -> list[Record]:
    return run_on(splits, dataset=REVIEWS, suffix="_reviews", ks=KS)
