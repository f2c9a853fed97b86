"""Feedback becomes gold: /v1/feedback labels joined to the raw rows they were served for, then versioned.

The prediction log (tasks/serving/predlog.py) holds, per request and row, the served prediction with
its raw row (`input`, /v1/predict only) and, later, any feedback label. `join_feedback` pairs them by
request id and row; `feedback_to_gold` hands the pairs to the registry's gold store
(tasks/registry/gold.py), which refuses test rows ("gold, test") and bad labels and keeps conflicts
flagged. Nothing is dropped silently: feedback that cannot be joined is refused with its reason
(unknown request id, expired, not a raw row) and recorded with the gold version, and the whole
account is the run's report (runs/<id>/feedback_gold.json).

`feedback_rows` turns the agreed gold rows into what the nightly uses: a seeded share joins the gold
dev set (LF analysis, the label model, the weak-weight choice), the rest trains in the mix as extra
gold rows. Pure apart from `feedback_to_gold`'s registry transaction.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import numpy as np
import pandas as pd

from tasks.datasets import class_names
from tasks.registry.gold import FEEDBACK, gold_number

Record = dict[str, Any]


def join_feedback(
    records: Iterable[Record],
    *,
    id_column: str,
    raw_columns: list[str],
    now: float,
    settle_s: float,
    retention_s: float,
    expiry_of: Callable[[str], float | None],
) -> tuple[list[Record], list[Record], list[Record]]:
    """-> (gold candidates, refused feedback with its reason, pending feedback younger than settle_s).

    A candidate is a feedback label with the raw row its request served (the champion's record: shadow
    records carry no input). Feedback younger than `settle_s` waits for the next run: its prediction's
    chunk may not be flushed yet by the replica that served it."""
    served: dict[tuple[str, int], Record] = {}
    feedback: list[Record] = []
    for r in records:
        kind = r.get("kind")
        if kind == "feedback":
            feedback.append(r)
        elif kind == "prediction" and not r.get("shadow") and "error" not in r:
            served.setdefault((str(r.get("request_id")), int(r.get("row", 0))), r)
    candidates, refused, pending = [], [], []
    for fb in feedback:
        key = (str(fb.get("request_id")), int(fb.get("row", 0)))
        brief = {k: fb.get(k) for k in ("request_id", "row", "label", "who", "at", "ts", "replica")}
        if now - float(fb.get("ts") or 0.0) < settle_s:
            pending.append(brief)
            continue
        pred = served.get(key)
        if pred is None:
            expiry = expiry_of(key[0])
            if expiry is not None and now > expiry:
                why = (
                    f"expired: request {key[0]} is past the prediction log's retention "
                    f"({retention_s / 3600:g} h); its prediction is no longer in the log"
                )
            else:
                why = f"unknown request id: no served prediction for request {key[0]} row {key[1]} in the log"
            refused.append({**brief, "reason": why})
            continue
        raw = pred.get("input")
        if pred.get("endpoint") != "predict" or not isinstance(raw, dict):
            refused.append(
                {**brief, "reason": "not a raw row: served through /v2 infer, the log holds its features only"}
            )
            continue
        missing = [c for c in raw_columns if c not in raw]
        if missing:
            refused.append({**brief, "reason": f"not a raw row: the served row lacks {missing}"})
            continue
        candidates.append(
            {
                **brief,
                "row_id": raw.get(id_column),
                "source": FEEDBACK,
                "served_version": pred.get("model_version"),
                "raw": {c: raw[c] for c in raw_columns},
            }
        )
    return candidates, refused, pending


def feedback_to_gold(
    registry: Any,
    records: Iterable[Record],
    ds: Any,
    *,
    test_ids: Iterable[Any],
    known: dict[str, int],
    now: float,
    settle_s: float,
    retention_s: float,
    expiry_of: Callable[[str], float | None],
    who: str | None = None,
) -> dict[str, Any]:
    """Join the log's feedback and record it as a gold version; the account (what was accepted,
    refused and why, conflicting, still pending) for the run's report."""
    candidates, refused, pending = join_feedback(
        records,
        id_column=ds.ID_COLUMN,
        raw_columns=list(ds.RAW_COLUMNS),
        now=now,
        settle_s=settle_s,
        retention_s=retention_s,
        expiry_of=expiry_of,
    )
    result = registry.add_gold(
        candidates,
        classes=range(len(class_names(ds))),
        test_ids=test_ids,
        known=known,
        refused=refused,
        until_ts=now - settle_s,
        who=who,
    )
    return {**result, "pending": pending}


