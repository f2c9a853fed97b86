"""dataset.params: the plug-in's own parameters, validated by the `Params` model it declares."""

import hashlib
import json
import re

import pytest

from tasks.core.params import _NOT_HYPERPARAMETERS, ParamsError, load_params
from tasks.datasets import dataset_params
from tests.conftest import write_params

PLUGIN = "tests.core.plugin_with_params"


def test_the_plugins_params_are_validated_by_its_model(tmp_path):
    path = write_params(
        tmp_path / "params.yaml", {"dataset": {"module": PLUGIN, "params": {"sites": ["north"], "max_temperature": 80}}}
    )
    p = load_params(path)
    got = dataset_params(p.dataset)
    assert type(got).__name__ == "Params" and got.sites == ("north",) and got.max_temperature == 80


@pytest.mark.parametrize(
    "values, message",
    [
        ({"sites": [], "max_temperature": 80}, "dataset.params.sites: Tuple should have at least 1 item"),
        ({"sites": ["north"], "max_temperature": 80, "site": "x"}, "dataset.params.site: Extra inputs"),
        ({"sites": ["north"]}, "dataset.params.max_temperature: missing key"),
    ],
)
def test_a_bad_plugin_param_is_an_error_naming_the_file_and_the_key(tmp_path, values, message):
    path = write_params(tmp_path / "params.yaml", {"dataset": {"module": PLUGIN, "params": values}})
    with pytest.raises(ParamsError, match=f"^{re.escape(str(path))}: {message}"):
        load_params(path)


def test_a_plugin_without_params_takes_none(params, tmp_path):
    assert params.dataset.params == {} and dataset_params(params.dataset) is None  # emails declares none
    path = write_params(tmp_path / "params.yaml", {"dataset": {"params": {"sites": ["north"]}}})
    with pytest.raises(ParamsError, match=r"dataset\.params: .*tasks\.plugins\.emails declares no Params"):
        load_params(path)


def test_an_empty_params_is_checked_against_a_model_that_needs_keys(params):
    section = params.dataset.replace(module=PLUGIN)  # {}: the plug-in is not imported to read the file
    with pytest.raises(ParamsError, match=r"^params\.yaml: dataset\.params\.sites: missing key"):
        dataset_params(section)


def test_no_plugin_params_leave_the_digest_as_it_was(params):
    """A model registered before dataset.params existed keeps its params hash: an empty one is left out."""
    hyper = {k: v for k, v in params.to_dict().items() if k not in _NOT_HYPERPARAMETERS}
    del hyper["dataset"]["params"]
    assert params.digest() == hashlib.sha256(json.dumps(hyper, sort_keys=True).encode()).hexdigest()[:16]
    plugin = params.dataset.replace(module=PLUGIN)
    with_values = params.replace(dataset=plugin.replace(params={"sites": ["north"], "max_temperature": 80}))
    assert with_values.digest() != params.replace(dataset=plugin).digest()
