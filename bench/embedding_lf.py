"""The embedding LF on `reviews` (tasks/labeling/embedding_lf.py): what the label model gains from an LF on
all-MiniLM-L6-v2's sentence embeddings beside the reviews LFs the plug-in keeps.

`embedding_lf_gain`: the label model's dev ROC AUC with the embedding LF over without it (goal >= 1.03),
the mean over SPLITS reshuffles of ROWS seeded reviews rows into DEV_ROWS gold dev rows and a batch of
the rest, as the weak_label step measures it (the LF's dev votes out of fold; the label model fitted on
batch and dev votes). The LF is the step's own (weak_label.embedding_lf's vote_at, c, folds from
params.yaml) on the encoder tasks/plugins/bert/demo.yaml names, read at MAX_LEN tokens; the embeddings
are the pipeline's cache under $SLUICE_HOME/cache/embeddings (`pretrained_frozen_trunk`'s folder: a
texts embedded before, by a night or an earlier run, is read back; `details.computed_texts` says how many
this run computed and `embed_s` how long). The details also give the label
model's ROC AUC on the batch rows' true labels (rows some LF voted on) with and without it, and what the
step's keep rule decided on each split (`batch_auc_ratio_mean`: on the batch rows the labeling
without the LF covers, both arms scored on the same rows).

Committed settings: 2,500 rows at max_len 128 (the demo's). Embedding them took 6.6 CPU-minutes (13 minutes
wall on 2 shared cores at load 6-7); with them in the cache the run takes about 1.5 minutes. `run(rows=...,
max_len=64)` for a quicker look (not the committed figure).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import yaml

from bench.record import Record
from tasks.core.params import load_params
from tasks.core.settings import Settings
from tasks.datasets import load_dataset, load_lfs
from tasks.evaluation.quality import classification_metrics
from tasks.labeling.embedding_lf import embedding_lf, with_embedding_lf
from tasks.labeling.label_model import label_batch
from tasks.labeling.lf import apply_lfs, apply_lfs_dev
from tasks.training.inputs import pretrained_frozen_trunk

REVIEWS = "tasks.plugins.reviews"
BERT_DEMO = Path(__file__).resolve().parents[1] / "tasks" / "plugins" / "bert" / "demo.yaml"
ROWS, DEV_ROWS, SPLITS, MAX_LEN, SEED = 2500, 500, 3, 128, 0
GOAL = ">= 1.03"


def _batch_auc(y: np.ndarray, prob: np.ndarray, rows: np.ndarray) -> float:
    """ROC AUC on the batch rows `rows` (the rows the labeling without the LF covers: the LF only adds
    coverage, and the rows it adds are harder ones every other LF abstained on)."""
    return float(classification_metrics(y[rows], prob[rows])["roc_auc"])


def run(rows: int = ROWS, splits: int = SPLITS, max_len: int = MAX_LEN) -> list[Record]:
    params = load_params(overrides={"train": yaml.safe_load(BERT_DEMO.read_text())["train"]})
    tp, wp = params.train, params.weak_label
    tp = tp.replace(model={"module": tp.model.module, "params": {**tp.model.params, "max_len": max_len}})
    ds = load_dataset(REVIEWS)
    lf_module = load_lfs(ds)
    source = ds.load_source().sample(rows, random_state=SEED).reset_index(drop=True)
    gold = ds.GOLD_COLUMN
    per_split = []
    frozen = pretrained_frozen_trunk(tp, 2, Settings.from_env())
    computed = []
    compute = frozen._compute
    frozen._compute = lambda texts: computed.extend(texts) or compute(texts)  # counted for the details
    t0 = time.perf_counter()
    frozen.embed(ds.texts(source))
    embed_s = time.perf_counter() - t0
    for s in range(splits):
        order = np.random.default_rng(SEED + s).permutation(rows)
        dev, batch = source.iloc[order[:DEV_ROWS]], source.iloc[order[DEV_ROWS:]]
        y_dev, y_batch = dev[gold].to_numpy().astype(int), batch[gold].to_numpy().astype(int)
        batch = batch.drop(columns=[gold])
        lfs = lf_module.make_lfs(dev, y_dev)
        L, L_dev = apply_lfs(batch, lfs), apply_lfs_dev(dev, lfs)
        out = label_batch(L, L_dev, y_dev, lfs, wp)
        lf = embedding_lf(dev, y_dev, ds.texts, frozen.embed, wp.embedding_lf, 2, wp.seed)
        choice = with_embedding_lf(batch, dev, y_dev, lfs, L, L_dev, out, lf, wp)[-1]  # the step's rule
        L2, L2_dev = np.hstack([L, apply_lfs(batch, [lf])]), np.hstack([L_dev, apply_lfs_dev(dev, [lf])])
        forced = label_batch(L2, L2_dev, y_dev, [*lfs, lf], wp)  # with it, whatever the rule decided
        names = [f.name for f in lfs]
        per_split.append(
            {
                "dev_auc_without": out.quality["label_model"]["roc_auc"],
                "dev_auc_with": forced.quality["label_model"]["roc_auc"],
                "batch_auc_without": _batch_auc(y_batch, out.prob, ~np.isnan(out.prob)),
                "batch_auc_with": _batch_auc(y_batch, forced.prob, ~np.isnan(out.prob)),
                "batch_rows_scored": int((~np.isnan(out.prob)).sum()),
                "batch_auc_with_on_its_own_coverage": _batch_auc(y_batch, forced.prob, ~np.isnan(forced.prob)),
                "kept_by_the_step": choice.kept,
                **{k: choice.details[k] for k in ("dev_coverage", "dev_accuracy_out_of_fold", "batch_coverage")},
            }
        )
    ratios = [r["dev_auc_with"] / r["dev_auc_without"] for r in per_split]
    batch_ratios = [r["batch_auc_with"] / r["batch_auc_without"] for r in per_split]
    details = {
        "rows": rows,
        "dev_rows": DEV_ROWS,
        "splits": splits,
        "max_len": max_len,
        "embed_s": round(embed_s, 1),
        "computed_texts": len(computed),
        "lfs_without": names,
        "embedding_lf": wp.embedding_lf.model_dump(mode="json"),
        "dev_ratio_per_split": [round(r, 4) for r in ratios],
        "batch_auc_ratio_mean": round(float(np.mean(batch_ratios)), 4),
        "per_split": per_split,
    }
    return [Record("embedding_lf_gain", float(np.mean(ratios)), "ratio", GOAL, details)]


if __name__ == "__main__":
    for r in run():
        print(r.to_dict())
