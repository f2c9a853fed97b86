"""The model server: serve_cold_start_s, serve_vs_raw_ort, serve_p99_ms (with p50 beside it).

Two registries, each with one registered model: the demo-size MLP (21 -> 32 -> 16 -> 1) and the
bench profile (21 -> params scaling.bench_hidden -> 1, ~9.6M parameters), both real fp32 ONNX,
served by `python -m tasks.serving` on loopback. The goals are judged on the bench profile;
the demo model's figures stand beside them (there HTTP and JSON dominate a ~1,200-parameter model).

  serve_cold_start_s  process start -> GET /v2/health/ready is 200 (imports, bind, registry
                      read, sha256 check, onnxruntime load and warm-up), median of 5 starts.
  serve_vs_raw_ort    requests/s of the server (OIP v2 JSON infer, batch 32, 2 client threads
                      on keep-alive connections) over batches/s of a raw onnxruntime session loop
                      on the same model and inputs in one process: the price of HTTP, JSON,
                      routing, metrics and the prediction log around a tiny model.
  serve_p99_ms        latency at a fixed open-loop rate (a quarter of the measured saturation, capped
                      at 100/s): requests are sent on a schedule and timed from their scheduled
                      send time, so a stall counts against every request it delays.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np

from bench.record import Record
from bench.registry_data import settings_at
from ops.model_server import ServerProcess
from tasks.core.settings import REPO_ROOT

BATCH = 32


def write_mlp_onnx(path: Path, widths: tuple[int, ...] = (21, 32, 16, 1), seed: int = 0) -> Path:
    """A real ONNX MLP with the served signature: features FP32 [batch, 21] -> p_spam FP32 [batch]."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    nodes, inits, prev = [], [], "features"
    for i, (a, b) in enumerate(zip(widths[:-1], widths[1:])):
        inits += [
            numpy_helper.from_array((rng.normal(0, 1 / np.sqrt(a), (a, b))).astype(np.float32), f"w{i}"),
            numpy_helper.from_array(np.zeros(b, np.float32), f"b{i}"),
        ]
        nodes += [
            helper.make_node("MatMul", [prev, f"w{i}"], [f"m{i}"]),
            helper.make_node("Add", [f"m{i}", f"b{i}"], [f"z{i}"]),
        ]
        prev = f"z{i}"
        if i < len(widths) - 2:
            nodes.append(helper.make_node("Relu", [prev], [f"r{i}"]))
            prev = f"r{i}"
    inits.append(numpy_helper.from_array(np.array([1], np.int64), "axes"))
    nodes += [helper.make_node("Sigmoid", [prev], ["p"]), helper.make_node("Squeeze", ["p", "axes"], ["p_spam"])]
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["batch", widths[0]])],
        [helper.make_tensor_value_info("p_spam", TensorProto.FLOAT, ["batch"])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def infer_body(x: np.ndarray) -> bytes:
    return json.dumps(
        {"inputs": [{"name": "features", "datatype": "FP32", "shape": list(x.shape), "data": x.reshape(-1).tolist()}]}
    ).encode()


def raw_ort_rate(
    model: Path, x: np.ndarray | list[np.ndarray], seconds: float = 2.0, input_name: str = "features", warm: int = 50
) -> float:
    """Batches/s of one onnxruntime session on `model` (the server's session options), cycling through
    `x` when it is a list of batches."""
    import onnxruntime as ort

    xs = x if isinstance(x, list) else [x]
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1  # as the server runs it (tasks.serving.variants.open_model)
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(str(model), opts, providers=["CPUExecutionProvider"])
    for i in range(warm):
        sess.run(None, {input_name: xs[i % len(xs)]})
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        sess.run(None, {input_name: xs[n % len(xs)]})
        n += 1
    return n / (time.perf_counter() - t0)


def server_rate(
    url: str,
    body: bytes | list[bytes],
    seconds: float = 4.0,
    threads: int = 2,
    path: str = "/v2/models/emails/infer",
) -> float:
    """Requests/s of `threads` keep-alive clients POSTing `body` (or cycling through a list of bodies) to `path`."""
    bodies = body if isinstance(body, list) else [body]
    counts, stop = [0] * threads, threading.Event()
    headers = {"content-type": "application/json"}

    def loop(i: int) -> None:
        with httpx.Client(base_url=url, timeout=30) as c:
            k = i
            while not stop.is_set():
                assert c.post(path, content=bodies[k % len(bodies)], headers=headers).status_code == 200
                counts[i] += 1
                k += 1

    workers = [threading.Thread(target=loop, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    time.sleep(0.5)  # warm
    start = sum(counts)
    t0 = time.perf_counter()
    time.sleep(seconds)
    done = sum(counts) - start
    elapsed = time.perf_counter() - t0
    stop.set()
    for w in workers:
        w.join()
    return done / elapsed


def fixed_rate_latencies(url: str, body: bytes, rate: float, seconds: float = 5.0, threads: int = 4) -> list[float]:
    """Open loop: request k is due at t0 + k/rate; latency counts from when it was due."""
    total = int(rate * seconds)
    lock, nxt, out = threading.Lock(), [0], []
    headers = {"content-type": "application/json"}
    t0 = time.perf_counter() + 0.2

    def loop() -> None:
        with httpx.Client(base_url=url, timeout=10) as c:
            c.get("/v2/health/live")
            while True:
                with lock:
                    k = nxt[0]
                    nxt[0] += 1
                if k >= total:
                    return
                due = t0 + k / rate
                delay = due - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                r = c.post("/v2/models/emails/infer", content=body, headers=headers)
                took = (time.perf_counter() - due) * 1000
                assert r.status_code == 200
                with lock:
                    out.append(took)

    workers = [threading.Thread(target=loop) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return out


def measure(home: Path, model: Path, version_tag: str, starts: int) -> dict:
    """Cold starts, saturation, raw onnxruntime and fixed-rate latency of one model in its own registry."""
    from tasks.registry import Registry

    reg = Registry(settings_at(home))
    reg.promote(
        reg.register_model(version_tag, {"model.int8.onnx": model}, {"data_version": "data-v1"})["model_version"],
        "bench",
    )
    cold = []
    for _ in range(starts):
        with ServerProcess(home, poll_s=0.01) as server:
            cold.append(server.start().ready_s)
    x = np.random.default_rng(1).random((BATCH, 21), dtype=np.float32)
    body = infer_body(x)
    raw = raw_ort_rate(model, x)
    with ServerProcess(home, poll_s=0.01) as server:
        url = server.start().url
        served = server_rate(url, body)
        rate = min(100.0, served / 4)
        lat = sorted(fixed_rate_latencies(url, body, rate))
    return {"cold": cold, "raw": raw, "served": served, "rate": rate, "lat": lat, "model_bytes": model.stat().st_size}


# Where a cold start's time goes: what the server imports before it is ready, each alone in a fresh
# interpreter (so shared dependencies count in each: numpy is in pandas' and onnxruntime's figures).
COLD_IMPORTS = {
    "pandas (the dataset plug-in)": "import pandas",
    "fastapi": "import fastapi",
    "params.yaml load and validation": "from tasks.core.params import load_params; load_params()",
    "onnxruntime": "import onnxruntime",
    "uvicorn": "import uvicorn",
    "prometheus_client": "import prometheus_client",
    "the server's modules (tasks.serving.app, __main__)": "import tasks.serving.app, tasks.serving.__main__",
}


def import_seconds(code: str, repeats: int = 3) -> float:
    """Median wall seconds of `code` in a fresh interpreter (the interpreter's own start excluded)."""
    timed = f"import time; t = time.perf_counter(); {code}; print(time.perf_counter() - t)"
    runs = [
        float(
            subprocess.run(
                [sys.executable, "-c", timed], cwd=REPO_ROOT, capture_output=True, text=True, check=True
            ).stdout
        )
        for _ in range(repeats)
    ]
    return statistics.median(runs)


def run(starts: int = 5) -> list[Record]:
    """The demo-size model (21 -> 32 -> 16 -> 1) and the bench profile (params scaling.bench_hidden)."""
    from tasks.core.params import load_params

    bench_widths = (21, *load_params().scaling.bench_hidden, 1)
    with tempfile.TemporaryDirectory(dir=Path.home()) as tmp:
        tmp = Path(tmp)
        demo = measure(tmp / "demo", write_mlp_onnx(tmp / "demo.onnx"), "demo", starts)
        big = measure(tmp / "bench", write_mlp_onnx(tmp / "bench.onnx", bench_widths), "bench", starts)
    p50, p99 = float(np.percentile(big["lat"], 50)), float(np.percentile(big["lat"], 99))
    return [
        Record(
            "serve_cold_start_s",
            statistics.median(big["cold"]),
            "s",
            "<= 1.0",
            {
                "bench_model_starts_s": [round(c, 3) for c in big["cold"]],
                "demo_model_median_s": round(statistics.median(demo["cold"]), 3),
                "bench_model_bytes": big["model_bytes"],
                "import_s": {name: round(import_seconds(code), 3) for name, code in COLD_IMPORTS.items()},
            },
        ),
        Record(
            "serve_vs_raw_ort",
            big["served"] / big["raw"],
            "ratio",
            ">= 0.7",
            {
                "server_requests_per_s": round(big["served"], 1),
                "raw_ort_batches_per_s": round(big["raw"], 1),
                "demo_model_ratio": round(demo["served"] / demo["raw"], 4),
                "demo_server_requests_per_s": round(demo["served"], 1),
                "demo_raw_ort_batches_per_s": round(demo["raw"], 1),
                "batch": BATCH,
                "client_threads": 2,
                "protocol": "OIP v2 JSON",
                "widths": list(bench_widths),
            },
        ),
        Record(
            "serve_p99_ms",
            p99,
            "ms",
            "<= 100",
            {
                "p50_ms": round(p50, 3),
                "rate_per_s": round(big["rate"], 1),
                "requests": len(big["lat"]),
                "batch": BATCH,
                "demo_p50_ms": round(float(np.percentile(demo["lat"], 50)), 3),
                "demo_p99_ms": round(float(np.percentile(demo["lat"], 99)), 3),
            },
        ),
    ]


if __name__ == "__main__":
    for r in run():
        print(json.dumps(r.to_dict()))