def dev_share(row_ids: Iterable[Any], fraction: float, seed: int) -> np.ndarray:
    """Which feedback gold rows join the gold dev set: a seeded hash of the row id (a row keeps its side)."""
    ids = [str(i) for i in row_ids]
    draws = np.array(
        [
            int.from_bytes(hashlib.blake2b(f"feedback-dev:{seed}:{i}".encode(), digest_size=8).digest(), "big")
            for i in ids
        ],
        dtype=np.float64,
    )
    return draws / 2.0**64 < fraction if len(ids) else np.zeros(0, bool)


@dataclass
class FeedbackRows:
    """The agreed feedback gold, split: `dev` rows join the gold dev set, `train` rows train in the mix."""

    dev: pd.DataFrame
    train: pd.DataFrame
    conflicted: list[str]


def feedback_rows(
    agreed: dict[str, Record],
    conflicted: dict[str, list[Record]],
    ds: Any,
    *,
    dev_fraction: float,
    seed: int,
    exclude: Iterable[Any] = (),
) -> FeedbackRows:
    """Raw columns + the gold column (the feedback label) + `gold_version`, per agreed row; rows in
    `exclude` (the gold test and dev sets) left out whatever the store says. A row the labeling
    queue's rule chose (hard on purpose, `queue.kind` chosen) only trains: the dev set judges the
    labeling and the weak weight, and stays a sample of the data as it comes (feedback on served rows,
    the queue's random share)."""
    out = set(map(str, exclude))
    rows = [
        {
            **lab["raw"],
            ds.GOLD_COLUMN: int(lab["label"]),
            "gold_version": lab["gold_version"],
            "_chosen": (lab.get("queue") or {}).get("kind") == "chosen",
        }
        for rid, lab in agreed.items()
        if rid not in out
    ]
    frame = pd.DataFrame(rows, columns=[*ds.RAW_COLUMNS, ds.GOLD_COLUMN, "gold_version", "_chosen"])
    # in a fixed order (version, then row id), not the request ids' (random): the grown dev set's order
    # feeds the dev folds, so the same gold gives the same labeling
    order = sorted(
        range(len(frame)), key=lambda i: (gold_number(frame["gold_version"].iloc[i]), str(frame[ds.ID_COLUMN].iloc[i]))
    )
    frame = frame.iloc[order].reset_index(drop=True)
    chosen = frame.pop("_chosen").to_numpy(bool)
    to_dev = dev_share(frame[ds.ID_COLUMN], dev_fraction, seed) & ~chosen
    return FeedbackRows(
        dev=frame[to_dev].reset_index(drop=True),
        train=frame[~to_dev].reset_index(drop=True),
        conflicted=sorted(conflicted),
    )


@dataclass
class NightlyFeedback:
    """What one nightly takes from the feedback gold (tasks/weak_label.py wires it into the mix)."""

    report: dict[str, Any]
    dev: pd.DataFrame
    """Feedback gold rows that join the gold dev set this run (raw columns + the gold column)."""
    batch_gold: np.ndarray
    """Per batch row: its feedback gold label (new since the previous data version), else nan."""
    batch_hold: np.ndarray
    """Per batch row: a feedback dev row, or one that trained already as appended feedback gold."""
    extra: pd.DataFrame
    """New feedback gold rows not in the batch: appended to the labeled batch as gold rows."""
    used_through: str | None
    """The latest gold version whose training rows are in the mix from this run on."""


