"""Pure parts of tuning: the Pareto front and the choice, the plot, the trial pod's spec, the overlay."""

import json

import pytest

from tasks.registry import RegistryError
from tasks.registry.tuning import TunedOverlays
from tasks.tuning.overlay import apply_overlay
from tasks.tuning.pareto import choose, front, pareto_svg


def _row(n, value, cost, state="COMPLETE"):
    return {"number": n, "state": state, "params": {"lr": 0.01}, "value": value, "cost": cost}


ROWS = [
    _row(0, 0.90, 1.0),
    _row(1, 0.95, 3.0),
    _row(2, 0.949, 1.5),  # within 0.002 of the best, half the cost: chosen
    _row(3, 0.80, 2.0),  # dominated by 0
    _row(4, 0.97, 0.1, state="PRUNED"),  # pruned: never on the front, never chosen
    _row(5, None, None, state="FAIL"),
]


def test_front_and_choice():
    assert [r["number"] for r in front(ROWS)] == [0, 2, 1]
    assert choose(ROWS, 0.002)["number"] == 2
    assert choose(ROWS, 0.0)["number"] == 1
    assert choose([_row(0, None, None, "FAIL")], 0.002) is None


def test_plot_marks_the_chosen_trial(tmp_path):
    import re

    svg = pareto_svg(ROWS, 2, tmp_path / "p.svg", "study s").read_text()
    assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>")
    # five trials with values, each a point with its hover text, in its legend group
    points = {t: g for g, t in re.findall(r'<g id="c[0-9a-f]+-([a-z-]+)-\d+"><title>trial (\d+) ', svg)}
    assert points == {
        "2": "chosen", "0": "pareto-front", "1": "pareto-front", "3": "completed", "4": "pruned-last-value-"
    }  # fmt: skip
    assert "<title>trial 2 (COMPLETE): ROC AUC 0.9490" in svg
    for legend in ("chosen", "Pareto front", "completed", "pruned (last value)"):
        assert f">{legend}</text>" in svg, legend


def test_trial_pod_renders_to_a_valid_restricted_pod():
    from tasks.training.kubernetes import KubernetesTraining, validate_manifests
    from tasks.tuning.kubernetes import render_trial_manifest

    cfg = KubernetesTraining(registry_url="https://git.example/registry.git")
    plan = {"study": "w49", "data_version": "data-v3", "dev": "s3://bucket/tuning/dev.parquet", "slots": [0, 1]}
    pod = render_trial_manifest(cfg, "manual__2026", 1, plan)
    validate_manifests([pod])
    (c,) = pod["spec"]["containers"]
    assert c["command"] == ["python"]
    assert c["args"][:6] == ["-m", "tasks.tune_trial", "--run-id", "manual__2026", "--index", "1"]
    assert json.loads(c["args"][c["args"].index("--plan") + 1]) == plan
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["SLUICE_TRAIN_BACKEND"] == "kubernetes" and env["SLUICE_REGISTRY_URL"] == cfg.registry_url
    assert {"secretRef": {"name": "sluice-tuning"}} in c["envFrom"]  # the study's PostgreSQL URL
    assert c["resources"]["limits"]["nvidia.com/gpu"] == str(cfg.gpus_per_node)
    assert pod["metadata"]["labels"]["sluice/data-version"] == "data-v3"


def test_overlay_registered_resolved_and_applied(settings, params):
    overlays = TunedOverlays(settings)
    assert overlays.resolve_overlay("latest") is None
    p = params.train.replace(params_overlay="latest")
    assert apply_overlay(settings, p) == (p, None, None)
    first = overlays.register_overlay("run-a", {"study": "s", "data_version": "data-v1", "train": {"lr": 0.01}})
    again = overlays.register_overlay("run-a", {"study": "s", "data_version": "data-v1", "train": {"lr": 0.02}})
    assert (first["version"], first["created"], again["version"], again["created"]) == (
        "tuned-v1",
        True,
        "tuned-v1",
        False,
    )
    overlays.register_overlay("run-b", {"study": "s", "data_version": "data-v1", "train": {"lr": 0.02, "hidden": [8]}})
    applied, version, values = apply_overlay(settings, p)
    assert version == "tuned-v2" and values == {"lr": 0.02, "hidden": [8]}
    assert (applied.lr, applied.value("hidden"), applied.params_overlay) == (0.02, [8], "tuned-v2")
    assert apply_overlay(settings, params.train.replace(params_overlay="tuned-v1"))[0].lr == 0.01
    with pytest.raises(RegistryError, match="tuned overlay tuned-v7 does not exist"):
        apply_overlay(settings, params.train.replace(params_overlay="tuned-v7"))
    audit = [json.loads(x) for x in (settings.layout.registry / "audit.jsonl").read_text().splitlines()]
    assert [a["version"] for a in audit if a["action"] == "tuned_overlay"] == ["tuned-v1", "tuned-v2"]


