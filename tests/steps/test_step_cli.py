"""The step CLIs (`python -m tasks.<step>`) are the same code the DAG calls."""

import json
import os
import subprocess
import sys

import pytest

from tasks.core.settings import REPO_ROOT


def cli(settings, module, *args):
    env = {**os.environ, "SLUICE_HOME": str(settings.home)}
    return subprocess.run(
        [sys.executable, "-m", module, *args], env=env, capture_output=True, text=True, cwd=REPO_ROOT, timeout=300
    )


@pytest.mark.parametrize(
    "module",
    [
        "tasks.ingest",
        "tasks.validate_raw",
        "tasks.weak_label",
        "tasks.fill_queue",
        "tasks.snapshot",
        "tasks.train",
        "tasks.evaluate",
        "tasks.compress",
        "tasks.register",
        "tasks.deploy_canary",
        "tasks.canary_analysis",
        "tasks.promote",
        "tasks.rollback_canary",
        "tasks.report",
        "tasks.quarantine",
        "tasks.reject_model",
        "tasks.plan_train",
        "ops",
    ],
)
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


def test_a_missing_upstream_record_is_one_line_naming_the_step(settings):
    proc = cli(settings, "tasks.evaluate", "--run-id", "nothing-yet")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "needs the record of step 'train'" in proc.stderr and "run train first" in proc.stderr


def test_a_bad_override_is_one_line_naming_the_key(settings):
    proc = cli(settings, "tasks.ingest", "--run-id", "r1", "--set", "train.epochs=0")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "train.epochs" in proc.stderr and "greater than or equal to 1" in proc.stderr


def test_step_declaration_reads_upstream_records_from_the_signature():
    from tasks.core.records import EvaluateRecord
    from tasks.register import register
    from tasks.reject_model import reject_model

    assert register.reads == {"train": True, "evaluate": True, "compress": True}
    assert (
        reject_model.reads == {"evaluate": False, "compress": False, "train": False}
        and register.record_type is not EvaluateRecord
    )


def test_every_module_in_tasks_is_a_declared_step():
    """The folder tells a step from a subsystem: each module directly in tasks/ declares its step."""
    import importlib

    from tasks.runner import Step

    modules = sorted(p.stem for p in (REPO_ROOT / "tasks").glob("*.py") if p.stem != "__init__")
    assert "ingest" in modules and "report" in modules
    for name in modules:
        module = importlib.import_module(f"tasks.{name}")
        assert isinstance(getattr(module, name, None), Step), f"tasks/{name}.py does not declare a step {name!r}"
