"""The model server on raw text: serve_vs_raw_ort_text.

The transformer of the text bench profile (params.yaml `scaling.bench_text_models.transformer`),
trained for a few steps on reviews (a throughput figure: its quality does not matter here), exported
through the project's own path (tasks.compression.export.export_onnx, fp32, with its tokenizer in the
artifact's metadata as the compress step writes it), registered as model.served.onnx and promoted in a
registry of its own, served by a real `python -m tasks.serving` on loopback with the reviews plug-in.

  serve_vs_raw_ort_text  requests/s of /v1/predict on 32 raw review rows per request (the server
                         validates them, tokenizes them with the artifact's tokenizer, scores them, logs
                         them) over batches/s of a raw onnxruntime session on the same ONNX file, with the
                         server's session options, fed the ids that tokenizer gives for the same batches
                         (tokenized once, before the timed loop). The arms alternate (server, raw, ...);
                         the figure is the median of the rounds' ratios: the machines here are shared,
                         and the load from other work drifts between rounds.

After each round's raw arm the server's steps are timed in this process on some of the same bodies
(parse and validate, frame, tokenize, onnxruntime; wall and CPU time), and the server process's CPU
time per request over the round is read (psutil, its /metrics count): the rest of a request (HTTP, the
response, the prediction log, metrics) is that less the steps' CPU. onnxruntime's CPU per batch over
the server's CPU per request (`cpu_ratio` in the details) is a cross-check of the figure that the
load from other work moves much less than it moves requests/s.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.record import Record
from bench.registry_data import settings_at
from bench.serving import BATCH, raw_ort_rate, server_rate
from ops.model_server import ServerProcess

SEED = 0
BATCHES = 64  # distinct request bodies (64 x 32 = 2,048 review rows), cycled through by both arms
ROUNDS = 7  # server, raw, split, server, raw, split, ...
SERVER_S, RAW_S = 3.0, 3.0
SPLIT_BODIES = 8
CLIENT_THREADS = 2
TRAIN_ROWS, TRAIN_EPOCHS = 256, 1  # a few optimizer steps: a throughput figure, not a quality one


def _model(ds: Any, train: Any, profile: Any, tmp: Path) -> tuple[Path, dict[str, Any]]:
    """The bench profile's transformer, trained a few steps, exported with its tokenizer: (onnx, facts)."""
    import torch

    from tasks.compression.export import export_onnx, write_metadata
    from tasks.core.params import load_params
    from tasks.models import attach_tokenizer, tokenizer_metadata
    from tasks.models.artifact import read_metadata
    from tasks.models.tokens import Encoder, train_tokenizer
    from tasks.training.loop import fit_in_memory

    arch = profile.params
    tok = train_tokenizer(ds.texts(train), arch["vocab_size"])
    rows = train.iloc[:TRAIN_ROWS]
    ids = Encoder(tok, arch["max_len"], arch["vocab_size"]).encode(ds.texts(rows))
    p = load_params().train.replace(model=profile.model_dump(mode="json"), epochs=TRAIN_EPOCHS, seed=SEED)
    y = torch.tensor(rows[ds.GOLD_COLUMN].to_numpy(), dtype=torch.float32)
    model, losses = fit_in_memory(torch.from_numpy(ids), y, p)
    attach_tokenizer(model, tok)
    onnx_path = export_onnx(model, tmp / "model.served.onnx")
    write_metadata(onnx_path, {**read_metadata(onnx_path), **tokenizer_metadata(model)})
    facts = {
        "module": profile.module,
        "params": dict(arch),
        "parameters": sum(t.numel() for t in model.parameters()),
        "trained": f"{TRAIN_EPOCHS} epoch(s) on {TRAIN_ROWS} reviews ({len(losses)} loss line(s)), seed {SEED}",
        "export": "tasks.compression.export.export_onnx (fp32, basic optimization) + tokenizer_metadata",
        "onnx_bytes": onnx_path.stat().st_size,
    }
    return onnx_path, facts


def _server_params(tmp: Path) -> Path:
    """The checkout's params.yaml with the reviews plug-in as the served dataset."""
    import yaml

    from tasks.core.settings import REPO_ROOT

    params = yaml.safe_load((REPO_ROOT / "params.yaml").read_text())
    params["dataset"] = {"module": "tasks.plugins.reviews", "params": {}}
    path = tmp / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    return path


STEPS = ("parse_validate", "frame", "tokenize", "onnxruntime")


