"""Pure parts of the server: the sticky split, the serving state it follows, the request schema
generated from the plug-in, the prediction log's rotation, and OIP request parsing."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from pydantic import ValidationError

from tasks.registry import CHALLENGER, CHAMPION, ServedModel, ServingState
from tasks.serving.errors import ApiError, describe_validation
from tasks.serving.predlog import LogStore, PredictionLog, read_log
from tasks.serving.requestid import RequestIds
from tasks.serving.split import choose_variant, key_bucket
from tasks.serving.tensors import input_features, split_binary, wants_binary
from tasks.serving.v2_models import InferenceRequest
from tasks.serving.variants import LoadError, open_model
from tests.conftest import row


def test_split_weight_stickiness_and_monotone_rollout():
    keys = [f"k{i}" for i in range(4000)]
    for w in (0, 10, 50, 90, 100):
        got = [choose_variant(k, w, True) for k in keys]
        p, n = w / 100, len(keys)
        assert abs(got.count(CHALLENGER) - n * p) <= 4 * math.sqrt(n * p * (1 - p)) + 1e-9
        assert got == [choose_variant(k, w, True) for k in keys]  # sticky
    # Raising the weight only moves keys champion -> challenger.
    at10 = {k for k in keys if choose_variant(k, 10, True) == CHALLENGER}
    at50 = {k for k in keys if choose_variant(k, 50, True) == CHALLENGER}
    assert at10 <= at50
    assert all(choose_variant(k, 100, False) == CHAMPION for k in keys[:50])
    assert choose_variant(None, 30, True, rand=lambda: 0.29) == CHALLENGER
    assert choose_variant(None, 30, True, rand=lambda: 0.30) == CHAMPION
    assert 0 <= key_bucket("x") < 100 and key_bucket("x") == key_bucket("x")


def test_serving_state_shapes():
    """The one schema of the registry's serving value, as the server reads it."""
    sha = "a" * 64
    full = {
        "champion": {"model_version": "model-v2", "artifact": "models/model-v2/model.int8.onnx", "sha256": sha},
        "challenger": {"model_version": "model-v3", "artifact": "models/model-v3/model.served.onnx", "sha256": sha},
        "challenger_weight": 25,
        "mode": "shadow",
    }
    d = ServingState.model_validate(full)
    assert d.champion.model_version == "model-v2" and d.challenger.artifact_name == "model.served.onnx"
    assert (d.challenger_weight, d.mode) == (25, "shadow")
    assert list(d.variants()) == [CHAMPION, CHALLENGER] and d.pointer("model-v3") == d.challenger
    legacy = ServingState.model_validate({"model_version": "model-v1", "artifact": "models/model-v1/model.int8.onnx"})
    assert legacy == ServingState(
        champion=ServedModel(model_version="model-v1", artifact="models/model-v1/model.int8.onnx")
    )
    assert ServingState.model_validate(None) == ServingState() == ServingState.of({})
    older = ServingState.model_validate({**full, "champion": {"model_version": "model-v2", "sha256": "ABC"}})
    assert older.champion.artifact == "models/model-v2/model.int8.onnx" and older.champion.sha256 == "abc"
    alone = ServingState.model_validate({**full, "challenger": None})  # no challenger: weight 0, split
    assert (alone.challenger_weight, alone.mode) == (0, "split")
    assert hash(d) == hash(ServingState.model_validate(json.loads(json.dumps(full))))  # the follower's key
    for bad, what in (
        ({**full, "challenger_weight": 101}, "challenger_weight"),
        ({**full, "challenger_weight": True}, "challenger_weight"),
        ({**full, "mode": "ab"}, "mode"),
        ({**full, "champion": {"model_version": 2, "artifact": "models/2/x.onnx"}}, "model_version"),
        ("champion", "ServingState"),
    ):
        with pytest.raises(ValidationError, match=what):
            ServingState.model_validate(bad)


