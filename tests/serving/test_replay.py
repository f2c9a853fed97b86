"""The replay client over real HTTP, against a small recording server on loopback."""

from __future__ import annotations

import asyncio
import hashlib
import json
import socket
import threading
import time
import uuid

import pandas as pd
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from tasks.canary import replay as rp
from tasks.serving.paths import address_file, server_url

ROWS = [{"email_id": i, "x": i * 1.5, "word": f"w{i}"} for i in range(1, 21)]
KEYS = [str(r["email_id"]) for r in ROWS]
LABELS = [int(i % 3 == 0) for i in range(1, 21)]


class Recorder:
    """A fake model server: sticky split by key, 422 for rows whose email_id is in `refuse`,
    a pause of `delay_s` per prediction; records every request it receives."""

    def __init__(
        self,
        weight: float = 50.0,
        refuse: frozenset[int] = frozenset(),
        delay_s: float = 0.0,
        broken: frozenset[str] = frozenset(),
    ):
        """`broken`: variants that fail every request (a 500 naming the variant, as the server answers a
        featurize failure), except that a broken challenger answers 200 without a score."""
        self.weight, self.refuse, self.delay_s, self.broken = weight, refuse, delay_s, broken
        self.predicts: list[dict] = []
        self.feedbacks: list[dict] = []
        self.served: dict[str, dict] = {}
        self.lock = threading.Lock()

    def app(self) -> FastAPI:
        app = FastAPI()  # Request is imported at module level: annotations are strings here

        @app.post("/v1/predict")
        async def predict(request: Request):
            body = await request.json()
            with self.lock:
                self.predicts.append({"body": body, "t": time.monotonic()})
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            row = body["rows"][0]
            if row["email_id"] in self.refuse:
                return JSONResponse({"error": f"row {row['email_id']} refused"}, status_code=422)
            bucket = int(hashlib.sha256(body["key"].encode()).hexdigest(), 16) % 100 if body.get("key") else 0
            variant = "challenger" if bucket < self.weight else "champion"
            rid = uuid.uuid4().hex
            if variant in self.broken and variant == "champion":
                error = {"error": "model model-v1: rows featurize to non-finite or misshaped inputs"}
                return JSONResponse(error, status_code=500, headers={"X-Sluice-Variant": variant})
            if variant in self.broken:
                return {"request_id": rid, "variant": variant, "predictions": [{"label": 0, "variant": variant}]}
            with self.lock:
                self.served[rid] = {"key": body.get("key"), "variant": variant, "row": row}
            return {
                "request_id": rid,
                "model_name": "emails",
                "model_version": "model-v1",
                "variant": variant,
                "predictions": [
                    {"score": 0.3, "label": 0, "model_version": "model-v1", "variant": variant, "request_id": rid}
                ],
            }

        @app.post("/v1/feedback")
        async def feedback(request: Request):
            body = await request.json()
            with self.lock:
                self.feedbacks.append({"body": body, "t": time.monotonic()})
            if body["request_id"] not in self.served:
                return JSONResponse({"error": "unknown request id"}, status_code=404)
            return {"request_id": body["request_id"], "labels": 1}

        return app


