"""Cost-aware tuning (issue 16): Sluice's tuner (TPE + Hyperband pruning) against random search.

Three figures, each the mean over seeds (5 by default):

- tuning_cost_to_target: the ledger cost Sluice's tuner spends (trials in order) until a completed trial
  reaches AUC* - 0.002, over what random search without pruning spends to reach the same; AUC* is the
  best gold dev ROC AUC any arm of that seed reached. Seeds where random search never reaches it have
  no ratio and are left out (counted in the details); where only the tuner misses it, the tuner is
  charged all it spent. Goal <= 0.56 (the seed's 280k/500k).
- tuning_pruned_fraction: epochs the pruned study trained, over the epochs its trials would have
  trained run to their full budget; beside it the loss in best AUC against TPE without pruning over
  the same number of trials (same seed). Goal <= 0.35 at a loss <= 0.002.
- tuning_trials_to_match_random60: trials TPE (no pruning) needs to match random search's best after
  60 trials, over 60 (TPE stops at 60: a seed that never matches counts 60/60). Goal <= 0.7.

To keep the run to tens of minutes on 2 cores, trials here train IN PROCESS at world size 1 with the
engine's own pieces (tasks/training/loop.py: make_model, make_optimizer, make_loss,
accumulate_gradients) on the demo data (the bundled emails dataset's demo split: the nightly
batches' rows with their gold labels as targets, scored on the gold dev set), with Optuna's in-memory
storage: it measures the search (sampler, pruner, cost), not torchrun or the journal. A trial's cost
is the ledger's price (tasks.monitoring.cost.price_usage through tasks.tuning.trial.trial_cost) of the
CPU seconds its training used on one CPU (CPU time, not wall time: six jobs share this machine). The
details also give the cost ratio with a fixed per-trial start-up of `tuning.trial_seconds_estimate`
added to every trial, as a torchrun trial pays (pruning cannot save that part).

`python -m bench.tuning --seeds N --trials T [--out details.json]` runs a reduced setting (defaults:
5 seeds, 30 trials of Sluice's tuner); the records' details give the setting used.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from bench.record import Record

SPACE = {
    "lr": {"low": 1.0e-4, "high": 1.0e-1, "log": True},
    "weight_decay": {"low": 1.0e-6, "high": 1.0e-2, "log": True},
    "hidden": {"choices": [[8], [16], [32, 16], [64, 32]]},
    "batch_size": {"choices": [32, 64, 128, 256]},
    "epochs": {"low": 2, "high": 9},
}
RANDOM_TRIALS = 60
TARGET_MARGIN = 0.002


@dataclass
class Trial:
    value: float | None  # final dev ROC AUC (None: pruned)
    best_seen: float
    epochs_trained: int
    epochs_budget: int
    cpu_s: float


@dataclass
class Arm:
    trials: list[Trial] = field(default_factory=list)

    def best(self, n: int | None = None) -> float:
        done = [t.value for t in self.trials[:n] if t.value is not None]
        return max(done) if done else 0.0

    def cost_to(self, target: float, price) -> tuple[float, bool]:
        """Cost spent until the first completed trial at or above target (reached?)."""
        spent = 0.0
        for t in self.trials:
            spent += price(t)
            if t.value is not None and t.value >= target:
                return spent, True
        return spent, False


def demo_data():
    import numpy as np
    import torch

    from tasks.core.params import repo_params
    from tasks.datasets import load_dataset
    from tasks.datasets.demo_feed import split_demo

    ds = load_dataset()
    source = ds.load_source()
    dev, _test, _batches = split_demo(source, repo_params().demo, ds)
    gold = ds.GOLD_COLUMN
    train = source[~source[ds.ID_COLUMN].isin(dev[ds.ID_COLUMN])]
    test_ids = set(_test[ds.ID_COLUMN])
    train = train[~train[ds.ID_COLUMN].isin(test_ids)]  # never the gold test set either
    x = torch.from_numpy(ds.featurize(train))
    y = torch.from_numpy(train[gold].to_numpy().astype(np.float32))
    return x, y, torch.from_numpy(ds.featurize(dev)), dev[gold].to_numpy().astype(int)


def train_in_process(values: dict, data, seed: int, on_epoch) -> Trial:
    """One trial with the engine's pieces at world size 1; `on_epoch(epoch, auc)` True stops it."""
    import torch
    from sklearn.metrics import roc_auc_score
    from torch.utils.data import DataLoader, TensorDataset

    from tasks.core.params import repo_params
    from tasks.training.data import FeatureStats
    from tasks.training.loop import accumulate_gradients, make_loss, make_model, make_optimizer

    x, y, dev_x, dev_y = data
    p = repo_params().train.replace(**values, nproc=1, seed=seed)
    stats = FeatureStats.of([(x, y)])
    model = make_model(stats, p)
    opt, loss_fn = make_optimizer(model, p), make_loss(model, stats)
    loader = DataLoader(
        TensorDataset(x, y), batch_size=p.batch_size, shuffle=True, generator=torch.Generator().manual_seed(seed)
    )
    c0, aucs, stopped = time.process_time(), [], False
    for epoch in range(1, p.epochs + 1):
        model.train()
        for xb, yb in loader:
            opt.zero_grad(set_to_none=True)
            accumulate_gradients(model, loss_fn, xb, yb, 1.0 / len(xb))
            opt.step()
        model.eval()
        with torch.no_grad():
            aucs.append(float(roc_auc_score(dev_y, torch.sigmoid(model(dev_x)).numpy())))
        if on_epoch(epoch, aucs[-1]):
            stopped = True
            break
    return Trial(None if stopped else aucs[-1], max(aucs), len(aucs), p.epochs, time.process_time() - c0)


