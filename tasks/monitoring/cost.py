"""The cost ledger's prices applied: pure functions from usage to priced lines (docs/monitoring.md).

    compute  = measured seconds / 3600 x requested (CPUs, GPUs, memory GB) x the hour prices
    storage  = registry + DVC remote bytes (GB = 2**30 bytes, as clouds bill) x storage_gb_month / 30, per day
    labor    = incidents (quarantine, rejected model, canary rollback, manual rollback) x hours x engineer_hour
    avoided  = weak labels produced x manual_label (what hand labeling them would have cost; not billed)
    waste    = GPUs x hours x the share of samples under the utilization floor x gpu_hour (a part of compute)

Prices come from params.yaml's `cost` section (tasks.core.params.CostParams). Amounts are not rounded
here: the ledger adds up exactly and the reports round when they print.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable, Sequence

from tasks.core.params import CostParams
from tasks.monitoring.store import BILLED_KINDS, COST_KINDS, CostLine, TaskUsage

GB = 2**30
DAYS_PER_MONTH = 30  # storage_gb_month prorated per day


def price_usage(usage: TaskUsage, prices: CostParams) -> list[CostLine]:
    """A task's compute lines: its measured duration x what it requested x the prices."""
    hours = usage.seconds / 3600.0
    lines = [
        CostLine(
            "compute",
            "cpu",
            usage.cpus * hours,
            "cpu_hour",
            prices.cpu_hour,
            usage.cpus * hours * prices.cpu_hour,
            usage.day,
        )
    ]
    if usage.gpus:
        q = usage.gpus * hours
        lines.append(CostLine("compute", "gpu", q, "gpu_hour", prices.gpu_hour, q * prices.gpu_hour, usage.day))
    if usage.memory_gb:
        q = usage.memory_gb * hours
        lines.append(
            CostLine(
                "compute", "memory", q, "memory_gb_hour", prices.memory_gb_hour, q * prices.memory_gb_hour, usage.day
            )
        )
    return lines


def idle_fraction(utilizations: Sequence[float], floor: float) -> float:
    """The share of accelerator samples (utilization 0..1) under the floor; 0 without samples."""
    if not utilizations:
        return 0.0
    return sum(1 for u in utilizations if u < floor) / len(utilizations)


def waste_lines(usage: TaskUsage, idle: float, prices: CostParams) -> list[CostLine]:
    """Idle accelerator time as waste: GPUs x hours x idle share x gpu_hour (already inside compute)."""
    if not usage.gpus or idle <= 0:
        return []
    q = usage.gpus * usage.seconds / 3600.0 * idle
    return [CostLine("waste", "idle_gpu", q, "gpu_hour", prices.gpu_hour, q * prices.gpu_hour, usage.day)]


def storage_lines(bytes_by_store: dict[str, int], prices: CostParams, day: str) -> list[CostLine]:
    """One day of storage for each store's bytes (GB-days priced at storage_gb_month / 30)."""
    unit_price = prices.storage_gb_month / DAYS_PER_MONTH
    return [
        CostLine("storage", f"storage:{name}", n / GB, "gb_day", unit_price, n / GB * unit_price, day)
        for name, n in sorted(bytes_by_store.items())
    ]


def labor_avoided(labels: int, prices: CostParams, day: str) -> list[CostLine]:
    """Weak labels produced instead of manual ones: the manual price they avoided (not billed)."""
    if labels <= 0:
        return []
    return [
        CostLine(
            "avoided", "manual_labels", float(labels), "label", prices.manual_label, labels * prices.manual_label, day
        )
    ]


def incident_lines(incidents: Iterable[str], prices: CostParams, day: str) -> list[CostLine]:
    """Engineer time for each incident (a quarantine, a rejected model, a canary rollback, a manual rollback)."""
    hours = prices.engineer_hours_per_incident
    return [
        CostLine(
            "labor", f"incident:{name}", hours, "engineer_hour", prices.engineer_hour, hours * prices.engineer_hour, day
        )
        for name in incidents
    ]


def totals(lines: Iterable[CostLine | dict[str, Any]]) -> dict[str, float]:
    """Sum of amounts per kind, plus "total" (the billed kinds: compute, storage, labor)."""
    out = dict.fromkeys(COST_KINDS, 0.0)
    for line in lines:
        kind, amount = (line["kind"], line["amount"]) if isinstance(line, dict) else (line.kind, line.amount)
        out[kind] += amount
    out["total"] = sum(out[k] for k in BILLED_KINDS)
    return out


def directory_bytes(path: Path) -> int:
    """Bytes of the files under a folder (0 when it does not exist); links are not followed."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                st = os.lstat(os.path.join(root, name))
            except FileNotFoundError:  # removed while walking
                continue
            total += st.st_size
    return total
