"""The study: Optuna with a TPE sampler and a Hyperband pruner, on journal storage with heartbeats.

Storage: on the embedded default a journal file under SLUICE_HOME (tuning/<study>.journal.log,
Optuna's JournalFileBackend: appends under a file lock, so parallel trial processes can write;
never SQLite, which locks under parallel writers); on a real deployment SLUICE_TUNING_STORAGE
names a PostgreSQL URL (Optuna's RDBStorage).

Heartbeats: a running trial's process records one every `heartbeat_s`; a trial silent for
4x that (its process was killed) is failed by the next trial that starts (`fail_stale`), and
RetryHeartbeatStaleTrialCallback(max_retry=1) (Optuna 5's name for RetryFailedTrialCallback)
queues it once more with the same parameters. Optuna 5's RDBStorage has heartbeats built in;
its JournalStorage has none, so `HeartbeatJournalStorage` adds them through Optuna's own
BaseHeartbeat interface (the timestamp kept as a trial system attr).
"""

from __future__ import annotations

import time
import warnings
from pathlib import Path
from typing import Any, Callable

import optuna
from optuna.storages import BaseStorage, JournalStorage, RDBStorage, RetryHeartbeatStaleTrialCallback
from optuna.storages._heartbeat import BaseHeartbeat, get_heartbeat_thread
from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock
from optuna.trial import FrozenTrial, TrialState

from tasks.core.tuning_config import TuningParams
from tasks.tuning.space import max_epochs

HEARTBEAT_ATTR = "sluice:heartbeat"
STALE_AFTER = 4  # heartbeats missed before a running trial counts as dead
optuna.logging.set_verbosity(optuna.logging.WARNING)
# Heartbeats and fail_stale_trials are marked experimental, and Optuna warns that heartbeats are meant for
# Study.optimize; trials here are asked and told by separate tasks, which is what the heartbeat is for.
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used with Study.optimize")


class HeartbeatJournalStorage(JournalStorage, BaseHeartbeat):
    """Journal storage with Optuna's heartbeat interface: the heartbeat is a trial system attr."""

    def __init__(
        self,
        backend,
        heartbeat_interval: int,
        grace_period: int | None = None,
        stale_callback: Callable[[optuna.Study, FrozenTrial], None] | None = None,
    ):
        super().__init__(backend)
        self.heartbeat_interval = heartbeat_interval
        self.grace_period = grace_period or STALE_AFTER * heartbeat_interval
        self.stale_callback = stale_callback

    def record_heartbeat(self, trial_id: int) -> None:
        self.set_trial_system_attr(trial_id, HEARTBEAT_ATTR, time.time())

    def _get_stale_trial_ids(self, study_id: int) -> list[int]:
        now, stale = time.time(), []
        for t in self.get_all_trials(study_id, deepcopy=False, states=(TrialState.RUNNING,)):
            # A retried trial carries its predecessor's attrs: its own start counts as a heartbeat.
            started = t.datetime_start.timestamp() if t.datetime_start else now
            last = max(float(t.system_attrs.get(HEARTBEAT_ATTR, 0.0)), started)
            if now - last > self.grace_period:
                stale.append(t._trial_id)
        return stale

    def get_heartbeat_interval(self) -> int | None:
        return self.heartbeat_interval

    def get_heartbeat_stale_trial_callback(self) -> Callable[[optuna.Study, FrozenTrial], None] | None:
        return self.stale_callback


def journal_path(home: Path, study_name: str) -> Path:
    return home / "tuning" / f"{study_name}.journal.log"


def make_storage(home: Path, study_name: str, heartbeat_s: int, url: str = "") -> BaseStorage:
    """The study's storage: PostgreSQL (`url`, SLUICE_TUNING_STORAGE) or the journal file under `home`."""
    retry = RetryHeartbeatStaleTrialCallback(max_retry=1)  # Optuna 5's name for RetryFailedTrialCallback
    if url:
        return RDBStorage(url, heartbeat_interval=heartbeat_s, heartbeat_stale_trial_callback=retry)
    path = journal_path(home, study_name)
    path.parent.mkdir(parents=True, exist_ok=True)
    # An flock-free lock file (open with O_EXCL): works on any local disk, as Optuna documents.
    backend = JournalFileBackend(str(path), lock_obj=JournalFileOpenLock(str(path)))
    return HeartbeatJournalStorage(backend, heartbeat_s, stale_callback=retry)


def make_sampler(p: TuningParams, seed: int) -> optuna.samplers.TPESampler:
    """TPE, seeded; constant liar keeps parallel trials from all drawing the same point."""
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=p.n_startup_trials, constant_liar=True)


def make_pruner(p: TuningParams, full_epochs: int) -> optuna.pruners.HyperbandPruner:
    return optuna.pruners.HyperbandPruner(
        min_resource=p.min_epochs, max_resource=max(full_epochs, p.min_epochs + 1), reduction_factor=p.reduction_factor
    )


def open_study(
    home: Path, study_name: str, p: TuningParams, seed: int, default_epochs: int, url: str = ""
) -> optuna.Study:
    """Create the study, or load it from its storage (a re-triggered run resumes it: finished trials kept)."""
    return optuna.create_study(
        study_name=study_name,
        storage=make_storage(home, study_name, p.heartbeat_s, url),
        sampler=make_sampler(p, seed),
        pruner=make_pruner(p, max_epochs(p.space, default_epochs)),
        direction="maximize",
        load_if_exists=True,
    )


def fail_stale(study: optuna.Study) -> None:
    """Fail running trials whose heartbeat stopped (their retry is queued by the callback)."""
    optuna.storages.fail_stale_trials(study)


def heartbeat(study: optuna.Study, trial_id: int):
    """A started thread recording the trial's heartbeat until `.join()`."""
    thread = get_heartbeat_thread(trial_id, study._storage)
    thread.start()
    return thread


def trial_rows(study: optuna.Study) -> list[dict[str, Any]]:
    """The trial table: number, state, params, value, cost, epochs trained, retry of."""
    rows = []
    for t in study.get_trials(deepcopy=False):
        rows.append(
            {
                "number": t.number,
                "state": t.state.name,
                "params": dict(t.params),
                "value": t.value if t.state == TrialState.COMPLETE else t.user_attrs.get("best_dev_roc_auc"),
                "cost": t.user_attrs.get("cost"),
                "epochs_trained": t.user_attrs.get("epochs_trained"),
                "seconds": t.user_attrs.get("seconds"),
                "pruned_by": t.user_attrs.get("pruned_by"),
                "retry_of": t.system_attrs.get("failed_trial"),
            }
        )
    return rows


def spent(study: optuna.Study) -> float:
    """What the study's finished trials cost (the ceiling's running total)."""
    return float(sum(t.user_attrs.get("cost") or 0.0 for t in study.get_trials(deepcopy=False)))