def test_a_model_that_does_not_match_its_sha256_or_does_not_load_is_refused(tmp_path):
    from tests.helpers.server import write_onnx

    data = write_onnx(tmp_path / "m.onnx", 21, seed=1).read_bytes()
    import hashlib

    digest = hashlib.sha256(data).hexdigest()
    good = ServedModel(model_version="model-v1", artifact="models/model-v1/model.int8.onnx", sha256=digest)
    m = open_model(good, data, 21)
    assert m.predict(np.zeros((3, 21), np.float32)).shape == (3,)
    with pytest.raises(LoadError, match="sha256"):
        open_model(good, data + b"x", 21)
    with pytest.raises(LoadError, match="dataset has 22 features"):
        open_model(ServedModel(model_version="model-v1", artifact="a"), data, 22)
    with pytest.raises(LoadError, match="onnxruntime cannot load"):
        open_model(ServedModel(model_version="model-v1", artifact="a"), b"garbage", 21)


def test_schema_from_the_plugin_and_its_contract():
    from pydantic import ValidationError

    import tests.toy.dataset as toy
    from tasks.datasets import load_dataset
    from tasks.serving.v1_models import load_row_model, predict_request_model

    Row = load_row_model(load_dataset("tasks.plugins.emails"))
    Req = predict_request_model(Row, 3)
    Req.model_validate({"rows": [row()], "key": "u1"})
    for bad in (
        {"rows": [row(cc="3")]},
        {"rows": [row(winner="maybe")]},
        {"rows": [row(num_char=float("nan"))]},
        {"rows": [row(time="yesterday")]},
        {"rows": [row()] * 4},
        {"rows": []},
        {"rows": [row(), 1]},
        {"rows": [row()], "other": 1},
    ):
        with pytest.raises(ValidationError):
            Req.model_validate(bad)
    ToyRow = load_row_model(toy)  # a second plug-in: names from RAW_COLUMNS
    assert set(ToyRow.model_fields) == set(toy.RAW_COLUMNS)
    with pytest.raises(ValidationError):
        ToyRow.model_validate(
            {"reading_id": 1, "taken_at": "t", "temperature": 500.0, "vibration": 0.1, "site": "north"}
        )  # the contract's range


def test_validation_messages_name_the_place():
    status, msg = describe_validation(
        [
            {"type": "missing", "loc": ("body", "rows", 2, "cc"), "msg": "Field required"},
            {"type": "extra_forbidden", "loc": ("body", "rows", 0, "x"), "msg": "no"},
        ]
    )
    assert status == 422 and msg == "rows[2].cc: missing column; rows[0].x: unknown column"
    status, msg = describe_validation(
        [{"type": "json_invalid", "loc": ("body", 7), "msg": "JSON decode error", "ctx": {"error": "Expecting value"}}]
    )
    assert status == 400 and msg == "malformed JSON at character 7: Expecting value"


def test_oip_binary_and_json_inputs():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    head = json.dumps(
        {
            "inputs": [{"name": "f", "datatype": "FP32", "shape": [2, 3], "parameters": {"binary_data_size": 24}}],
            "parameters": {"binary_data_output": True},
        }
    ).encode()
    js, tail = split_binary(head + x.tobytes(), str(len(head)))
    req = InferenceRequest.model_validate_json(js)
    np.testing.assert_array_equal(input_features(req, tail, "f", 3, 10), x)
    assert wants_binary(req)
    req = InferenceRequest.model_validate(
        {"inputs": [{"name": "f", "datatype": "FP32", "shape": [2, 3], "data": [[0, 1, 2], [3, 4, 5]]}]}
    )
    np.testing.assert_array_equal(input_features(req, b"", "f", 3, 10), x)
    assert not wants_binary(req)
    with pytest.raises(ApiError, match="outside the body"):
        split_binary(head, "9999")
    js, tail = split_binary(head + b"\0" * 8, str(len(head)))
    with pytest.raises(ApiError, match="binary_data_size"):
        input_features(InferenceRequest.model_validate_json(js), tail, "f", 3, 10)
    with pytest.raises(ApiError, match="exactly one tensor named 'f'"):
        input_features(InferenceRequest(inputs=[]), b"", "f", 3, 10)
    with pytest.raises(ValidationError):  # the protocol's structure is the model's
        InferenceRequest.model_validate({"inputs": [{"name": "f", "datatype": "FP32", "shape": [True, 3]}]})


