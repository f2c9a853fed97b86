"""One trial, from its slot to the study's verdict: take a slot, fail stale trials, ask the study
for parameters, train them with the engine (torchrun, the worker of tasks/tuning/worker.py),
price the resources it used with the cost ledger's prices, tell the study.

Slots: the run's `parallelism` (at most the DAG's max_active_tis_per_dag) is kept by lock files
beside the journal (tuning/<study>.slots/N.lock): a trial task waits for a free one before it
asks, so it draws its parameters only when a slot frees, as ASHA does.
"""

from __future__ import annotations

import fcntl
import time
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

from tasks.core.files import read_json
from tasks.core.log import log
from tasks.core.params import CostParams, Params, TrainParams
from tasks.core.tuning_config import tunable
from tasks.tuning.space import suggest

WORKER_MODULE = "tasks.tuning.worker"


@dataclass(frozen=True)
class TrialResources:
    """What a trial requests: torchrun processes x 1 thread here; the pod's requests on Kubernetes."""

    cpus: float
    gpus: float = 0.0
    memory_gb: float = 0.0
    backend: str = "local"


def resources_for(settings, p: Params) -> TrialResources:
    if settings.train_backend == "kubernetes":
        from kubernetes.utils import parse_quantity

        from tasks.tuning.kubernetes import trial_pod_config

        cfg = trial_pod_config(p)
        return TrialResources(
            float(parse_quantity(cfg.cpu)),
            float(cfg.gpus_per_node),
            float(parse_quantity(cfg.memory)) / 2**30,
            "kubernetes",
        )
    return TrialResources(cpus=float(p.tuning.nproc), memory_gb=0.5 * p.tuning.nproc)


def trial_cost(seconds: float, r: TrialResources, prices: CostParams, state: str = "success") -> float:
    """The ledger's price of `seconds` of these resources (tasks.monitoring.cost.price_usage)."""
    from tasks.monitoring.cost import price_usage
    from tasks.monitoring.store import TaskUsage

    now = datetime.now(timezone.utc)
    usage = TaskUsage(now, now, seconds, r.cpus, r.gpus, r.memory_gb, r.backend, state)
    return float(sum(line.amount for line in price_usage(usage, prices)))


@contextmanager
def slot(folder: Path, parallelism: int, poll_s: float = 0.5) -> Iterator[int]:
    """Hold one of `parallelism` slot locks (waiting for a free one); yields its number."""
    folder.mkdir(parents=True, exist_ok=True)
    while True:
        for n in range(parallelism):
            f = open(folder / f"{n}.lock", "a+")
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                f.close()
                continue
            try:
                yield n
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)
                f.close()
            return
        time.sleep(poll_s)


def trial_train_params(base: TrainParams, values: dict[str, Any], nproc: int) -> TrainParams:
    """train with the trial's values: no warm start (every trial starts alike), no overlay, checkpoints
    only at the end (a trial is short; a killed one is retried from its start)."""
    return base.replace(
        **values, nproc=nproc, warm_start=False, params_overlay="none", checkpoint_every=10**9, log_every=10**6
    )


