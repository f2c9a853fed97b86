"""Training entrypoint: the same code for 1 process or N under torchrun (gloo on CPU).

    python -m torch.distributed.run --nproc-per-node=2 ... -m tasks.training.engine \
        --data-version data-v2 --out runs/<run_id>/train --params '<json of params.train>'

Reads the data version from the registry by tag (through DVC) and trains on the
weak labels (soft targets: the label source's P(spam)), step by step: each step one
global batch, split into per-rank micro-batches (re-split by throughput when
balancing), gradients accumulated and averaged exactly. Checkpoints every
`checkpoint_every` steps (asynchronously) and on SIGTERM; resumes from the newest
valid checkpoint of the same training. Only rank 0 logs and writes files.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import json
import os
import signal
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from tasks.params import TrainParams
from tasks.registry import Registry
from tasks.datasets import load_dataset
from tasks.settings import Settings
from tasks.stepio import atomic_write_json, log
from tasks.training.batching import epoch_permutation, equal_splits, rank_rows, rebalance
from tasks.training.checkpoint import AsyncCheckpointer, latest_valid_checkpoint
from tasks.training.hierarchical import HierarchicalState, hierarchical_allreduce_hook
from tasks.training.loop import accumulate_gradients, make_loss, make_model, make_optimizer
from tasks.training.metrics import TrainingMetrics
from tasks.training.model import save_model


def init_process_group() -> None:
    """gloo on CPU. On one machine the local backend names a FileStore (SLUICE_DIST_STORE_DIR):
    torch's TCPStore server always listens on every interface, a file store on none. Across
    machines (Kubernetes) the launcher's env:// rendezvous is used."""
    from datetime import timedelta

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    store_dir = os.environ.get("SLUICE_DIST_STORE_DIR")
    timeout = timedelta(seconds=int(os.environ.get("SLUICE_DIST_TIMEOUT_S", "300")))
    if store_dir:
        # One store per restart: a restarted group must not read the dead group's keys.
        attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        store = dist.FileStore(str(Path(store_dir) / f"store-{attempt}"), world)
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world, timeout=timeout)
    else:
        dist.init_process_group("gloo", timeout=timeout)


