"""The shared prediction log (chunks by replica on the object store) and the signed request ids."""

from __future__ import annotations

import time

import pytest

from tasks.serving.predlog import (
    LogStore,
    PredictionLog,
    chunk_span,
    encode_chunk,
    feedback_records,
    prediction_records,
    read_log,
)
from tasks.serving.requestid import BadRequestId, RequestIds, load_key


def preds(i: int, row=None):
    return prediction_records(f"q{i}", [0.25], "champion", "model-v1", 1.5, False, "predict", [row or {"i": i}])


def test_chunks_by_replica_read_back_in_time_order(tmp_path):
    store = LogStore(tmp_path / "log")
    a = PredictionLog(store, "a", flush_s=60, flush_rows=100, retention_s=3600)
    b = PredictionLog(store, "b", flush_s=60, flush_rows=100, retention_s=3600)
    for i in range(12):
        (a if i % 2 else b).append(preds(i))
        time.sleep(0.001)
        if i == 5:
            a.flush(), b.flush()
    a.close()
    b.close()
    keys = store.keys()
    assert {k.split("/")[0] for k in keys} == {"a", "b"} and len(keys) == 4  # two chunks each
    recs = read_log(store)
    assert [r["request_id"] for r in recs] == [f"q{i}" for i in range(12)]
    assert all(r["replica"] == ("a" if int(r["request_id"][1:]) % 2 else "b") for r in recs)
    assert recs[3]["input"] == {"i": 3}
    span = chunk_span([k for k in keys if k.startswith("b/")][0])  # q0's chunk: its first record
    assert span is not None and span[0] <= recs[0]["ts"] < span[1]


def test_a_chunk_cut_short_is_skipped_with_a_warning_naming_it(tmp_path, capsys):
    store = LogStore(tmp_path / "log")
    w = PredictionLog(store, "a", flush_s=60, flush_rows=100, retention_s=3600)
    for i in range(6):
        w.append(preds(i))
        if i == 2:
            w.flush()
    w.close()
    first, second = store.keys()
    path = tmp_path / "log" / first
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])  # cut inside a line
    recs = read_log(store)
    assert [r["request_id"] for r in recs] == ["q3", "q4", "q5"]
    assert f"{first} was cut short: skipped" in capsys.readouterr().err
    # cut at a line boundary: the trailer is missing, so it is still caught
    lines = data.decode().splitlines(keepends=True)
    path.write_bytes("".join(lines[:2]).encode())
    assert [r["request_id"] for r in read_log(store)] == ["q3", "q4", "q5"]
    assert f"{first} was cut short" in capsys.readouterr().err


def test_a_replica_killed_between_flushes_loses_at_most_flush_rows(tmp_path):
    """What a crash loses is what is buffered: never more than flush_rows records (the buffer is
    written as soon as it holds that many), and within flush_s of being appended it is written."""
    store = LogStore(tmp_path / "log")
    # The timer cannot fire during the first part (flush_s an hour): what is written there, the rows did.
    w = PredictionLog(store, "a", flush_s=3600, flush_rows=10, retention_s=3600)
    for i in range(95):
        w.append(preds(i))
        time.sleep(0.001)
    # 95 appended, flush_rows 10: fewer than 10 wait for the timer, so at least 86 are written by the row
    # count. (When it runs the flusher drains the whole buffer, a partial chunk too: what waits is whatever
    # came after its last drain, any count below flush_rows, not 95 mod 10. The flusher thread may take a
    # while to run on a loaded machine: waited for, up to 10 s.)
    t0 = time.monotonic()
    while len(read_log(store)) < 95 - (10 - 1):
        assert time.monotonic() - t0 < 10, f"{len(read_log(store))} of 86 written by the row count"
        time.sleep(0.01)
    w.flush_s = 0.2  # now the timer: read by the flusher at its next wait
    w._wake.set()
    w.append(preds(95))
    t0 = time.monotonic()
    while len(read_log(store)) < 96:
        assert time.monotonic() - t0 < 0.2 + 0.5, "not written within flush_s"
        time.sleep(0.01)
    # A crash now (the flusher gone, nothing closed) loses only what came after the last write.
    w._stop.set()
    w._wake.set()
    w._thread.join()
    for i in range(96, 99):
        w.append(preds(i))
    assert len(read_log(store)) == 96  # the 3 unflushed records are what a SIGKILL would cost


def test_retention_prunes_old_chunks_of_any_replica(tmp_path):
    store = LogStore(tmp_path / "log")
    old = time.time() - 7200
    store.put(f"gone/{int(old * 1000):013d}-{int(old * 1000) + 5:013d}-000000.jsonl", encode_chunk("gone", []))
    w = PredictionLog(store, "a", flush_s=60, flush_rows=100, retention_s=3600)
    w.append(preds(1))
    w.flush()
    assert w.prune() == 1
    assert [k.split("/")[0] for k in store.keys()] == ["a"]
    w.close()


def test_the_log_on_s3(s3_server, tmp_path):
    from tests.conftest import S3_BUCKET

    store = LogStore(f"s3://{S3_BUCKET}/predlog", s3_endpoint_url=s3_server)
    assert store.keys() == [] and read_log(store) == []  # an empty prefix lists nothing
    w = PredictionLog(store, "r1", flush_s=60, flush_rows=100, retention_s=3600)
    for i in range(3):
        w.append(preds(i))
        if i == 1:
            w.flush()
    w.append(feedback_records("q0", [1]))
    w.close()
    reader = LogStore(f"s3://{S3_BUCKET}/predlog", s3_endpoint_url=s3_server)
    assert reader.keys() == store.keys()
    assert len(store.keys()) == 2 and all(k.startswith("r1/") for k in store.keys())
    recs = read_log(LogStore(f"s3://{S3_BUCKET}/predlog", s3_endpoint_url=s3_server))
    assert [r["kind"] for r in recs] == ["prediction"] * 3 + ["feedback"]


def test_signed_request_ids():
    ids = RequestIds(b"k" * 32, ttl_s=60)
    rid = ids.issue(3)
    assert ids.verify(rid) == 3
    assert RequestIds(b"k" * 32, ttl_s=1).verify(rid) == 3  # any replica with the key
    nonce, expiry, rows, sig = rid.split(".")
    with pytest.raises(BadRequestId, match="signature does not match"):
        ids.verify(f"{nonce}.{expiry}.9.{sig}")  # rows altered
    with pytest.raises(BadRequestId, match="signature does not match"):
        RequestIds(b"x" * 32, 60).verify(rid)  # another key
    with pytest.raises(BadRequestId, match="not an id this service issued"):
        ids.verify("f" * 32)
    with pytest.raises(BadRequestId, match="expired"):
        ids.verify(rid, now=time.time() + 61)


def test_the_key_is_created_once_and_shared(tmp_path):
    path = tmp_path / "serving" / "request_id.key"
    k1 = load_key(path)
    assert len(k1) >= 32 and load_key(path) == k1
    assert oct(path.stat().st_mode & 0o777) == "0o600"
