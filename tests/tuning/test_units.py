"""Pure parts of tuning: the Pareto front and the choice, the plot, the trial pod's spec, the overlay."""

import json

import pytest

from tasks.core.params import TrainParams
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
    svg = pareto_svg(ROWS, 2, tmp_path / "p.svg", "study s").read_text()
    assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>")
    assert svg.count("<circle") == 5 + 4  # five trials with values, four legend dots
    assert 'r="7" fill="#228833"><title>trial 2 (COMPLETE)' in svg


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


def test_overlay_registered_resolved_and_applied(settings):
    overlays = TunedOverlays(settings)
    assert overlays.resolve_overlay("latest") is None
    p = TrainParams(params_overlay="latest")
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
    assert (applied.lr, applied.hidden, applied.params_overlay) == (0.02, (8,), "tuned-v2")
    assert apply_overlay(settings, TrainParams(params_overlay="tuned-v1"))[0].lr == 0.01
    with pytest.raises(RegistryError, match="tuned overlay tuned-v7 does not exist"):
        apply_overlay(settings, TrainParams(params_overlay="tuned-v7"))
    audit = [json.loads(x) for x in (settings.layout.registry / "audit.jsonl").read_text().splitlines()]
    assert [a["version"] for a in audit if a["action"] == "tuned_overlay"] == ["tuned-v1", "tuned-v2"]
