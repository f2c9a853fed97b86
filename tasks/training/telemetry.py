"""Training metrics, every `log_every` steps, as JSON lines the run report can read.

Hardware: CPU utilization and resident memory of the rank (and GPU memory when on a
GPU). Algorithm: loss and its fluctuation over the window, gradient norm, the
gradient's variance across ranks (`spread.py`; also relative to ||g||^2), and the
update-to-weight ratio (||w_after - w_before|| / ||w_before||: too high diverges,
too low does not learn). Throughput: samples per second of the global batch.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import torch

from tasks.training.spread import variance_across_ranks


class TrainingMetrics:
    def __init__(self, path: Path, enabled: bool):
        self.path, self.enabled = path, enabled
        self.window: list[float] = []
        self.last = time.perf_counter()
        self._proc = None
        if enabled:
            import psutil

            self._proc = psutil.Process()
            self._proc.cpu_percent()  # start the CPU-time window

    @staticmethod
    def due(step_done: int, every: int) -> bool:
        """Whether the step about to run (number step_done + 1) closes a window."""
        return (step_done + 1) % every == 0

    def observe(self, loss: float) -> None:
        """Every step: its global loss joins the window (cheap; the rest is computed in `record`)."""
        if self.enabled:
            self.window.append(loss)

    def record(
        self,
        step: int,
        epoch: int,
        loss: float,
        model: torch.nn.Module,
        before: list[torch.Tensor],
        splits: list[int],
        batch: int,
        compute_s: float,
        local_grad_sq: list[float] | None = None,
        sums: tuple[float, float, float] | None = None,
    ) -> None:
        """On the steps that close a window (after `observe` of that step): write one line. `sums`:
        (||grad||^2, ||update||^2, ||weights before||^2) when the caller has them (a sharded model's,
        summed over every rank's shards: `sharded.square_sums`), else computed from the model here."""
        if not self.enabled:
            return
        now = time.perf_counter()
        if sums is None:
            params = list(model.parameters())
            grad_sq = sum(float(p.grad.detach().pow(2).sum()) for p in params if p.grad is not None)
            delta_sq = sum(float((p.detach() - b).pow(2).sum()) for p, b in zip(params, before))
            weight_sq = sum(float(b.pow(2).sum()) for b in before)
        else:
            grad_sq, delta_sq, weight_sq = sums
        mean = sum(self.window) / len(self.window)
        line = {
            "step": step,
            "epoch": epoch,
            "time": time.time(),
            "loss": loss,
            "loss_std": math.sqrt(sum((v - mean) ** 2 for v in self.window) / len(self.window)),
            "grad_norm": math.sqrt(grad_sq),
            "update_to_weight": math.sqrt(delta_sq / max(weight_sq, 1e-30)),
            "samples_per_s": batch * len(self.window) / max(now - self.last, 1e-9),
            "rank0_compute_s": compute_s,
            "splits": splits,
            **self._spread(local_grad_sq, grad_sq),
            "cpu_percent": self._proc.cpu_percent(),
            "rss_mb": self._proc.memory_info().rss / 2**20,
        }
        if torch.cuda.is_available():
            line["gpu_mem_mb"] = torch.cuda.max_memory_allocated() / 2**20
            line["gpu_util_percent"] = _gpu_utilization()
        with open(self.path, "a") as f:
            f.write(json.dumps(line) + "\n")
        self.window, self.last = [], now

    @staticmethod
    def _spread(local_grad_sq: list[float] | None, grad_sq: float) -> dict:
        if not local_grad_sq:
            return {}
        var = variance_across_ranks(local_grad_sq, grad_sq)
        return {"grad_var_across_ranks": var, "grad_var_relative": var / max(grad_sq, 1e-30)}


def _gpu_utilization() -> float | None:
    """This GPU's utilization over the last sample period (NVML through torch), None if unreadable."""
    try:
        return float(torch.cuda.utilization())
    except Exception:  # no NVML (pynvml missing, MIG slices): report nothing
        return None


def summarize(lines: list[dict]) -> dict | None:
    """The run report's view of metrics.jsonl: throughput, the last algorithm metrics, peak memory."""
    if not lines:
        return None
    last = lines[-1]
    rates = sorted(m["samples_per_s"] for m in lines)
    out = {
        "windows": len(lines),
        "median_samples_per_s": rates[len(rates) // 2],
        "last_grad_norm": last["grad_norm"],
        "last_update_to_weight": last["update_to_weight"],
        "last_loss_std": last["loss_std"],
        "peak_rss_mb": max(m["rss_mb"] for m in lines),
    }
    spreads = sorted(m["grad_var_relative"] for m in lines if "grad_var_relative" in m)
    if spreads:
        out["median_grad_var_relative"] = spreads[len(spreads) // 2]
    if any("gpu_mem_mb" in m for m in lines):
        out["peak_gpu_mem_mb"] = max(m.get("gpu_mem_mb", 0.0) for m in lines)
    return out
