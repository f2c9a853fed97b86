"""The model server as a real process: OIP v2 with Triton's client, raw-row prediction, feedback,
metrics, the sticky weighted split, shadow mode, hot swaps under load, corrupt artifacts, bad
input, loopback-only sockets, and its own OpenAPI document fuzzed by schemathesis."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pandas as pd
import pytest
import yaml

from ops.model_server import ServerProcess
from tasks.core.settings import REPO_ROOT, Settings
from tasks.registry import Registry
from tasks.serving.paths import prediction_log
from tasks.serving.predlog import read_log
from tasks.serving.split import choose_variant
from tests.conftest import row
from tests.helpers.server import wait_for, write_onnx

MAX_ROWS, MAX_BODY = 64, 64 * 1024
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A registry with four real model versions (v4's ONNX is garbage), v1 champion, and the
    server following it (poll every 0.1 s, small limits)."""
    from tasks.datasets import load_dataset

    tmp = tmp_path_factory.mktemp("serving")
    home = tmp / "home"
    settings = Settings.from_env({"SLUICE_HOME": str(home)})
    reg = Registry(settings)
    ds = load_dataset()
    n = len(ds.FEATURE_NAMES)
    paths = {}
    for i in (1, 2, 3):
        paths[f"model-v{i}"] = write_onnx(tmp / f"m{i}" / "model.int8.onnx", n, seed=i)
        reg.register_model(f"run-{i}", {"model.int8.onnx": paths[f"model-v{i}"]}, {"data_version": "data-v1"})
    garbage = tmp / "m4" / "model.int8.onnx"
    garbage.parent.mkdir()
    garbage.write_bytes(b"this is not an onnx model" * 10)
    reg.register_model("run-4", {"model.int8.onnx": garbage}, {"data_version": "data-v1"})
    reg.promote("model-v1", "test")
    params = yaml.safe_load((REPO_ROOT / "params.yaml").read_text())
    params["serving"].update(
        {
            "poll_s": 0.1,
            "max_rows": MAX_ROWS,
            "max_body_bytes": MAX_BODY,
            "log_flush_s": 0.1,
            "drain_s": 0.2,
        }
    )
    params_file = tmp / "params.yaml"
    params_file.write_text(yaml.safe_dump(params))
    server = ServerProcess(home, params_file)
    try:
        server.start(timeout_s=90)
        yield {"server": server, "reg": reg, "home": home, "paths": paths, "ds": ds, "n": n, "params_file": params_file}
    finally:
        server.stop()


