"""`make run DEMO=reviews` (docs/datasets.md): one variable runs the demo on another dataset plug-in, in
a SLUICE_HOME of its own, with params.yaml's values but the dataset."""

import os
import subprocess
import sys

import yaml

from tasks.core.params import load_params
from tasks.core.settings import REPO_ROOT


def test_demo_params_is_params_yaml_with_the_dataset_named(tmp_path):
    out = tmp_path / "home" / "params.reviews.yaml"
    proc = subprocess.run([sys.executable, "-m", "ops", "demo-params", "reviews", str(out)], cwd=REPO_ROOT,
                          capture_output=True, text=True, check=True)  # fmt: skip
    assert f"params in {out}" in proc.stdout
    written, base = yaml.safe_load(out.read_text()), yaml.safe_load((REPO_ROOT / "params.yaml").read_text())
    assert written.pop("dataset") == {"module": "tasks.plugins.reviews", "params": {}}
    base.pop("dataset")
    assert written == base  # nothing else changed
    assert load_params(out).dataset.module == "tasks.plugins.reviews"


def test_an_unknown_demo_is_refused_naming_it_and_writes_nothing(tmp_path):
    for name in ("nosuch", "../x"):
        out = tmp_path / "p.yaml"
        proc = subprocess.run([sys.executable, "-m", "ops", "demo-params", name, str(out)], cwd=REPO_ROOT,
                              capture_output=True, text=True)  # fmt: skip
        assert proc.returncode == 2 and f"DEMO={name}: not a dataset plug-in" in proc.stderr
        assert not out.exists()


def test_make_run_demo_reviews_uses_a_home_and_params_of_its_own():
    env = {k: v for k, v in os.environ.items() if k not in ("SLUICE_HOME", "SLUICE_PARAMS", "MAKEFLAGS", "MAKELEVEL")}
    plan = subprocess.run(["make", "-n", "run", "DEMO=reviews"], cwd=REPO_ROOT, env=env, capture_output=True,
                          text=True, check=True).stdout  # fmt: skip
    params = REPO_ROOT / ".sluice-reviews" / "params.reviews.yaml"
    assert f'-m ops demo-params reviews "{params}"' in plan and plan.rstrip().endswith("-m ops run")
    default = subprocess.run(["make", "-n", "run"], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                             check=True).stdout  # fmt: skip
    assert "demo-params" not in default
    # what the recipes' processes (ops run and the services it starts) see
    show = ["make", "-s", "--eval", "show: ; @echo $$SLUICE_HOME $$SLUICE_PARAMS", "show", "DEMO=reviews"]
    seen = subprocess.run(show, cwd=REPO_ROOT, env=env, capture_output=True, text=True, check=True).stdout.split()
    assert seen == [str(REPO_ROOT / ".sluice-reviews"), str(params)]