def run_trial(
    study,
    p: Params,
    settings,
    *,
    data_version: str,
    dev: str,
    out_root: Path,
    seed: int,
    n_trials: int,
    cost_ceiling: float,
) -> dict[str, Any]:
    """Ask, train, tell one trial of `study` (its slot already held). Returns the trial's summary,
    or {"skipped": why} when the study has its trials or has spent its ceiling."""
    import optuna

    from tasks.tuning.study import fail_stale, heartbeat, make_sampler, spent

    fail_stale(study)
    states = [t.state for t in study.get_trials(deepcopy=False)]
    done = sum(s in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED) for s in states)
    waiting = optuna.trial.TrialState.WAITING in states  # a retry queued: it runs even past n_trials
    if done >= n_trials and not waiting:
        return {"skipped": f"the study has its {n_trials} trials"}
    used = spent(study)
    if cost_ceiling and used >= cost_ceiling:
        return {"skipped": f"the study spent {used:.4f} of its ceiling {cost_ceiling}"}
    trial = study.ask()
    # Seeded per trial number: a trial's draws do not depend on which process asked before it.
    study.sampler = make_sampler(p.tuning, seed + trial.number)
    values = suggest(trial, p.tuning.space, tunable(p.train))
    resources = resources_for(settings, p)
    # A pod trains on all its GPUs (one process each); the local backend runs tuning.nproc processes.
    tp = trial_train_params(p.train, values, int(resources.gpus) or p.tuning.nproc)
    per_hour = trial_cost(3600, resources, p.cost)
    out = out_root / f"trial-{trial.number}"
    trial.set_user_attr("train", {k: tp.value(k) for k in sorted(values)})
    log(f"trial {trial.number}: {values}")
    beat = heartbeat(study, trial._trial_id)
    t0 = time.time()
    try:
        rc = train_trial(
            study.study_name,
            trial._trial_id,
            data_version,
            dev,
            out,
            tp,
            per_hour,
            cost_ceiling - used if cost_ceiling else None,
            p.tuning.trial_timeout_s,
        )
    finally:
        beat.join()
    seconds = time.time() - t0
    return tell(study, trial, out, rc, seconds, trial_cost(seconds, resources, p.cost), values)


def train_trial(
    study_name: str,
    trial_id: int,
    data_version: str,
    dev: str,
    out: Path,
    tp: TrainParams,
    per_hour: float,
    budget_left: float | None,
    timeout_s: float = 3600,
) -> int:
    """The local backend: torchrun with the tuning worker (the engine plus the epoch hook)."""
    from tasks.core.processes import stop_groups
    from tasks.training.local import start_torchrun

    module_args = [
        "--study",
        study_name,
        "--trial-id",
        str(trial_id),
        "--dev",
        dev,
        "--cost-per-hour",
        repr(per_hour),
        "--budget-left",
        repr(-1.0 if budget_left is None else budget_left),
    ]
    proc = start_torchrun(data_version, out, tp, max_restarts=0, module=WORKER_MODULE, module_args=module_args)
    try:
        return proc.wait(timeout=timeout_s)
    except BaseException:
        stop_groups({"torchrun": proc.pid}, grace_s=10)
        proc.wait()
        raise


def tell(study, trial, out: Path, rc: int, seconds: float, cost: float, values: dict[str, Any]) -> dict[str, Any]:
    """The study's verdict from what the worker wrote: complete (final dev ROC AUC), pruned, or failed."""
    import optuna

    seen = read_json(out / "trial.json") if (out / "trial.json").exists() else {"epochs": [], "pruned_by": None}
    epochs = seen["epochs"]
    summary = {"number": trial.number, "params": values, "cost": cost, "seconds": seconds, "epochs": len(epochs)}
    try:
        for key, value in (
            ("cost", cost),
            ("seconds", seconds),
            ("epochs_trained", len(epochs)),
            ("dev_roc_auc_by_epoch", [e["dev_roc_auc"] for e in epochs]),
            ("best_dev_roc_auc", max((e["dev_roc_auc"] for e in epochs), default=None)),
            ("pruned_by", seen["pruned_by"]),
        ):
            trial.set_user_attr(key, value)
        if rc != 0 or not epochs:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            return {**summary, "state": "FAIL", "why": f"torchrun exited with {rc}"}
        if seen["pruned_by"]:
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            return {**summary, "state": "PRUNED", "pruned_by": seen["pruned_by"], "value": epochs[-1]["dev_roc_auc"]}
        study.tell(trial, epochs[-1]["dev_roc_auc"])
    except optuna.exceptions.UpdateFinishedTrialError:  # failed meanwhile by a missed heartbeat (retried)
        return {**summary, "state": "FAIL", "why": "failed by its heartbeat while running"}
    return {**summary, "state": "COMPLETE", "value": epochs[-1]["dev_roc_auc"]}
