"""A text model served: /v1/predict on raw reviews tokenized in the server with the artifact's own
tokenizer, and OIP with BYTES text or INT64 ids, through tritonclient; bad text is a clear 400."""

import numpy as np
import pytest
import torch

from tasks.compression.export import export_onnx, open_session, predict, write_metadata
from tasks.core.params import load_params
from tasks.models import attach_tokenizer, metadata_input_encoder, tokenizer_metadata
from tasks.models.artifact import read_metadata
from tasks.models.tokens import Encoder, train_tokenizer
from tasks.training.loop import fit_in_memory
from tests.helpers.server import promoted_server

pytestmark = pytest.mark.slow
TRANSFORMER = {
    "module": "tasks.plugins.transformer",
    "params": {"vocab_size": 1000, "max_len": 48, "width": 32, "depth": 1, "heads": 4, "ffn": 64, "dropout": 0.0},
}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A small transformer trained on 800 reviews, exported with its tokenizer in the metadata (as the
    compress step writes it), registered and promoted; the server following the registry."""
    from tasks.datasets import load_dataset

    ds = load_dataset("tasks.plugins.reviews")
    source = ds.load_source()
    train, held = source.iloc[:800], source.iloc[800:832]
    tok = train_tokenizer(ds.texts(train), 1000)
    ids = Encoder(tok, 48, 1000).encode(ds.texts(train))
    p = load_params().train.replace(model=TRANSFORMER, epochs=2, batch_size=32)
    model, _ = fit_in_memory(
        torch.from_numpy(ids), torch.tensor(train[ds.GOLD_COLUMN].to_numpy(), dtype=torch.float32), p
    )
    attach_tokenizer(model, tok)
    tmp = tmp_path_factory.mktemp("text-serving")
    onnx_path = export_onnx(model, tmp / "model.served.onnx")
    write_metadata(onnx_path, {**read_metadata(onnx_path), **tokenizer_metadata(model)})
    server = promoted_server(tmp, onnx_path, "tasks.plugins.reviews")
    try:
        server.start(timeout_s=90)
        encode = metadata_input_encoder(read_metadata(onnx_path), ds)
        meta = read_metadata(onnx_path)
        yield {
            "server": server,
            "held": held,
            "ds": ds,
            "encoder": Encoder(meta["tokenizer"], meta["max_len"], meta["vocab_size"], meta["tokenizer_sha256"]),
            "expected": predict(open_session(onnx_path), encode(held)),
            "onnx": onnx_path,
        }
    finally:
        server.stop()


def test_predict_tokenizes_raw_text_in_the_server(served):
    import httpx

    rows = served["held"][list(served["ds"].RAW_COLUMNS)].to_dict("records")
    r = httpx.post(served["server"].url + "/v1/predict", json={"rows": rows}, timeout=30)
    assert r.status_code == 200, r.text
    scores = [p["score"] for p in r.json()["predictions"]]
    np.testing.assert_allclose(scores, served["expected"], rtol=1e-5, atol=1e-6)


def test_tritonclient_sends_bytes_text_or_int64_ids(served):
    import tritonclient.http as triton

    ds, held = served["ds"], served["held"]
    client = triton.InferenceServerClient(served["server"].url.removeprefix("http://"))
    meta = client.get_model_metadata("reviews")
    assert meta["inputs"] == [{"name": "input_ids", "datatype": "INT64", "shape": [-1, -1]}]
    texts = np.array([t.encode() for t in ds.texts(held)], dtype=np.object_)
    for binary in (True, False):
        inp = triton.InferInput("text", [len(texts)], "BYTES")
        inp.set_data_from_numpy(texts, binary_data=binary)
        result = client.infer("reviews", [inp], outputs=[triton.InferRequestedOutput("p_positive", binary_data=binary)])
        np.testing.assert_allclose(result.as_numpy("p_positive"), served["expected"], rtol=1e-5, atol=1e-6)
    ids = served["encoder"].encode(ds.texts(held))
    cut = ids[:, : max(2, int((ids != 0).sum(1).max()))]  # shorter than max_len: padded by the server
    inp = triton.InferInput("input_ids", list(cut.shape), "INT64")
    inp.set_data_from_numpy(cut, binary_data=True)
    result = client.infer("reviews", [inp])
    np.testing.assert_allclose(result.as_numpy("p_positive"), served["expected"], rtol=1e-5, atol=1e-6)
    client.close()


def test_text_that_is_not_utf8_or_the_wrong_type_is_a_clear_400(served):
    import httpx

    url = served["server"].url + "/v2/models/reviews/infer"
    bad = b"\xff\xfe not text"
    header = b'{"inputs":[{"name":"text","shape":[1],"datatype":"BYTES","parameters":{"binary_data_size":%d}}]}' % (
        len(bad) + 4
    )
    body = header + len(bad).to_bytes(4, "little") + bad
    r = httpx.post(url, content=body, headers={"Inference-Header-Content-Length": str(len(header))}, timeout=10)
    assert r.status_code == 400 and "BYTES element 0 of 'text' is not UTF-8 text" in r.text, r.text
    r = httpx.post(
        url, json={"inputs": [{"name": "text", "shape": [1], "datatype": "FP32", "data": [1.0]}]}, timeout=10
    )
    assert r.status_code == 400 and "must be BYTES" in r.text, r.text
    r = httpx.post(
        url,
        json={"inputs": [{"name": "input_ids", "shape": [1, 2], "datatype": "INT64", "data": [5, 99999]}]},
        timeout=10,
    )
    assert r.status_code == 400 and "ids outside 0..999" in r.text, r.text


def test_empty_or_blank_text_is_refused_alike_on_both_routes(served):
    import httpx

    url = served["server"].url
    oip = {"inputs": [{"name": "text", "shape": [2], "datatype": "BYTES", "data": ["fine coffee", " \t "]}]}
    r = httpx.post(url + "/v2/models/reviews/infer", json=oip, timeout=10)
    assert r.status_code == 400 and "element(s) [1] are empty or whitespace only" in r.text, r.text
    row = {**served["held"][list(served["ds"].RAW_COLUMNS)].iloc[0].to_dict(), "review": " \t "}
    r = httpx.post(url + "/v1/predict", json={"rows": [row]}, timeout=10)
    assert r.status_code == 422 and "rows[0].review" in r.text, r.text


def test_a_text_champion_keeps_serving_beside_a_challenger_and_after_the_rollback(served):
    """The text-canary outage, on a real server process: model-v2 joins as a challenger (the champion's
    session is reused), then is rolled back; every request after each swap returns probabilities, from
    both variants, on /v1/predict (raw text tokenized in the server) and OIP (BYTES text), and the
    server stays ready. (Before the fix every champion request after the first swap failed with 422.)"""
    import httpx

    from tasks.core.settings import Settings
    from tasks.registry import Registry
    from tasks.registry.serving import CHALLENGER, CHAMPION

    server, ds, held = served["server"], served["ds"], served["held"]
    reg = Registry(Settings.from_env({"SLUICE_HOME": str(server.home)}))
    reg.register_model("run-2", {"model.served.onnx": served["onnx"]}, {"data_version": "data-v1"})
    reg.start_canary("model-v2", 50, reason="test: a challenger beside the text champion")
    rows = held[list(ds.RAW_COLUMNS)].to_dict("records")

    def serves(n: int) -> bool:
        body = httpx.get(server.url + "/v1/serving", timeout=5).json()
        return len(body["variants"]) == n and not body["pending"]

    def all_answer(variants: set[str]) -> None:
        seen = set()
        for i, row in enumerate(rows):
            r = httpx.post(server.url + "/v1/predict", json={"rows": [row], "key": f"k{i}"}, timeout=10)
            assert r.status_code == 200, r.text
            (p,) = r.json()["predictions"]
            assert 0 <= p["score"] <= 1
            seen.add(p["variant"])
        assert seen == variants
        texts = ds.texts(held)
        oip = {"inputs": [{"name": "text", "shape": [len(texts)], "datatype": "BYTES", "data": texts}]}
        r = httpx.post(server.url + "/v2/models/reviews/infer", json=oip, timeout=10)
        assert r.status_code == 200, r.text
        np.testing.assert_allclose(r.json()["outputs"][0]["data"], served["expected"], rtol=1e-5, atol=1e-6)
        assert httpx.get(server.url + "/v2/health/ready", timeout=5).status_code == 200

    from tasks.core.wait import wait_until

    wait_until(lambda: serves(2), timeout_s=30, interval_s=0.1, what="the challenger served")
    all_answer({CHAMPION, CHALLENGER})
    reg.rollback_canary(reason="test: back to the champion alone", who="test")
    wait_until(lambda: serves(1), timeout_s=30, interval_s=0.1, what="the champion alone")
    all_answer({CHAMPION})


def test_a_pretrained_encoder_serves_probabilities_from_raw_text_to_tritonclient(tmp_path):
    """The BERT plug-in (a 2-layer copy of all-MiniLM-L6-v2, tests/helpers/checkpoints.py) with the
    checkpoint's own tokenizer in the served file: tritonclient sends BYTES text and gets the torch
    model's probabilities for those texts, the ids made in the server by that tokenizer."""
    import tritonclient.http as triton

    from tasks.datasets import load_dataset
    from tasks.models import build_model, predict_proba
    from tasks.models.pretrained import load_pretrained, pretrained_tokenizer
    from tasks.training.data import FeatureStats
    from tests.helpers.checkpoints import truncated_checkpoint

    ds = load_dataset("tasks.plugins.reviews")
    held = ds.load_source().iloc[:24]
    ckpt = truncated_checkpoint(tmp_path, 2, max_len=64)
    torch.manual_seed(0)
    model = build_model("tasks.plugins.bert", FeatureStats(1, torch.zeros(1), torch.ones(1), (0.5, 0.5)), ckpt.params)
    load_pretrained(model, ckpt.spec)
    tokenizer = pretrained_tokenizer(ckpt.spec)
    attach_tokenizer(model, tokenizer)
    expected = predict_proba(model.eval(), Encoder(tokenizer, 64, 30522).encode(ds.texts(held)))
    onnx_path = export_onnx(model, tmp_path / "model.served.onnx")
    write_metadata(onnx_path, {**read_metadata(onnx_path), **tokenizer_metadata(model)})
    assert read_metadata(onnx_path)["tokenizer_sha256"] == ckpt.tokenizer_sha256  # the checkpoint's, as it is
    server = promoted_server(tmp_path, onnx_path, "tasks.plugins.reviews")
    try:
        server.start(timeout_s=90)
        client = triton.InferenceServerClient(server.url.removeprefix("http://"))
        inp = triton.InferInput("text", [len(held)], "BYTES")
        inp.set_data_from_numpy(np.array([t.encode() for t in ds.texts(held)], dtype=np.object_), binary_data=True)
        result = client.infer("reviews", [inp], outputs=[triton.InferRequestedOutput("p_positive", binary_data=True)])
        np.testing.assert_allclose(result.as_numpy("p_positive"), expected, rtol=1e-4, atol=1e-5)
        client.close()
    finally:
        server.stop()
