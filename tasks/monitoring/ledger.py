"""The cost ledger read back: per task, per run and per day, and one day's report (pure functions over
the store's cost rows, as `MetricsStore.costs()` returns them), plus the storage measurement.

A day holds the lines dated that day (a task's lines are dated by its end, UTC; storage has one line
per store per day). Billed = compute + storage + labor; "waste" (idle accelerator time, a part of
compute) and "avoided" (manual labels weak supervision spared) are shown beside the total.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import date, timedelta
from pathlib import Path
from typing import Any, Iterable

from tasks.monitoring.store import BILLED_KINDS

Row = dict[str, Any]


def billed(rows: Iterable[Row]) -> list[Row]:
    return [r for r in rows if r["kind"] in BILLED_KINDS]


def total(rows: Iterable[Row]) -> float:
    return sum(r["amount"] for r in billed(rows))


def by_kind(rows: Iterable[Row]) -> dict[str, float]:
    out: dict[str, float] = defaultdict(float)
    for r in rows:
        out[r["kind"]] += r["amount"]
    return dict(out)


def by_task(rows: Iterable[Row]) -> dict[tuple[str, str], float]:
    """Billed amount per (run, task)."""
    out: dict[tuple[str, str], float] = defaultdict(float)
    for r in billed(rows):
        out[(r["run_id"], r["task"])] += r["amount"]
    return dict(out)


def by_run(rows: Iterable[Row]) -> dict[str, float]:
    out: dict[str, float] = defaultdict(float)
    for r in billed(rows):
        out[r["run_id"]] += r["amount"]
    return dict(out)


def by_day(rows: Iterable[Row]) -> dict[str, float]:
    out: dict[str, float] = defaultdict(float)
    for r in billed(rows):
        out[r["day"]] += r["amount"]
    return dict(out)


def biggest(rows: Iterable[Row], n: int = 5) -> list[Row]:
    """The day's largest billed costs, grouped by task and item across runs, largest first."""
    rows = billed(rows)
    day_total = sum(r["amount"] for r in rows) or 1.0
    groups: dict[tuple[str, str], list[Row]] = defaultdict(list)
    for r in rows:
        groups[(r["task"], r["item"])].append(r)
    out = [
        {
            "task": task,
            "item": item,
            "amount": sum(r["amount"] for r in rs),
            "quantity": sum(r["quantity"] for r in rs),
            "unit": rs[0]["unit"],
            "runs": len({r["run_id"] for r in rs}),
            "share": sum(r["amount"] for r in rs) / day_total,
        }
        for (task, item), rs in groups.items()
    ]
    return sorted(out, key=lambda g: (-g["amount"], g["task"], g["item"]))[:n]


def waste_items(rows: Iterable[Row]) -> list[Row]:
    """Idle accelerator time per (run, task), largest first."""
    out = [
        {"run_id": r["run_id"], "task": r["task"], "gpu_hours": r["quantity"], "amount": r["amount"]}
        for r in rows
        if r["kind"] == "waste"
    ]
    return sorted(out, key=lambda w: -w["amount"])


def previous_day(day: str) -> str:
    return (date.fromisoformat(day) - timedelta(days=1)).isoformat()


def day_report(day: str, rows: list[Row], previous_rows: list[Row], currency: str, n: int = 5) -> dict[str, Any]:
    """One day of the ledger against the day before: totals, change, the biggest costs, waste, avoided."""
    kinds = by_kind(rows)
    today = total(rows)
    prev = total(previous_rows) if previous_rows else None
    runs = by_run(rows)
    return {
        "day": day,
        "currency": currency,
        "total": today,
        "by_kind": {k: kinds.get(k, 0.0) for k in ("compute", "storage", "labor", "waste", "avoided")},
        "previous_day": previous_day(day),
        "previous_total": prev,
        "change": None if prev is None else today - prev,
        "biggest": biggest(rows, n),
        "waste": kinds.get("waste", 0.0),
        "waste_items": waste_items(rows),
        "avoided": kinds.get("avoided", 0.0),
        "runs": {run: amount for run, amount in sorted(runs.items(), key=lambda kv: -kv[1])},
    }


def format_report(rep: dict[str, Any], alerts: Iterable[str] = ()) -> str:
    """The day's report as text (what the task log and SLUICE_HOME/reports/cost-<day>.txt show)."""
    cur = rep["currency"]
    k = rep["by_kind"]
    lines = [
        f"Sluice daily cost report {rep['day']} (UTC)",
        f"  total          {cur} {rep['total']:.4f}  (compute {k['compute']:.4f}, storage {k['storage']:.4f}, "
        f"labor {k['labor']:.4f})",
    ]
    if rep["previous_total"] is None:
        lines.append(f"  previous day   {rep['previous_day']}: no costs recorded")
    else:
        prev, change = rep["previous_total"], rep["change"]
        pct = f" ({change / prev:+.0%})" if prev else ""
        lines.append(f"  previous day   {rep['previous_day']}: {cur} {prev:.4f}; change {change:+.4f}{pct}")
    if rep.get("storage_bytes"):
        stores = ", ".join(f"{name} {n / 2**20:,.1f} MB" for name, n in sorted(rep["storage_bytes"].items()))
        lines.append(f"  storage        {stores} ({cur} {k['storage']:.6f} for the day)")
    lines.append(f"  waste          {cur} {rep['waste']:.4f} of idle accelerator time")
    for w in rep["waste_items"][:5]:
        lines.append(f"                 {w['task']} in {w['run_id']}: {w['gpu_hours']:.3f} GPU h, {w['amount']:.4f}")
    lines.append(f"  labor avoided  {cur} {rep['avoided']:.4f} (weak labels instead of manual ones)")
    lines.append(f"  runs           {len(rep['runs'])}")
    if rep["biggest"]:
        lines.append("  biggest costs")
        for b in rep["biggest"]:
            lines.append(
                f"    {b['task']:<22} {b['item']:<28} {cur} {b['amount']:.4f}  {b['share']:>4.0%}  "
                f"({b['quantity']:.4g} {b['unit']}, {b['runs']} run{'s' if b['runs'] != 1 else ''})"
            )
    for a in alerts:
        lines.append(f"  ALERT {a}")
    return "\n".join(lines) + "\n"


def storage_bytes(settings: Any) -> tuple[dict[str, int], list[str]]:
    """Bytes of the registry (its git objects, DVC cache and workspace) and of the DVC remote, with notes
    for what could not be measured (an S3 remote that cannot be listed from here)."""
    from tasks.monitoring.cost import directory_bytes

    layout, remote = settings.layout, settings.dvc_remote
    sizes = {"registry": directory_bytes(Path(layout.registry))}
    notes: list[str] = []
    if not remote:
        sizes["dvc_remote"] = directory_bytes(Path(layout.dvc_remote))
    elif "://" not in remote:
        sizes["dvc_remote"] = directory_bytes(Path(remote))
    else:
        try:
            import fsspec

            opts = {"client_kwargs": {"endpoint_url": settings.s3_endpoint_url}} if settings.s3_endpoint_url else {}
            sizes["dvc_remote"] = int(fsspec.filesystem("s3", **opts).du(remote))
        except Exception as exc:  # noqa: BLE001 - a remote we cannot list is noted, not a failed report
            notes.append(f"DVC remote {remote} not measured ({type(exc).__name__}: {exc})")
    return sizes, notes
