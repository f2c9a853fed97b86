"""fill_queue: the K most useful unlabeled rows of tonight's batch into the labeling queue.

After weak_label (whose LF votes and label-model probabilities it reads, runs/<run_id>/lf_votes.parquet):
the acquisition rule (tasks/labeling/acquisition.py: LF conflict, label-model entropy, the prod model's
uncertainty when there is a prod model, greedy diversity over the featurized rows) picks K - R rows,
and R = round(K * queue.random_share) are drawn at random from the rest, each with its inclusion
probability. Never queued: a gold test row, a row with gold already, a row queued before. The queue
is SLUICE_HOME/queue/queue.sqlite, or SLUICE_DATABASE_URL's PostgreSQL (tasks/labeling/queue.py); a
person works through it on the Sluice page, and the labels become gold for the next night
(docs/training.md "Queue gold").
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import pandas as pd

from tasks.core.context import StepContext
from tasks.core.log import log
from tasks.core.records import FillQueueRecord, IngestRecord, WeakLabelRecord
from tasks.labeling.lf import ROW_ID, votes_probabilities
from tasks.labeling.queue import QueueStore, build_items
from tasks.registry import Registry, served_artifact
from tasks.runner import step


@step
def fill_queue(ctx: StepContext, ingest: IngestRecord, weak_label: WeakLabelRecord) -> FillQueueRecord:
    p = ctx.params.queue
    ds = ctx.dataset
    batch = pd.read_parquet(ingest.staged)[ds.RAW_COLUMNS].reset_index(drop=True)
    votes = pd.read_parquet(weak_label.lf_votes) if weak_label.lf_votes else None
    if votes is None or list(votes[ROW_ID]) != list(batch[ds.ID_COLUMN].astype(str)):
        raise ValueError(f"{weak_label.lf_votes}: the LF votes are not this batch's rows (re-run weak_label)")
    names = [c for c in votes.columns if not c.startswith("_")]
    L, prob = votes[names].to_numpy(), votes_probabilities(votes)
    registry = Registry(ctx.settings)
    store = QueueStore.open(ctx.settings)
    gold_sets = set()  # rows the gold dev and test sets hold: a label there is never used
    for name in ("test", "dev"):
        gold_sets |= set(map(str, pd.read_parquet(ctx.settings.layout.gold / f"{name}.parquet")[ds.ID_COLUMN]))
    # A retry chooses as the first attempt did (the same seed, the same eligible rows: this run's own items
    # and their labels do not count against it), so its rows are the ones queued already and none is added.
    labels = registry.gold_labels() if registry.gold_versions() else []
    has_gold = {str(lab["row_id"]) for lab in labels if (lab.get("queue") or {}).get("run_id") != ctx.run_id}
    queued = store.row_ids(but_run=ctx.run_id)
    ids = batch[ds.ID_COLUMN].astype(str)
    eligible = ~(ids.isin(gold_sets) | ids.isin(has_gold) | ids.isin(queued))
    model_version, score = prod_scores(registry, batch, ds) if p.model_scores else (None, None)
    seed = int.from_bytes(hashlib.blake2b(f"{p.seed}:{ctx.run_id}".encode(), digest_size=4).digest(), "big")
    items, account = build_items(
        batch, L, names, prob, score, ds.featurize(batch), id_column=ds.ID_COLUMN, raw_columns=list(ds.RAW_COLUMNS),
        params=p, seed=seed, eligible=eligible.to_numpy(),
    )  # fmt: skip
    added = store.add_items(ctx.run_id, items)
    log(
        f"labeling queue: {added} row(s) added ({account['chosen']} chosen by {'+'.join(account['signals'])}, "
        f"{account['random']} at random, inclusion {account['random_inclusion']}); {int(eligible.sum())} of "
        f"{len(batch)} rows eligible; {store.path}"
    )
    return FillQueueRecord(
        path=str(store.path),
        added=added,
        chosen=account["chosen"],
        random=account["random"],
        random_inclusion=account["random_inclusion"],
        signals=account["signals"],
        model_version=model_version,
        eligible=account["eligible"],
        queued_before=len(queued),
        mean_score_chosen=account["mean_score_chosen"],
        mean_score_batch=account["mean_score_batch"],
    )


def prod_scores(registry: Registry, batch: pd.DataFrame, ds: Any) -> tuple[str | None, np.ndarray | None]:
    """(the prod model version, its served ONNX's P(positive) per batch row, or [n, K]), or (None, None)."""
    prod = registry.state()["prod_model"]
    if not prod:
        return None, None
    from tasks.evaluation.scoring import predict_onnx

    return prod, predict_onnx(registry.model_path(prod, served_artifact(registry, prod)), batch, ds)


if __name__ == "__main__":
    raise SystemExit(fill_queue.main())