@pytest.fixture
def serve():
    """serve(recorder) -> base URL of a real uvicorn server on 127.0.0.1 (a free port), stopped after the test."""
    import uvicorn

    started = []

    def start(recorder: Recorder) -> str:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        server = uvicorn.Server(uvicorn.Config(recorder.app(), log_level="warning", lifespan="off"))
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        started.append((server, thread, sock))
        deadline = time.monotonic() + 10
        while not server.started:
            assert time.monotonic() < deadline, "the test server did not start"
            time.sleep(0.01)
        return f"http://127.0.0.1:{sock.getsockname()[1]}"

    yield start
    for server, thread, sock in started:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def test_replays_rows_at_the_rate_with_sticky_keys_and_delayed_feedback(serve):
    rec = Recorder(weight=50)
    url = serve(rec)
    result = rp.replay(url, ROWS, LABELS, KEYS, count=40, rate=100.0, max_seconds=10, feedback_delay_s=0.2)
    assert (result.sent, result.ok, result.failed) == (40, 40, 0)
    assert (result.feedback_sent, result.feedback_failed) == (40, 0)
    assert sum(result.variants.values()) == 40 and set(result.variants) <= {"champion", "challenger"}
    assert result.errors == []
    # the rows cycle (each twice: 40 requests, 20 rows; arrival order may differ under load), each keyed by its id
    bodies = sorted(rec.predicts, key=lambda p: p["t"])
    assert sorted(json.dumps(p["body"]["rows"]) for p in bodies) == sorted(json.dumps([r]) for r in ROWS * 2)
    assert all(p["body"]["key"] == str(p["body"]["rows"][0]["email_id"]) for p in bodies)
    # sticky: a key always met the same variant
    by_key: dict[str, set[str]] = {}
    for s in rec.served.values():
        by_key.setdefault(s["key"], set()).add(s["variant"])
    assert all(len(v) == 1 for v in by_key.values())
    # paced: 40 requests at 100/s span about 0.39 s
    span = bodies[-1]["t"] - bodies[0]["t"]
    assert 0.2 < span < 3.0, span
    # feedback: each served request once, with its row's gold label, after the delay
    assert sorted(f["body"]["request_id"] for f in rec.feedbacks) == sorted(rec.served)
    for f in rec.feedbacks:
        served = rec.served[f["body"]["request_id"]]
        assert f["body"]["label"] == LABELS[KEYS.index(served["key"])]
    first_fb = min(f["t"] for f in rec.feedbacks)
    assert first_fb - bodies[0]["t"] >= 0.2


def test_offset_walks_on_through_the_rows(serve):
    rec = Recorder()
    url = serve(rec)
    result = rp.replay(url, ROWS, None, KEYS, count=5, rate=500.0, max_seconds=10, offset=18)
    assert result.ok == 5
    assert sorted(p["body"]["key"] for p in rec.predicts) == sorted(["19", "20", "1", "2", "3"])


def test_failed_requests_are_counted_and_get_no_feedback(serve):
    rec = Recorder(refuse=frozenset({3, 7}))
    url = serve(rec)
    result = rp.replay(url, ROWS, LABELS, KEYS, count=20, rate=200.0, max_seconds=10, feedback_delay_s=0.0)
    assert (result.sent, result.ok, result.failed) == (20, 18, 2)
    assert result.feedback_sent == 18 and len(rec.feedbacks) == 18
    assert any("HTTP 422: row 3 refused" in e for e in result.errors), result.errors


def test_every_request_without_a_usable_score_is_a_failure_of_the_variant_the_server_names(serve):
    """A 500 (the server's featurize failure, X-Sluice-Variant: champion), a 200 without a score (the
    challenger), and a refusal before any variant answered ("none") are each counted where they belong."""
    rec = Recorder(weight=50, refuse=frozenset({3}), broken=frozenset({"champion", "challenger"}))
    url = serve(rec)
    result = rp.replay(url, ROWS, LABELS, KEYS, count=20, rate=200.0, max_seconds=10, feedback_delay_s=0.0)
    assert (result.sent, result.ok, result.failed) == (20, 0, 20)
    assert set(result.failed_by_variant) == {"champion", "challenger", "none"}
    assert result.failed_by_variant["none"] == 1 and sum(result.failed_by_variant.values()) == 20
    assert result.feedback_sent == 0 and rec.feedbacks == []
    assert any("HTTP 500: model model-v1: rows featurize" in e and e.endswith("[champion]") for e in result.errors)
    assert any("no request_id or no finite score" in e and e.endswith("[challenger]") for e in result.errors)


def test_time_is_bounded(serve):
    rec = Recorder()
    url = serve(rec)
    t0 = time.monotonic()
    result = rp.replay(url, ROWS, LABELS, KEYS, count=10_000, rate=20.0, max_seconds=0.5, feedback_delay_s=0.1)
    elapsed = time.monotonic() - t0
    assert 8 <= result.sent <= 11 and result.ok == result.sent
    assert result.feedback_sent == result.ok
    assert elapsed < 3.0, elapsed


def test_a_slow_server_times_out_as_failures(serve):
    rec = Recorder(delay_s=1.0)
    url = serve(rec)
    result = rp.replay(url, ROWS, None, KEYS, count=3, rate=50.0, max_seconds=5, timeout_s=0.3)
    assert (result.sent, result.ok, result.failed, result.feedback_sent) == (3, 0, 3, 0)
    assert all("Timeout" in e for e in result.errors), result.errors


def test_no_server_is_a_failure_not_a_crash():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    result = rp.replay(f"http://127.0.0.1:{port}", ROWS, LABELS, KEYS, count=2, rate=100.0, max_seconds=5)
    assert (result.sent, result.ok, result.failed) == (2, 0, 2)