def run_arm(name: str, sampler, pruner, n_trials: int, data, seed: int, done=None) -> Arm:
    import optuna

    from tasks.core.params import repo_params
    from tasks.core.tuning_config import tunable
    from tasks.tuning.space import decode, suggest

    params = repo_params()
    space = params.tuning.replace(space=SPACE).space
    # A fixed name: Hyperband assigns brackets by a hash of the study name and trial number.
    study = optuna.create_study(study_name=f"{name}-{seed}", direction="maximize", sampler=sampler, pruner=pruner)
    arm = Arm()
    for _ in range(n_trials):
        trial = study.ask()
        values = decode(suggest(trial, space, tunable(params.train)), space)

        def on_epoch(epoch: int, auc: float, trial=trial) -> bool:
            if pruner is None:
                return False
            trial.report(auc, epoch)
            return trial.should_prune()

        t = train_in_process(values, data, seed, on_epoch)
        arm.trials.append(t)
        if t.value is None:
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        else:
            study.tell(trial, t.value)
        if done is not None and done(arm):
            break
    return arm


def one_seed(seed: int, n_tuner: int, data, prices, overhead_s: float) -> dict:
    import optuna

    from tasks.core.params import repo_params
    from tasks.tuning.study import make_pruner, make_sampler
    from tasks.tuning.trial import TrialResources, trial_cost

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    tp = repo_params().tuning.replace(space=SPACE)
    resources = TrialResources(cpus=1.0, memory_gb=0.5)
    price = lambda t: trial_cost(t.cpu_s, resources, prices)  # noqa: E731
    price_overhead = lambda t: trial_cost(t.cpu_s + overhead_s, resources, prices)  # noqa: E731

    random = run_arm("random", optuna.samplers.RandomSampler(seed=seed), None, RANDOM_TRIALS, data, seed)
    tuner = run_arm("tuner", make_sampler(tp, seed), make_pruner(tp, 9), n_tuner, data, seed)
    # TPE without pruning: the same trials' quality unpruned, and how soon it matches random's best of 60.
    r60 = random.best()
    enough = lambda arm: len(arm.trials) >= n_tuner and arm.best() >= r60  # noqa: E731
    tpe = run_arm("tpe", make_sampler(tp, seed), None, RANDOM_TRIALS, data, seed, done=enough)
    auc_star = max(random.best(), tuner.best(), tpe.best())
    target = auc_star - TARGET_MARGIN
    c_tuner, ok_tuner = tuner.cost_to(target, price)
    c_random, ok_random = random.cost_to(target, price)
    co_tuner, _ = tuner.cost_to(target, price_overhead)
    co_random, _ = random.cost_to(target, price_overhead)
    match = next((i + 1 for i, t in enumerate(tpe.trials) if t.value is not None and t.value >= r60), RANDOM_TRIALS)
    return {
        "seed": seed,
        "auc_star": auc_star,
        "cost_ratio": c_tuner / c_random,
        "cost_ratio_with_startup": co_tuner / co_random,
        "tuner_reached": ok_tuner,
        "random_reached": ok_random,
        "pruned_fraction": sum(t.epochs_trained for t in tuner.trials) / sum(t.epochs_budget for t in tuner.trials),
        "auc_loss": tpe.best(n_tuner) - tuner.best(),
        "pruned_trials": sum(t.value is None for t in tuner.trials),
        "trials_to_match": match,
        "random60_best": r60,
        "tuner_best": tuner.best(),
        "tpe_best": tpe.best(),
    }


