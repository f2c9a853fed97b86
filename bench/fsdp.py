"""FSDP2 benchmarks (train.strategy fsdp2), real torchrun processes on this machine (gloo, CPU).

- fsdp_memory_ratio: per-rank peak resident memory over the process's own baseline (RSS once the
  process group is up, before the model; the peak is the kernel's high-water mark, so the
  all-gather buffers, DDP's buckets and the activations are in it), FSDP2 over DDP, world 2, an MLP
  of `MEMORY_HIDDEN` (~52.8M parameters), a few steps each (`bench/fsdp_worker.py`, through the
  engine's own wrapping). Measured, not computed from tensor sizes. The larger rank of each run;
  DDP and FSDP2 alternated twice, the median of the two ratios. Goal <= 0.6.
- fsdp_step_time_ratio: FSDP2's median step time over DDP's, the same runs (the first step excluded).
  A CPU figure over gloo on loopback: it says nothing of NCCL. Goal <= 1.3.
- reshard_resume_max_loss_diff: the engine (FSDP2) on 1,300 rows, 40 steps, checkpointing at step 20;
  the checkpoint resumed at world 1 and at world 4 (from world 2) and at world 2 (from a world-1
  run): the largest |loss difference| over the 20 steps after the resume against the uninterrupted
  run. Goal <= 1e-5.
- dcp_checkpoint_overhead: the engine (FSDP2, world 2, the bench model ~9.6M parameters with its
  AdamW state, 312 steps of 64 rows), a sharded checkpoint every `DCP_EVERY` (25) steps,
  asynchronous: the share of the run's training time its step loop is blocked
  (`checkpoint_blocked_s` over `seconds`), the larger of 2 runs; the control saves synchronously
  (`bench/slow_engine.py --sync-checkpoints`) and must fail the goal (Record.controls).
  Goal <= 0.03.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.gpu_check import BENCH_HIDDEN
from bench.record import Record
from bench.slow_engine import slowed
from bench.training import _data_version, blocked_fraction
from tasks.core.files import read_json
from tasks.core.params import load_params
from tasks.training.command import entry, launcher
from tasks.training.local import run_torchrun, worker_env

MEMORY_HIDDEN = (5120, 5120, 5120)  # with 64 features: ~52.8M parameters
MEMORY_FEATURES = 64
MEMORY_STEPS = 4
MEMORY_BATCH = 64
CHECKPOINT_GOAL = 0.03
# dcp_checkpoint_overhead checkpoints every 25 steps, twice as often as the claim's 50: at 50 the
# synchronous control was blocked 2.7% of its run, under the goal, so it could not tell async from
# sync (a step here costs the same at 16 rows as at 64: its all-gathers, not its arithmetic).
DCP_EVERY = 25


def _worker_run(tmp: Path, strategy: str, k: int) -> dict:
    store = tmp / f"store-{strategy}-{k}"
    store.mkdir(parents=True)
    out = tmp / f"{strategy}-{k}.json"
    cmd = [
        *launcher(2, file_store=store),
        *entry(
            "bench.fsdp_worker",
            str(store),
            str(out),
            strategy,
            str(MEMORY_STEPS),
            str(MEMORY_BATCH),
            str(MEMORY_FEATURES),
            ",".join(map(str, MEMORY_HIDDEN)),
        ),
    ]
    subprocess.run(cmd, env={**worker_env(), "PYTHONPATH": os.pathsep.join(sys.path)}, check=True, timeout=1200)
    return read_json(out)


def memory_and_step_time(tmp: Path) -> list[Record]:
    runs: dict[str, list[dict]] = {"ddp": [], "fsdp2": []}
    for k in range(2):
        for strategy in ("ddp", "fsdp2"):
            runs[strategy].append(_worker_run(tmp, strategy, k))

    def peak(r: dict) -> float:
        return max(x["peak_over_baseline_mb"] for x in r["ranks"])

    def step_s(r: dict) -> float:
        return statistics.median(max(x["step_s"][i] for x in r["ranks"]) for i in range(1, MEMORY_STEPS))

    mem = [peak(f) / peak(d) for d, f in zip(runs["ddp"], runs["fsdp2"])]
    time_ratio = [step_s(f) / step_s(d) for d, f in zip(runs["ddp"], runs["fsdp2"])]
    loss_gap = max(abs(a - b) for d, f in zip(runs["ddp"], runs["fsdp2"]) for a, b in zip(d["losses"], f["losses"]))
    common = {"hidden": list(MEMORY_HIDDEN), "parameters": runs["ddp"][0]["parameters"], "steps": MEMORY_STEPS}
    return [
        Record(
            "fsdp_memory_ratio",
            statistics.median(mem),
            "ratio",
            "<= 0.6",
            {
                **common,
                "ratios": mem,
                "peak_over_baseline_mb": {s: [peak(r) for r in rs] for s, rs in runs.items()},
                "baseline_mb": {s: [r["ranks"][0]["baseline_mb"] for r in rs] for s, rs in runs.items()},
                "ddp_vs_fsdp2_max_loss_diff": loss_gap,
            },
        ),
        Record(
            "fsdp_step_time_ratio",
            statistics.median(time_ratio),
            "ratio",
            "<= 1.3",
            {
                **common,
                "ratios": time_ratio,
                "median_step_s": {s: [step_s(r) for r in rs] for s, rs in runs.items()},
                "batch": MEMORY_BATCH,
            },
        ),
    ]


def _losses(out: Path) -> dict[int, float]:
    return {m["step"]: m["loss"] for m in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())}


def resume_copy(src: Path, dst: Path, step: int) -> None:
    """A copy of a finished run's folder as it was when it had checkpointed `step` (later checkpoints
    and the run's outputs removed): a rerun there resumes from `step`."""
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("dist-store", "model.pt", "train_metrics.json"))
    for ckpt in (dst / "checkpoints").iterdir():
        if int(ckpt.name[5:11]) > step:
            shutil.rmtree(ckpt) if ckpt.is_dir() else ckpt.unlink()
    lines = (dst / "metrics.jsonl").read_text().splitlines()
    (dst / "metrics.jsonl").write_text("".join(x + "\n" for x in lines if json.loads(x)["step"] <= step))


