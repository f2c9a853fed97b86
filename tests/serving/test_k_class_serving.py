"""Models of K = 3 classes served: an MLP on the 3-class toy readings (tests/toy/three.py) and a
transformer on 3-class toy reviews (tests/toy/text3.py). /v1/predict answers each row's most probable
class with every class's probability, OIP declares and returns FP32 [-1, 3] (JSON and Triton's binary
extension, through tritonclient; BYTES text for the transformer), the prediction log keeps the three
probabilities, and feedback takes a label of any of the three classes and refuses one outside them,
naming them."""

import numpy as np
import pytest
import torch

from tasks.compression.export import export_onnx, open_session, predict
from tasks.core.params import load_params
from tasks.core.settings import Settings
from tasks.training.loop import fit_in_memory
from tests.helpers.server import promoted_server
from tests.toy import three

pytestmark = pytest.mark.slow
K = 3


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A 3-class MLP trained on 800 toy3 readings, registered and promoted; the server following it."""
    source = three.load_source()
    train, held = source.iloc[:800], source.iloc[800:830]
    targets = np.concatenate([np.eye(K)[train[three.GOLD_COLUMN]], np.ones((len(train), 1))], 1)
    p = load_params().train.replace(
        epochs=5, batch_size=64, model={"module": "tasks.plugins.mlp", "params": {"hidden": [16]}}
    )
    model, _ = fit_in_memory(torch.from_numpy(three.featurize(train)), torch.from_numpy(targets.astype(np.float32)), p)
    tmp = tmp_path_factory.mktemp("k-class-serving")
    onnx_path = export_onnx(model, tmp / "model.served.onnx")
    server = promoted_server(tmp, onnx_path, "tests.toy.three")
    try:
        server.start(timeout_s=90)
        yield {
            "server": server,
            "home": server.home,
            "held": held,
            "expected": predict(open_session(onnx_path), three.featurize(held)),
        }
    finally:
        server.stop()


def test_predict_answers_the_most_probable_class_and_every_class_probability(served):
    import httpx

    rows = served["held"][three.RAW_COLUMNS].to_dict("records")
    r = httpx.post(served["server"].url + "/v1/predict", json={"rows": rows}, timeout=30)
    assert r.status_code == 200, r.text
    body = r.json()
    expected = served["expected"]
    probs = np.array([p["probabilities"] for p in body["predictions"]])
    np.testing.assert_allclose(probs, expected, rtol=1e-5, atol=1e-6)
    assert [p["label"] for p in body["predictions"]] == expected.argmax(1).tolist()
    np.testing.assert_allclose([p["score"] for p in body["predictions"]], expected.max(1), rtol=1e-5, atol=1e-6)
    assert len(set(expected.argmax(1).tolist())) > 1  # the rows are not all one class: the labels are read

    # feedback: a label of any class is taken; one outside the three is refused, naming them
    rid = body["request_id"]
    labels = served["held"][three.GOLD_COLUMN].tolist()
    ok = httpx.post(served["server"].url + "/v1/feedback", json={"request_id": rid, "label": labels}, timeout=10)
    assert ok.status_code == 200 and ok.json()["labels"] == len(labels), ok.text
    bad = httpx.post(
        served["server"].url + "/v1/feedback", json={"request_id": rid, "label": [3] * len(labels)}, timeout=10
    )
    assert (
        bad.status_code == 422 and "label(s) [3] outside the 3 classes 0..2 ('ok', 'overheating', 'loose')" in bad.text
    )


def test_tritonclient_gets_k_probabilities_a_row(served):
    import tritonclient.http as triton

    client = triton.InferenceServerClient(served["server"].url.removeprefix("http://"))
    meta = client.get_model_metadata("toy3")
    assert meta["outputs"] == [{"name": "class_probabilities", "datatype": "FP32", "shape": [-1, K]}]
    x = three.featurize(served["held"])
    for binary in (True, False):
        inp = triton.InferInput("features", list(x.shape), "FP32")
        inp.set_data_from_numpy(x, binary_data=binary)
        result = client.infer(
            "toy3", [inp], outputs=[triton.InferRequestedOutput("class_probabilities", binary_data=binary)]
        )
        out = result.as_numpy("class_probabilities")
        assert out.shape == (len(x), K)
        np.testing.assert_allclose(out, served["expected"], rtol=1e-5, atol=1e-6)
    client.close()


def test_the_prediction_log_keeps_each_rows_k_probabilities(served):
    import time

    import httpx

    from tasks.serving.paths import prediction_log
    from tasks.serving.predlog import read_log

    rows = served["held"][three.RAW_COLUMNS].iloc[:4].to_dict("records")
    rid = httpx.post(served["server"].url + "/v1/predict", json={"rows": rows}, timeout=30).json()["request_id"]
    settings = Settings.from_env({"SLUICE_HOME": str(served["home"])})
    deadline, preds = time.time() + 15, []
    while not preds and time.time() < deadline:
        time.sleep(0.2)
        preds = [r for r in read_log(prediction_log(settings)) if r.get("request_id") == rid and "score" in r]
    assert len(preds) == 4, preds
    np.testing.assert_allclose(
        [r["score"] for r in sorted(preds, key=lambda r: r["row"])], served["expected"][:4], atol=1e-6
    )


@pytest.fixture(scope="module")
def served_text(tmp_path_factory):
    """A 3-class transformer trained on 600 toy reviews, exported with its tokenizer (as the compress step
    writes it), registered and promoted; the server following it."""
    from tasks.compression.export import write_metadata
    from tasks.models import attach_tokenizer, tokenizer_metadata
    from tasks.models.artifact import read_metadata
    from tasks.models.tokens import Encoder, train_tokenizer
    from tests.toy import text3

    source = text3.load_source()
    train, held = source.iloc[:600], source.iloc[600:630]
    tok = train_tokenizer(text3.texts(train), 200)
    ids = Encoder(tok, 16, 200).encode(text3.texts(train))
    spec = {
        "module": "tasks.plugins.transformer",
        "params": {"vocab_size": 200, "max_len": 16, "width": 32, "depth": 1, "heads": 4, "ffn": 64, "dropout": 0.0},
    }
    p = load_params().train.replace(model=spec, epochs=8, batch_size=32, lr=0.005)
    targets = np.concatenate([np.eye(K)[train[text3.GOLD_COLUMN]], np.ones((len(train), 1))], 1)
    model, _ = fit_in_memory(torch.from_numpy(ids), torch.from_numpy(targets.astype(np.float32)), p)
    attach_tokenizer(model, tok)
    tmp = tmp_path_factory.mktemp("k-class-text-serving")
    onnx_path = export_onnx(model, tmp / "model.served.onnx")
    write_metadata(onnx_path, {**read_metadata(onnx_path), **tokenizer_metadata(model)})
    server = promoted_server(tmp, onnx_path, "tests.toy.text3")
    try:
        server.start(timeout_s=90)
        expected = predict(open_session(onnx_path), Encoder(tok, 16, 200).encode(text3.texts(held)))
        yield {"server": server, "held": held, "expected": expected, "texts": text3.texts(held)}
    finally:
        server.stop()


def test_tritonclient_gets_k_probabilities_for_text(served_text):
    import httpx
    import tritonclient.http as triton

    expected = served_text["expected"]
    assert expected.shape == (30, K) and len(set(expected.argmax(1).tolist())) == K  # it tells the three apart
    client = triton.InferenceServerClient(served_text["server"].url.removeprefix("http://"))
    meta = client.get_model_metadata("toy_text3")
    assert meta["outputs"] == [{"name": "class_probabilities", "datatype": "FP32", "shape": [-1, K]}]
    texts = np.array([t.encode() for t in served_text["texts"]], dtype=np.object_)
    for binary in (True, False):
        inp = triton.InferInput("text", [len(texts)], "BYTES")
        inp.set_data_from_numpy(texts, binary_data=binary)
        result = client.infer(
            "toy_text3", [inp], outputs=[triton.InferRequestedOutput("class_probabilities", binary_data=binary)]
        )
        np.testing.assert_allclose(result.as_numpy("class_probabilities"), expected, rtol=1e-5, atol=1e-6)
    client.close()
    rows = served_text["held"][["review_id", "text"]].to_dict("records")
    r = httpx.post(served_text["server"].url + "/v1/predict", json={"rows": rows}, timeout=30)
    assert r.status_code == 200, r.text
    assert [p["label"] for p in r.json()["predictions"]] == expected.argmax(1).tolist()
