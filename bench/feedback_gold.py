"""Feedback becomes gold: test quality after nights that learn from feedback over nights that ignore it.

For each of `SPLITS` demo splits (params.yaml `demo`, its seed varied; the same split, batches and
gold budget rows for every arm), `NIGHTS` nights run the nightly's labeling as `tasks/weak_label.py`
wires it (the same functions: `nightly_feedback`, `grow_dev`, `mix_in`): the night's batch, the LFs
and the label model built on the gold dev set, the gold budget (`weak_label.gold_budget`, replayed
from the true labels), the weak weight chosen on the dev folds
(`choose_weak_weight`, the step's `auto`). Before each night, the demo traffic feed's rows (the first
`TRAFFIC_ROWS` rows of that night's batch, `tasks/canary/demo_traffic.py`) are served and a seeded
`demo.feedback_rate` of them get their true label as feedback: prediction and feedback records as
the server writes them, through the real join and gold store (`nightly_feedback`, a registry per
arm). After the last night the pipeline's end model (`fit_in_memory`, params.yaml train) trains on
every night's labeled rows and is scored by ROC AUC on the gold test set.

Arms: ignore (feedback versioned, not used: `weak_label.feedback_gold: false`); learn (feedback as
extra labels: the same gold budget plus the feedback gold, a `feedback_dev_fraction` of it growing
the dev set); equal (learn, with each night's gold budget cut by that night's feedback labels: the
same total of labels as ignore).

`feedback_gold_gain` = learn / ignore (mean ROC AUC over the splits; goal >= 1: extra labels must not
hurt), `feedback_gold_gain_equal` = equal / ignore (goal >= 0.99: a feedback label is worth about a
budget label).
"""

from __future__ import annotations

import statistics
import tempfile
import time

import numpy as np
import pandas as pd

from bench.record import Record
from tasks.core.params import load_params
from tasks.core.settings import Settings
from tasks.datasets import load_dataset, load_lfs
from tasks.datasets.demo_feed import split_demo
from tasks.labeling.feedback import grow_dev, mix_in, nightly_feedback
from tasks.labeling.label_model import label_batch
from tasks.labeling.lf import apply_lfs, apply_lfs_dev
from tasks.labeling.mix import gold_budget_mask, hold_out, training_labels
from tasks.labeling.weak_weight import choose_weak_weight, fit_and_predict
from tasks.registry import Registry
from tasks.serving.predlog import feedback_records, prediction_records
from tasks.serving.requestid import RequestIds, expiry_of

SPLITS, NIGHTS, TRAFFIC_ROWS = 3, 3, 50
DATASET = "tasks.plugins.emails"
ARMS = ("ignore", "learn", "equal")


def served_log(batch: pd.DataFrame, ds, rate: float, seed: int, now: float) -> tuple[list[dict], int]:
    """The demo feed's served rows of `batch` as the server logs them, with feedback for a seeded share."""
    from tasks.canary.demo_traffic import feedback_mask
    from tasks.core.files import json_safe

    rows = batch.head(TRAFFIC_ROWS)
    ids = RequestIds(b"bench-key-" * 4, ttl_s=7 * 86400)
    truth = dict(zip(batch[ds.ID_COLUMN], batch["_truth"]))
    records, told = [], 0
    for raw, fed in zip(json_safe(rows[list(ds.RAW_COLUMNS)].to_dict("records")),
                        feedback_mask(rows[ds.ID_COLUMN].tolist(), rate, seed)):  # fmt: skip
        rid = ids.issue(1, now=now - 200)
        pred = prediction_records(rid, [0.5], "champion", "model-v1", 1.0, False, "predict", [raw])
        pred[0]["ts"] = now - 200
        records += pred
        if fed:
            fb = feedback_records(rid, [int(truth[raw[ds.ID_COLUMN]])], "bench")
            fb[0]["ts"] = now - 100
            records += fb
            told += 1
    return records, told


