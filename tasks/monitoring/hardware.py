"""Hardware layer: a background thread samples the task's process tree with psutil (CPU, resident
memory) and, when a GPU is present, every device through NVML (nvidia-ml-py's `pynvml`: utilization,
memory-controller utilization, memory used, PCIe throughput). Without NVML (no driver, no GPU, the
library missing) the sampler says so once, with NVML's reason, and records a `gpu_available` 0 row.

Cheap by design: one sample per `every_s` (1 s by default) on a daemon thread; each sample is a few
/proc reads per process of the tree and, on a GPU machine, a handful of NVML calls per device.
"""

from __future__ import annotations

import math
import os
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import psutil

from tasks.monitoring.store import Metric

MB = 2**20


@dataclass(frozen=True)
class GpuSample:
    index: int
    util_percent: float  # SM busy share over NVML's last sample period
    memory_bw_percent: float  # memory-controller busy share (memory bandwidth in use)
    memory_used_mb: float
    memory_total_mb: float
    pcie_tx_mb_s: float | None  # None: the device or driver does not report PCIe throughput
    pcie_rx_mb_s: float | None
    ours: bool  # a process of this task's tree runs on it


@dataclass(frozen=True)
class Sample:
    t: float  # time.time()
    cpu_percent: float  # summed over the process tree (100 = one core busy)
    rss_bytes: int  # summed over the process tree
    processes: int
    system_memory_percent: float
    gpus: tuple[GpuSample, ...] = ()


class Nvml:
    """NVML through nvidia-ml-py, or a reason why not. `available` is False without a driver or a GPU."""

    def __init__(self) -> None:
        self.available, self.reason, self._handles = False, "", []
        try:
            import pynvml
        except ImportError as exc:  # the pinned nvidia-ml-py is missing from this environment
            self.reason = f"nvidia-ml-py is not installed ({exc})"
            return
        self._nvml = pynvml
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:  # NVMLError_LibraryNotFound on a machine without a driver
            self.reason = f"NVML: {exc}"
            return
        try:
            count = pynvml.nvmlDeviceGetCount()
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        except pynvml.NVMLError as exc:
            self.reason = f"NVML: {exc}"
            self.close()
            return
        if not self._handles:
            self.reason = "NVML: no GPU on this machine"
            self.close()
            return
        self.available = True
        self.names = [_text(pynvml.nvmlDeviceGetName(h)) for h in self._handles]

    def sample(self, pids: set[int]) -> tuple[GpuSample, ...]:
        nv, out = self._nvml, []
        for i, h in enumerate(self._handles):
            util = nv.nvmlDeviceGetUtilizationRates(h)  # .gpu and .memory, percent
            mem = nv.nvmlDeviceGetMemoryInfo(h)  # bytes
            tx = rx = None
            try:  # KB/s over a 20 ms window; not every device or driver reports it
                tx = nv.nvmlDeviceGetPcieThroughput(h, nv.NVML_PCIE_UTIL_TX_BYTES) * 1024 / MB
                rx = nv.nvmlDeviceGetPcieThroughput(h, nv.NVML_PCIE_UTIL_RX_BYTES) * 1024 / MB
            except nv.NVMLError:
                pass
            try:
                running = {p.pid for p in nv.nvmlDeviceGetComputeRunningProcesses(h)}
            except nv.NVMLError:
                running = set()
            out.append(
                GpuSample(
                    i, float(util.gpu), float(util.memory), mem.used / MB, mem.total / MB, tx, rx, bool(running & pids)
                )
            )
        return tuple(out)

    def close(self) -> None:
        if getattr(self, "_nvml", None) is not None:
            try:
                self._nvml.nvmlShutdown()
            except self._nvml.NVMLError:
                pass
            self._handles = []


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


