"""The step CLIs (`python -m tasks.<step>`) are the same code the DAG calls."""
import json
import os
import subprocess
import sys

import pytest

from tasks.core.settings import REPO_ROOT


def cli(settings, module, *args):
    env = {**os.environ, "SLUICE_HOME": str(settings.home)}
    return subprocess.run([sys.executable, "-m", module, *args], env=env, capture_output=True, text=True,
                          cwd=REPO_ROOT, timeout=300)


@pytest.mark.parametrize("module", ["tasks.ingest", "tasks.validate_raw", "tasks.weak_label", "tasks.snapshot",
                                    "tasks.train", "tasks.evaluate", "tasks.compress", "tasks.register",
                                    "tasks.deploy", "tasks.report", "tasks.quarantine", "ops"])
def test_every_cli_has_help(settings, module):
    proc = cli(settings, module, "--help")
    assert proc.returncode == 0 and "usage" in proc.stdout.lower()


def test_gate_failure_exits_nonzero_and_names_the_cause(settings, raw_batch, monkeypatch):
    monkeypatch.setenv("SLUICE_DEMO_FEED", "0")
    layout = settings.layout.ensure()
    raw_batch.assign(number="lots").to_csv(layout.landing / "odd.csv", index=False)
    ingest = cli(settings, "tasks.ingest", "--run-id", "r1", "--batch", "odd")
    assert ingest.returncode == 0, ingest.stderr
    assert json.loads(ingest.stdout)["status"] == "staged"
    gate = cli(settings, "tasks.validate_raw", "--run-id", "r1")
    assert gate.returncode == 1
    assert "expect_column_values_to_be_in_set on column 'number'" in gate.stderr


def test_unreadable_file_is_reported_not_crashed(settings, monkeypatch):
    monkeypatch.setenv("SLUICE_DEMO_FEED", "0")
    layout = settings.layout.ensure()
    (layout.landing / "garbled.csv").write_bytes(b"email_id,time\n1,\xff\xfe\xfa\n")
    ingest = cli(settings, "tasks.ingest", "--run-id", "r1")
    gate = cli(settings, "tasks.validate_raw", "--run-id", "r1")
    assert json.loads(ingest.stdout)["status"] == "unreadable"
    assert gate.returncode == 1 and "file_is_readable" in gate.stderr and "UnicodeDecodeError" in gate.stderr
