"""weak_label: labeling functions + Snorkel's LabelModel (vs majority vote) on a staged batch.

Writes runs/<run_id>/labeled.parquet (raw columns + label + label_prob) and an LF
analysis table; the gold dev set scores both label sources every run.
"""

from __future__ import annotations

import hashlib
import importlib
from pathlib import Path

import numpy as np
import pandas as pd

from tasks.core.files import atomic_write_json, atomic_write_parquet
from tasks.core.log import log
from tasks.core.records import IngestRecord, WeakLabelRecord
from tasks.core.steps import StepContext, step
from tasks.datasets import load_dataset
from tasks.labeling.drift import drift_flags, labeling_stats
from tasks.labeling.label_model import label_batch
from tasks.labeling.lf import apply_lfs, apply_lfs_dev
from tasks.registry import Registry


@step
def weak_label(ctx: StepContext, ingest: IngestRecord) -> WeakLabelRecord:
    p = ctx.params.weak_label
    layout = ctx.settings.layout
    run_dir = ctx.run_dir
    ds = load_dataset(ctx.params.dataset.module)
    lf_module = p.lf_module or ds.LF_MODULE
    module = importlib.import_module(lf_module)
    lf_hash = hashlib.sha256(Path(module.__file__).read_bytes()).hexdigest()[:16]  # the LF code's version
    batch = pd.read_parquet(ingest.staged)[ds.RAW_COLUMNS]
    dev = pd.read_parquet(layout.gold / "dev.parquet")
    y_dev = dev[ds.GOLD_COLUMN].to_numpy().astype(int)
    lfs = module.make_lfs(dev, y_dev)

    L, L_dev = apply_lfs(batch, lfs), apply_lfs_dev(dev, lfs)
    log(f"applied {len(lfs)} LFs to {len(batch)} batch rows and {len(dev)} gold dev rows")
    out = label_batch(L, L_dev, y_dev, lfs, p)
    stats = labeling_stats(L, out.label)
    registry = Registry(ctx.settings)
    previous = registry.state()["current_data"]
    before = registry.data_version_info(previous).get("labeling_stats") if previous else None
    drift = drift_flags(stats, before, p)
    for flag in drift:
        log(f"DRIFT vs {previous}: {flag}")

    labeled = batch.copy()
    labeled["label"] = out.label.astype(np.int64)
    labeled["label_prob"] = out.prob
    path = run_dir / "labeled.parquet"
    atomic_write_parquet(path, labeled)
    atomic_write_json(run_dir / "lf_analysis.json", out.lf_table)

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
    )


if __name__ == "__main__":
    raise SystemExit(weak_label.main())
