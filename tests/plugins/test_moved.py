"""Plug-ins that moved keep loading under the module paths records and params files hold: a data
version, a model record's params or a user's params.yaml written before the move name
tasks.datasets.emails, tasks.labeling.email_lfs and tasks.models.mlp (tasks.core.moved.MOVED)."""

from __future__ import annotations

import pytest

from tasks.core.context import StepContext
from tasks.core.moved import MOVED
from tasks.core.plugins import DatasetError, load_dataset, load_lfs
from tests.conftest import write_params


@pytest.mark.parametrize("old, new", sorted(MOVED.items()))
def test_every_old_path_imports_the_module_that_lives_at_the_new_one(old, new):
    import importlib

    assert importlib.util.find_spec(new) is not None
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(old)  # gone from the tree: only the table leads there


def test_params_written_before_the_move_resolve_to_the_plugins_folder(tmp_path, settings, monkeypatch):
    import tasks.plugins.emails as emails
    import tasks.plugins.emails.lfs as emails_lfs

    before = {"dataset": {"module": "tasks.datasets.emails"}, "weak_label": {"lf_module": "tasks.labeling.email_lfs"}}
    monkeypatch.setenv("SLUICE_PARAMS", str(write_params(tmp_path / "params.yaml", before)))
    ctx = StepContext.create("run-1")
    assert ctx.params.dataset.module == "tasks.datasets.emails"  # the file as it was written
    assert ctx.dataset is emails and load_dataset("tasks.datasets.emails") is emails
    assert load_lfs(ctx.dataset, ctx.params.weak_label.lf_module) is emails_lfs
    assert load_lfs(ctx.dataset) is emails_lfs  # the plug-in's own, by its LF_MODULE


def test_a_path_that_never_existed_is_still_refused_naming_it():
    with pytest.raises(DatasetError, match="'tasks.datasets.tickets' cannot be imported"):
        load_dataset("tasks.datasets.tickets")
    with pytest.raises(DatasetError, match="labeling-function module 'tasks.labeling.ticket_lfs' cannot be imported"):
        load_lfs(load_dataset("tasks.plugins.emails"), "tasks.labeling.ticket_lfs")


def test_a_model_file_written_before_the_move_loads_as_its_plugin_now(tmp_path):
    """A model.pt of the registry names the plug-in that built it: files written before the move say
    tasks.models.mlp. It loads, is tagged where the plug-in lives now, and saves under that path."""
    import torch

    from tasks.models import build_model, load_model, model_blob, save_model
    from tasks.training.data import FeatureStats

    stats = FeatureStats(1, torch.zeros(3), torch.ones(3), (0.5, 0.5))
    model = build_model("tasks.plugins.mlp", stats, {"hidden": [4]})
    old = tmp_path / "model.pt"
    torch.save({**model_blob(model), "plugin": "tasks.models.mlp"}, old)  # as the registry holds it
    loaded = load_model(old)
    assert loaded.sluice_plugin == "tasks.plugins.mlp"
    x = torch.ones(2, 3)
    assert torch.equal(loaded(x), model.eval()(x))
    save_model(loaded, tmp_path / "again.pt")
    assert torch.load(tmp_path / "again.pt", weights_only=True)["plugin"] == "tasks.plugins.mlp"
