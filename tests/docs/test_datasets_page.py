"""docs/datasets.md followed literally: its first shell block copies a plug-in folder under a new name
outside the tree, its YAML block names it in params.yaml, and nothing else changes; a nightly batch
of the copy then passes both contracts, the labeling functions and a snapshot, as the new dataset."""

from __future__ import annotations

import re
import subprocess
import sys

import pandas as pd
import yaml

from tasks.core.settings import REPO_ROOT, Settings
from tests.conftest import write_params

PAGE = REPO_ROOT / "docs" / "datasets.md"


def blocks(page: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", page, re.S)


def test_a_copied_folder_and_a_params_entry_are_a_new_dataset(tmp_path, settings, monkeypatch):
    page = PAGE.read_text()
    shell, entry = blocks(page, "bash")[0], yaml.safe_load(blocks(page, "yaml")[0])
    (tmp_path / "tasks").symlink_to(REPO_ROOT / "tasks")  # the page's commands run in the checkout
    proc = subprocess.run(["bash", "-euc", shell + '\necho "PYTHONPATH=$PYTHONPATH"'], cwd=tmp_path,
                          capture_output=True, text=True, check=True)  # fmt: skip
    (path,) = re.findall(r"^PYTHONPATH=(.*)$", proc.stdout, re.M)
    folder = tmp_path / "plugins-of-mine" / entry["dataset"]["module"]
    assert path == str(tmp_path / "plugins-of-mine") and (folder / "lfs.py").is_file()
    assert not (REPO_ROOT / "tasks" / "plugins" / entry["dataset"]["module"]).exists()  # outside the tree

    monkeypatch.syspath_prepend(path)  # what the exported PYTHONPATH does for every task process
    params = write_params(tmp_path / "params.yaml", entry)
    monkeypatch.setenv("SLUICE_PARAMS", str(params))
    home = Settings.from_env()
    from tasks.datasets import load_dataset, load_lfs

    ds = load_dataset(entry["dataset"]["module"])
    assert ds.NAME == "tickets" and ds.__file__ == str(folder / "__init__.py")
    assert load_lfs(ds).__file__ == str(folder / "lfs.py")  # its own LFs, not the folder it came from

    from tests.steps.test_bad_input import through_data_gates

    outcome, version, _ = through_data_gates(home, None, run="night-1")  # the demo feed's first batch
    assert (outcome, version) == ("snapshot", "data-v1")
    from tasks.registry import Registry

    info = Registry(home).data_version_info("data-v1")
    assert info["dataset"] == "tickets" and info["lf_module"] == "tickets.lfs"
    assert info["partitions"][0]["path"].startswith("data/tickets/")
    labeled = pd.read_parquet(home.layout.run_dir("night-1") / "labeled.parquet")
    assert len(labeled) == yaml.safe_load((REPO_ROOT / "params.yaml").read_text())["demo"]["batch_size"]
    assert sys.modules["tickets.lfs"].__file__ == str(folder / "lfs.py")
