"""train: distributed training on a data version (local backend: torchrun processes).

Writes runs/<run_id>/train/{model.pt, train_metrics.json, checkpoints/}. A retry
resumes from the newest valid checkpoint rather than starting over.
"""
from __future__ import annotations

from typing import Any

from tasks.params import load_params
from tasks.registry import Registry, check_version
from tasks.settings import Settings
from tasks.stepio import read_json, record_step, step_cli
from tasks.training.launch import run_torchrun


def train(run_id: str, settings: Settings, data_version: str, epochs: int | None = None) -> dict[str, Any]:
    check_version("data", data_version)
    p = load_params(overrides={"train": {"epochs": epochs}}).train
    out = settings.layout.run_dir(run_id) / "train"
    registry = Registry(settings)
    prod = registry.state()["prod_model"]
    init_from = registry.model_path(prod, "model.pt") if (p.warm_start and prod) else None
    run_torchrun(data_version, out, p, init_from=init_from)
    m = read_json(out / "train_metrics.json")
    summary = {k: m[k] for k in ("data_version", "rows", "epochs", "world_size", "final_loss", "seconds",
                                 "resumed_from_step", "steps", "n_parameters")}
    summary["warm_start"] = prod if m["warm_started_from"] else None
    return record_step(settings.layout.run_dir(run_id), "train", {**summary, "model": str(out / "model.pt")})


def main(argv: list[str] | None = None) -> int:
    def args(p):
        p.add_argument("--data-version", required=True, help="e.g. data-v3")
        p.add_argument("--epochs", type=int, help="override params.yaml train.epochs")
    return step_cli(__doc__.splitlines()[0], args, lambda a, s: train(a.run_id, s, a.data_version, a.epochs), argv)


if __name__ == "__main__":
    raise SystemExit(main())