def test_a_non_finite_score_is_refused_logged_against_its_variant_and_counted(tmp_path):
    """A model that answers NaN is a model defect: the request is a 500 naming it, never a NaN
    answer; an error record goes to the prediction log against the variant (the canary's error
    rate), and sluice_request_errors_total counts it."""
    from fastapi.testclient import TestClient

    from bench.canary import nan_onnx
    from tasks.datasets import load_dataset
    from tasks.serving.app import create_app
    from tasks.serving.context import ServingContext
    from tasks.serving.metrics import ServerMetrics
    from tasks.serving.v1_models import load_row_model
    from tasks.serving.variants import ScoreError, Variants

    n = 21
    # NaN exactly where feature 3 >= 2 (the warm-up's random inputs in [0, 1) never are: it loads)
    data = nan_onnx(tmp_path / "nan.onnx", np.full(n, 0.1), -1.0, feature=3, above=2.0).read_bytes()
    spec = ServedModel(model_version="model-v7", artifact="models/model-v7/model.int8.onnx")
    model = open_model(spec, data, n)
    x = np.zeros((4, n), np.float32)
    assert np.all(np.isfinite(model.predict(x)))
    x[2, 3] = 5.0
    with pytest.raises(ScoreError, match=r"model-v7 gave a non-finite score \(nan\) for 1 of 4 rows \(first: row 2\)"):
        model.predict(x)

    metrics = ServerMetrics()
    variants = Variants(
        lambda: ServingState(champion=spec),
        lambda version, artifact: data,
        n,
        metrics,
    )
    assert variants.poll() and variants.ready
    ds = load_dataset("tasks.plugins.emails")
    store = LogStore(tmp_path / "predlog")
    predlog = PredictionLog(store, "r1", 0.1, 1000, 3600)
    ctx = ServingContext(
        dataset=ds,
        row_model=load_row_model(ds),
        variants=variants,
        metrics=metrics,
        predlog=predlog,
        max_rows=64,
        max_body_bytes=1 << 20,
        request_ids=RequestIds(b"k" * 32, 3600),
        replica="r1",
    )
    client = TestClient(create_app(ctx))

    def infer(rows: np.ndarray):
        return client.post(
            "/v2/models/emails/infer",
            json={
                "inputs": [
                    {
                        "name": "features",
                        "datatype": "FP32",
                        "shape": list(rows.shape),
                        "data": rows.reshape(-1).tolist(),
                    }
                ]
            },
        )

    ok = infer(x[:2])
    assert ok.status_code == 200 and all(math.isfinite(v) for v in ok.json()["outputs"][0]["data"])
    bad = infer(x)
    assert bad.status_code == 500 and bad.json() == {"error": "model model-v7 gave a non-finite score"}
    assert "NaN" not in bad.text and "nan" not in bad.text
    predlog.close()
    records = read_log(store)
    errors = [r for r in records if r.get("error")]
    assert len(errors) == 1 and errors[0]["variant"] == "champion" and errors[0]["model_version"] == "model-v7"
    assert errors[0]["error"].startswith("ScoreError: model-v7 gave a non-finite score")
    assert errors[0]["inputs"] == x.tolist()  # every row's input, as the request sent it
    assert all(math.isfinite(r["score"]) for r in records if "score" in r)
    exposition = client.get("/metrics").text
    assert 'sluice_request_errors_total{code="500",endpoint="infer",variant="champion"} 1.0' in exposition


def test_feedback_labels_are_class_indices_or_class_names():
    from tasks.serving.errors import ApiError
    from tasks.serving.v1_routes import class_indices

    names = ("bad", "fine", "good")
    assert class_indices([0, "good", "fine", 2], names) == [0, 2, 1, 2]
    with pytest.raises(ApiError) as refused:
        class_indices([3, "great", 1], names)
    assert refused.value.status == 422
    assert refused.value.message == (
        "label(s) [3] outside the 3 classes 0..2 ('bad', 'fine', 'good'); unknown class name(s) ['great']; "
        "the classes are ('bad', 'fine', 'good') (a label is a class index 0..2 or one of those names)"
    )
