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
from tests.serving.server import promoted_server

pytestmark = pytest.mark.slow
TRANSFORMER = {
    "module": "tasks.models.transformer",
    "params": {"vocab_size": 1000, "max_len": 48, "width": 32, "depth": 1, "heads": 4, "ffn": 64, "dropout": 0.0},
}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A small transformer trained on 800 reviews, exported with its tokenizer in the metadata (as the
    compress step writes it), registered and promoted; the server following the registry."""
    from tasks.datasets import load_dataset

    ds = load_dataset("tasks.datasets.reviews")
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
    server = promoted_server(tmp, onnx_path, "tasks.datasets.reviews")
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