def run(seeds: int = 5, n_tuner: int = 30) -> list[Record]:
    import statistics

    import torch

    from tasks.core.params import load_params

    torch.set_num_threads(1)
    params = load_params()
    data = demo_data()
    t0 = time.time()
    per_seed = [one_seed(s, n_tuner, data, params.cost, params.tuning.trial_seconds_estimate) for s in range(seeds)]
    mean = lambda k: statistics.fmean(r[k] for r in per_seed)  # noqa: E731
    setting = {"seeds": seeds, "tuner_trials": n_tuner, "random_trials": RANDOM_TRIALS, "seconds": time.time() - t0}
    loss = mean("auc_loss")
    # A seed where random search never reached the target has no ratio (it is left out and counted); a seed
    # where only the tuner missed it charges the tuner everything it spent (against it).
    judged = [r for r in per_seed if r["random_reached"]] or per_seed
    return [
        Record(
            "tuning_cost_to_target",
            statistics.fmean(r["cost_ratio"] for r in judged),
            "ratio",
            "<= 0.56",
            {
                **setting,
                "with_startup_per_trial": statistics.fmean(r["cost_ratio_with_startup"] for r in judged),
                "seeds_judged": len(judged),
                "random_missed_target": sum(not r["random_reached"] for r in per_seed),
                "tuner_missed_target": sum(not r["tuner_reached"] for r in judged),
                "per_seed": per_seed,
            },
        ),
        Record(
            "tuning_pruned_fraction",
            mean("pruned_fraction"),
            "ratio",
            "<= 0.35",
            {**setting, "auc_loss": loss, "auc_loss_goal": "<= 0.002", "pruned_trials": mean("pruned_trials")},
        ),
        Record(
            "tuning_trials_to_match_random60",
            mean("trials_to_match") / RANDOM_TRIALS,
            "ratio",
            "<= 0.7",
            {**setting, "trials": [r["trials_to_match"] for r in per_seed]},
        ),
    ]


if __name__ == "__main__":
    import argparse
    import json

    parser = argparse.ArgumentParser(description="The tuning benchmarks alone (python -m bench runs them all).")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--trials", type=int, default=30, help="trials of Sluice's tuner per seed")
    parser.add_argument("--out", help="write the records with their details (per seed) to this JSON file")
    args = parser.parse_args()
    records = run(args.seeds, args.trials)
    if args.out:
        with open(args.out, "w") as f:
            json.dump([r.to_dict() for r in records], f, indent=2)
    for rec in records:
        extra = f"  (AUC loss {rec.details['auc_loss']:+.4f})" if "auc_loss" in rec.details else ""
        print(f"{rec.name:<34}{rec.value:.3f}  goal {rec.goal}  {'pass' if rec.passed else 'MISS'}{extra}")