def test_epoch_reporter_prunes_by_the_pruner_and_by_the_cost_ceiling(tmp_path):
    """The worker's epoch hook: reports each epoch's dev ROC AUC; the study's pruner or the ceiling stops it."""
    import optuna
    import torch

    from tasks.tuning.worker import EpochReporter

    x = torch.randn(40, 3)
    y = (x[:, 0] > 0).long().numpy()
    model = torch.nn.Linear(3, 1)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[1.0, 0.0, 0.0]]))
    net = lambda t: model(t).squeeze(-1)  # noqa: E731
    net.eval = model.eval
    net.train = model.train

    study = optuna.create_study(direction="maximize", pruner=optuna.pruners.ThresholdPruner(lower=2.0))
    hook = EpochReporter(study.ask(), x, y, tmp_path, cost_per_hour=1.0, budget_left=None)
    assert hook(1, net) is True  # ROC AUC 1.0 < 2.0: the pruner stops it
    seen = json.loads((tmp_path / "trial.json").read_text())
    assert seen["pruned_by"] == "pruner" and seen["epochs"][0]["dev_roc_auc"] == 1.0
    assert study.trials[0].intermediate_values == {1: 1.0}

    study = optuna.create_study(direction="maximize", pruner=optuna.pruners.NopPruner())
    hook = EpochReporter(study.ask(), x, y, tmp_path, cost_per_hour=3600.0, budget_left=1e-6)
    assert hook(1, net) is True and hook.pruned_by == "cost_ceiling"  # a second epoch would cross it
    hook = EpochReporter(study.ask(), x, y, tmp_path, cost_per_hour=1.0, budget_left=100.0)
    assert hook(1, net) is False and hook(2, net) is False


@pytest.mark.slow
def test_engine_epoch_hook_stops_training_where_it_says(tuning_home, tmp_path, params):
    """The engine's on_epoch hook (one process, in this one): called after each epoch; True stops there."""
    from tasks.training.engine import run_training

    calls = []

    def hook(epoch, model):
        calls.append((epoch, type(model).__name__))
        return epoch == 2

    p = params.train.replace(epochs=5, nproc=1, batch_size=64, warm_start=False)
    result = run_training("data-v1", str(tmp_path / "out"), p, on_epoch=hook)
    assert calls == [(1, "MLP"), (2, "MLP")]
    assert result["stopped_at_epoch"] == 2 and len(result["losses"]) == 2
    assert (tmp_path / "out" / "model.pt").exists()


def test_lineage_params_are_the_ones_trained_with(settings):
    """register records the overlay's values and the resolved overlay, so params and hash match the training."""
    from tasks.core.context import StepContext
    from tasks.register import trained_params
    from tests.steps.records import train_record

    ctx = StepContext.create("run-l", settings, {"train": {"params_overlay": "latest"}})
    plain = trained_params(ctx, train_record())
    assert plain.train.params_overlay == "none" and plain.train.lr == ctx.params.train.lr
    tuned = trained_params(ctx, train_record(params_overlay="tuned-v2", overlay_values={"lr": 0.02, "hidden": [8]}))
    assert (tuned.train.params_overlay, tuned.train.lr, tuned.train.value("hidden")) == ("tuned-v2", 0.02, [8])
    assert tuned.digest() != plain.digest() and tuned.model_dump()["evaluate"] == ctx.params.model_dump()["evaluate"]
    none = StepContext.create("run-n", settings)  # params.yaml's default: no overlay, the hash is unchanged
    assert trained_params(none, train_record()).digest() == none.params.digest()
