"""Test helpers for the model server: real ONNX models in a real registry, and a server for them
(ops/model_server.py's ServerProcess, the one launcher the tests, ops and the benchmarks share)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ops.model_server import ServerProcess
from tasks.core.settings import REPO_ROOT
from tasks.core.wait import wait_until


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


def wait_for(predicate, timeout_s: float = 30, what: str = "condition") -> Any:
    """`predicate`'s first truthy result, polled every 0.05 s (tasks/core/wait.wait_until)."""
    return wait_until(predicate, timeout_s=timeout_s, interval_s=0.05, what=what)
