"""Test helpers for the model server: real ONNX models in a real registry, and the server as a
real subprocess (`python -m tasks.serving`) in its own process group, always stopped
(SIGTERM, then SIGKILL of the group: ops/services.py's stop_groups)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from tasks.core.processes import stop_groups
from tasks.core.settings import REPO_ROOT
from tasks.serving.paths import address_file, serving_dir


def write_onnx(path: Path, n_features: int, seed: int) -> Path:
    """A real ONNX model with the served signature: features FP32 [batch, n] -> p_spam FP32 [batch]
    (a logistic regression: MatMul, Add, Sigmoid, Squeeze), as the compress step exports."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array(rng.normal(0, 0.7, (n_features, 1)).astype(np.float32), "w")
    b = numpy_helper.from_array(np.array([rng.normal(0, 0.5)], np.float32), "b")
    axes = numpy_helper.from_array(np.array([1], np.int64), "axes")
    nodes = [
        helper.make_node("MatMul", ["features", "w"], ["z0"]),
        helper.make_node("Add", ["z0", "b"], ["z"]),
        helper.make_node("Sigmoid", ["z"], ["p"]),
        helper.make_node("Squeeze", ["p", "axes"], ["p_spam"]),
    ]
    graph = helper.make_graph(
        nodes,
        f"lr{seed}",
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["batch", n_features])],
        [helper.make_tensor_value_info("p_spam", TensorProto.FLOAT, ["batch"])],
        initializer=[w, b, axes],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def promoted_server(tmp: Path, onnx_path: Path, dataset_module: str) -> "ServerProcess":
    """`onnx_path` registered as model-v1 of a fresh registry under tmp/home and promoted, a params file
    naming `dataset_module` (quick polls and flushes), and a server for them (not started)."""
    import yaml

    from tasks.core.settings import Settings
    from tasks.registry import Registry

    home = tmp / "home"
    reg = Registry(Settings.from_env({"SLUICE_HOME": str(home)}))
    reg.register_model("run-1", {"model.served.onnx": onnx_path}, {"data_version": "data-v1"})
    reg.promote("model-v1", "test")
    params = yaml.safe_load((REPO_ROOT / "params.yaml").read_text())
    params["dataset"] = {"module": dataset_module, "params": {}}
    params["serving"].update({"poll_s": 0.1, "log_flush_s": 0.1, "drain_s": 0.2})
    (tmp / "params.yaml").write_text(yaml.safe_dump(params))
    return ServerProcess(home, tmp / "params.yaml")


def server_env(home: Path, params: Path | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
    env.update({"SLUICE_HOME": str(home), "DVC_NO_ANALYTICS": "1", "PYTHONUNBUFFERED": "1"})
    if params is not None:
        env["SLUICE_PARAMS"] = str(params)
    return env


class ServerProcess:
    """`python -m tasks.serving` in its own process group; a context manager that always stops it."""

    def __init__(
        self, home: Path, params: Path | None = None, args: tuple[str, ...] = (), env: dict[str, str] | None = None
    ):
        self.home = Path(home)
        self.env = env or {}  # SLUICE_* variables beyond SLUICE_HOME and SLUICE_PARAMS
        self.address_file = address_file(self.home)
        self.params, self.args = params, args
        self.proc: subprocess.Popen | None = None
        self.log_path = serving_dir(self.home) / f"server-{time.time_ns()}.log"
        self.url = ""
        self.started_at = 0.0

    def start(self, timeout_s: float = 60, wait_ready: bool = True) -> "ServerProcess":
        self.address_file.unlink(missing_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "wb")
        self.started_at = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tasks.serving", *self.args],
            cwd=REPO_ROOT,
            env={**server_env(self.home, self.params), **self.env},
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout_s
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.output()}")
            try:
                address = json.loads(self.address_file.read_text())
                if address.get("pid") == self.proc.pid:
                    self.url = address["url"]
                    break
            except (OSError, ValueError):
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"no address.json after {timeout_s} s:\n{self.output()}")
            time.sleep(0.05)
        if wait_ready:
            self.wait_ready(deadline - time.monotonic())
        return self

    def wait_ready(self, timeout_s: float = 60) -> float:
        """Seconds from process start until GET /v2/health/ready answers 200."""
        deadline = time.monotonic() + max(timeout_s, 1)
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url + "/v2/health/ready", timeout=2).status_code == 200:
                    return time.monotonic() - self.started_at
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.output()}")
            time.sleep(0.05)
        raise TimeoutError(f"server not ready after {timeout_s} s:\n{self.output()}")

    def output(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def stop(self, grace_s: float = 10) -> int | None:
        if self.proc is not None:
            try:
                stop_groups({"model-server": self.proc.pid}, grace_s=grace_s)
            finally:
                self._log.close()
            return self.proc.poll()
        return None

    def __enter__(self) -> "ServerProcess":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def wait_for(predicate, timeout_s: float = 30, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise TimeoutError(f"timed out waiting for {what}")
