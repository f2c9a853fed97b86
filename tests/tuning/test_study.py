"""Real trials (torchrun workers of the engine) on a tiny study: reproducibility, a killed trial
failed by its heartbeat and retried, a re-triggered run resuming the study from its journal."""

import json
import os
import signal
import subprocess
import sys
import time

import optuna
import psutil
import pytest

from tasks.core.context import StepContext
from tasks.core.settings import REPO_ROOT
from tasks.core.wait import wait_until
from tasks.registry.tuning import TunedOverlays
from tasks.tune_plan import tune_plan
from tasks.tune_report import tune_report
from tasks.tune_trial import tune_trial
from tasks.tuning.study import fail_stale, open_study
from tests.tuning.conftest import tiny_overrides, tiny_sets

pytestmark = pytest.mark.slow


def _study(settings, name, **more):
    ctx = StepContext.create("probe", settings, tiny_overrides(**more))
    return open_study(settings.home, name, ctx.params.tuning, 7, ctx.params.train.epochs)


def _run_study(settings, run_id, name, n_trials):
    ctx = StepContext.create(run_id, settings, tiny_overrides(n_trials))
    plan = tune_plan(ctx, data_version="data-v1", study_name=name)
    return [tune_trial(ctx, tune_plan=plan, index=i) for i in plan.slots], plan


@pytest.mark.extended
def test_seeded_study_with_parallelism_one_gives_the_same_trials_twice(tuning_home):
    first, _ = _run_study(tuning_home, "rep-a", "same-a", 2)
    second, _ = _run_study(tuning_home, "rep-b", "same-b", 2)
    assert [t.state for t in first] == ["COMPLETE", "COMPLETE"]
    assert [(t.params, t.value, t.epochs) for t in first] == [(t.params, t.value, t.epochs) for t in second]
    assert first[0].params != first[1].params  # the second came from TPE (n_startup_trials=1), not a repeat
    assert all(0.5 < t.value <= 1.0 and t.cost > 0 for t in first)


def test_stale_heartbeat_fails_the_trial_and_queues_one_retry(tuning_home):
    study = _study(tuning_home, "stale", heartbeat_s=1)
    trial = study.ask({"lr": optuna.distributions.FloatDistribution(1e-3, 3e-2, log=True)})
    study._storage.record_heartbeat(trial._trial_id)
    fail_stale(study)
    assert study.trials[0].state.name == "RUNNING"  # beating: kept
    time.sleep(4.5)  # 4 heartbeats missed
    fail_stale(study)
    states = [t.state.name for t in study.trials]
    assert states == ["FAIL", "WAITING"]
    assert study.trials[1].params == study.trials[0].params
    assert study.trials[1].system_attrs["failed_trial"] == 0
    retry = study.ask()
    assert retry.number == 1 and retry.params == study.trials[0].params
    # max_retry=1: the retry dies too (no heartbeat at all) and is not queued again.
    time.sleep(4.5)
    fail_stale(study)
    assert [t.state.name for t in study.trials] == ["FAIL", "FAIL"]


def _kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL the trial task and its torchrun launcher and workers (their own session): a lost machine."""
    victims = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    for group in {os.getpgid(p.pid) for p in victims if p.is_running()}:
        os.killpg(group, signal.SIGKILL)
    proc.wait(timeout=10)
    psutil.wait_procs([p for p in victims if p.is_running()], timeout=10)


@pytest.mark.extended
def test_killed_trial_is_failed_retried_and_a_retriggered_run_resumes_the_study(tuning_home):
    """Run 1: trial 0 completes, trial 1 is SIGKILLed mid-training (the DAG run dies with it).
    Run 2, same study name: the plan keeps trial 0 and plans one more slot; that trial fails trial 1
    by its stopped heartbeat and trains its retry (same parameters) to the end."""
    long = {"lr": {"low": 1.0e-3, "high": 3.0e-2, "log": True}, "epochs": {"low": 60, "high": 61}}
    ctx = StepContext.create("run-1", tuning_home, tiny_overrides(2))
    plan = tune_plan(ctx, data_version="data-v1", study_name="resume")
    assert plan.slots == [0, 1]
    assert tune_trial(ctx, tune_plan=plan, index=0).state == "COMPLETE"
    before = _study(tuning_home, "resume").trials[0]

    sets = tiny_sets(2, **{"tuning.space": json.dumps(long)})
    proc = subprocess.Popen(
        [sys.executable, "-m", "tasks.tune_trial", "--run-id", "run-1", "--index", "1", *sets],
        cwd=REPO_ROOT,
        env={**os.environ, **tuning_home.child_env()},
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    progress = ctx.run_dir / "tuning" / "trial-1" / "trial.json"
    try:
        wait_until(lambda: progress.exists() and json.loads(progress.read_text())["epochs"], timeout_s=120)
    finally:
        _kill_tree(proc)
    seen = json.loads(progress.read_text())["epochs"]
    assert 1 <= len(seen) < 60  # killed mid-training
    assert [t.state.name for t in _study(tuning_home, "resume").trials] == ["COMPLETE", "RUNNING"]

    time.sleep(4.5)  # the dead trial misses 4 heartbeats
    ctx2 = StepContext.create("run-2", tuning_home, tiny_overrides(2))
    plan2 = tune_plan(ctx2, data_version="data-v1", study_name="resume")
    assert (plan2.finished, plan2.slots) == (1, [0])  # trial 0 kept; one trial to go
    rec = tune_trial(ctx2, tune_plan=plan2, index=0)
    trials = _study(tuning_home, "resume").trials
    assert [t.state.name for t in trials] == ["COMPLETE", "FAIL", "COMPLETE"]
    assert rec.number == 2 and trials[2].params == trials[1].params and trials[2].system_attrs["failed_trial"] == 1
    assert trials[0].params == before.params and trials[0].value == before.value
    assert not [p for p in psutil.process_iter(["cmdline"]) if "trial-1" in " ".join(p.info["cmdline"] or [])]

    report = tune_report(ctx2, tune_plan=plan2)
    assert report.trials == {"COMPLETE": 2, "FAIL": 1} and report.overlay_version == "tuned-v1"
    assert report.chosen["number"] in report.front
    assert (ctx2.run_dir / "tuning" / "pareto.svg").read_text().startswith("<svg")
    info = TunedOverlays(tuning_home).overlay_info("tuned-v1")
    assert info["study"] == "resume" and info["data_version"] == "data-v1" and len(info["trials"]) == 3
    assert set(info["train"]) == {"lr", "epochs"}
    assert tune_report(ctx2, tune_plan=plan2).overlay_version == "tuned-v1"  # idempotent per run
