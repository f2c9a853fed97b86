"""Shared fixtures: an isolated SLUICE_HOME per test, params.yaml's values, and small real inputs."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

from ops.test_run import PARTS
from tasks.core.params import DEFAULT_PARAMS_FILE, Params, _Loader, repo_params
from tasks.core.settings import Settings
from tasks.core.wait import wait_until

S3_BUCKET = "sluice-registry"  # created empty in the S3 test server


def pytest_addoption(parser):
    parser.addoption(
        "--part",
        choices=PARTS,
        default=None,
        help="ops/test_run.py's parts: parallel = the tests not marked slow (run on pytest-xdist workers); "
        "paired = the slow ones marked paired (two at a time); serial = the other slow ones (they need the "
        "whole machine: one at a time). Default: every test.",
    )


def pytest_configure(config):
    """A pytest-xdist worker's torch and its subprocesses' OpenMP on one thread: two workers on two cores,
    each with the machine's thread count, spend their time in each other's spin-waits."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[var] = "1"
        import torch

        torch.set_num_threads(1)


def pytest_collection_modifyitems(config, items):
    """`--part` keeps its tests (the others are reported deselected). The k8s tier last: its cluster
    (etcd, the API server, the kubelet, containerd) is a session fixture, up from the tier's first test to
    the end of the run, and would otherwise idle beside every test collected after tests/k8s. The order
    within each part is kept."""
    part = config.getoption("part")
    if part:
        keep = [i for i in items if part_of(i) == part]
        if len(keep) < len(items):
            kept = set(keep)
            config.hook.pytest_deselected(items=[i for i in items if i not in kept])
            items[:] = keep
    items.sort(key=lambda item: item.get_closest_marker("k8s") is not None)


def part_of(item) -> str:
    """The part of ops/test_run.py that runs a test: parallel (not slow), paired (slow and paired), serial."""
    if item.get_closest_marker("slow") is None:
        return "parallel"
    return "paired" if item.get_closest_marker("paired") is not None else "serial"


_durations: dict[str, dict[str, Any]] = {}


def pytest_runtest_logreport(report):
    """Each test's setup + call + teardown seconds and outcome (for the durations summary below); under
    pytest-xdist the controller sees every worker's reports."""
    case = _durations.setdefault(report.nodeid, {"id": report.nodeid, "seconds": 0.0, "outcome": "passed"})
    case["seconds"] += report.duration
    if report.failed:
        case["outcome"] = "failed" if report.when == "call" else "error"
    elif report.skipped and case["outcome"] == "passed":
        case["outcome"] = "skipped"


def pytest_terminal_summary(terminalreporter, config):
    """Every run keeps its durations (.test-results/durations.json, git-ignored; a part of ops/test_run.py
    durations-<part>.json, which it merges) and prints the per-folder sums and the slowest tests
    (ops/test_durations.py; docs/testing.md shows a clean-clone run's)."""
    from ops.test_durations import RESULTS, folder_of, lines, summarize
    from tasks.core.files import atomic_write_json

    if not _durations or hasattr(config, "workerinput"):
        return
    summary = summarize([c | {"folder": folder_of(c["id"])} for c in _durations.values()])
    part = config.getoption("part")
    path = RESULTS / (f"durations-{part}.json" if part else "durations.json")
    atomic_write_json(path, summary)
    terminalreporter.write_sep("=", f"test durations (kept in {path})")
    for line in lines(summary):
        terminalreporter.write_line(line)


@pytest.fixture
def params() -> Params:
    """The checkout's params.yaml, validated: where a test's params come from (there are no defaults
    in code). A test that needs other values says so: `params.train.replace(epochs=1)`."""
    return repo_params()


def params_dict(changes: dict[str, Any] | None = None) -> dict[str, Any]:
    """The checkout's params.yaml as read (a fresh copy), with `changes` merged in: mappings key by
    key, all the way down; any other value replaces the file's."""

    def merge(base: Any, change: Any) -> Any:
        if isinstance(base, dict) and isinstance(change, dict):
            return {**base, **{k: merge(base.get(k), v) for k, v in change.items()}}
        return copy.deepcopy(change)

    return merge(yaml.load(DEFAULT_PARAMS_FILE.read_text(), Loader=_Loader), changes or {})