def _served_requests(url: str) -> float:
    """The server's count of answered /v1/predict requests (its /metrics)."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(url + "/metrics", timeout=10).text
    return sum(
        s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == "sluice_requests_total" and s.labels.get("endpoint") == "predict"
    )


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system, all threads) of a process so far."""
    import psutil

    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


def _splitter(ds: Any, onnx_path: Path, encoder: Any) -> Any:
    """A function timing the server's own steps on request bodies in this process: parse + validate
    (the generated /v1 body model), the DataFrame, tokenize (the dataset's cleaned texts, then the
    artifact's tokenizer), onnxruntime (the server's session options)."""
    import onnxruntime as ort
    import pandas as pd

    from tasks.serving.v1_models import load_row_model, predict_request_model

    request_model = predict_request_model(load_row_model(ds), 1024)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads, opts.log_severity_level = 1, 1, 3
    sess = ort.InferenceSession(str(onnx_path), opts, providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name

    def split(bodies: list[bytes]) -> dict[str, dict[str, float]]:
        """{"wall_ms": {step: ms}, "cpu_ms": {step: ms}} per request, means over `bodies`."""
        wall: dict[str, list[float]] = {k: [] for k in STEPS}
        cpu: dict[str, list[float]] = {k: [] for k in STEPS}
        for body in bodies:
            marks = [(time.perf_counter(), time.process_time())]  # process: the tokenizer's threads count
            req = request_model.model_validate(json.loads(body))
            marks.append((time.perf_counter(), time.process_time()))
            df = pd.DataFrame([r.model_dump() for r in req.rows], columns=list(ds.RAW_COLUMNS))
            marks.append((time.perf_counter(), time.process_time()))
            ids = encoder.encode(ds.texts(df))
            marks.append((time.perf_counter(), time.process_time()))
            c3 = time.thread_time()  # one intra-op thread: the model runs in this one
            sess.run(None, {name: ids})
            marks.append((time.perf_counter(), marks[-1][1] + time.thread_time() - c3))
            for k, (m0, m1) in zip(STEPS, zip(marks, marks[1:])):
                wall[k].append((m1[0] - m0[0]) * 1000)
                cpu[k].append((m1[1] - m0[1]) * 1000)
        return {
            "wall_ms": {k: statistics.mean(v) for k, v in wall.items()},
            "cpu_ms": {k: statistics.mean(v) for k, v in cpu.items()},
        }

    return split


def run() -> list[Record]:
    import httpx
    import onnxruntime as ort

    from tasks.core.params import repo_params
    from tasks.datasets import load_dataset
    from tasks.models.artifact import read_metadata
    from tasks.models.tokens import Encoder
    from tasks.registry import Registry

    profile = repo_params().scaling.bench_text_models["transformer"]
    ds = load_dataset("tasks.plugins.reviews")
    source = ds.load_source()
    order = np.random.default_rng(SEED).permutation(len(source))
    served_rows = source.iloc[order[: BATCHES * BATCH]]
    train = source.iloc[order[BATCHES * BATCH :]]
    batches = [served_rows.iloc[i * BATCH : (i + 1) * BATCH] for i in range(BATCHES)]
    bodies = [json.dumps({"rows": b[list(ds.RAW_COLUMNS)].to_dict("records")}).encode() for b in batches]

    with tempfile.TemporaryDirectory(dir=Path.home()) as tmp:
        tmp = Path(tmp)
        onnx_path, facts = _model(ds, train, profile, tmp)
        meta = read_metadata(onnx_path)
        encoder = Encoder(meta["tokenizer"], meta["max_len"], meta["vocab_size"], meta["tokenizer_sha256"])
        ids = [encoder.encode(ds.texts(b)) for b in batches]  # the raw arm's inputs: tokenized once, here
        check = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
        input_name = check.get_inputs()[0].name
        expected = check.run(None, {input_name: ids[0]})[0].reshape(-1)
        home = tmp / "home"
        reg = Registry(settings_at(home))
        version = reg.register_model("bench-text", {"model.served.onnx": onnx_path}, {"data_version": "data-v1"})
        reg.promote(version["model_version"], "bench")
        with ServerProcess(home, _server_params(tmp)) as server:
            server.start(timeout_s=120)
            url, proc = server.url, server.proc
            # The two arms score the same: the same model and the same ids.
            r = httpx.post(url + "/v1/predict", content=bodies[0], headers={"content-type": "application/json"})
            assert r.status_code == 200, r.text
            np.testing.assert_allclose([p["score"] for p in r.json()["predictions"]], expected, rtol=1e-4, atol=1e-5)
            split = _splitter(ds, onnx_path, encoder)
            split(bodies[:2])  # warm
            served, raw, splits, server_cpu_ms = [], [], [], []
            for i in range(ROUNDS):  # server, raw, split: each round's three adjacent in time
                n0, c0 = _served_requests(url), _cpu_s(proc.pid)
                served.append(server_rate(url, bodies, SERVER_S, CLIENT_THREADS, path="/v1/predict"))
                server_cpu_ms.append((_cpu_s(proc.pid) - c0) * 1000 / (_served_requests(url) - n0))
                raw.append(raw_ort_rate(onnx_path, ids, RAW_S, input_name=input_name, warm=3))
                splits.append(split(bodies[(i * SPLIT_BODIES) % BATCHES :][:SPLIT_BODIES]))
                print(f"server {served[-1]:.1f} req/s, raw onnxruntime {raw[-1]:.1f} batches/s")

    ratios = [a / b for a, b in zip(served, raw)]

    def med(values: Any) -> float:
        return round(statistics.median(values), 2)

    # The server's CPU per request = its steps' CPU timed in process + the rest (HTTP, the response, the
    # prediction log, metrics), per round; the medians over the rounds.
    cpu_rest = [c - sum(sp["cpu_ms"].values()) for c, sp in zip(server_cpu_ms, splits)]
    cpu_ratios = [sp["cpu_ms"]["onnxruntime"] / c for sp, c in zip(splits, server_cpu_ms)]
    tokens = np.concatenate(ids)
    return [
        Record(
            "serve_vs_raw_ort_text",
            statistics.median(ratios),
            "ratio",
            ">= 0.5",
            {
                "server_requests_per_s": round(statistics.median(served), 2),
                "raw_ort_batches_per_s": round(statistics.median(raw), 2),
                "ratio_of_the_arms_medians": round(statistics.median(served) / statistics.median(raw), 3),
                "server_rounds_per_s": [round(v, 2) for v in served],
                "raw_rounds_per_s": [round(v, 2) for v in raw],
                "round_ratios": [round(v, 3) for v in ratios],
                "arms": (
                    f"alternated: server {SERVER_S:g} s, raw {RAW_S:g} s, in-process split, x {ROUNDS} rounds; "
                    "the value is the median of the rounds' ratios (each round's arms adjacent in time, the load "
                    "from other work drifts between rounds)"
                ),
                "batch": BATCH,
                "client_threads": CLIENT_THREADS,
                "protocol": "POST /v1/predict, JSON raw rows (review_id, product, review)",
                "raw_arm": (
                    f"onnxruntime InferenceSession on the same file, CPU, intra_op 1, inter_op 1 (as the server), "
                    f"fed {input_name} int64 [32, max_len] from the artifact's tokenizer, tokenized before the loop"
                ),
                "rows": (
                    f"{BATCHES * BATCH} real reviews of the reviews plug-in's source (seeded permutation, "
                    f"seed {SEED}), {BATCHES} distinct bodies cycled by both arms; the tokenizer was trained on "
                    "the other source texts"
                ),
                "nonpad_tokens_per_row_mean": round(float((tokens != 0).sum(1).mean()), 1),
                "model": facts,
                "cpu_ratio": round(statistics.median(cpu_ratios), 3),
                "cpu_ratio_rounds": [round(v, 3) for v in cpu_ratios],
                "cpu_ratio_note": (
                    "a cross-check less sensitive to the load from other work: onnxruntime's CPU time per batch "
                    "(in this process, right after the round's raw arm) over the server process's CPU time per "
                    "/v1/predict request (all its threads, psutil; requests counted by its /metrics) in the round"
                ),
                "server_ms_per_request": med(1000 / v for v in served),
                "server_cpu_ms_per_request": med(server_cpu_ms),
                "server_cpu_split_ms": {
                    **{k: med(sp["cpu_ms"][k] for sp in splits) for k in STEPS},
                    "rest": med(cpu_rest),
                },
                "steps_wall_ms_in_process": {k: med(sp["wall_ms"][k] for sp in splits) for k in STEPS},
                "split_note": (
                    f"the server's steps (parse + validate with the generated /v1 body model, the DataFrame, "
                    f"clean + tokenize, onnxruntime) run in this process on {SPLIT_BODIES} of the same bodies after "
                    "each round's raw arm, means, then the median over rounds; `rest` is the server process's CPU "
                    "per request less them: HTTP, the response, the prediction log, metrics. The server's "
                    "clean_text cache is warm for repeated bodies, as it is here"
                ),
            },
        )
    ]


if __name__ == "__main__":
    for rec in run():
        print(json.dumps(rec.to_dict()))
