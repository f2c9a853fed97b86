"""The labeling claim: a model trained on Sluice's weak labels vs the same model on gold labels.

For each of `splits` random splits: 20% of the demo data is the test set; on the rest,
the pipeline's model (params.yaml train) is trained three ways and scored by ROC AUC
on the test set (only 9% of emails are spam: accuracy would say little):

- full gold: every training row with its gold label (the reference, 100% manual labels);
- weak, k%: a gold dev set of k% of the data (the only manual labels) drives the LFs'
  model-based LF and the label-model choice; every other row gets a weak label
  (rows where every LF abstains are left out, as in the pipeline);
- gold only, k%: the k% dev rows alone, with their gold labels (the honest baseline).

Records `weak_vs_gold_k{5,10,20}` = weak / full gold (goal for k5: >= 0.95) and
`gold_only_k{5,10,20}` = gold only / full gold; weak is worth something where it
beats gold only. Means over the splits.
"""

from __future__ import annotations

import statistics

import numpy as np
import torch

from bench.record import Record
from tasks.core.params import load_params
from tasks.datasets import load_dataset
from tasks.datasets.emails import GOLD_COLUMN, featurize, load_source
from tasks.evaluation.scoring import gold_quality
from tasks.labeling.label_model import label_batch
from tasks.labeling.lf import apply_lfs, apply_lfs_dev
from tasks.training.loop import fit_in_memory

KS = (5, 10, 20)


def _auc(train_df, target: np.ndarray, test_df, p) -> float:
    model, _ = fit_in_memory(torch.from_numpy(featurize(train_df)), torch.from_numpy(target.astype(np.float32)), p)
    with torch.no_grad():
        prob = torch.sigmoid(model(torch.from_numpy(featurize(test_df)))).numpy()
    return gold_quality(prob, test_df)["roc_auc"]


def run(splits: int = 5) -> list[Record]:
    import importlib

    from sklearn.model_selection import train_test_split

    params = load_params()
    p, wp = params.train, params.weak_label
    lf_module = importlib.import_module(wp.lf_module or load_dataset().LF_MODULE)
    emails = load_source()
    n = len(emails)
    ratios: dict[str, list[float]] = {f"{kind}_k{k}": [] for kind in ("weak_vs_gold", "gold_only") for k in KS}
    details: dict[str, list[float]] = {"full_gold_auc": []}
    for s in range(splits):
        rest, test = train_test_split(emails, test_size=0.2, stratify=emails[GOLD_COLUMN], random_state=100 + s)
        full = _auc(rest, rest[GOLD_COLUMN].to_numpy(), test, p)
        details["full_gold_auc"].append(full)
        for k in KS:
            dev, pool = train_test_split(
                rest, train_size=round(n * k / 100), stratify=rest[GOLD_COLUMN], random_state=200 + s
            )
            y_dev = dev[GOLD_COLUMN].to_numpy()
            lfs = lf_module.make_lfs(dev, y_dev)
            out = label_batch(apply_lfs(pool, lfs), apply_lfs_dev(dev, lfs), y_dev, lfs, wp)
            covered = out.label != -1
            weak = _auc(pool[covered], out.prob[covered], test, p)
            gold_only = _auc(dev, y_dev, test, p)
            ratios[f"weak_vs_gold_k{k}"].append(weak / full)
            ratios[f"gold_only_k{k}"].append(gold_only / full)
            details.setdefault(f"label_source_k{k}", []).append(out.chosen)
            details.setdefault(f"weak_auc_k{k}", []).append(weak)
            details.setdefault(f"gold_only_auc_k{k}", []).append(gold_only)
            print(
                f"[bench] split {s} k={k}%: full gold {full:.3f}  weak {weak:.3f}  gold-only {gold_only:.3f}"
                f"  ({out.chosen}, coverage {covered.mean():.1%})",
                flush=True,
            )
    records = []
    for k in KS:
        weak, gold = statistics.mean(ratios[f"weak_vs_gold_k{k}"]), statistics.mean(ratios[f"gold_only_k{k}"])
        goal = ">= 0.95" if k == 5 else f">= {gold:.3f}"  # weak must beat gold-only at every k
        records.append(
            Record(
                f"weak_vs_gold_k{k}",
                weak,
                "ratio",
                goal,
                {
                    "per_split": ratios[f"weak_vs_gold_k{k}"],
                    "gold_only": gold,
                    "beats_gold_only": weak > gold,
                    **{key: v for key, v in details.items() if key.endswith(f"k{k}") or key == "full_gold_auc"},
                },
            )
        )
        records.append(
            Record(f"gold_only_k{k}", gold, "ratio", f"<= {weak:.3f}", {"per_split": ratios[f"gold_only_k{k}"]})
        )
    return records
