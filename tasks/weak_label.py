"""weak_label: labeling functions + Snorkel's LabelModel (vs majority vote) on a staged batch,
mixed with the gold labels that exist for the batch's rows.

First the prediction log's new feedback becomes a gold version in the registry (tasks/labeling/feedback.py,
report runs/<run_id>/feedback_gold.json); with weak_label.feedback_gold its rows then grow the gold dev
set and train as extra gold rows.

Writes runs/<run_id>/labeled.parquet (raw columns + label, label_prob (K classes: label_prob_<k>),
label_source, label_weight: tasks/labeling/mix.py) and an LF analysis table; the gold dev set scores
both label sources every run and, out of fold, chooses how much the weak rows weigh
(tasks/labeling/weak_weight.py).
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import numpy as np
import pandas as pd

from tasks.core.context import StepContext
from tasks.core.files import atomic_write_json, atomic_write_parquet
from tasks.core.log import log
from tasks.core.records import IngestRecord, WeakLabelRecord
from tasks.datasets import check_labels, class_names, load_lfs
from tasks.labeling.drift import drift_flags, labeling_stats
from tasks.labeling.embedding_lf import embedding_lf, with_embedding_lf
from tasks.labeling.feedback import NightlyFeedback, describe, grow_dev, mix_in, nightly_feedback, trained_through
from tasks.labeling.label_model import label_batch
from tasks.labeling.lf import VOTES_FILE, apply_lfs, apply_lfs_dev, votes_frame
from tasks.labeling.mix import hold_out, label_counts, replayed_gold, training_labels
from tasks.labeling.weak_weight import nightly_weak_weight
from tasks.registry import Registry
from tasks.runner import step
from tasks.serving.paths import prediction_log
from tasks.serving.predlog import read_log
from tasks.serving.requestid import expiry_of


@step
def weak_label(ctx: StepContext, ingest: IngestRecord) -> WeakLabelRecord:
    p = ctx.params.weak_label
    layout = ctx.settings.layout
    run_dir = ctx.run_dir
    ds = ctx.dataset
    module = load_lfs(ds, p.lf_module)
    lf_module = module.__name__
    lf_hash = hashlib.sha256(Path(module.__file__).read_bytes()).hexdigest()[:16]  # the LF code's version
    batch = pd.read_parquet(ingest.staged)[ds.RAW_COLUMNS]
    dev = pd.read_parquet(layout.gold / "dev.parquet")
    test_ids = pd.read_parquet(layout.gold / "test.parquet", columns=[ds.ID_COLUMN])[ds.ID_COLUMN]
    registry = Registry(ctx.settings)
    previous = registry.state()["current_data"]
    prev_info = registry.data_version_info(previous) if previous else {}
    fb = feedback_gold(ctx, ds, registry, batch, dev, test_ids, trained_through(registry))
    dev = grow_dev(dev, fb)
    classes = len(class_names(ds))
    check_labels(ds, dev[ds.GOLD_COLUMN], "the gold dev set")
    y_dev = dev[ds.GOLD_COLUMN].to_numpy().astype(int)
    lfs = module.make_lfs(dev, y_dev)

    L, L_dev = apply_lfs(batch, lfs, classes), apply_lfs_dev(dev, lfs, classes)
    log(f"applied {len(lfs)} LFs to {len(batch)} batch rows and {len(dev)} gold dev rows ({classes} classes)")
    out = label_batch(L, L_dev, y_dev, lfs, p, classes)
    make_lfs, embedding = module.make_lfs, None
    if p.embedding_lf.enabled:
        labeling = embedding_lf_step(ctx, ds, module.make_lfs, batch, dev, y_dev, lfs, L, L_dev, out)
        make_lfs, lfs, L, L_dev, out, embedding = labeling
    stats = labeling_stats(L, out.label, classes)
    before = prev_info.get("labeling_stats")
    drift = drift_flags(stats, before, p)
    for flag in drift:
        log(f"DRIFT vs {previous}: {flag}")

    held_out = batch[ds.ID_COLUMN].isin(set(test_ids)).to_numpy()  # the gold test set is never trained on
    if held_out.any():
        log(f"{int(held_out.sum())} batch row(s) are in the gold test set: kept out of training (weight 0)")
    gold = np.full(len(batch), np.nan)
    if p.mix != "weak_only" and p.gold_budget > 0:
        gold = replayed_gold(batch, ds, p.gold_budget, p.seed, held_out)
    # feedback gold (empty unless weak_label.feedback_gold): its dev rows and the rows that trained in an
    # earlier version are held out; its new rows are gold here, or appended when not in the batch
    rows, gold, prob, held_out = mix_in(fb, batch, gold, out.prob, held_out, ds)
    lm_auc = out.quality["label_model"]["roc_auc"]  # the label model's dev quality: which way the choice leans
    choice = nightly_weak_weight(
        rows[~held_out], gold[~held_out], dev, y_dev, make_lfs, ds.featurize, p, lm_auc, classes
    )
    labels = hold_out(training_labels(prob, gold, p.mix, choice.weight), held_out)
    counts = label_counts(labels)
    log(
        f"training labels ({p.mix}): {counts['gold']['rows']} gold, {counts['weak']['training_rows']} weak at "
        f"weight {choice.weight:g} ({choice.reason}), {counts['none']['rows']} unlabeled"
    )
    labeled = rows.copy()
    for column in labels.columns:
        labeled[column] = labels[column].to_numpy()
    path = run_dir / "labeled.parquet"
    atomic_write_parquet(path, labeled)
    atomic_write_json(run_dir / "lf_analysis.json", out.lf_table)
    votes = votes_frame(batch[ds.ID_COLUMN], L, [lf.name for lf in lfs], out.prob)
    atomic_write_parquet(run_dir / VOTES_FILE, votes)  # the labeling queue's signals (tasks/fill_queue.py)

    q = out.quality
    log(
        f"label model dev ROC AUC {q['label_model']['roc_auc']:.3f} F1 {q['label_model']['f1']:.3f}; "
        f"majority vote ROC AUC {q['majority_vote']['roc_auc']:.3f} F1 {q['majority_vote']['f1']:.3f}; "
        f"using {out.chosen}; coverage {out.coverage:.1%}, {out.abstained_rows} rows unlabeled"
    )
    return WeakLabelRecord(
        labeled=str(path),
        rows=int(len(labeled)),
        lf_module=lf_module,
        lf_module_hash=lf_hash,
        labeling_stats=stats,
        drift=drift,
        drift_compared_with=previous,
        n_lfs=len(lfs),
        coverage=out.coverage,
        abstained_rows=out.abstained_rows,
        chosen=out.chosen,
        quality_dev=q,
        lf_table=out.lf_table,
        mix=p.mix,
        gold_budget=p.gold_budget,
        weak_weight=choice.weight,
        weak_weight_choice={
            "fold_auc": choice.fold_auc,
            "fold_se": choice.fold_se,
            "folds": choice.folds,
            "reason": choice.reason,
        },
        label_counts=counts,
        feedback_gold={k: v for k, v in fb.report.items() if k not in ("accepted", "refused", "conflicts", "pending")}
        | {k: len(fb.report[k]) for k in ("accepted", "refused", "conflicts", "pending")},
        feedback_gold_version=fb.used_through,
        lf_votes=str(run_dir / VOTES_FILE),
        embedding_lf=embedding,
    )


def embedding_lf_step(ctx: StepContext, ds, own_lfs, batch, dev, y_dev, lfs, L, L_dev, out):
    """weak_label.embedding_lf: the LF on train.pretrained's frozen encoder's embeddings (the cache a frozen
    training reads), kept only when the label model's dev ROC AUC gains from it; (make_lfs for the weak
    weight's folds, LFs, L, L_dev, outcome, the choice's report)."""
    from tasks.training.inputs import pretrained_frozen_trunk  # torch and the checkpoint: only when enabled

    p, classes = ctx.params.weak_label, len(class_names(ds))
    if not hasattr(ds, "texts"):
        raise ValueError(f"weak_label.embedding_lf: the dataset {ds.NAME} has no texts(df) to embed")
    frozen = pretrained_frozen_trunk(ctx.params.train, classes, ctx.settings)

    def build(dev_rows, y):
        return embedding_lf(dev_rows, y, ds.texts, frozen.embed, p.embedding_lf, classes, p.seed)

    lfs, L, L_dev, out, choice = with_embedding_lf(batch, dev, y_dev, lfs, L, L_dev, out, build(dev, y_dev), p, classes)
    log(f"embedding LF (cache {frozen.cache.fingerprint[:12]}): {choice.reason}")

    def with_it(dev_rows, y):  # the weak weight's folds rebuild the labeling as it is: the LF fitted on the fold
        extra = build(dev_rows, y)
        return [*own_lfs(dev_rows, y), *([extra] if extra is not None else [])]

    report = choice.report() | {"cache": frozen.cache.fingerprint}
    return (with_it if choice.kept else own_lfs), lfs, L, L_dev, out, report


def feedback_gold(ctx: StepContext, ds, registry, batch, dev, test_ids, consumed) -> NightlyFeedback:
    """The prediction log's new feedback as a gold version, and its split for this run; the account in
    runs/<run_id>/feedback_gold.json."""
    p = ctx.params.weak_label
    retention_s = ctx.params.serving.log_retention_h * 3600
    fb = nightly_feedback(
        registry,
        read_log(prediction_log(ctx.settings)),
        ds,
        batch,
        dev,
        test_ids,
        consumed=consumed,
        use=p.feedback_gold and p.mix != "weak_only",  # weak_only: no gold trains, so none is taken as trained
        dev_fraction=p.feedback_dev_fraction,
        seed=p.seed,
        now=time.time(),
        settle_s=p.feedback_settle_s,
        retention_s=retention_s,
        expiry_of=expiry_of,
    )
    atomic_write_json(ctx.run_dir / "feedback_gold.json", fb.report)
    log(describe(fb))
    return fb


if __name__ == "__main__":
    raise SystemExit(weak_label.main())
