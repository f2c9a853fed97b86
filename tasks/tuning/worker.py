"""A tuning trial's torchrun worker: the training engine with an epoch hook that scores the gold
dev set, reports it to the study (the Hyperband pruner decides whether to stop) and keeps the
study's cost ceiling.

    torchrun ... -m tasks.tuning.worker --study S --trial-id N --dev gold/dev.parquet \
        --cost-per-hour 0.04 --budget-left 1.2 <the engine's arguments>

Rank 0 scores and reports; its answer stops every rank at the same step (the engine's
EpochHook). What it saw goes to <out>/trial.json (per-epoch ROC AUC, why it stopped), which
the trial's runner (tasks/tuning/trial.py) reads to tell the study. Only the gold dev set is
scored: the gold test set stays for the model gates.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from tasks.core.files import atomic_write_json


class EpochReporter:
    """The engine's on_epoch hook for one trial (rank 0 does the work; other ranks answer False)."""

    def __init__(self, trial, features, labels, out: Path, cost_per_hour: float, budget_left: float | None):
        self.trial, self.x, self.y, self.out = trial, features, labels, out
        self.cost_per_hour, self.budget_left = cost_per_hour, budget_left
        self.t0 = time.time()
        self.epochs: list[dict] = []
        self.pruned_by: str | None = None
        self.rank = int(os.environ.get("RANK", "0"))

    def __call__(self, epoch: int, model) -> bool:
        if self.rank != 0:
            return False
        import optuna
        import torch

        from tasks.evaluation.quality import classification_metrics
        from tasks.models.losses import class_probabilities

        model.eval()
        with torch.no_grad():
            prob = class_probabilities(model(self.x)).numpy()  # P(class 1), or [n, K]
        model.train()
        auc = classification_metrics(self.y, prob)["roc_auc"]  # K classes: the macro one-vs-rest one
        seconds = time.time() - self.t0
        self.epochs.append({"epoch": epoch, "dev_roc_auc": auc, "seconds": seconds})
        try:
            self.trial.report(auc, epoch)
            if self.trial.should_prune():
                self.pruned_by = "pruner"  # Hyperband (the study's pruner)
        except (optuna.exceptions.UpdateFinishedTrialError, RuntimeError, ValueError):
            self.pruned_by = "trial_finished_elsewhere"  # failed by its heartbeat meanwhile: stop
        if self.pruned_by is None and self.budget_left is not None:
            # Another epoch would cost about what the last one did; stop before crossing the ceiling.
            per_epoch = seconds / max(1, len(self.epochs)) * self.cost_per_hour / 3600
            if seconds * self.cost_per_hour / 3600 + per_epoch > self.budget_left:
                self.pruned_by = "cost_ceiling"
        self.write()
        return self.pruned_by is not None

    def write(self) -> None:
        atomic_write_json(self.out / "trial.json", {"epochs": self.epochs, "pruned_by": self.pruned_by})


def dev_tensors(dev: str):
    """The gold dev set's features and labels (a path, or an fsspec URI in a pod)."""
    import pandas as pd
    import torch

    from tasks.datasets import load_dataset

    ds = load_dataset()
    df = pd.read_parquet(dev)
    return torch.from_numpy(ds.featurize(df)), df[ds.GOLD_COLUMN].to_numpy().astype(int)


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(description="A tuning trial's training worker (under torchrun).")
    parser.add_argument("--study", required=True)
    parser.add_argument("--trial-id", type=int, required=True, help="the storage's trial id")
    parser.add_argument("--dev", required=True, help="the gold dev set (parquet path or URI)")
    parser.add_argument("--cost-per-hour", type=float, required=True, help="this trial's resources, priced")
    parser.add_argument("--budget-left", type=float, default=-1, help="what the study may still spend (<0: none)")
    return parser.parse_known_args(argv)


def main(argv: list[str] | None = None) -> int:
    import optuna

    from tasks.core.params import load_params
    from tasks.core.settings import Settings
    from tasks.training import engine
    from tasks.tuning.study import open_study

    args, engine_argv = parse_args(argv)
    settings, p = Settings.from_env(), load_params()
    # The study as its runner opened it (same storage and pruner); the seed is irrelevant here.
    study = open_study(settings.home, args.study, p.tuning, 0, p.train.epochs, settings.tuning_storage)
    x, y = dev_tensors(args.dev)
    out = Path(engine.parse_args(engine_argv).workdir or engine.parse_args(engine_argv).out)
    budget = args.budget_left if args.budget_left >= 0 else None
    reporter = EpochReporter(optuna.trial.Trial(study, args.trial_id), x, y, out, args.cost_per_hour, budget)
    return engine.main(engine_argv, on_epoch=reporter)


if __name__ == "__main__":
    raise SystemExit(main())