def night_labels(arm, registry, log, batch, dev, test_ids, consumed, ds, p, make_lfs, now):
    """One night's labeled rows (raw columns + label columns) as the weak_label step builds them."""
    wp = p.weak_label
    fb = nightly_feedback(
        registry, log, ds, batch, dev, test_ids, consumed=consumed, use=arm != "ignore",
        dev_fraction=wp.feedback_dev_fraction, seed=wp.seed, now=now, settle_s=wp.feedback_settle_s,
        retention_s=p.serving.log_retention_h * 3600, expiry_of=expiry_of,
    )  # fmt: skip
    dev = grow_dev(dev, fb)
    y_dev = dev[ds.GOLD_COLUMN].to_numpy().astype(int)
    raw = batch[ds.RAW_COLUMNS]
    lfs = make_lfs(dev, y_dev)
    out = label_batch(apply_lfs(raw, lfs), apply_lfs_dev(dev, lfs), y_dev, lfs, wp)
    budget = wp.gold_budget
    if arm == "equal":  # the feedback labels are counted in the night's budget
        told = len(fb.report["accepted"])
        budget = max(budget * len(batch) - told, 0) / len(batch)
    mask = gold_budget_mask(batch[ds.ID_COLUMN].to_numpy(), budget, wp.seed)
    gold = np.where(mask, batch["_truth"].to_numpy(np.float64), np.nan)
    rows, gold, prob, held = mix_in(fb, raw, gold, out.prob, np.zeros(len(raw), bool), ds)
    has = ~np.isnan(gold) & ~held
    fixed = (rows[has], gold[has].astype(int)) if has.any() else None
    choice = choose_weak_weight(
        dev, y_dev, rows[~has & ~held], make_lfs, ds.featurize, wp, train_on_judge_folds=False,
        fixed_gold=fixed, label_model_auc=out.quality["label_model"]["roc_auc"],
    )  # fmt: skip
    labels = hold_out(training_labels(prob, gold, wp.mix, choice.weight), held)
    counts = {"gold": int(((labels["label_source"] == "gold") & (labels["label_weight"] > 0)).sum())}
    return rows, labels, dev, fb.used_through, counts, choice.weight


def run_split(split: int, p, ds, make_lfs) -> dict[str, dict]:
    demo = p.demo.replace(seed=p.demo.seed + split)
    source = ds.load_source()
    dev0, test, batches = split_demo(source, demo, ds)
    truth = source.drop_duplicates(ds.ID_COLUMN).set_index(ds.ID_COLUMN)[ds.GOLD_COLUMN]
    test_ids = test[ds.ID_COLUMN]
    x_test, y_test = ds.featurize(test), test[ds.GOLD_COLUMN].to_numpy().astype(int)
    out = {}
    for arm in ARMS:
        with tempfile.TemporaryDirectory(prefix="sluice-bench-fbgold-") as home:
            registry = Registry(Settings.from_env({"SLUICE_HOME": home}))
            dev, consumed, log, frames, labels_used = dev0, None, [], [], 0
            weights = []
            for night in range(NIGHTS):
                now = 1_000_000.0 + night * 86400
                batch = batches[night].assign(_truth=truth.reindex(batches[night][ds.ID_COLUMN]).to_numpy())
                served, told = served_log(batch, ds, demo.feedback_rate, demo.seed + night, now)
                log += served
                rows, labels, dev, consumed, counts, w = night_labels(
                    arm, registry, log, batch, dev, test_ids, consumed, ds, p, make_lfs, now
                )
                frames.append((rows, labels))
                labels_used += counts["gold"] + (len(dev) - len(dev0) if night == NIGHTS - 1 else 0)
                weights.append(w)
            x = np.concatenate([ds.featurize(r) for r, _ in frames]).astype(np.float32)
            lab = pd.concat([lab for _, lab in frames], ignore_index=True)
            targets = np.stack([lab["label_prob"].fillna(0).to_numpy(), lab["label_weight"].to_numpy()], 1)
            pred = fit_and_predict(x, targets.astype(np.float32), x_test.astype(np.float32), p.train)
            from sklearn.metrics import roc_auc_score

            out[arm] = {
                "roc_auc": float(roc_auc_score(y_test, pred)),
                "gold_labels": labels_used,
                "dev_rows": len(dev),
                "weak_weights": weights,
            }
        print(f"[bench] split {split} {arm}: {out[arm]}", flush=True)
    return out


def run(splits: int = SPLITS) -> list[Record]:
    p = load_params()
    ds = load_dataset(DATASET)
    make_lfs = load_lfs(ds).make_lfs
    t0 = time.time()
    per = [run_split(s, p, ds, make_lfs) for s in range(splits)]
    mean = {arm: statistics.fmean(r[arm]["roc_auc"] for r in per) for arm in ARMS}
    details = {
        "splits": splits,
        "nights": NIGHTS,
        "traffic_rows_per_night": TRAFFIC_ROWS,
        "feedback_rate": p.demo.feedback_rate,
        "gold_budget": p.weak_label.gold_budget,
        "feedback_dev_fraction": p.weak_label.feedback_dev_fraction,
        "roc_auc": mean,
        "per_split": per,
        "seconds": round(time.time() - t0, 1),
    }
    return [
        Record("feedback_gold_gain", mean["learn"] / mean["ignore"], "ratio", ">= 1.0", details),
        Record("feedback_gold_gain_equal", mean["equal"] / mean["ignore"], "ratio", ">= 0.99", details),
    ]


if __name__ == "__main__":
    for r in run():
        print(r.to_dict())