@dataclass
class HardwareSampler:
    """Samples the process tree of `pid` (default: this process) every `every_s` seconds on a thread.

    sampler = HardwareSampler(1.0).start()
    ...  # the task runs; its children (torchrun workers) are counted too
    samples = sampler.stop()
    """

    every_s: float = 1.0
    tree_every_s: float = 5.0  # listing the tree scans all of /proc (most of a sample's cost): not every time
    pid: int = field(default_factory=os.getpid)
    use_nvml: bool = True
    samples: list[Sample] = field(default_factory=list)
    nvml_reason: str = ""
    gpu_names: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._root = psutil.Process(self.pid)
        self._procs: dict[int, psutil.Process] = {}
        self._listed_at = float("-inf")
        self._started_at = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._nvml: Nvml | None = None

    def start(self) -> "HardwareSampler":
        if self.use_nvml:
            self._nvml = Nvml()
            if self._nvml.available:
                self.gpu_names = list(self._nvml.names)
            else:
                self.nvml_reason = self._nvml.reason
        else:
            self.nvml_reason = "NVML sampling turned off"
        self._started_at = time.monotonic()
        self._sample()  # primes each process's CPU counter; the thread's samples measure from here
        self._thread = threading.Thread(target=self._loop, name="sluice-hardware-sampler", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            self._sample()

    def stop(self) -> list[Sample]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._sample()
        if self._nvml is not None:
            self._nvml.close()
        return self.samples

    @property
    def gpu_available(self) -> bool:
        return bool(self.gpu_names)

    def _tree(self) -> list[psutil.Process]:
        """The root and its descendants: listed at every sample during the first `tree_every_s` (when a
        task starts its workers), then every `tree_every_s`, and at stop; in between, the processes
        last listed (one that exited is skipped when read)."""
        now = time.monotonic()
        settled = now - self._started_at >= self.tree_every_s
        if settled and now - self._listed_at < self.tree_every_s and not self._stop.is_set():
            return list(self._procs.values())
        self._listed_at = now
        try:
            procs = [self._root, *self._root.children(recursive=True)]
        except psutil.Error:
            return []
        live = {}
        for p in procs:  # keep one Process object per pid: cpu_percent() measures since its previous call
            live[p.pid] = self._procs.get(p.pid, p)
        self._procs = live
        return list(live.values())

    def _sample(self) -> None:
        cpu, rss, n = 0.0, 0, 0
        for p in self._tree():
            try:
                with p.oneshot():
                    cpu += p.cpu_percent(None)
                    rss += p.memory_info().rss
                n += 1
            except psutil.Error:  # exited between listing and reading
                continue
        gpus: tuple[GpuSample, ...] = ()
        if self._nvml is not None and self._nvml.available:
            try:
                gpus = self._nvml.sample(set(self._procs))
            except Exception as exc:  # noqa: BLE001 - a driver error must not stop a task; say it once
                self.nvml_reason = f"NVML sampling failed: {exc}"
                self._nvml.available = False
        self.samples.append(Sample(time.time(), cpu, rss, n, psutil.virtual_memory().percent, gpus))


def hardware_metrics(samples: list[Sample], nvml_reason: str = "", gpu_names: list[str] | None = None) -> list[Metric]:
    """The samples as hardware-layer metrics: a series per quantity (ts = the sample's time) and a summary.

    Summary names: cpu_percent_mean, cpu_percent_max, rss_peak_mb, processes_max, samples; per GPU
    (subject "gpu<i>"): gpu_util_mean, gpu_memory_bw_mean, gpu_memory_peak_mb, pcie_tx_mb_s_mean,
    pcie_rx_mb_s_mean; gpu_available 1/0 (subject: the GPU names, or why not available)."""
    out: list[Metric] = []
    timed = samples[1:] or samples  # the first sample primes the CPU counters (reads 0)
    for s in timed:
        ts = datetime.fromtimestamp(s.t, timezone.utc)
        out.append(Metric("hardware", "cpu_percent", s.cpu_percent, ts=ts))
        out.append(Metric("hardware", "rss_mb", s.rss_bytes / MB, ts=ts))
        out.append(Metric("hardware", "system_memory_percent", s.system_memory_percent, ts=ts))
        for g in s.gpus:
            sub = f"gpu{g.index}"
            out.append(Metric("hardware", "gpu_util", g.util_percent, subject=sub, ts=ts))
            out.append(Metric("hardware", "gpu_memory_bw", g.memory_bw_percent, subject=sub, ts=ts))
            out.append(Metric("hardware", "gpu_memory_mb", g.memory_used_mb, subject=sub, ts=ts))
            if g.pcie_tx_mb_s is not None:
                out.append(Metric("hardware", "pcie_tx_mb_s", g.pcie_tx_mb_s, subject=sub, ts=ts))
                out.append(Metric("hardware", "pcie_rx_mb_s", g.pcie_rx_mb_s, subject=sub, ts=ts))
    if timed:
        cpu = [s.cpu_percent for s in timed]
        out += [
            Metric("hardware", "cpu_percent_mean", sum(cpu) / len(cpu)),
            Metric("hardware", "cpu_percent_max", max(cpu)),
            Metric("hardware", "rss_peak_mb", max(s.rss_bytes for s in samples) / MB),
            Metric("hardware", "processes_max", float(max(s.processes for s in samples))),
            Metric("hardware", "samples", float(len(timed))),
        ]
    for index, series in sorted(gpu_series(samples).items()):
        sub = f"gpu{index}"
        out += [
            Metric("hardware", "gpu_util_mean", _mean([g.util_percent for g in series]), subject=sub),
            Metric("hardware", "gpu_memory_bw_mean", _mean([g.memory_bw_percent for g in series]), subject=sub),
            Metric("hardware", "gpu_memory_peak_mb", max(g.memory_used_mb for g in series), subject=sub),
        ]
        tx = [g.pcie_tx_mb_s for g in series if g.pcie_tx_mb_s is not None]
        rx = [g.pcie_rx_mb_s for g in series if g.pcie_rx_mb_s is not None]
        if tx:
            out += [
                Metric("hardware", "pcie_tx_mb_s_mean", _mean(tx), subject=sub),
                Metric("hardware", "pcie_rx_mb_s_mean", _mean(rx), subject=sub),
            ]
    if gpu_names:
        out.append(Metric("hardware", "gpu_available", 1.0, subject=", ".join(gpu_names)))
    else:
        out.append(Metric("hardware", "gpu_available", 0.0, subject=f"not available: {nvml_reason or 'no GPU'}"))
    return out


def gpu_series(samples: list[Sample], ours_only: bool = False) -> dict[int, list[GpuSample]]:
    out: dict[int, list[GpuSample]] = {}
    for s in samples:
        for g in s.gpus:
            if g.ours or not ours_only:
                out.setdefault(g.index, []).append(g)
    return out


def used_gpus(samples: list[Sample]) -> int:
    """Devices a process of the task ran on at any sample."""
    return len({g.index for s in samples for g in s.gpus if g.ours})


def gpu_utilizations(samples: list[Sample], devices: int = 0) -> list[float]:
    """Utilization (0..1) of each used device at each sample: what idle time is judged on. When NVML
    shows none of the task's processes (a container whose PIDs NVML does not see) but the task ran on
    `devices` GPUs, devices 0..devices-1 (where cuda:LOCAL_RANK lands) stand in."""
    used = {g.index for s in samples for g in s.gpus if g.ours} or set(range(int(devices)))
    return [g.util_percent / 100 for s in samples for g in s.gpus if g.index in used]


def peak_cores(samples: list[Sample]) -> int:
    """Whole cores the tree kept busy at its peak (at least 1)."""
    return max(1, math.ceil(max((s.cpu_percent for s in samples[1:]), default=0.0) / 100 - 1e-9))


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")
