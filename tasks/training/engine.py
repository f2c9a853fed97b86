"""Training entrypoint: the same code for 1 process, N, or M nodes under torchrun
(gloo on CPU, NCCL on GPU with bf16 autocast).

    python -m torch.distributed.run --nproc-per-node=2 ... -m tasks.training.engine \
        --data-version data-v2 --out runs/<run_id>/train --params '<json of params.train>'

Streams the data version's partitions from the registry by tag (through DVC; see
`data.py`) and trains on the weak labels (soft targets: the label source's P(spam)),
step by step: each step one global batch, split into per-rank micro-batches
(re-split by throughput when balancing), gradients accumulated and averaged exactly.
Checkpoints every `checkpoint_every` steps (asynchronously) and on SIGTERM; resumes
from the newest valid checkpoint of the same training. Only rank 0 logs and writes
files; with `--out` a URI (a pod), rank 0 publishes them there (`outputs.py`).
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import signal
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from tasks.core.params import TrainParams
from tasks.core.files import atomic_write_json
from tasks.core.log import log
from tasks.training.batching import equal_splits, rank_slice, rebalance
from tasks.training.checkpoint import AsyncCheckpointer, latest_valid_checkpoint
from tasks.training.data import StreamingVersion
from tasks.training.hierarchical import HierarchicalState, hierarchical_allreduce_hook
from tasks.training.loop import accumulate_gradients, make_loss, make_model, make_optimizer
from tasks.training.telemetry import TrainingMetrics
from tasks.training.model import save_model
from tasks.training.outputs import CHECKPOINTS, OUTPUTS, OutputStore
from tasks.training.spread import SpreadState, measured_hook


def pick_device(p: TrainParams) -> torch.device:
    """cuda:LOCAL_RANK when asked for (or "auto" and a GPU is there), else the CPU."""
    if p.device == "cuda" or (p.device == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise RuntimeError("train.device is 'cuda' but torch sees no GPU on this machine")
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
        return device
    return torch.device("cpu")


def autocast_for(p: TrainParams, device: torch.device):
    """bf16 autocast on a GPU ("auto" or "bf16"); fp32 on the CPU unless bf16 is asked for."""
    bf16 = p.precision == "bf16" or (p.precision == "auto" and device.type == "cuda")
    if not bf16:
        return contextlib.nullcontext
    return lambda: torch.autocast(device_type=device.type, dtype=torch.bfloat16)


def init_process_group(device: torch.device) -> None:
    """NCCL on GPU, gloo on CPU. On one machine the local backend names a FileStore
    (SLUICE_DIST_STORE_DIR): torch's TCPStore server always listens on every interface, a
    file store on none. Across machines (Kubernetes) the launcher's env:// rendezvous is used."""
    from datetime import timedelta

    backend = "nccl" if device.type == "cuda" else "gloo"
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    store_dir = os.environ.get("SLUICE_DIST_STORE_DIR")
    timeout = timedelta(seconds=int(os.environ.get("SLUICE_DIST_TIMEOUT_S", "300")))
    if store_dir:
        # One store per restart: a restarted group must not read the dead group's keys.
        attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        store = dist.FileStore(str(Path(store_dir) / f"store-{attempt}"), world)
        dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout)
    else:
        dist.init_process_group(backend, timeout=timeout)


def read_init_model(init_from: str, registry_url: str | None) -> dict:
    """A previous model's blob: a registered version (model-vN, read by tag through DVC, as a
    pod does) or a model.pt path."""
    import io
    import re

    if re.match(r"^model-v[1-9][0-9]*$", init_from):
        from tasks.registry import Registry
        from tasks.core.settings import Settings

        data = Registry(Settings.from_env()).read_model_artifact(init_from, "model.pt", repo_url=registry_url)
        return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    return torch.load(init_from, map_location="cpu", weights_only=True)


def warm_start(model, init_from: str | None, registry_url: str | None = None) -> str | None:
    """Load a previous model's weights (and its input scaling) when the architecture matches."""
    if not init_from:
        return None
    blob = read_init_model(init_from, registry_url)
    if blob["arch"] != model.arch:
        log(f"not warm-starting: {init_from} has architecture {blob['arch']}, this run {model.arch}")
        return None
    model.load_state_dict(blob["state_dict"])
    return init_from


