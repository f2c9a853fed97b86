"""pyproject's extras: a minimal base, and a [serve] extra that is exactly what the server image installs."""

import re
import tomllib
from pathlib import Path

from tests.deploy.test_serving_specs import _image_packages, _norm

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _names(reqs: list[str]) -> set[str]:
    return {_norm(re.split(r"[\[<>=!~; ]", r, maxsplit=1)[0]) for r in reqs if not r.startswith("sluice[")}


def test_the_server_image_installs_the_base_and_the_serve_extra_and_nothing_else():
    wanted = _names(PROJECT["dependencies"]) | _names(PROJECT["optional-dependencies"]["serve"])
    assert set(_image_packages()) == wanted


def test_neither_the_base_nor_serve_pulls_torch_or_airflow():
    light = _names(PROJECT["dependencies"]) | _names(PROJECT["optional-dependencies"]["serve"])
    assert not {n for n in light if n.startswith(("torch", "apache-airflow", "nvidia-", "great-expectations"))}


def test_each_heavier_extra_builds_on_the_one_below():
    extras = PROJECT["optional-dependencies"]
    assert "sluice[serve]" in extras["pipeline"] and "sluice[pipeline]" in extras["airflow"]
    assert "sluice[airflow]" in extras["dev"]
    assert {"torch", "apache-airflow"} <= _names(extras["pipeline"]) | _names(extras["airflow"])
