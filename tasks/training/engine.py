"""Training entrypoint: the same code for 1 process or N under torchrun (gloo on CPU).

    python -m torch.distributed.run --nproc-per-node=2 ... -m tasks.training.engine \
        --data-version data-v2 --out runs/<run_id>/train --params '<json of params.train>'

Reads the data version from the registry by tag (through DVC), trains on the weak
labels (soft targets: the label source's P(spam)), checkpoints atomically every
`checkpoint_every` epochs and resumes from the newest valid checkpoint. Only rank 0
logs and writes.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from tasks.params import TrainParams
from tasks.registry import Registry
from tasks.datasets import load_dataset
from tasks.settings import Settings
from tasks.stepio import atomic_write_json, log
from tasks.training.checkpoint import latest_valid_checkpoint, save_checkpoint
from tasks.training.hierarchical import HierarchicalState, hierarchical_allreduce_hook
from tasks.training.loop import make_loss, make_model, make_optimizer, train_epoch
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


def train(data_version: str, out: Path, p: TrainParams, registry_url: str | None = None,
          init_from: str | None = None) -> dict:
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        init_process_group()
    rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
    master = rank == 0
    x, y = load_training_data(data_version, registry_url)
    model = make_model(x, p)                   # same seed and data on every rank: same start, same scaling
    opt = make_optimizer(model, p)
    ckpt_dir = out / "checkpoints"
    start_epoch, losses = 0, []
    # A checkpoint resumes only the same training: same data version and hyperparameters.
    fingerprint = hashlib.sha256(json.dumps([data_version, dataclasses.asdict(p), init_from],
                                            sort_keys=True).encode()).hexdigest()
    found = latest_valid_checkpoint(ckpt_dir)
    if found and found[1].get("fingerprint") != fingerprint:
        if master:
            log(f"ignoring {found[0].name}: it belongs to another data version or other params")
        found = None
    warm = None
    if not found:
        warm = warm_start(model, init_from)
        if warm and master:
            log(f"warm start from {warm}")
    if found:
        path, state = found
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["rng"][rank] if rank < len(state["rng"]) else state["rng"][0])
        start_epoch, losses = state["epoch"], state["losses"]
        if master:
            log(f"resumed from {path.name} at epoch {start_epoch}")

    ddp = DistributedDataParallel(model) if distributed else model
    if distributed and p.allreduce == "hierarchical":
        local = int(os.environ.get("LOCAL_WORLD_SIZE", world))
        ddp.register_comm_hook(HierarchicalState.build(local), hierarchical_allreduce_hook)
    sampler = DistributedSampler(TensorDataset(x, y), num_replicas=world, rank=rank, shuffle=True, seed=p.seed) \
        if distributed else None
    loader = DataLoader(TensorDataset(x, y), batch_size=p.batch_size // world, sampler=sampler,
                        shuffle=sampler is None, generator=torch.Generator().manual_seed(p.seed))
    loss_fn = make_loss(y)
    t0 = time.time()
    for epoch in range(start_epoch, p.epochs):
        if sampler is not None:
            sampler.set_epoch(epoch)
        total = train_epoch(ddp, loader, opt, loss_fn)
        if distributed:
            dist.all_reduce(total)
        losses.append(float(total[0] / total[1]))
        if master and (epoch + 1) % max(1, p.epochs // 10) == 0:
            log(f"epoch {epoch + 1}/{p.epochs} loss {losses[-1]:.4f}")
        if (epoch + 1) % p.checkpoint_every == 0 and epoch + 1 < p.epochs:
            rngs = [torch.get_rng_state()]
            if distributed:
                rngs = [None] * world
                dist.all_gather_object(rngs, torch.get_rng_state())
            if master:
                save_checkpoint(ckpt_dir, epoch + 1, {"model": model.state_dict(), "optimizer": opt.state_dict(),
                                                      "epoch": epoch + 1, "losses": losses, "rng": rngs,
                                                      "fingerprint": fingerprint})
            if distributed:
                dist.barrier()
    metrics = {"data_version": data_version, "rows": int(len(x)), "epochs": p.epochs, "world_size": world,
               "resumed_from_epoch": start_epoch, "warm_started_from": warm, "losses": losses, "final_loss": losses[-1],
               "seconds": time.time() - t0, "n_parameters": sum(t.numel() for t in model.parameters())}
    if master:
        save_model(model, str(out / "model.pt"), {"data_version": data_version})
        atomic_write_json(out / "train_metrics.json", metrics)
        log(f"trained on {len(x)} rows x {world} processes: final loss {losses[-1]:.4f}")
    if distributed:
        dist.barrier()
        dist.destroy_process_group()
    return metrics


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