def rng_state(device: torch.device) -> dict:
    return {"torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state(device) if device.type == "cuda" else None}


def set_rng_state(state: dict, device: torch.device) -> None:
    torch.set_rng_state(state["torch"])
    if state["cuda"] is not None and device.type == "cuda":
        torch.cuda.set_rng_state(state["cuda"], device)


class StopSignal:
    """SIGTERM (preemption, `kill`): finish the step, checkpoint, exit. Ranks agree on it each step."""

    def __init__(self):
        self.requested = False
        signal.signal(signal.SIGTERM, self._handle)

    def _handle(self, signum, frame):
        self.requested = True


def simulated_delay(rank: int) -> float:
    """Seconds per sample to add on this rank: SLUICE_SIMULATE_SLOW="RANK:SECONDS[,RANK:SECONDS]" ("*" for all).
    A test and benchmark knob that makes a rank slow in proportion to its micro-batch."""
    for part in filter(None, os.environ.get("SLUICE_SIMULATE_SLOW", "").split(",")):
        who, seconds = part.split(":")
        if who in ("*", str(rank)):
            return float(seconds)
    return 0.0


def train(data_version: str, out: str, p: TrainParams, registry_url: str | None = None,
          init_from: str | None = None, workdir: Path | None = None) -> dict:
    device = pick_device(p)
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        init_process_group(device)
    rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
    master = rank == 0
    stop = StopSignal()
    store = OutputStore(out, workdir)
    data = StreamingVersion(data_version, registry_url, cache_mb=p.stream_cache_mb, seed=p.seed)
    model = make_model(data.stats, p)          # same seed and data on every rank: same start, same scaling
    n, batch = len(data), min(p.batch_size, len(data))
    steps_per_epoch = max(1, n // batch)       # full global batches only; the order changes each epoch
    total_steps = p.epochs * steps_per_epoch
    splits = equal_splits(batch, world)
    ckpt_dir = store.local / CHECKPOINTS
    step, losses, epoch_loss = 0, [], [0.0, 0]
    # A checkpoint resumes only the same training: same data version, hyperparameters and start.
    fingerprint = hashlib.sha256(json.dumps([data_version, p.model_dump(mode="json"), init_from, world],
                                            sort_keys=True).encode()).hexdigest()
    if int(os.environ.get("LOCAL_RANK", "0")) == 0:
        store.fetch_checkpoints()              # one fetch per node: each pod has its own disk
    if distributed:
        dist.barrier()                         # fetched before anyone reads the folder
    found = latest_valid_checkpoint(ckpt_dir)
    if found and found[1].get("fingerprint") != fingerprint:
        if master:
            log(f"ignoring {found[0].name}: it belongs to another data version, other params or world size")
        found = None
    warm = None
    if found:
        path, state = found
        model.load_state_dict(state["model"])
        step, losses, epoch_loss, splits = state["step"], state["losses"], state["epoch_loss"], state["splits"]
        set_rng_state(state["rng"][rank], device)
        if master:
            log(f"resumed from {path.name} at step {step}/{total_steps}")
    else:
        warm = warm_start(model, init_from, registry_url)
        if warm and master:
            log(f"warm start from {warm}")
    model.to(device)
    opt = make_optimizer(model, p)
    if found:
        opt.load_state_dict(found[1]["optimizer"])
    resumed_from = step
    if master:
        log(f"{n} rows in {len(data.counts)} partition(s), {world} process(es) on {device.type}, "
            f"steps {step}->{total_steps}")

    # The only buffers are the input scaling, identical on every rank: no sync each forward
    # (it would also make fast ranks wait for slow ones before their compute, blinding the balancer).
    spread = SpreadState()
    if distributed:
        ddp = DistributedDataParallel(model, forward_sync_buffers=False,
                                      device_ids=[device.index] if device.type == "cuda" else None)
        if p.allreduce == "hierarchical":
            local = int(os.environ.get("LOCAL_WORLD_SIZE", world))
            spread.inner, spread.inner_state = hierarchical_allreduce_hook, HierarchicalState.build(local)
        ddp.register_comm_hook(spread, measured_hook)
    else:
        ddp = model
    no_sync = ddp.no_sync if distributed else contextlib.nullcontext
    autocast = autocast_for(p, device)
    loss_fn = make_loss(data.stats.spam_share).to(device)

    def publish_checkpoint(path: Path) -> None:
        store.publish(path, path.with_suffix(".sha256"))      # the checksum last: it marks it complete
        store.prune_checkpoints({f.name for f in ckpt_dir.glob("ckpt-*")})
        if (store.local / "metrics.jsonl").exists():
            store.publish(store.local / "metrics.jsonl")

    checkpointer = AsyncCheckpointer(ckpt_dir, on_saved=publish_checkpoint if store.uri else None) if master else None
    metrics = TrainingMetrics(store.local / "metrics.jsonl", enabled=master)
    delay = simulated_delay(rank)
    compute_s, t0 = 0.0, time.time()

    def checkpoint(at: int, wait: bool = False) -> None:
        """Every rank calls this at the same steps: the RNG states of all ranks are gathered (no layer
        draws random numbers today, but a resumed run must not depend on that staying true)."""
        rng = [rng_state(device)] * world
        if distributed:
            dist.all_gather_object(rng, rng_state(device))
        if master:
            checkpointer.save(at, {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": at,
                                   "losses": losses, "epoch_loss": epoch_loss, "splits": splits, "rng": rng,
                                   "fingerprint": fingerprint}, wait=wait)

    while step < total_steps:
        epoch, s = divmod(step, steps_per_epoch)
        lo, hi = rank_slice(splits, rank)
        xb, yb = data.rows(epoch, s * batch + lo, s * batch + hi)
        xb, yb = xb.to(device, non_blocking=True), yb.to(device, non_blocking=True)
        logging = metrics.due(step, p.log_every)
        before = [t.detach().clone() for t in model.parameters()] if logging else None
        spread.start(logging)
        started = time.perf_counter()
        if delay:
            time.sleep(delay * len(xb))
        opt.zero_grad(set_to_none=True)
        # Scaled so that DDP's mean over ranks is the mean over the global batch, whatever the split.
        loss_sum, ready = accumulate_gradients(ddp, loss_fn, xb, yb, world / batch, p.micro_batch_size,
                                               no_sync, autocast)
        opt.step()
        compute_s = ready - started           # this rank's own time (the backward below waits for the others)
        # One small collective per step: the global loss, whether anyone was told to stop, timing, and
        # (on logging steps) the squared norm of each rank's own gradient.
        shared = torch.tensor([loss_sum, float(stop.requested), compute_s / max(1, len(xb)), spread.local_sq],
                              dtype=torch.float64, device=device)
        per_rank = [shared.clone() for _ in range(world)]
        if distributed:
            dist.all_gather(per_rank, shared)
        per_rank = [t.tolist() for t in per_rank]
        step += 1
        step_loss = sum(t[0] for t in per_rank) / batch
        epoch_loss = [epoch_loss[0] + step_loss * batch, epoch_loss[1] + batch]
        metrics.observe(step_loss)
        if before is not None:
            metrics.record(step, epoch, step_loss, model, before, splits, batch, compute_s,
                           local_grad_sq=[t[3] for t in per_rank] if distributed else None)
        if step % steps_per_epoch == 0:
            losses.append(epoch_loss[0] / epoch_loss[1])
            epoch_loss = [0.0, 0]
            if master and (step // steps_per_epoch) % max(1, p.epochs // 10) == 0:
                log(f"epoch {step // steps_per_epoch}/{p.epochs} loss {losses[-1]:.4f} splits {splits}")
        if p.balance_every and step % p.balance_every == 0 and world > 1:
            splits = rebalance(splits, [t[2] for t in per_rank], batch)
        if any(t[1] for t in per_rank):
            checkpoint(step, wait=True)
            if master:
                log(f"stopping on SIGTERM at step {step}: checkpoint written")
            if distributed:
                dist.barrier()
            raise SystemExit(143)
        if step % p.checkpoint_every == 0 and step < total_steps:
            checkpoint(step)
    if master:
        checkpointer.close()
    result = {"data_version": data_version, "rows": int(n), "partitions": len(data.counts), "epochs": p.epochs,
              "world_size": world, "device": device.type, "steps": total_steps, "resumed_from_step": resumed_from,
              "warm_started_from": warm, "losses": losses, "final_loss": losses[-1], "final_splits": splits,
              "partition_loads": data.cache.loads, "seconds": time.time() - t0,
              "n_parameters": sum(t.numel() for t in model.parameters())}
    if master:
        save_model(model.cpu(), str(store.local / "model.pt"), {"data_version": data_version})
        atomic_write_json(store.local / "train_metrics.json", result)
        store.publish(*(store.local / name for name in OUTPUTS if (store.local / name).exists()))
        log(f"trained on {n} rows x {world} processes: final loss {losses[-1]:.4f}")
    if distributed:
        dist.barrier()
        dist.destroy_process_group()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Train the spam model on a data version (run under torchrun).")
    parser.add_argument("--data-version", required=True)
    parser.add_argument("--out", required=True,
                        help="output folder, or an fsspec URI (s3://...) to publish to from a pod")
    parser.add_argument("--workdir", type=Path, help="local working folder when --out is a URI")
    parser.add_argument("--params", required=True, help="JSON of the train section of params.yaml")
    parser.add_argument("--init-from", help="model version (model-vN) or model.pt to warm-start from, "
                                            "used when the architecture matches")
    parser.add_argument("--registry-url", default=os.environ.get("SLUICE_REGISTRY_URL"),
                        help="git URL of the registry to read the data version from (default: the local one)")
    args = parser.parse_args(argv)
    raw = json.loads(args.params)
    raw["hidden"] = tuple(raw["hidden"])
    train(args.data_version, args.out, TrainParams.model_validate(raw), args.registry_url, args.init_from or None, args.workdir)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