def nightly_feedback(
    registry: Any,
    records: Iterable[Record],
    ds: Any,
    batch: pd.DataFrame,
    dev: pd.DataFrame,
    test_ids: Iterable[Any],
    *,
    consumed: str | None,
    use: bool,
    dev_fraction: float,
    seed: int,
    now: float,
    settle_s: float,
    retention_s: float,
    expiry_of: Callable[[str], float | None],
) -> NightlyFeedback:
    """Record the log's new feedback as a gold version, then split the agreed gold for this run.
    `consumed`: the gold version the previous data version trained through (its rows are in it)."""
    tests = {str(t) for t in test_ids}
    dev_ids = dev[ds.ID_COLUMN].astype(str)
    known = dict(zip(dev_ids, dev[ds.GOLD_COLUMN].astype(int)))
    account = feedback_to_gold(
        registry,
        records,
        ds,
        test_ids=tests,
        known=known,
        now=now,
        settle_s=settle_s,
        retention_s=retention_s,
        expiry_of=expiry_of,
    )
    versions = registry.gold_versions()
    latest = versions[-1] if versions else None
    agreed, conflicted = registry.gold_rows(latest) if latest else ({}, {})  # as of `latest`: a label made
    # meanwhile (the queue writes at any time) waits for the next run instead of training untracked
    rows = feedback_rows(agreed, conflicted, ds, dev_fraction=dev_fraction, seed=seed, exclude=tests | set(dev_ids))
    ids = batch[ds.ID_COLUMN].astype(str).to_numpy()
    n = len(batch)
    empty = pd.DataFrame(columns=rows.train.columns)
    report = {
        "gold_version": account["gold_version"],
        "latest_gold_version": latest,
        "accepted": account["accepted"],
        "refused": account["refused"],
        "conflicts": account["conflicts"],
        "pending": account["pending"],
        "conflicted_rows": rows.conflicted,
        "used": use,
    }
    if not use or latest is None:
        return NightlyFeedback(report, empty, np.full(n, np.nan), np.zeros(n, bool), empty, consumed)
    done = gold_number(consumed) if consumed else 0
    train = rows.train.assign(_new=[gold_number(v) > done for v in rows.train["gold_version"]])
    train_ids = train[ds.ID_COLUMN].astype(str)
    label_of = dict(zip(train_ids[train["_new"]], train.loc[train["_new"], ds.GOLD_COLUMN]))
    batch_gold = np.array([label_of.get(i, np.nan) for i in ids], dtype=np.float64)
    trained_before = set(train_ids[~train["_new"]])
    hold = np.array([i in trained_before for i in ids]) | np.isin(ids, rows.dev[ds.ID_COLUMN].astype(str))
    in_batch = set(ids)
    extra = train[train["_new"] & ~train_ids.isin(in_batch)].drop(columns="_new").reset_index(drop=True)
    in_use = [*rows.dev[ds.ID_COLUMN].astype(str), *train_ids[train["_new"]]]
    report.update(
        {
            "used_through": latest,
            "by_source": dict(sorted(Counter(agreed[i]["source"] for i in in_use).items())),
            "dev_rows": int(len(rows.dev)),
            "batch_rows_gold": int((~np.isnan(batch_gold)).sum()),
            "batch_rows_held": int(hold.sum()),
            "appended_rows": int(len(extra)),
        }
    )
    return NightlyFeedback(report, rows.dev, batch_gold, hold, extra, latest)


def describe(fb: NightlyFeedback) -> str:
    """One log line of what a nightly took from the feedback gold."""
    r = fb.report
    line = (
        f"feedback gold: {len(r['accepted'])} accepted ({len(r['conflicts'])} conflicting), {len(r['refused'])} "
        f"refused, {len(r['pending'])} pending; {r['gold_version'] or 'no new gold version'}"
    )
    if not r["used"]:
        return line + "; not used (feedback_gold)"
    return line + f"; {len(fb.dev)} dev rows, {len(fb.extra)} rows appended"


def grow_dev(dev: pd.DataFrame, fb: NightlyFeedback) -> pd.DataFrame:
    """The gold dev set with the feedback gold's dev share after it (same columns and types)."""
    if not len(fb.dev):
        return dev
    return pd.concat([dev, fb.dev[dev.columns].astype(dev.dtypes.to_dict())], ignore_index=True)


def mix_in(
    fb: NightlyFeedback, batch: pd.DataFrame, gold: np.ndarray, prob: np.ndarray, held_out: np.ndarray, ds: Any
) -> tuple[pd.DataFrame, np.ndarray, np.ndarray, np.ndarray]:
    """(rows, gold, weak probabilities ([n], or [n, K]), held out) of the night with the feedback gold
    mixed in: its new labels win over the batch's gold, its dev rows and the rows that trained already
    are held out, and its new rows that are not in the batch come after the batch's (no weak label:
    every LF is left unasked)."""
    extra = fb.extra
    rows = pd.concat([batch, extra[ds.RAW_COLUMNS].astype(batch.dtypes.to_dict())], ignore_index=True)
    gold = np.concatenate(
        [np.where(np.isnan(fb.batch_gold), gold, fb.batch_gold), extra[ds.GOLD_COLUMN].to_numpy(np.float64)]
    )
    prob = np.concatenate([prob, np.full((len(extra), *prob.shape[1:]), np.nan)])
    held_out = np.concatenate([np.asarray(held_out, bool) | fb.batch_hold, np.zeros(len(extra), bool)])
    return rows, gold, prob, held_out


def trained_through(registry: Any) -> str | None:
    """The latest gold version whose training rows are in the data: the current data version's
    `feedback_gold_version`, or a held batch's (a rejected model's batch re-enters with the labels,
    and the feedback rows, it was stored with; a quarantined one is not counted: it is labeled anew)."""
    state = registry.state()
    versions = {state["current_data"]} | {
        e.get("from_version") for e in registry.held().values() if e.get("status") != "quarantined"
    }
    found = [registry.data_version_info(v).get("feedback_gold_version") for v in versions if v]
    return max((f for f in found if f), key=gold_number, default=None)
