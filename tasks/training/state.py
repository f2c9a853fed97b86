"""What a training run is at a step boundary, and so what a checkpoint holds.

`TrainState` is the model, its optimizer and the bookkeeping that, with the seeded
epoch order (`batching.py`), fixes everything the next step does: the step number
(which is also the data position), the losses so far and the batch split. A
checkpoint is `state.to_dict(rng)` with every rank's RNG state; `load_dict` puts
one back, so a resumed run continues bit-identical to one that never stopped. It holds
tensors and plain values only (RNG states included), so it loads with
`torch.load(weights_only=True)` (`checkpoint.py`).
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

# At import, not inside the first checkpoint: importing DCP's helpers takes ~0.7 s, which the step
# loop would count as blocked by checkpointing.
from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

from tasks.core.params import TrainParams
from tasks.training.batching import equal_splits


def rng_state(device: torch.device) -> dict:
    """This process's random generators (torch's CPU one, the GPU's when training on one, Python's
    and numpy's global ones) as tensors and plain numbers, so a checkpoint loads as data only
    (`torch.load(weights_only=True)`)."""
    version, mt, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
        "python": {
            "version": int(version),
            "state": torch.tensor(mt, dtype=torch.int64),
            "gauss": None if gauss is None else float(gauss),
        },
        "numpy": {
            "name": str(name),
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
    }


def set_rng_state(state: dict, device: torch.device) -> None:
    torch.set_rng_state(state["torch"])
    if state["cuda"] is not None and device.type == "cuda":
        torch.cuda.set_rng_state(state["cuda"], device)
    if state.get("python") is not None:  # absent in checkpoints written before they were kept
        py = state["python"]
        random.setstate((py["version"], tuple(int(x) for x in py["state"].tolist()), py["gauss"]))
    if state.get("numpy") is not None:
        npy = state["numpy"]
        np.random.set_state(
            (npy["name"], npy["keys"].numpy().astype(np.uint32), npy["pos"], npy["has_gauss"], npy["cached_gaussian"])
        )


# Train keys that say how a training is laid out on ranks, not what it computes: a resumed run may
# change them (another world size, DDP <-> FSDP2) and continue from the checkpoint.
LAYOUT_KEYS = ("nproc", "strategy")
LAYOUT_FSDP_KEYS = ("reshard_after_forward", "activation_checkpointing")


def training_fingerprint(data_version: str, p: TrainParams, init_from: str | None) -> str:
    """A checkpoint resumes only the same training: same data version, hyperparameters and start.
    Neither the world size nor the layout keys (`LAYOUT_KEYS`: nproc, strategy; fsdp's resharding
    and activation checkpointing) count: a job resumed on another number of ranks, or switched
    between DDP and FSDP2, continues (`TrainState.load_small` says what a resize re-derives)."""
    train = p.model_dump(mode="json")
    for key in LAYOUT_KEYS:
        train.pop(key)
    train["fsdp"] = {k: v for k, v in train["fsdp"].items() if k not in LAYOUT_FSDP_KEYS}
    return hashlib.sha256(json.dumps([data_version, train, init_from], sort_keys=True).encode()).hexdigest()


def seed_rng(fingerprint: str, step: int, rank: int) -> None:
    """Every generator of this rank seeded from global state (the training, the step, the rank): what a
    resized run uses where a saved per-rank state has no counterpart."""
    seed = int(hashlib.sha256(f"{fingerprint}:{step}:{rank}".encode()).hexdigest()[:15], 16)
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed % 2**32)


@dataclass
class TrainState:
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    splits: list[int]  # rows of the global batch per rank (load balancing changes them)
    fingerprint: str  # which training this is (`training_fingerprint`)
    world: int  # ranks of this run
    strategy: str  # train.strategy of this run (ddp, fsdp2)
    step: int = 0  # optimizer steps done; with the seeded order, the data position too
    losses: list[float] = field(default_factory=list)  # mean loss of each finished epoch
    epoch_loss: list[float] = field(default_factory=lambda: [0.0, 0])  # this epoch so far: loss sum, rows

    def position(self, steps_per_epoch: int) -> tuple[int, int]:
        """(epoch, step within the epoch) of the step about to run."""
        return divmod(self.step, steps_per_epoch)

    def finish_step(self, step_loss: float, batch: int, steps_per_epoch: int) -> bool:
        """Count a step done with its global mean loss; True when it closed an epoch."""
        self.step += 1
        self.epoch_loss = [self.epoch_loss[0] + step_loss * batch, self.epoch_loss[1] + batch]
        if self.step % steps_per_epoch:
            return False
        self.losses.append(self.epoch_loss[0] / self.epoch_loss[1])
        self.epoch_loss = [0.0, 0]
        return True

    def small_dict(self, rng: list[dict]) -> dict[str, Any]:
        """Everything but the tensors of the model and optimizer: plain values and RNG states (`rng`:
        every rank's, in rank order), plus the world and strategy that wrote it (a resize is told)."""
        return {
            "step": self.step,
            "losses": self.losses,
            "epoch_loss": self.epoch_loss,
            "splits": self.splits,
            "rng": rng,
            "fingerprint": self.fingerprint,
            "world": self.world,
            "strategy": self.strategy,
        }

    def to_dict(self, rng: list[dict]) -> dict[str, Any]:
        """The single-file (DDP) checkpoint: the small state with the full model and optimizer, keyed
        by parameter name (torch.distributed.checkpoint.state_dict), so an FSDP2 run loads it too.
        Live tensors: the checkpointer copies them before training goes on."""
        return {
            **self.small_dict(rng),
            "model": get_model_state_dict(self.model),
            "optimizer": get_optimizer_state_dict(self.model, self.optimizer),
        }

    def load_dict(self, blob: dict[str, Any], rank: int, device: torch.device) -> dict[str, Any]:
        """Continue from a single-file checkpoint: weights and optimizer moments (into a plain or a
        sharded model), then the small state (`load_small`)."""
        from tasks.training.sharded import load_full

        load_full(blob, self.model, self.optimizer)
        return self.load_small(blob, rank, device)

    def load_small(self, blob: dict[str, Any], rank: int, device: torch.device) -> dict[str, Any]:
        """The step, losses and fingerprint from a checkpoint; returns where it came from (step, world,
        strategy). At the world size that wrote it, each rank gets its own saved RNG state and the
        saved splits: the run continues bit-identical. At another world size the per-rank state has no
        counterpart and is derived from global state: the splits are equal_splits of the global batch,
        each generator is seeded from (fingerprint, step, rank) (`seed_rng`). The global batch and its
        rows at each step are the same either way (the seeded epoch order), so the resized run computes
        the same mean gradient, summed in another order: within float tolerance, not bit-identical.
        No layer draws random numbers today; one that does (dropout) would differ after a resize."""
        self.step, self.fingerprint = blob["step"], blob["fingerprint"]
        self.losses, self.epoch_loss = list(blob["losses"]), list(blob["epoch_loss"])
        if blob["world"] == self.world:
            self.splits = list(blob["splits"])
            set_rng_state(blob["rng"][rank], device)
        else:
            self.splits = equal_splits(sum(blob["splits"]), self.world)
            seed_rng(self.fingerprint, self.step, rank)
        return {"step": self.step, "world_size": blob["world"], "strategy": blob["strategy"]}
