"""Does the weak weight hold still? The same data judged night after night with reshuffled folds.

One gold judging set (`SPAM_ROWS` spam and `HAM_ROWS` ham rows of the emails demo: the few gold
rows a night has, with the pipeline's MIN_GOLD_PER_CLASS of each class so that it judges at all)
and one pool of unlabeled rows (`POOL_ROWS`, a night's batch) stay fixed; each of `NIGHTS` nights
reshuffles the folds (and reseeds the label model: weak_label.seed = night), computes the
candidates' out-of-fold scores once (tasks/labeling/weak_weight.py `out_of_fold_scores`), and
chooses the weight by both rules side by side, on the same scores:

- before: one cross-validation (the first repeat) and the best pooled out-of-fold ROC AUC (ties to
  the smaller weight), the rule the pipeline used until now;
- after: the pipeline's rule now: weak_weight_repeats cross-validations averaged, then
  `one_se_choice` (within weak_weight_se standard errors of the best, leaning toward the weak
  labels when the label model's dev ROC AUC reaches trust_label_model_auc).

`weak_weight_flip_rate` = the share of nights whose chosen weight differs from the majority choice
(after; goal <= 0.1); `weak_weight_flip_rate_before` is the same share for the old rule, reported
beside it (its goal is the same: it may fail, which is the point of measuring it).
"""

from __future__ import annotations

import collections
import time

import pandas as pd

from bench.record import Record
from tasks.core.params import load_params
from tasks.datasets import load_dataset, load_lfs
from tasks.labeling.label_model import label_batch
from tasks.labeling.lf import apply_lfs, apply_lfs_dev
from tasks.labeling.weak_weight import CANDIDATES, FOLDS, mean_scores, one_se_choice, out_of_fold_scores

NIGHTS = 20
SPAM_ROWS, HAM_ROWS = 12, 36
POOL_ROWS = 800
DATASET = "tasks.plugins.emails"


def flip_rate(choices: list[float]) -> float:
    """The share of choices that differ from the most common one."""
    _, top = collections.Counter(choices).most_common(1)[0]
    return 1 - top / len(choices)


def run(nights: int = NIGHTS) -> list[Record]:
    from sklearn.metrics import roc_auc_score

    wp0 = load_params().weak_label
    ds = load_dataset(DATASET)
    make_lfs = load_lfs(ds).make_lfs
    source = ds.load_source()
    is_spam = source[ds.GOLD_COLUMN] == 1
    gold = source[is_spam].sample(SPAM_ROWS, random_state=11)
    gold = pd.concat([gold, source[~is_spam].sample(HAM_ROWS, random_state=11)]).sort_index()
    pool = source.drop(gold.index).sample(POOL_ROWS, random_state=12).drop(columns=[ds.GOLD_COLUMN])
    y = gold[ds.GOLD_COLUMN].to_numpy().astype(int)
    before, after, t0 = [], [], time.time()
    for night in range(nights):
        wp = wp0.replace(seed=night)
        lfs = make_lfs(gold, y)
        labeled = label_batch(apply_lfs(pool, lfs), apply_lfs_dev(gold, lfs), y, lfs, wp)
        lm_auc = labeled.quality["label_model"]["roc_auc"]
        repeats = out_of_fold_scores(gold, y, pool, make_lfs, ds.featurize, wp, True, None, CANDIDATES, FOLDS)
        once = {w: float(roc_auc_score(y, repeats[0][w])) for w in CANDIDATES}  # one cross-validation
        before.append(max(sorted(once), key=lambda w: (once[w], -w)))
        oof = mean_scores(repeats)
        auc = {w: float(roc_auc_score(y, oof[w])) for w in CANDIDATES}
        chosen = one_se_choice(y, oof, auc, wp, lm_auc, FOLDS)
        after.append(chosen.weight)
        print(
            f"[bench] night {night}: ROC AUC by weight {', '.join(f'{w:g}: {v:.4f}' for w, v in auc.items())}; "
            f"before {before[-1]:g}, after {after[-1]:g} ({chosen.reason}) [{time.time() - t0:.0f} s]",
            flush=True,
        )
    details = {"nights": nights, "gold_rows": [SPAM_ROWS, HAM_ROWS], "pool_rows": POOL_ROWS, "dataset": DATASET}
    return [
        Record("weak_weight_flip_rate", flip_rate(after), "ratio", "<= 0.1", {**details, "choices": after}),
        Record("weak_weight_flip_rate_before", flip_rate(before), "ratio", "<= 0.1", {**details, "choices": before}),
    ]


if __name__ == "__main__":
    for r in run():
        print(r.to_dict())
