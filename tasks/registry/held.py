"""Held batches: labeled partitions that a data pointer's move back left out, kept and listed.

When a challenger is rejected (evaluate, compress or the canary), the data pointer goes back to the
prod model's lineage (`rollback_to_prod_lineage`); the partitions of the rejected data version that
the lineage lacks are *held*, not dropped: registry.json `held` lists each with its stored partition
(the labels it was validated with), the version it came from and every rejection. By default a
held batch re-enters the next snapshot as it is (a canary that could not judge the challenger, its
champion failing, holds them too, but that is not a rejection); a batch rejected `limit` times in a row is marked
`quarantined` (the pipeline then moves its landing file to quarantine/ with every reason, and
`python -m tasks.quarantine --readmit BATCH` brings it back as for a contract quarantine). A batch
left out by an operator's rollback is held with `reenter` false: it waits for
`python -m tasks.quarantine --readmit BATCH`, which marks it to re-enter the next snapshot.

A re-entered batch keeps its entry (status `reentered`, not listed as held) so that a second
rejection counts as one in a row; the entry goes when the data pointer's move back keeps the batch
(it is in the prod model's lineage: its model was accepted) or when it is readmitted through landing.

Pure functions on the registry's state dict (the caller holds the transaction and commits).
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

READMIT = "python -m tasks.quarantine --readmit {batch}"


def held_batches(state: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """{batch_id: entry} of the registry state, re-entered ones included (a copy: change it, then
    assign it back)."""
    return {b: dict(e) for b, e in (state.get("held") or {}).items()}


def waiting(state: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The batches out of the current data: held (to re-enter), left out (until readmitted), quarantined."""
    return {b: e for b, e in held_batches(state).items() if e.get("status") != "reentered"}


def hold_left_out(
    state: dict[str, Any],
    left_out: list[dict[str, Any]],
    from_version: str,
    *,
    reason: str,
    rejected: bool,
    limit: int | None,
) -> list[str]:
    """Hold the partitions `left_out` of `from_version` (the pointer moved away from it). `rejected`:
    a rejected challenger's batches (they re-enter by default; the `limit`-th rejection in a row
    quarantines); else an operator's rollback (they wait for a readmit). `limit` None: the challenger
    was sent back without a judgement (a canary that could not compare it, its champion failing): the
    batches re-enter and the hold is not a rejection (it neither counts toward nor breaks a row).
    Returns the batch ids quarantined now."""
    held, now, quarantined = held_batches(state), datetime.now(timezone.utc).isoformat(), []
    for part in left_out:
        batch = part["batch_id"]
        entry = held.get(batch) or {"batch_id": batch, "partition": part, "rejections": []}
        entry["from_version"] = from_version
        if rejected and limit is None:
            entry.pop("left_out_by", None)
            entry.update(status="held", reenter=True, not_judged={"reason": reason, "at": now})
        elif rejected:
            entry.pop("left_out_by", None)  # a rejection now: its reasons say why
            entry.pop("not_judged", None)
            entry["rejections"] = [*entry["rejections"], {"reason": reason, "at": now}]
            quarantine = len(entry["rejections"]) >= limit
            entry["status"] = "quarantined" if quarantine else "held"
            entry["reenter"] = not quarantine
            if quarantine:
                quarantined.append(batch)
        else:
            entry.update(status="left_out", reenter=False, left_out_by=reason, at=now)
        entry["readmit"] = READMIT.format(batch=batch)
        held[batch] = entry
    state["held"] = held
    return quarantined


def reentering(state: dict[str, Any], have: set[str]) -> list[dict[str, Any]]:
    """The stored partitions that re-enter the next snapshot (held, marked to re-enter, not in `have`)."""
    return [
        e["partition"]
        for b, e in sorted(held_batches(state).items())
        if e.get("reenter") and e.get("status") == "held" and b not in have
    ]


def mark_reentered(state: dict[str, Any], batches: list[str], version: str) -> None:
    """These held batches are in `version` now; their rejections are kept (a next one is in a row)."""
    held = held_batches(state)
    for b in batches:
        held[b] = {**held[b], "status": "reentered", "reenter": False, "in_version": version}
    state["held"] = held


def release(state: dict[str, Any], batches: list[str]) -> None:
    """These batches are in the prod model's lineage (or back in landing): their entries go."""
    held = held_batches(state)
    for b in batches:
        held.pop(b, None)
    state["held"] = held


def mark_to_reenter(state: dict[str, Any], batch: str) -> dict[str, Any] | None:
    """A batch an operator's rollback left out re-enters the next snapshot; None if it is not
    held that way (a quarantined batch comes back through landing instead)."""
    held = held_batches(state)
    entry = held.get(batch)
    if entry is None or entry.get("status") != "left_out":
        return None
    entry.update(status="held", reenter=True, rejections=[])  # a person decided: no rejection counts
    state["held"] = held
    return entry


def describe(state: dict[str, Any]) -> list[dict[str, Any]]:
    """Each batch out of the current data, as the summary, `ops status` and the Sluice page show it:
    id, status, the version it came from, why, and what brings it back."""
    return [
        {
            "batch_id": b,
            "status": e.get("status"),
            "from_version": e.get("from_version"),
            "why": e.get("left_out_by")
            or (f"not judged: {e['not_judged']['reason']}" if e.get("not_judged") else "")
            or "; ".join(r["reason"] for r in e.get("rejections", []))
            or "unknown",
            "next": "re-enters the next snapshot" if e.get("reenter") else f"readmit: {e.get('readmit')}",
        }
        for b, e in sorted(waiting(state).items())
    ]


def listing(state: dict[str, Any]) -> list[str]:
    """One line a held batch: id, status, where it came from, why, and what brings it back."""
    return [
        f"{d['batch_id']}\t{d['status']} (from {d['from_version']})\t{d['why']}\t{d['next']}" for d in describe(state)
    ]
