"""`make run DEMO=reviews` (docs/datasets.md): one variable runs the demo on another dataset plug-in, in
a SLUICE_HOME of its own, with params.yaml's values and the plug-in's demo.yaml over them."""

import os
import subprocess
import sys

import pytest
import yaml

from tasks.core.params import load_params
from tasks.core.settings import REPO_ROOT


def test_demo_params_is_params_yaml_with_the_plugins_demo_yaml_over_it(tmp_path):
    out = tmp_path / "home" / "params.reviews.yaml"
    proc = subprocess.run([sys.executable, "-m", "ops", "demo-params", "reviews", str(out)], cwd=REPO_ROOT,
                          capture_output=True, text=True, check=True)  # fmt: skip
    assert f"params in {out}" in proc.stdout
    written, base = yaml.safe_load(out.read_text()), yaml.safe_load((REPO_ROOT / "params.yaml").read_text())
    own = yaml.safe_load((REPO_ROOT / "tasks" / "plugins" / "reviews" / "demo.yaml").read_text())
    assert written.pop("dataset") == {"module": "tasks.plugins.reviews", "params": {}}
    # the demo's own choices, whatever params.yaml says (its model is the emails demo's)
    assert own["train"]["model.module"] == "tasks.plugins.mlp"
    assert written["train"]["model"] == {"module": own["train"]["model.module"], "params": own["train"]["model.params"]}
    assert written["evaluate"]["min_roc_auc"] == own["evaluate"]["min_roc_auc"]
    # every value it does not set is params.yaml's
    for section, values in own.items():
        for key in values:
            head = key.split(".")[0]
            written[section].pop(head, None)
            base[section].pop(head, None)
    base.pop("dataset")
    assert written == base
    assert load_params(out).dataset.module == "tasks.plugins.reviews"


def test_a_demo_key_params_yaml_lacks_is_an_error_naming_it():
    from tasks.core.params import ParamsError, parse_params, with_overrides

    base = yaml.safe_load((REPO_ROOT / "params.yaml").read_text())
    with pytest.raises(ParamsError, match="evaluate.min_auc"):
        parse_params(with_overrides(base, {"evaluate": {"min_auc": 0.8}}), "demo.yaml")
    with pytest.raises(ParamsError, match="unknown section 'evaluation'"):
        with_overrides(base, {"evaluation": {"min_roc_auc": 0.8}})


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


def test_a_model_plugins_demo_yaml_goes_over_the_datasets_in_the_datasets_home(tmp_path):
    """`make run DEMO=reviews MODEL=bert` (docs/models.md "Pretrained encoders"): the model plug-in's
    demo.yaml over the dataset demo's params, in the dataset demo's SLUICE_HOME, in a params file of its own."""
    out = tmp_path / "params.reviews-bert.yaml"
    subprocess.run([sys.executable, "-m", "ops", "demo-params", "reviews", str(out), "--model", "bert"],
                   cwd=REPO_ROOT, capture_output=True, text=True, check=True)  # fmt: skip
    p = load_params(out)
    bert = yaml.safe_load((REPO_ROOT / "tasks" / "plugins" / "bert" / "demo.yaml").read_text())["train"]
    reviews = yaml.safe_load((REPO_ROOT / "tasks" / "plugins" / "reviews" / "demo.yaml").read_text())
    assert p.dataset.module == "tasks.plugins.reviews" and p.train.model.module == "tasks.plugins.bert"
    assert p.train.pretrained.model_dump() == bert["pretrained"]
    own = yaml.safe_load((REPO_ROOT / "tasks" / "plugins" / "bert" / "demo.yaml").read_text())
    assert [list(c) for c in p.compress.candidates] == own["compress"]["candidates"]
    assert p.evaluate.min_roc_auc == reviews["evaluate"]["min_roc_auc"]  # the dataset's own floor stays
    for model, message in (
        ("nosuch", "MODEL=nosuch: not a model plug-in"),
        ("mlp", "tasks.plugins.mlp has no demo.yaml"),
    ):
        bad = tmp_path / f"{model}.yaml"
        proc = subprocess.run([sys.executable, "-m", "ops", "demo-params", "reviews", str(bad), "--model", model],
                              cwd=REPO_ROOT, capture_output=True, text=True)  # fmt: skip
        assert proc.returncode == 2 and message in proc.stderr and not bad.exists()
    env = {k: v for k, v in os.environ.items() if k not in ("SLUICE_HOME", "SLUICE_PARAMS", "MAKEFLAGS", "MAKELEVEL")}
    show = ["make", "-s", "--eval", "show: ; @echo $$SLUICE_HOME $$SLUICE_PARAMS", "show", "DEMO=reviews", "MODEL=bert"]
    seen = subprocess.run(show, cwd=REPO_ROOT, env=env, capture_output=True, text=True, check=True).stdout.split()
    assert seen == [str(REPO_ROOT / ".sluice-reviews"), str(REPO_ROOT / ".sluice-reviews" / "params.reviews-bert.yaml")]
