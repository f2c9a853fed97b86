"""The hardware layer: the sampler on a real process tree, NVML's absence said plainly, and the samples'
metrics (GPU-shaped samples for the pure functions: this machine has no GPU)."""

from __future__ import annotations

import subprocess
import sys
import time

from tasks.monitoring.hardware import (
    GpuSample,
    HardwareSampler,
    Nvml,
    Sample,
    gpu_utilizations,
    hardware_metrics,
    peak_cores,
    used_gpus,
)


def test_the_sampler_sees_the_tree_and_its_memory():
    sampler = HardwareSampler(every_s=0.1).start()
    child = subprocess.Popen([sys.executable, "-c", "x = bytearray(60 * 2**20); import time; time.sleep(1.0)"])
    child.wait(timeout=60)
    time.sleep(0.2)
    samples = sampler.stop()
    assert len(samples) >= 4 and max(s.processes for s in samples) >= 2
    assert max(s.rss_bytes for s in samples) > 60 * 2**20  # the child's 60 MB counted with ours
    assert not sampler._thread.is_alive()


def test_without_nvml_the_reason_is_kept():
    nvml = Nvml()
    if nvml.available:  # a GPU machine: the real path, every device named
        assert nvml.names
        nvml.close()
        return
    assert nvml.reason.startswith(("NVML:", "nvidia-ml-py is not installed"))
    ms = hardware_metrics([], nvml.reason, [])
    (row,) = [m for m in ms if m.name == "gpu_available"]
    assert row.value == 0.0 and row.subject == f"not available: {nvml.reason}"


def gpu(index, util, ours=True, tx=1.5):
    return GpuSample(index, util, 40.0, 1000.0 + util, 80_000.0, tx, 2.5 if tx is not None else None, ours)


def test_gpu_metrics_utilization_and_usage():
    samples = [
        Sample(t, 150.0, 2**30, 3, 20.0, (gpu(0, u), gpu(1, 90.0, ours=False, tx=None)))
        for t, u in ((1.0, 0.0), (2.0, 10.0), (3.0, 80.0))
    ]
    ms = hardware_metrics(samples, "", ["NVIDIA H200", "NVIDIA H200"])
    by = {(m.name, m.subject): m.value for m in ms if m.name.endswith("_mean")}
    assert by[("gpu_util_mean", "gpu0")] == 30.0 and by[("gpu_util_mean", "gpu1")] == 90.0
    assert by[("pcie_tx_mb_s_mean", "gpu0")] == 1.5 and ("pcie_tx_mb_s_mean", "gpu1") not in by
    assert [m.value for m in ms if m.name == "gpu_util" and m.subject == "gpu0"] == [10.0, 80.0]  # 1st primes
    assert [m.subject for m in ms if m.name == "gpu_available"] == ["NVIDIA H200, NVIDIA H200"]
    assert used_gpus(samples) == 1 and gpu_utilizations(samples) == [0.0, 0.1, 0.8]
    assert peak_cores(samples) == 2
    no_pids = [Sample(1.0, 0, 0, 1, 0, (gpu(0, 50.0, ours=False),))]
    assert gpu_utilizations(no_pids) == [] and gpu_utilizations(no_pids, devices=1) == [0.5]