def load_training_data(data_version: str, registry_url: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Features and soft targets of every labeled row (rows where all LFs abstained are left out).

    `registry_url` (a clone URL of the registry): read by tag from the DVC remote, as a pod
    with no disk shared with the pipeline does; default: the local registry."""
    df = Registry(Settings.from_env()).read_data_version(data_version, repo_url=registry_url)
    df = df[df["label"] != -1]
    if df.empty:
        raise ValueError(f"data version {data_version} has no labeled rows to train on")
    return torch.from_numpy(load_dataset().featurize(df)), torch.from_numpy(df["label_prob"].to_numpy(np.float32))


def warm_start(model, init_from: str | None) -> str | None:
    """Load a previous model's weights (and its input scaling) when the architecture matches."""
    if not init_from:
        return None
    blob = torch.load(init_from, map_location="cpu", weights_only=True)
    if blob["arch"] != model.arch:
        log(f"not warm-starting: {init_from} has architecture {blob['arch']}, this run {model.arch}")
        return None
    model.load_state_dict(blob["state_dict"])
    return init_from


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


def train(data_version: str, out: Path, p: TrainParams, registry_url: str | None = None,
          init_from: str | None = None) -> dict:
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        init_process_group()
    rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
    master = rank == 0
    stop = StopSignal()
    x, y = load_training_data(data_version, registry_url)
    model = make_model(x, p)                   # same seed and data on every rank: same start, same scaling
    opt = make_optimizer(model, p)
    n, batch = len(x), min(p.batch_size, len(x))
    steps_per_epoch = max(1, n // batch)       # full global batches only; the permutation changes each epoch
    total_steps = p.epochs * steps_per_epoch
    splits = equal_splits(batch, world)
    ckpt_dir = out / "checkpoints"
    step, losses, epoch_loss = 0, [], [0.0, 0]
    # A checkpoint resumes only the same training: same data version, hyperparameters and start.
    fingerprint = hashlib.sha256(json.dumps([data_version, dataclasses.asdict(p), init_from, world],
                                            sort_keys=True).encode()).hexdigest()
    found = latest_valid_checkpoint(ckpt_dir)
    if found and found[1].get("fingerprint") != fingerprint:
        if master:
            log(f"ignoring {found[0].name}: it belongs to another data version, other params or world size")
        found = None
    warm = None
    if found:
        path, state = found
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        step, losses, epoch_loss, splits = state["step"], state["losses"], state["epoch_loss"], state["splits"]
        if master:
            log(f"resumed from {path.name} at step {step}/{total_steps}")
    else:
        warm = warm_start(model, init_from)
        if warm and master:
            log(f"warm start from {warm}")
    resumed_from = step

    # The only buffers are the input scaling, identical on every rank: no sync each forward
    # (it would also make fast ranks wait for slow ones before their compute, blinding the balancer).
    ddp = DistributedDataParallel(model, forward_sync_buffers=False) if distributed else model
    if distributed and p.allreduce == "hierarchical":
        local = int(os.environ.get("LOCAL_WORLD_SIZE", world))
        ddp.register_comm_hook(HierarchicalState.build(local), hierarchical_allreduce_hook)
    no_sync = ddp.no_sync if distributed else contextlib.nullcontext
    loss_fn = make_loss(y)
    checkpointer = AsyncCheckpointer(ckpt_dir) if master else None
    metrics = TrainingMetrics(out / "metrics.jsonl", enabled=master)
    delay = simulated_delay(rank)
    perm, perm_epoch, compute_s, t0 = None, -1, 0.0, time.time()

    def checkpoint(at: int, wait: bool = False) -> None:
        if master:
            checkpointer.save(at, {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": at,
                                   "losses": losses, "epoch_loss": epoch_loss, "splits": splits,
                                   "fingerprint": fingerprint}, wait=wait)

    while step < total_steps:
        epoch, s = divmod(step, steps_per_epoch)
        if epoch != perm_epoch:
            perm, perm_epoch = epoch_permutation(n, p.seed, epoch), epoch
        rows = rank_rows(perm[s * batch:(s + 1) * batch], splits, rank)
        before = [t.detach().clone() for t in model.parameters()] if metrics.due(step, p.log_every) else None
        started = time.perf_counter()
        if delay:
            time.sleep(delay * len(rows))
        opt.zero_grad(set_to_none=True)
        # Scaled so that DDP's mean over ranks is the mean over the global batch, whatever the split.
        loss_sum, ready = accumulate_gradients(ddp, loss_fn, x[rows], y[rows], world / batch, p.micro_batch_size,
                                               no_sync)
        opt.step()
        compute_s = ready - started           # this rank's own time (the backward below waits for the others)
        # One small collective per step: the global loss, whether anyone was told to stop, and timing.
        shared = torch.tensor([loss_sum, float(stop.requested), compute_s / max(1, len(rows))], dtype=torch.float64)
        per_rank = [shared.clone() for _ in range(world)]
        if distributed:
            dist.all_gather(per_rank, shared)
        step += 1
        step_loss = sum(float(t[0]) for t in per_rank) / batch
        epoch_loss = [epoch_loss[0] + step_loss * batch, epoch_loss[1] + batch]
        if before is not None:
            metrics.record(step, epoch, step_loss, model, before, splits, batch, compute_s)
        if step % steps_per_epoch == 0:
            losses.append(epoch_loss[0] / epoch_loss[1])
            epoch_loss = [0.0, 0]
            if master and (step // steps_per_epoch) % max(1, p.epochs // 10) == 0:
                log(f"epoch {step // steps_per_epoch}/{p.epochs} loss {losses[-1]:.4f} splits {splits}")
        if p.balance_every and step % p.balance_every == 0 and world > 1:
            splits = rebalance(splits, [float(t[2]) for t in per_rank], batch)
        if any(float(t[1]) for t in per_rank):
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
    result = {"data_version": data_version, "rows": int(n), "epochs": p.epochs, "world_size": world,
              "steps": total_steps, "resumed_from_step": resumed_from, "warm_started_from": warm,
              "losses": losses, "final_loss": losses[-1], "final_splits": splits,
              "seconds": time.time() - t0, "n_parameters": sum(t.numel() for t in model.parameters())}
    if master:
        save_model(model, str(out / "model.pt"), {"data_version": data_version})
        atomic_write_json(out / "train_metrics.json", result)
        log(f"trained on {n} rows x {world} processes: final loss {losses[-1]:.4f}")
    if distributed:
        dist.barrier()
        dist.destroy_process_group()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Train the spam model on a data version (run under torchrun).")
    parser.add_argument("--data-version", required=True)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--params", required=True, help="JSON of the train section of params.yaml")
    parser.add_argument("--init-from", help="model.pt to warm-start from (used when the architecture matches)")
    parser.add_argument("--registry-url", default=os.environ.get("SLUICE_REGISTRY_URL"),
                        help="git URL of the registry to read the data version from (default: the local one)")
    args = parser.parse_args(argv)
    raw = json.loads(args.params)
    raw["hidden"] = tuple(raw["hidden"])
    args.out.mkdir(parents=True, exist_ok=True)
    train(args.data_version, args.out, TrainParams(**raw), args.registry_url, args.init_from)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
