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

from tasks.core.params import TrainParams


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


def training_fingerprint(data_version: str, p: TrainParams, init_from: str | None, world: int) -> str:
    """A checkpoint resumes only the same training: same data version, hyperparameters, start and world size."""
    return hashlib.sha256(
        json.dumps([data_version, p.model_dump(mode="json"), init_from, world], sort_keys=True).encode()
    ).hexdigest()


@dataclass
class TrainState:
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    splits: list[int]  # rows of the global batch per rank (load balancing changes them)
    fingerprint: str  # which training this is (`training_fingerprint`)
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

    def to_dict(self, rng: list[dict]) -> dict[str, Any]:
        """The checkpoint; `rng` is every rank's RNG state in rank order. Live tensors: the
        checkpointer copies them before training goes on."""
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "step": self.step,
            "losses": self.losses,
            "epoch_loss": self.epoch_loss,
            "splits": self.splits,
            "rng": rng,
            "fingerprint": self.fingerprint,
        }

    def load_dict(self, blob: dict[str, Any], rank: int, device: torch.device) -> None:
        """Continue from a checkpoint: weights and optimizer moments in place, this rank's RNG state."""
        self.model.load_state_dict(blob["model"])
        self.optimizer.load_state_dict(blob["optimizer"])
        self.step, self.splits, self.fingerprint = blob["step"], list(blob["splits"]), blob["fingerprint"]
        self.losses, self.epoch_loss = list(blob["losses"]), list(blob["epoch_loss"])
        set_rng_state(blob["rng"][rank], device)