def ort_scores(path: Path, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return sess.run(None, {"features": x.astype(np.float32)})[0].reshape(-1)


def serving(world) -> dict:
    return httpx.get(world["server"].url + "/v1/serving", timeout=5).json()


def set_state(world, champion: str, challenger: str | None = None, weight: int = 0, mode: str = "split") -> None:
    """Move the registry's serving state with its own API (as the pipeline does) and wait for the server."""
    reg: Registry = world["reg"]
    s = reg.state()["serving"]
    if (s["champion"] or {}).get("model_version") != champion:
        reg.promote(champion, "test")
        s = reg.state()["serving"]
    current = (s["challenger"] or {}).get("model_version")
    if current and current != challenger:
        reg.rollback_canary("test")
    if challenger:
        reg.start_canary(challenger, weight, mode, "test")
    want = {"champion": champion, **({"challenger": challenger} if challenger else {})}

    def applied():
        got = serving(world)
        return {v: m["model_version"] for v, m in got["variants"].items()} == want and (
            not challenger or (got["challenger_weight"] == weight and got["mode"] == mode)
        )

    wait_for(applied, 30, f"server to serve {want}")


def rows(emails, k: int, start: int = 0) -> list[dict]:
    from tasks.plugins.emails import GOLD_COLUMN

    df = emails.drop(columns=[GOLD_COLUMN]).iloc[start : start + k]
    return json.loads(df.to_json(orient="records"))


# ---- protocol ---------------------------------------------------------------------------------
def test_listens_on_loopback_only(world):
    import psutil

    pid = world["server"].proc.pid
    pids = {pid} | {c.pid for c in psutil.Process(pid).children(recursive=True)}
    seen = {
        (c.laddr.ip, c.laddr.port)
        for c in psutil.net_connections("inet")
        if c.status == psutil.CONN_LISTEN and c.pid in pids
    }
    assert seen, "the server should listen on a socket"
    assert all(ip in ("127.0.0.1", "::1") for ip, _ in seen), seen


def test_triton_client_speaks_to_it(world):
    import tritonclient.http as triton

    set_state(world, "model-v1")
    server = world["server"]
    client = triton.InferenceServerClient(server.url.removeprefix("http://"))
    assert client.is_server_live() and client.is_server_ready() and client.is_model_ready("emails")
    meta = client.get_model_metadata("emails")
    assert meta["name"] == "emails" and meta["versions"] == ["model-v1"] and meta["platform"] == "onnxruntime_onnx"
    assert meta["inputs"] == [{"name": "features", "datatype": "FP32", "shape": [-1, world["n"]]}]
    assert meta["outputs"][0]["datatype"] == "FP32"
    x = np.random.default_rng(0).random((32, world["n"]), dtype=np.float32)
    expected = ort_scores(world["paths"]["model-v1"], x)
    for binary in (True, False):
        inp = triton.InferInput("features", list(x.shape), "FP32")
        inp.set_data_from_numpy(x, binary_data=binary)
        outputs = [triton.InferRequestedOutput("p_spam", binary_data=binary)]
        result = client.infer("emails", [inp], outputs=outputs)
        np.testing.assert_allclose(result.as_numpy("p_spam"), expected, rtol=1e-6)
        assert result.get_response()["model_version"] == "model-v1"
    result = client.infer("emails", [inp])  # no outputs named: binary by default
    np.testing.assert_allclose(result.as_numpy("p_spam"), expected, rtol=1e-6)
    pinned = client.infer("emails", [inp], model_version="model-v1")
    assert pinned.get_response()["model_version"] == "model-v1"
    with pytest.raises(triton.InferenceServerException, match="unknown version 'model-v9'"):
        client.infer("emails", [inp], model_version="model-v9")
    with pytest.raises(triton.InferenceServerException, match="unknown model 'spam'"):
        client.get_model_metadata("spam")
    client.close()


def test_predict_scores_raw_rows_with_the_plugins_featurize(world, emails):
    set_state(world, "model-v1")
    body = rows(emails, 20)
    r = httpx.post(world["server"].url + "/v1/predict", json={"rows": body}, timeout=10)
    assert r.status_code == 200, r.text
    out = r.json()
    df = pd.DataFrame(body)
    expected = ort_scores(world["paths"]["model-v1"], world["ds"].featurize(df))
    preds = out["predictions"]
    assert len(preds) == 20 and out["request_id"] == r.headers["x-request-id"]
    np.testing.assert_allclose([p["score"] for p in preds], expected, rtol=1e-6)
    assert all(
        p["label"] == int(p["score"] >= 0.5)
        and p["model_version"] == "model-v1"
        and p["variant"] == "champion"
        and p["request_id"] == out["request_id"]
        for p in preds
    )


# ---- bad input: a 4xx naming the problem, and the server keeps serving ------------------------
def _bad_cases():
    good = row()
    many = [row(email_id=i) for i in range(MAX_ROWS + 1)]
    from tasks.plugins.emails import FEATURE_NAMES

    n = len(FEATURE_NAMES)
    infer_ok = {"inputs": [{"name": "features", "datatype": "FP32", "shape": [1, n], "data": [0.0] * n}]}
    return {
        "malformed_json": ("/v1/predict", b'{"rows": [', 400, "malformed JSON"),
        "missing_column": (
            "/v1/predict",
            {"rows": [{k: v for k, v in good.items() if k != "cc"}]},
            422,
            "rows[0].cc: missing column",
        ),
        "extra_column": ("/v1/predict", {"rows": [{**good, "subject": "hi"}]}, 422, "rows[0].subject: unknown column"),
        "wrong_column_name": (
            "/v1/predict",
            {"rows": [{**{k: v for k, v in good.items() if k != "winner"}, "winer": "no"}]},
            422,
            "rows[0].winner: missing column",
        ),
        "wrong_type": ("/v1/predict", {"rows": [{**good, "line_breaks": "eighty"}]}, 422, "rows[0].line_breaks"),
        "wrong_category": ("/v1/predict", {"rows": [{**good, "number": "huge"}]}, 422, "rows[0].number"),
        "nan": (
            "/v1/predict",
            b'{"rows": [' + json.dumps({**good, "num_char": 1.0}).replace("1.0", "NaN").encode() + b"]}",
            422,
            "rows[0].num_char: Input should be a finite number",
        ),
        "infinity": (
            "/v1/predict",
            b'{"rows": [' + json.dumps({**good, "num_char": 1.0}).replace("1.0", "Infinity").encode() + b"]}",
            422,
            "rows[0].num_char: Input should be a finite number",
        ),
        "empty_batch": ("/v1/predict", {"rows": []}, 422, "rows: List should have at least 1 item"),
        "batch_over_limit": ("/v1/predict", {"rows": many}, 422, f"at most {MAX_ROWS} items"),
        "body_over_limit": ("/v1/predict", {"rows": [good], "pad": "k" * MAX_BODY}, 413, "request body over the limit"),
        "not_an_object": ("/v1/predict", [1, 2], 422, "body"),
        "infer_unknown_model": ("/v2/models/spam/infer", infer_ok, 404, "unknown model 'spam'"),
        "infer_unknown_version": (
            "/v2/models/emails/versions/model-v7/infer",
            infer_ok,
            404,
            "unknown version 'model-v7'",
        ),
        "infer_malformed_json": ("/v2/models/emails/infer", b"{nope", 400, "malformed JSON"),
        "infer_wrong_input": (
            "/v2/models/emails/infer",
            {"inputs": [{**infer_ok["inputs"][0], "name": "x"}]},
            400,
            "unknown input 'x'",
        ),
        "infer_wrong_dtype": (
            "/v2/models/emails/infer",
            {"inputs": [{**infer_ok["inputs"][0], "datatype": "INT64"}]},
            400,
            "must be FP32",
        ),
        "infer_wrong_width": (
            "/v2/models/emails/infer",
            {"inputs": [{**infer_ok["inputs"][0], "shape": [1, n - 1], "data": [0.0] * (n - 1)}]},
            400,
            f"{n} features",
        ),
        "infer_short_data": (
            "/v2/models/emails/infer",
            {"inputs": [{**infer_ok["inputs"][0], "data": [0.0] * 5}]},
            400,
            "holds 5 values",
        ),
        "infer_nan": (
            "/v2/models/emails/infer",
            (
                '{"inputs": [{"name": "features", "datatype": "FP32", '
                f'"shape": [1, {n}], "data": [NaN' + ", 0" * (n - 1) + "]}]}"
            ).encode(),
            400,
            "NaN or infinite",
        ),
        "infer_string_data": (
            "/v2/models/emails/infer",
            {"inputs": [{**infer_ok["inputs"][0], "data": ["a"] * n}]},
            400,
            "must be numbers",
        ),
        "infer_empty_batch": (
            "/v2/models/emails/infer",
            {"inputs": [{**infer_ok["inputs"][0], "shape": [0, n], "data": []}]},
            400,
            "empty batch",
        ),
        "infer_over_limit": (
            "/v2/models/emails/infer",
            {"inputs": [{**infer_ok["inputs"][0], "shape": [MAX_ROWS + 1, n], "data": [0] * n}]},
            413,
            f"over the limit of {MAX_ROWS} rows",
        ),
        "feedback_unknown_request": ("/v1/feedback", {"request_id": "f" * 32, "label": 1}, 404, "unknown request id"),
        "feedback_bad_label": ("/v1/feedback", {"request_id": "x", "label": 2}, 422, "label"),
        "feedback_unknown_class_name": (
            "/v1/feedback",
            {"request_id": "x", "label": "maybe"},
            422,
            "unknown class name(s) ['maybe']; the classes are",
        ),
        "not_utf8": (
            "/v1/predict",
            b'{"rows": [{"winner": "\xff\xfe"}]}',
            400,
            "the body is not UTF-8 (JSON must be): invalid start byte at byte 22",
        ),
    }


BAD = _bad_cases()


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_is_a_4xx_naming_the_problem(world, case):
    path, body, status, message = BAD[case]
    url = world["server"].url + path
    if isinstance(body, bytes):
        r = httpx.post(url, content=body, headers={"content-type": "application/json"}, timeout=10)
    else:
        r = httpx.post(url, json=body, timeout=10)
    assert r.status_code == status, r.text
    assert message in r.json()["error"], r.json()
    ok = httpx.post(world["server"].url + "/v1/predict", json={"rows": [row()]}, timeout=10)
    assert ok.status_code == 200, ok.text  # still serving


def test_chunked_body_over_the_limit_is_refused(world):
    def chunks():
        for _ in range(MAX_BODY // 1024 + 2):
            yield b" " * 1024

    r = httpx.post(
        world["server"].url + "/v1/predict", content=chunks(), timeout=10, headers={"content-type": "application/json"}
    )
    assert r.status_code == 413 and "over the limit" in r.json()["error"]


# ---- feedback, log, metrics -------------------------------------------------------------------
def test_feedback_and_the_prediction_log(world, emails):
    set_state(world, "model-v1")
    url = world["server"].url
    one = httpx.post(url + "/v1/predict", json={"rows": rows(emails, 1)}, timeout=10).json()
    three = httpx.post(url + "/v1/predict", json={"rows": rows(emails, 3, 5)}, timeout=10).json()
    assert httpx.post(url + "/v1/feedback", json={"request_id": one["request_id"], "label": 1}).status_code == 200
    r = httpx.post(url + "/v1/feedback", json={"request_id": three["request_id"], "label": 1})
    assert r.status_code == 422 and "list of 3 labels" in r.json()["error"]
    assert (
        httpx.post(url + "/v1/feedback", json={"request_id": three["request_id"], "label": [0, 1, 0]}).status_code
        == 200
    )

    def logged():
        log = read_log(prediction_log(Settings.from_env({"SLUICE_HOME": str(world["home"])})))
        return log if any(r["kind"] == "feedback" and r["request_id"] == three["request_id"] for r in log) else None

    log = wait_for(logged, 10, "the feedback in the log")
    preds = [r for r in log if r["kind"] == "prediction" and r["request_id"] == three["request_id"]]
    assert [p["row"] for p in preds] == [0, 1, 2]
    assert all(
        p["variant"] == "champion" and p["model_version"] == "model-v1" and not p["shadow"] and p["latency_ms"] > 0
        for p in preds
    )
    assert [p["score"] for p in preds] == [p["score"] for p in three["predictions"]]
    fb = [r for r in log if r["kind"] == "feedback" and r["request_id"] == three["request_id"]]
    assert [(f["row"], f["label"]) for f in fb] == [(0, 0), (1, 1), (2, 0)]


def test_metrics_in_prometheus_exposition(world, emails):
    from prometheus_client.parser import text_string_to_metric_families

    set_state(world, "model-v1")
    url = world["server"].url
    httpx.post(url + "/v1/predict", json={"rows": rows(emails, 4)}, timeout=10)
    httpx.post(url + "/v1/predict", json={"rows": []}, timeout=10)
    text = httpx.get(url + "/metrics", timeout=10).text
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    for name in (
        "sluice_requests",
        "sluice_request_errors",
        "sluice_request_latency_seconds",
        "sluice_prediction_score",
        "sluice_model_info",
        "sluice_model_load_failures",
        "sluice_ready",
    ):
        assert name in fams, sorted(fams)
    req = {
        tuple(sorted(s.labels.items())): s.value
        for s in fams["sluice_requests"].samples
        if s.name == "sluice_requests_total"
    }
    assert req[(("endpoint", "predict"), ("variant", "champion"))] >= 1
    info = [s.labels for s in fams["sluice_model_info"].samples if s.value == 1]
    assert {"variant": "champion", "model_version": "model-v1"}.items() <= info[0].items()
    assert any(s.labels.get("code") == "422" for s in fams["sluice_request_errors"].samples)


# ---- traffic split ----------------------------------------------------------------------------
def test_split_holds_its_weight_and_is_sticky(world):
    set_state(world, "model-v1", "model-v2", weight=30)
    url, p = world["server"].url, 0.30
    with httpx.Client(base_url=url, timeout=10) as c:
        n = 400
        got = [c.post("/v1/predict", json={"rows": [row()]}).json()["variant"] for _ in range(n)]
        k = got.count("challenger")
        assert abs(k - n * p) <= 4 * math.sqrt(n * p * (1 - p)), (k, n)
        keys = [f"user-{i}" for i in range(150)]
        first = {key: c.post("/v1/predict", json={"rows": [row()], "key": key}).json()["variant"] for key in keys}
        again = {
            key: c.post("/v1/predict", json={"rows": [row()]}, headers={"X-Sluice-Key": key}).json()["variant"]
            for key in keys
        }
        assert first == again  # sticky: body key == header key
        assert first == {key: choose_variant(key, 30, True) for key in keys}
        kk = list(first.values()).count("challenger")
        assert abs(kk - len(keys) * p) <= 4 * math.sqrt(len(keys) * p * (1 - p)), kk
        v = c.post("/v1/predict", json={"rows": [row()]}, headers={"X-Sluice-Key": "user-1"}).json()
        assert v["model_version"] == ("model-v2" if first["user-1"] == "challenger" else "model-v1")


def test_shadow_mode_mirrors_to_the_challenger(world):
    set_state(world, "model-v1", "model-v2", weight=100, mode="shadow")
    url = world["server"].url
    ids = [
        httpx.post(url + "/v1/predict", json={"rows": [row(), row(email_id=2)]}, timeout=10).json() for _ in range(10)
    ]
    assert all(r["variant"] == "champion" and r["model_version"] == "model-v1" for r in ids)
    wanted = {r["request_id"] for r in ids}

    def shadows():
        log = read_log(prediction_log(Settings.from_env({"SLUICE_HOME": str(world["home"])})))
        return [r for r in log if r["request_id"] in wanted and r["shadow"]]

    mirrored = wait_for(lambda: len(shadows()) == 20 and shadows(), 10, "shadow predictions")
    assert all(r["variant"] == "challenger" and r["model_version"] == "model-v2" for r in mirrored)


# ---- hot swap and failures --------------------------------------------------------------------
def test_hot_swap_drops_no_request(world, emails):
    set_state(world, "model-v1")
    url = world["server"].url
    body = {"rows": rows(emails, 8)}
    stop, failures, seen, counts = threading.Event(), [], set(), [0]
    lock = threading.Lock()

    def client():
        with httpx.Client(base_url=url, timeout=10) as c:
            deadline = time.monotonic() + 60
            while not stop.is_set() and time.monotonic() < deadline:
                try:
                    r = c.post("/v1/predict", json=body)
                    ok = r.status_code == 200
                    with lock:
                        counts[0] += 1
                        if ok:
                            seen.add(r.json()["model_version"])
                        else:
                            failures.append(r.text)
                except httpx.HTTPError as exc:
                    with lock:
                        failures.append(repr(exc))

    threads = [threading.Thread(target=client) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        set_state(world, "model-v1", "model-v2", weight=20)  # canary
        set_state(world, "model-v1", "model-v2", weight=70)  # weight change
        set_state(world, "model-v2")  # promote
        world["reg"].rollback(None, "model-v1", "test: back to v1")  # rollback
        wait_for(lambda: serving(world)["variants"]["champion"]["model_version"] == "model-v1", 30, "rollback")
        set_state(world, "model-v3")  # promote a new version
        time.sleep(0.3)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)
    assert not failures, failures[:5]
    assert counts[0] > 50 and {"model-v1", "model-v2", "model-v3"} <= seen, (counts, seen)


def _load_failures(url: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(url + "/metrics", timeout=10).text
    return sum(
        s.value
        for f in text_string_to_metric_families(text)
        if f.name == "sluice_model_load_failures"
        for s in f.samples
        if s.name == "sluice_model_load_failures_total"
    )


def test_unloadable_or_corrupt_artifact_keeps_the_previous_version_serving(world):
    set_state(world, "model-v1")
    server, reg, url = world["server"], world["reg"], world["server"].url
    before = _load_failures(url)
    reg.promote("model-v4", "test: an artifact onnxruntime cannot load")
    wait_for(lambda: _load_failures(url) > before, 20, "a load failure")
    assert "LOAD FAILED: model-v4: onnxruntime cannot load" in server.output()
    r = httpx.post(url + "/v1/predict", json={"rows": [row()]}, timeout=10)
    assert r.status_code == 200 and r.json()["model_version"] == "model-v1"
    assert httpx.get(url + "/v2/health/ready").status_code == 200
    assert "model-v4" in serving(world)["last_error"]
    # Bytes in the registry's store that no longer match the recorded sha256.
    reg.promote("model-v1", "test")
    cache = _cached_object(reg, "model-v3")
    original = cache.read_bytes()
    cache.chmod(0o644)
    cache.write_bytes(original[:-8] + b"corrupt!")
    try:
        failures = _load_failures(url)
        reg.start_canary("model-v3", 50, "split", "test: corrupt artifact")
        wait_for(lambda: _load_failures(url) > failures, 20, "a sha256 failure")
        assert "LOAD FAILED: model-v3" in server.output() and "sha256" in server.output()
        assert serving(world)["variants"].keys() == {"champion"}
        r = httpx.post(url + "/v1/predict", json={"rows": [row()]}, timeout=10)
        assert r.status_code == 200 and r.json()["model_version"] == "model-v1"
    finally:
        cache.write_bytes(original)
        reg.rollback_canary("test")


def _cached_object(reg: Registry, version: str) -> Path:
    """The DVC cache file holding `version`'s model.int8.onnx."""
    import hashlib

    want = hashlib.md5((reg.root / "models" / version / "model.int8.onnx").read_bytes()).hexdigest()
    found = [p for p in (reg.root / ".dvc" / "cache").rglob("*") if p.is_file() and p.name == want[2:]]
    assert found, f"no cache object {want}"
    return found[0]


# ---- the OpenAPI document, fuzzed -------------------------------------------------------------
def test_schemathesis_finds_no_server_error(world):
    set_state(world, "model-v1")
    st = Path(sys.executable).with_name("st")
    proc = subprocess.run(
        [
            str(st),
            "run",
            world["server"].url + "/openapi.json",
            "--checks",
            "not_a_server_error",
            "--max-examples",
            "25",
            "--seed",
            "7",
            "--generation-database",
            "none",
            "--request-timeout",
            "10",
            "--no-color",
        ],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=world["home"],
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


# ---- process ----------------------------------------------------------------------------------
def test_starts_fast_and_stops_cleanly_on_sigterm(world):
    server = ServerProcess(world["home"], world["params_file"], args=("--port", "0"))
    try:
        server.start(timeout_s=60)
        assert server.started_at and json.loads(server.address_file.read_text())["url"] == server.url
        pid = server.proc.pid
        os.killpg(pid, signal.SIGTERM)
        server.proc.wait(timeout=15)
        assert server.proc.returncode == 0, server.output()
        assert not server.address_file.exists() or json.loads(server.address_file.read_text())["pid"] != pid
        assert "serving: stopped" in server.output()
    finally:
        server.stop()
    # The module's server wrote its address first; a second server's exit must not remove the first's file
    # (only its own): the first one still answers.
    assert httpx.get(world["server"].url + "/v2/health/live").status_code == 200