def test_arguments_are_checked():
    with pytest.raises(ValueError, match="no rows"):
        rp.replay("http://127.0.0.1:9", [], None, count=1, rate=1, max_seconds=1)
    with pytest.raises(ValueError, match="labels"):
        rp.replay("http://127.0.0.1:9", ROWS, LABELS[:3], count=1, rate=1, max_seconds=1)
    with pytest.raises(ValueError, match="rate > 0"):
        rp.replay("http://127.0.0.1:9", ROWS, None, count=1, rate=0, max_seconds=1)


def test_server_url_reads_the_address_file(tmp_path):
    address = address_file(tmp_path)
    address.parent.mkdir()
    address.write_text(json.dumps({"host": "127.0.0.1", "port": 8123, "url": "http://127.0.0.1:8123/", "pid": 1}))
    assert server_url(tmp_path) == "http://127.0.0.1:8123"
    address.write_text(json.dumps({"host": "0.0.0.0", "port": 8124}))
    assert server_url(tmp_path) == "http://127.0.0.1:8124"
    address.write_text(json.dumps({"host": "::1", "port": 8125}))
    assert server_url(tmp_path) == "http://[::1]:8125"
    with pytest.raises(FileNotFoundError, match="python -m tasks.serving"):
        server_url(tmp_path / "elsewhere")


@pytest.fixture
def gold_home(settings, emails):
    """SLUICE_HOME with a gold test set of 30 real rows (with the gold label), as the demo feed writes it."""
    from tasks.core.files import atomic_write_parquet

    settings.layout.gold.mkdir(parents=True, exist_ok=True)
    atomic_write_parquet(settings.layout.gold / "test.parquet", emails.sample(30, random_state=0))
    return settings


def test_load_replay_rows_gives_raw_json_rows(gold_home, emails):
    from tasks.plugins import emails as ds

    rows, keys, labels = rp.load_replay_rows(gold_home.layout.gold, ds)
    assert len(rows) == len(keys) == len(labels) == 30
    assert all(list(r) == ds.RAW_COLUMNS for r in rows)  # no gold label among the raw columns
    json.dumps(rows, allow_nan=False)
    expected = emails.sample(30, random_state=0)
    assert keys == [str(v) for v in expected[ds.ID_COLUMN]]
    assert labels == expected[ds.GOLD_COLUMN].tolist()
    assert rows[0] == json.loads(json.dumps(expected[ds.RAW_COLUMNS].iloc[0].to_dict(), default=int))


def test_load_replay_rows_writes_datetimes_as_utc_iso(tmp_path):
    from types import SimpleNamespace

    df = pd.DataFrame({"id": [1, 2], "t": pd.to_datetime(["2012-01-01 06:16:41", "2012-01-02 00:00:00"]), "y": [0, 1]})
    df.to_parquet(tmp_path / "test.parquet")
    ds = SimpleNamespace(RAW_COLUMNS=["id", "t"], ID_COLUMN="id", GOLD_COLUMN="y")
    rows, keys, labels = rp.load_replay_rows(tmp_path, ds)
    assert rows == [{"id": 1, "t": "2012-01-01T06:16:41Z"}, {"id": 2, "t": "2012-01-02T00:00:00Z"}]
    assert (keys, labels) == (["1", "2"], [0, 1])


def test_cli_replays_the_gold_set_to_the_address_in_sluice_home(gold_home, serve, capsys):
    rec = Recorder()
    url = serve(rec)
    address_file(gold_home.home).parent.mkdir(parents=True)
    address_file(gold_home.home).write_text(json.dumps({"url": url}))
    assert rp.main(["--rows", "12", "--rate", "200", "--feedback-delay", "0"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {k: out[k] for k in ("sent", "ok", "failed", "feedback_sent")} == {
        "sent": 12,
        "ok": 12,
        "failed": 0,
        "feedback_sent": 12,
    }
    assert {p["body"]["key"] for p in rec.predicts} <= {
        str(r["email_id"]) for _, r in pd.read_parquet(gold_home.layout.gold / "test.parquet").iterrows()
    }
    rec.refuse = frozenset({p["body"]["rows"][0]["email_id"] for p in rec.predicts})
    assert rp.main(["--url", url, "--rows", "3", "--rate", "200", "--no-feedback"]) == 1
