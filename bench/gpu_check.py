"""GPU check: the bench model (~9.6M parameters) trained with NCCL and bf16 autocast on every
visible GPU, through the engine's own device, process-group and autocast code, under DDP and
then under FSDP2 (`--strategy`: the engine's `sharded.shard_model`, bf16 parameters with fp32
gradient reduction; sharded even on one GPU, over a mesh of one). Prints throughput and model
FLOPs utilization (MFU) of each, and FSDP2's peak GPU memory beside DDP's. Bounded to a few minutes.

    python -m bench.gpu_check                   # all visible GPUs, NCCL, bf16: DDP, then FSDP2
    python -m bench.gpu_check --device cpu --nproc 2 --steps 5    # the same path on CPU (gloo, fp32)

MFU = achieved FLOP/s over the GPU's peak dense bf16 FLOP/s. Training FLOPs of an MLP
are 6 per parameter per sample (2 forward, 4 backward); the peak comes from a table
of known GPUs or --peak-tflops. CI never has a GPU: without one, and without
--device cpu, the script says so and exits 2 having measured nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from tasks.core.params import load_params

BENCH_HIDDEN = load_params().scaling.bench_hidden  # params.yaml: the benchmark model profile
N_FEATURES = 20
# Dense bf16 peak TFLOP/s (no sparsity), per GPU, from the vendors' data sheets.
PEAK_BF16_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L40S": 362.0, "L4": 121.0, "A10": 125.0}


def peak_tflops(device_name: str) -> float | None:
    for key, value in PEAK_BF16_TFLOPS.items():
        if key in device_name:
            return value
    return None


def _worker(rank: int, world: int, args: argparse.Namespace, store_dir: str, out: str) -> None:
    import torch
    from torch.nn.parallel import DistributedDataParallel

    from tasks.core.params import repo_params
    from tasks.training.data import FeatureStats
    from tasks.training.engine import autocast_for, init_process_group, pick_device
    from tasks.training.loop import accumulate_gradients, make_loss, make_model, make_optimizer
    from tasks.training.sharded import shard_model

    os.environ.update({"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank)})
    torch.set_num_threads(1)
    p = repo_params().train.replace(
        hidden=BENCH_HIDDEN, nproc=world, batch_size=args.batch * world, device=args.device, precision="auto"
    )
    fsdp = args.strategy == "fsdp2"
    if fsdp:  # bf16 parameters, fp32 reduction on a GPU; fp32 on the CPU (slower there in bf16)
        precision = "bf16" if args.device == "cuda" else "fp32"
        p = p.replace(strategy="fsdp2", fsdp={**p.fsdp.model_dump(), "mixed_precision": precision})
    device = pick_device(p)
    if world > 1 or fsdp:  # FSDP2 needs a process group even for one rank (a mesh of one)
        init_process_group(device, store_dir)
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(args.batch, N_FEATURES, generator=g).to(device)
    y = (torch.rand(args.batch, generator=g) < 0.1).float().to(device)
    stats = FeatureStats(args.batch, torch.zeros(N_FEATURES), torch.ones(N_FEATURES), (0.9, 0.1))
    model = make_model(stats, p).to(device)
    no_sync = contextlib.nullcontext
    if fsdp:
        no_sync, ddp = shard_model(model, p, device, distributed=True), model
    elif world > 1:
        ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    else:
        ddp = model
    opt, loss_fn = make_optimizer(model, p), make_loss(model, stats, device)
    # FSDP2's MixedPrecisionPolicy casts the parameters itself: no autocast on top.
    autocast = contextlib.nullcontext if fsdp else autocast_for(p, device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def step():
        opt.zero_grad(set_to_none=True)
        accumulate_gradients(ddp, loss_fn, x, y, 1.0 / args.batch, 0, no_sync, autocast)
        opt.step()

    for _ in range(args.warmup):
        step()
    sync()
    t0, deadline = time.perf_counter(), time.perf_counter() + args.budget_s
    steps = 0
    while steps < args.steps and time.perf_counter() < deadline:
        step()
        steps += 1
    sync()
    seconds = time.perf_counter() - t0
    if rank == 0:
        params = sum(t.numel() for t in model.parameters())
        samples_per_s = steps * args.batch * world / seconds
        achieved = 6 * params * samples_per_s / 1e12
        name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
        peak = args.peak_tflops or (peak_tflops(name) if device.type == "cuda" else None)
        result = {
            "device": name,
            "strategy": args.strategy,
            "mixed_precision": p.fsdp.mixed_precision if fsdp else None,
            "processes": world,
            "backend": "nccl" if device.type == "cuda" else "gloo",
            "bf16_autocast": autocast is not contextlib.nullcontext,
            "bf16_parameters": fsdp and p.fsdp.mixed_precision == "bf16",
            "parameters": params,
            "batch_per_process": args.batch,
            "steps": steps,
            "seconds": seconds,
            "samples_per_s": samples_per_s,
            "achieved_tflops": achieved,
            "peak_tflops": peak,
            "mfu": achieved / (peak * world) if peak else None,
            "gpu_mem_mb": torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None,
        }
        Path(out).write_text(json.dumps(result))
    if world > 1 or fsdp:
        from tasks.training.peers import leave_process_group

        del step, ddp  # DDP (and the step that closes over it), before the group goes
        leave_process_group()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--nproc", type=int, help="processes (default: every visible GPU; 1 on CPU)")
    parser.add_argument("--batch", type=int, default=8192, help="samples per process per step")
    parser.add_argument("--steps", type=int, default=200, help="timed steps (stops earlier at --budget-s)")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--budget-s", type=float, default=120.0, help="time limit of the timed loop")
    parser.add_argument(
        "--strategy", choices=["ddp", "fsdp2", "both"], default="both", help="DDP, FSDP2 or both in turn"
    )
    parser.add_argument("--peak-tflops", type=float, help="peak dense bf16 TFLOP/s per device, if not in the table")
    args = parser.parse_args(argv)

    import torch
    import torch.multiprocessing as mp

    if args.device == "cuda" and not torch.cuda.is_available():
        print(
            "gpu_check: no NVIDIA GPU visible to torch (CUDA build: %s); nothing measured"
            % (torch.version.cuda or "no"),
            file=sys.stderr,
        )
        return 2
    world = args.nproc or (torch.cuda.device_count() if args.device == "cuda" else 1)
    # One machine: collectives' bootstrap sockets stay on loopback (the store is a file).
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")
    for strategy in ("ddp", "fsdp2") if args.strategy == "both" else (args.strategy,):
        case = argparse.Namespace(**{**vars(args), "strategy": strategy})
        with tempfile.TemporaryDirectory() as tmp:
            out, store = str(Path(tmp) / "result.json"), str(Path(tmp) / "store")
            Path(store).mkdir()
            if world == 1:
                _worker(0, 1, case, store, out)
            else:
                mp.spawn(_worker, args=(world, case, store, out), nprocs=world, join=True)
            result = json.loads(Path(out).read_text())
        mfu = f"{result['mfu']:.1%}" if result["mfu"] is not None else "n/a (peak unknown)"
        bf16 = result["bf16_parameters"] if strategy == "fsdp2" else result["bf16_autocast"]
        print(
            f"gpu_check: {result['device']} x{world} {result['backend']} {strategy} bf16={bf16}: "
            f"{result['samples_per_s']:,.0f} samples/s, {result['achieved_tflops']:.2f} TFLOP/s, MFU {mfu}"
        )
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