def write_params(path: Path, changes: dict[str, Any] | None = None) -> Path:
    """A params file at `path`: the checkout's params.yaml with `changes` merged in (params_dict),
    for tests that point SLUICE_PARAMS (or load_params) at a file of their own."""
    path.write_text(json.dumps(params_dict(changes)))  # JSON is YAML; floats stay floats
    return path


def write_params_with_model(path: Path, changes: dict[str, Any], model: dict[str, Any]) -> Path:
    """write_params, with `train.model` (a model plug-in and its params) replaced whole: merged key by
    key, the MLP's params would stay beside another plug-in's."""
    write_params(path, changes)
    written = json.loads(path.read_text())
    written["train"]["model"] = model
    path.write_text(json.dumps(written))
    return path


@pytest.fixture
def settings(tmp_path, monkeypatch) -> Settings:
    """A fresh SLUICE_HOME under the test's tmp dir (nothing shared between tests)."""
    monkeypatch.setenv("SLUICE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DVC_NO_ANALYTICS", "1")
    monkeypatch.setenv("GX_ANALYTICS_ENABLED", "false")
    return Settings.from_env()


@pytest.fixture(scope="session")
def emails() -> pd.DataFrame:
    from tasks.plugins.emails import load_source

    return load_source()


@pytest.fixture
def raw_batch(emails) -> pd.DataFrame:
    """200 real rows, unlabeled, as a landing batch holds them."""
    from tasks.plugins.emails import GOLD_COLUMN

    return emails.head(200).drop(columns=[GOLD_COLUMN]).reset_index(drop=True)


def row(**overrides) -> dict:
    """One neutral email row (every LF abstains on it) with fields overridden."""
    base = {
        "email_id": 1,
        "time": "2012-01-01T06:16:41Z",
        "to_multiple": 0,
        "from": 1,
        "cc": 0,
        "sent_email": 0,
        "image": 0,
        "attach": 0,
        "dollar": 0,
        "winner": "no",
        "inherit": 0,
        "viagra": 0,
        "password": 0,
        "num_char": 4.0,
        "line_breaks": 80,
        "format": 1,
        "re_subj": 0,
        "exclaim_subj": 0,
        "urgent_subj": 0,
        "exclaim_mess": 0,
        "number": "small",
    }
    base.update(overrides)
    return base


@pytest.fixture
def s3_server(monkeypatch):
    """A real S3 API (moto's server mode) on loopback, with bucket S3_BUCKET; yields its URL."""
    import boto3
    import httpx

    from ops.services import free_port
    from tasks.core.processes import stop_groups

    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(
            lambda: httpx.get(url, timeout=1),
            timeout_s=30,
            what=f"the S3 test server at {url}",
            retry_on=(httpx.HTTPError,),
        )
        # Credentials come from the environment only (the registry never writes them down).
        for k, v in {
            "AWS_ACCESS_KEY_ID": "test-key",
            "AWS_SECRET_ACCESS_KEY": "test-secret",
            "AWS_DEFAULT_REGION": "us-east-1",
        }.items():
            monkeypatch.setenv(k, v)
        boto3.client("s3", endpoint_url=url).create_bucket(Bucket=S3_BUCKET)
        yield url
    finally:
        stop_groups({"moto": proc.pid}, grace_s=5)


@pytest.fixture(scope="session")
def postgres_server():
    """A real PostgreSQL server (tests/postgres.py), shared by the session's tests; stopped at the end."""
    from tests.postgres import PostgresServer

    server = PostgresServer()
    try:
        yield server.start()
    finally:
        server.close()


@pytest.fixture
def postgres_url(postgres_server) -> str:
    """A fresh empty database on the shared server: its postgresql:// URL."""
    return postgres_server.create_database()
