"""dvc.yaml's stages run the same step CLIs on a data version, outside Airflow."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tasks.core.settings import REPO_ROOT

pytestmark = [pytest.mark.slow, pytest.mark.paired]
DVC = str(Path(sys.executable).parent / "dvc")


def test_dvc_repro_trains_evaluates_compresses(tmp_path, emails):
    # A copy of the project (tracked files) with its own default SLUICE_HOME.
    project = tmp_path / "project"
    files = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "ls-files", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    for f in files:
        if (REPO_ROOT / f).is_file():
            (project / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO_ROOT / f, project / f)
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    subprocess.run(["git", "add", "-A"], cwd=project, check=True)
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "copy"], cwd=project, check=True
    )

    # as after `source .venv/bin/activate`: dvc runs the stages with `python` from PATH
    env = {**os.environ, "DVC_NO_ANALYTICS": "1", "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    env.pop("SLUICE_HOME", None)
    home = project / ".sluice"
    prepare = f"""
import pandas as pd
from tasks.plugins.emails import load_source
from tasks.datasets import load_dataset
from tasks.datasets.demo_feed import DemoFeed
from tasks.core.params import load_params
from tasks.registry import Registry
from tasks.core.settings import Settings
s = Settings.from_env()
assert str(s.home) == {str(home)!r}, s.home
DemoFeed(s.layout.ensure(), load_params().demo, load_dataset()).ensure_gold()
df = load_source().iloc[:800]
df = df.assign(label=df.pop("spam"), label_prob=lambda d: d["label"].astype(float))
df.to_parquet("part.parquet", index=False)
made = Registry(s).snapshot({{"batch-0001": "part.parquet"}}, {{"rows_by_batch": {{"batch-0001": len(df)}}}})
print(made["data_version"])
"""
    out = subprocess.run([sys.executable, "-c", prepare], cwd=project, env=env, capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip().endswith("data-v1"), out.stderr[-2000:]

    repro = subprocess.run([DVC, "repro"], cwd=project, env=env, capture_output=True, text=True, timeout=600)
    assert repro.returncode == 0, repro.stdout[-2000:] + repro.stderr[-3000:]
    runs = home / "runs" / "dvc-exp"
    assert json.loads((runs / "steps" / "evaluate.json").read_text())["passed"] is True
    assert json.loads((runs / "steps" / "compress.json").read_text())["quality"]["roc_auc"] > 0.8
    lock = (project / "dvc.lock").read_text()
    assert all(stage in lock for stage in ("train:", "evaluate:", "compress:"))
    again = subprocess.run([DVC, "repro"], cwd=project, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "didn't change" in again.stdout + again.stderr