def reshard_resume(version: str, tmp: Path) -> Record:
    p = load_params().train.replace(
        strategy="fsdp2", epochs=2, batch_size=64, log_every=1, checkpoint_every=20, warm_start=False
    )
    diffs = {}
    for src_world, to_world in ((2, 1), (2, 4), (1, 2)):
        src = tmp / f"resume-w{src_world}"
        if not src.exists():
            run_torchrun(version, src, p.replace(nproc=src_world))
        dst = tmp / f"resume-w{src_world}-to-w{to_world}"
        resume_copy(src, dst, 20)
        run_torchrun(version, dst, p.replace(nproc=to_world))
        m = read_json(dst / "train_metrics.json")
        if m["resumed_from"] is None or m["resumed_from"]["world_size"] != src_world:
            raise RuntimeError(f"{dst.name} did not resume from the world-{src_world} checkpoint: {m['resumed_from']}")
        a, b = _losses(src), _losses(dst)
        after = [s for s in sorted(a) if s > 20][:20]
        if len(after) < 20 or any(s not in b for s in after):
            raise RuntimeError(f"{dst.name}: expected 20 steps after the resume, got {len(after)}")
        diffs[f"{src_world}->{to_world}"] = max(abs(a[s] - b[s]) for s in after)
    return Record(
        "reshard_resume_max_loss_diff",
        max(diffs.values()),
        "loss",
        "<= 1e-05",
        {
            "per_resize": diffs,
            "steps_after_resume": 20,
            "resumed_at_step": 20,
            "hidden": list(tuple(p.value("hidden"))),
        },
    )


def dcp_checkpoint_overhead(version: str, tmp: Path) -> Record:
    ck = load_params().train.replace(
        strategy="fsdp2",
        hidden=BENCH_HIDDEN,
        nproc=2,
        batch_size=64,
        epochs=1,
        log_every=1000,
        checkpoint_every=DCP_EVERY,
        warm_start=False,
    )
    async_ = []
    for k in range(2):
        run_torchrun(version, tmp / f"dcp{k}", ck)
        async_.append(read_json(tmp / f"dcp{k}" / "train_metrics.json"))
    run_torchrun(version, tmp / "dcp-sync", ck, **slowed(sync_checkpoints=True))
    sync = read_json(tmp / "dcp-sync" / "train_metrics.json")
    fractions = [blocked_fraction(m) for m in async_]
    control = blocked_fraction(sync)
    shards = sorted(f.name for f in next((tmp / "dcp0" / "checkpoints").glob("ckpt-*/")).iterdir())
    return Record(
        "dcp_checkpoint_overhead",
        max(fractions),
        "share",
        f"<= {CHECKPOINT_GOAL}",
        {
            "blocked_fraction_per_run": fractions,
            "checkpoint_blocked_s": [m["checkpoint_blocked_s"] for m in async_],
            "seconds": [m["seconds"] for m in async_],
            "checkpoints_per_run": async_[0]["checkpoints"],
            "steps": async_[0]["steps"],
            "files_per_checkpoint": shards,
            "sync_control_blocked_fraction": control,
            "sync_control_blocked_s": sync["checkpoint_blocked_s"],
            "sync_control_seconds": sync["seconds"],
        },
        controls={"sync_control_fails_goal": control > CHECKPOINT_GOAL},
    )


def run() -> list[Record]:
    records = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        old_home = os.environ.get("SLUICE_HOME")
        os.environ["SLUICE_HOME"] = str(tmp / "home")
        try:
            records += memory_and_step_time(tmp)
            version = _data_version(tmp / "home", 20_000)
            records.append(dcp_checkpoint_overhead(version, tmp))
            small = _data_version(tmp / "home-small", 1_300)  # 20 steps of 64 rows an epoch
            os.environ["SLUICE_HOME"] = str(tmp / "home-small")
            records.append(reshard_resume(small, tmp))
        finally:
            if old_home is None:
                os.environ.pop("SLUICE_HOME", None)
            else:
                os.environ["SLUICE_HOME"] = old_home
    return records


if __name__ == "__main__":
    for r in run():
        print(json.dumps(r.to_dict()))
