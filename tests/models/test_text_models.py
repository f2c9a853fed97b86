"""The token-input plug-ins (bag-of-embeddings, transformer) and the tokenizer that travels with
them: in process, then through the torchrun engine on a data version of text."""

import json
import re

import numpy as np
import pytest
import torch

from tasks.compression.export import export_onnx, open_session
from tasks.core.params import load_params
from tasks.models import (
    attach_tokenizer,
    load_model,
    model_blob,
    model_from_blob,
    predict_proba,
    tokenizer_metadata,
)
from tasks.models.tokens import Encoder, TokenizerError, tokenizer_sha256, train_tokenizer
from tasks.registry import Registry
from tasks.training.data import FeatureStats
from tasks.training.local import run_torchrun
from tasks.training.loop import fit_in_memory
from tests.conftest import write_params
from tests.toy import text as toy_text

BOW = {"module": "tasks.plugins.bow", "params": {"vocab_size": 200, "max_len": 16, "dim": 16, "head_width": 16}}
TRANSFORMER = {
    "module": "tasks.plugins.transformer",
    "params": {"vocab_size": 200, "max_len": 16, "width": 32, "depth": 2, "heads": 4, "ffn": 64, "dropout": 0.0},
}
# the transformer distilled into a bag-of-embeddings (vocab_size and max_len: the teacher's)
TO_BOW = {
    "kind": "distil",
    "student": {"module": BOW["module"], "params": {"dim": 16, "head_width": 16}},
    "epochs": 20,
    "seed": 0,
}


@pytest.fixture(scope="module")
def corpus():
    df = toy_text.load_source(400)
    return df, train_tokenizer(toy_text.texts(df), 200)


def test_the_encoder_refuses_what_does_not_fit(corpus):
    df, tok = corpus
    ids = Encoder(tok, 16, 200).encode(["great taste", "a " * 40])
    assert ids.shape == (2, 16) and ids.dtype == np.int64 and ids[0, -1] == 0 and (ids[1] != 0).all()  # padded, cut
    with pytest.raises(TokenizerError, match="is not the recorded"):
        Encoder(tok, 16, 200, sha256="0" * 64)
    with pytest.raises(TokenizerError, match=r"the tokenizer has \d+ ids; the model embeds 20"):
        Encoder(tok, 16, 20)
    with pytest.raises(TokenizerError, match="row 1 holds bytes, not text"):
        Encoder(tok, 16, 200).encode(["fine", b"\xff\xfe"])
    with pytest.raises(TokenizerError, match="no text to train a tokenizer on"):
        train_tokenizer(["", "   "], 200)


@pytest.mark.parametrize("spec", [BOW, TRANSFORMER], ids=["bow", "transformer"])
def test_a_text_model_learns_and_exports_with_dynamic_batch_and_sequence(spec, corpus, tmp_path):
    df, tok = corpus
    p = load_params().train.replace(model=spec, epochs=5, batch_size=32)
    ids = torch.from_numpy(Encoder(tok, 16, 200).encode(toy_text.texts(df)))
    model, losses = fit_in_memory(ids, torch.tensor(df["liked"].to_numpy(), dtype=torch.float32), p)
    assert losses[-1] < 0.5 * losses[0]
    attach_tokenizer(model, tok)
    again = model_from_blob(model_blob(model))  # model.pt holds the tokenizer and its sha256
    assert again.tokenizer_sha256 == tokenizer_sha256(tok) and again.tokenizer_json == tok
    session = open_session(export_onnx(model, tmp_path / "m.onnx"))
    assert [(i.name, i.shape, i.type) for i in session.get_inputs()] == [
        ("input_ids", ["batch", "sequence"], "tensor(int64)")
    ]
    short = ids[:5, :9]  # another batch size and a shorter sequence than traced
    with torch.no_grad():
        expected = torch.sigmoid(model(short)).numpy()
    np.testing.assert_allclose(session.run(None, {"input_ids": short.numpy()})[0], expected, atol=1e-5)
    one = open_session(tmp_path / "m.onnx", threads=1)  # quality is predicted on every core, latency on one
    assert np.array_equal(
        one.run(None, {"input_ids": ids.numpy()})[0], session.run(None, {"input_ids": ids.numpy()})[0]
    )


def test_a_tokenizer_that_does_not_match_the_model_is_refused(corpus):
    _, tok = corpus
    blob = model_blob(_tiny_trained(tok))
    blob["tokenizer_sha256"] = "f" * 64
    with pytest.raises(TokenizerError, match="is not the recorded"):
        model_from_blob(blob)


def _tiny_trained(tok):
    from tasks.models import build_model

    stats = FeatureStats(1, torch.zeros(1), torch.ones(1), (0.5, 0.5))
    model = build_model(BOW["module"], stats, BOW["params"])
    attach_tokenizer(model, tok)
    return model


@pytest.fixture
def text_version(settings, tmp_path, monkeypatch):
    """A data version of 600 toy reviews (gold labels as the training labels), read by the engine
    with the toy_text dataset plug-in."""
    monkeypatch.setenv(
        "SLUICE_PARAMS", str(write_params(tmp_path / "params.yaml", {"dataset": {"module": "tests.toy.text"}}))
    )
    df = toy_text.load_source(600)
    df["label"] = df.pop("liked")
    df["label_prob"] = df["label"].astype(float)
    path = tmp_path / "part.parquet"
    df.to_parquet(path, index=False)
    return Registry(settings).snapshot({"batch-0001": path}, {"rows_by_batch": {"batch-0001": len(df)}})["data_version"]


@pytest.mark.slow
def test_the_engine_trains_a_transformer_on_two_processes_and_keeps_its_tokenizer(text_version, tmp_path, capfd):
    p = load_params().train.replace(model=TRANSFORMER, epochs=3, nproc=2, batch_size=32, checkpoint_every=1000)
    run_torchrun(text_version, tmp_path / "a", p)
    first = load_model(tmp_path / "a" / "model.pt")
    tok = (tmp_path / "a" / "tokenizer.json").read_text()
    assert first.tokenizer_json == tok and first.sluice_plugin == "tasks.plugins.transformer"
    metrics = json.loads((tmp_path / "a" / "train_metrics.json").read_text())
    assert metrics["world_size"] == 2 and metrics["losses"][-1] < metrics["losses"][0]
    assert "tokenizer: trained on 600 texts" in capfd.readouterr().err
    # A warm start reads with the previous model's tokenizer: its embedding rows mean those ids.
    run_torchrun(text_version, tmp_path / "b", p.replace(epochs=1), init_from=str(tmp_path / "a" / "model.pt"))
    logged = capfd.readouterr().err
    assert re.search(r"tokenizer: the warm-start model's \(sha256 [0-9a-f]{12}\)", logged), logged
    assert load_model(tmp_path / "b" / "model.pt").tokenizer_sha256 == first.tokenizer_sha256
    # A tokenizer laid in the output folder (what a resumed training finds, and where a reproduction
    # puts the recorded one) is read with, never retrained.
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "tokenizer.json").write_text(tok)
    run_torchrun(text_version, tmp_path / "c", p.replace(epochs=1))
    assert "tokenizer: this training's own tokenizer.json" in capfd.readouterr().err
    assert load_model(tmp_path / "c" / "model.pt").tokenizer_sha256 == first.tokenizer_sha256
    # Held-out rows scored through the same encoder the engine trained with.
    from tasks.models import input_encoder, predict_proba

    held = toy_text.load_source(200, seed=9)
    prob = predict_proba(first, input_encoder(first, toy_text)(held))
    assert ((prob > 0.5) == held["liked"].to_numpy().astype(bool)).mean() > 0.9


@pytest.mark.slow
def test_the_engine_starts_a_transformer_from_pretrained_weights_and_reads_with_their_tokenizer(
    corpus, text_version, tmp_path, capfd
):
    """Weights a test writes (a transformer fitted in process, as safetensors) and the tokenizer they
    read with, pinned by sha256 in train.pretrained: the engine reads with that tokenizer (never trains
    one), starts from those weights (after a step at a tiny learning rate they are still there; a run
    from scratch is far from them), and train_metrics records the file. A token model's weights
    without their tokenizer are refused."""
    import hashlib

    from safetensors.torch import save_file

    df, tok = corpus
    ids, y = Encoder(tok, 16, 200).encode(toy_text.texts(df)), df["liked"].to_numpy()
    p = load_params().train.replace(model=TRANSFORMER, epochs=2, batch_size=32, checkpoint_every=1000, nproc=1)
    source, _ = fit_in_memory(torch.from_numpy(ids), torch.tensor(y, dtype=torch.float32), p.replace(seed=p.seed + 1))
    save_file({k: v.contiguous() for k, v in source.state_dict().items()}, str(tmp_path / "w.safetensors"))
    (tmp_path / "tokenizer.json").write_text(tok)

    def sha(name):
        return hashlib.sha256((tmp_path / name).read_bytes()).hexdigest()

    pretrained = {
        "path": str(tmp_path / "w.safetensors"),
        "sha256": sha("w.safetensors"),
        "tokenizer": str(tmp_path / "tokenizer.json"),
        "tokenizer_sha256": sha("tokenizer.json"),
    }
    slow = p.replace(pretrained=pretrained, epochs=1, lr=1e-6)
    run_torchrun(text_version, tmp_path / "a", slow)
    logged = capfd.readouterr().err
    assert "tokenizer: the pretrained weights'" in logged and "tokenizer: trained" not in logged, logged
    assert re.search(r"pretrained: \d+ tensors from .*w.safetensors \(sha256 [0-9a-f]{12}\)", logged), logged
    started = load_model(tmp_path / "a" / "model.pt")
    assert started.tokenizer_sha256 == tokenizer_sha256(tok)
    metrics = json.loads((tmp_path / "a" / "train_metrics.json").read_text())
    assert metrics["pretrained"]["sha256"] == pretrained["sha256"] and metrics["pretrained"]["fresh"] == []

    def distance(model):
        return max(
            float((a - b).abs().max()) for a, b in zip(model.state_dict().values(), source.state_dict().values())
        )

    run_torchrun(text_version, tmp_path / "b", p.replace(epochs=1, lr=1e-6))
    assert distance(started) < 1e-3 < 0.1 < distance(load_model(tmp_path / "b" / "model.pt"))

    no_tokenizer = {**pretrained, "tokenizer": None, "tokenizer_sha256": None}
    with pytest.raises(RuntimeError):
        run_torchrun(text_version, tmp_path / "c", slow.replace(pretrained=no_tokenizer))
    assert "mean the ids of the tokenizer they were trained with: give it" in capfd.readouterr().err


def test_the_compression_search_runs_on_a_text_model_and_names_what_does_not_apply(corpus, tmp_path):
    from tasks.compression.chain import CompressionData
    from tasks.compression.pipeline import GoldSplit, compress_model
    from tasks.core.params import repo_params
    from tasks.models import metadata_input_encoder, save_model
    from tasks.models.artifact import read_metadata

    df, tok = corpus
    p = load_params().train.replace(model=TRANSFORMER, epochs=6, batch_size=32)
    encode = Encoder(tok, 16, 200).encode
    ids, y = encode(toy_text.texts(df)), df["liked"].to_numpy()
    model, _ = fit_in_memory(torch.from_numpy(ids), torch.tensor(y, dtype=torch.float32), p)
    attach_tokenizer(model, tok)
    save_model(model, tmp_path / "model.pt")
    dev = toy_text.load_source(200, seed=5)
    dev_ids = encode(toy_text.texts(dev))
    short = dev[toy_text.TEXT_COLUMN].str.split().str.len().to_numpy() <= 4
    cfg = repo_params().compress.replace(
        candidates=[
            ["int8_dynamic"],
            ["int8_static"],
            ["fp16"],
            ["prune(0.3)"],
            ["prune_structured(0.5)", "int8_dynamic"],
            [TO_BOW, "int8_dynamic"],
            ["lowrank(4)"],
        ],
        latency_budget_ms=1000,
        latency_repeats=3,
    )
    out = compress_model(
        tmp_path / "model.pt",
        cfg,
        CompressionData(ids, y),
        GoldSplit(dev_ids, dev["liked"].to_numpy(), {"short": short, "long": ~short}),
        GoldSplit(dev_ids, dev["liked"].to_numpy(), {}),
        tmp_path / "compress",
        {"data_version": "data-v1", **tokenizer_metadata(model)},
    )
    table = json.loads((tmp_path / "compress" / "candidates.json").read_text())
    names = {r["name"] for r in table["rows"]}
    assert {
        "fp32",
        "int8_dynamic",
        "int8_static",
        "fp16",
        "prune(0.3)",
        "prune_structured(0.5)+int8_dynamic",
        "distil(bow)+int8_dynamic",
    } <= names
    assert "lowrank(4)" not in names
    assert "do not apply to model plug-in transformer" in table["not_applied"]["lowrank(4)"]
    import onnx

    int8 = next(r for r in table["rows"] if r["name"] == "int8_dynamic")
    eight_bit = (onnx.TensorProto.INT8, onnx.TensorProto.UINT8)
    tables = [t for t in onnx.load(int8["onnx_path"]).graph.initializer if t.data_type in eight_bit]
    assert [200, 32] in [list(t.dims) for t in tables]  # the token embedding itself is stored in 8 bits
    # fp16 and static int8 (calibrated on token ids) load, run and keep the fp32 export's quality
    rows = {r["name"]: r for r in table["rows"]}
    for name in ("fp16", "int8_static"):
        assert rows[name]["size_bytes"] < rows["fp32"]["size_bytes"], name
        assert rows[name]["overall"]["roc_auc"] >= rows["fp32"]["overall"]["roc_auc"] - 0.01, rows[name]["overall"]
    half = onnx.load(rows["fp16"]["onnx_path"])
    assert sum(t.data_type == onnx.TensorProto.FLOAT16 for t in half.graph.initializer) > 10
    assert [i.type.tensor_type.elem_type for i in half.graph.input] == [onnx.TensorProto.INT64]
    assert "QuantizeLinear" in {n.op_type for n in onnx.load(rows["int8_static"]["onnx_path"]).graph.node}
    # the transformer distilled into a bag-of-embeddings: the same ids in, the teacher's quality kept
    small = rows["distil(bow)+int8_dynamic"]
    assert small["size_bytes"] < rows["int8_dynamic"]["size_bytes"] / 2
    assert small["overall"]["roc_auc"] >= rows["fp32"]["overall"]["roc_auc"] - 0.02, small["overall"]
    assert "Attention" not in str({n.op_type for n in onnx.load(small["onnx_path"]).graph.node})
    assert out["passed"], out["reasons"]
    assert out["quality"]["roc_auc"] > 0.95 and set(out["slices"]) == {"short", "long"}
    meta = read_metadata(out["path"])  # the served file reads text with the model's own tokenizer
    assert meta["tokenizer_sha256"] == tokenizer_sha256(tok)
    from tasks.compression.export import open_session, predict

    served = predict(open_session(out["path"]), metadata_input_encoder(meta, toy_text)(dev))
    assert ((served > 0.5) == dev["liked"].to_numpy().astype(bool)).mean() > 0.9


def test_a_transformer_distils_into_a_bag_of_embeddings_that_reads_its_ids(corpus, tmp_path):
    """The student is another plug-in's model: it takes the teacher's tokenizer (and so its
    vocab_size and max_len), tracks the teacher's scores, and exports to the same served signature.
    A student that cannot read the teacher's inputs, and a chain going on with a technique the
    student's plug-in does not list, are refused by name."""
    from tasks.compression.chain import CompressionData, apply_chain
    from tasks.core.compression_config import parse_chain
    from tasks.core.errors import CompressionError

    df, tok = corpus
    p = load_params().train.replace(model=TRANSFORMER, epochs=6, batch_size=32)
    ids, y = Encoder(tok, 16, 200).encode(toy_text.texts(df)), df["liked"].to_numpy()
    teacher, _ = fit_in_memory(torch.from_numpy(ids), torch.tensor(y, dtype=torch.float32), p)
    attach_tokenizer(teacher, tok)
    chain = parse_chain([TO_BOW, "int8_dynamic"], {"seed": 0})
    cand = apply_chain(teacher, chain, CompressionData(ids), tmp_path)
    student = cand.torch_model
    assert student.sluice_plugin == BOW["module"] and cand.info["distil(bow)"]["student"] == "bow"
    assert student.tokenizer_sha256 == tokenizer_sha256(tok)
    assert {k: student.arch[k] for k in ("vocab_size", "max_len")} == {"vocab_size": 200, "max_len": 16}
    agree = (predict_proba(student, ids) > 0.5) == (predict_proba(teacher, ids) > 0.5)
    assert agree.mean() > 0.9, agree.mean()
    session = open_session(cand.onnx_path)
    assert [(i.name, i.type) for i in session.get_inputs()] == [("input_ids", "tensor(int64)")]
    assert [o.name for o in session.get_outputs()] == ["p_positive"]
    assert parse_chain([c.model_dump(mode="json") for c in chain]) == chain  # what reproduction re-reads

    with pytest.raises(CompressionError, match=r"max_len 32 is not the teacher's 16"):
        apply_chain(
            teacher,
            [{**TO_BOW, "student": {**BOW, "params": {**BOW["params"], "max_len": 32}}}],
            CompressionData(ids),
            tmp_path,
        )
    with pytest.raises(CompressionError, match=r"reads dense inputs, the teacher \(transformer\) tokens"):
        apply_chain(
            teacher,
            [{**TO_BOW, "student": {"module": "tasks.plugins.mlp", "params": {"hidden": [4]}}}],
            CompressionData(ids),
            tmp_path,
        )
    with pytest.raises(CompressionError, match=r"\['prune_structured'\] do not apply to model plug-in bow"):
        apply_chain(
            teacher,
            parse_chain([TO_BOW, "prune_structured(0.5)"], {"seed": 0, "fine_tune_epochs": 0}),
            CompressionData(ids),
            tmp_path,
        )
    with pytest.raises(CompressionError, match=r"distil\(32,16\): a transformer has one width to narrow"):
        apply_chain(teacher, parse_chain(["distil(32,16)"], {"seed": 0}), CompressionData(ids), tmp_path)
    narrow = apply_chain(teacher, parse_chain(["distil(8)"], {"seed": 0}), CompressionData(ids), tmp_path)
    assert narrow.torch_model.arch == {**teacher.arch, "ffn": 8}  # distil(N): the teacher's FFN N wide
    with pytest.raises(CompressionError, match=r"give `hidden` .* or `student` .*, not both"):
        parse_chain([{**TO_BOW, "hidden": [8]}], {"seed": 0})


def test_structured_pruning_drops_the_weakest_ffn_units_of_every_transformer_block(corpus):
    """A unit whose incoming weights and bias are zero adds nothing (GELU(0) = 0): with every other unit
    of each block's FFN zeroed, pruning half keeps exactly the others, every other weight is the
    teacher's, and the narrower transformer computes the same logits."""
    import copy

    from tasks.compression.pruning import prune_structured
    from tasks.core.compression_config import PruneStructuredConfig
    from tasks.models import build_model

    df, tok = corpus
    stats = FeatureStats(1, torch.zeros(1), torch.ones(1), (0.5, 0.5))
    torch.manual_seed(0)
    model = build_model(TRANSFORMER["module"], stats, TRANSFORMER["params"]).eval()
    dead = torch.arange(0, 64, 2)
    with torch.no_grad():
        for block in model.blocks:
            block.ffn[0].weight[dead] = 0.0
            block.ffn[0].bias[dead] = 0.0
    ids = Encoder(tok, 16, 200).encode(toy_text.texts(df))
    cfg = PruneStructuredConfig(ratio=0.5, fine_tune_epochs=0, seed=0)
    student, info = prune_structured(copy.deepcopy(model), cfg, ids)
    assert student.arch == {**model.arch, "ffn": 32} and info["widths"] == [32]
    assert info["params_before"] - info["params"] == 2 * (32 * 32 + 32 + 32 * 32)  # each block: 32 rows, 32 columns
    for old, new in zip(model.blocks, student.blocks):
        torch.testing.assert_close(new.ffn[0].weight, old.ffn[0].weight[1::2])
        torch.testing.assert_close(new.ffn[2].weight, old.ffn[2].weight[:, 1::2])
        torch.testing.assert_close(new.attn.in_proj_weight, old.attn.in_proj_weight)
    with torch.no_grad():
        x = torch.from_numpy(ids)
        torch.testing.assert_close(student.eval()(x), model(x), atol=1e-5, rtol=1e-5)


@pytest.mark.slow  # four threads: the whole machine, in the serial part
def test_a_fine_tuned_chain_comes_out_the_same_whatever_the_callers_thread_count(corpus, tmp_path):
    """The compress step runs in an Airflow task with the machine's thread count, a reproduction's
    rebuild in a process pinned to one: a sum split over threads rounds differently, so the chain's
    torch side (the fine-tune with dropout) runs on one thread either way and the weights are the same."""
    from tasks.compression.chain import CompressionData, apply_chain
    from tasks.models import build_model

    df, tok = corpus
    stats = FeatureStats(1, torch.zeros(1), torch.ones(1), (0.5, 0.5))
    torch.manual_seed(0)
    model = build_model(TRANSFORMER["module"], stats, {**TRANSFORMER["params"], "dropout": 0.1}).eval()
    attach_tokenizer(model, tok)
    data = CompressionData(
        Encoder(tok, 16, 200).encode(toy_text.texts(df)), df[toy_text.GOLD_COLUMN].to_numpy().astype(int)
    )
    chain = [{"kind": "prune_structured", "ratio": 0.5, "fine_tune_epochs": 2, "seed": 0}]
    threads, weights = torch.get_num_threads(), []
    try:
        for n in (1, 4):
            torch.set_num_threads(n)
            cand = apply_chain(model, chain, data, tmp_path / str(n))
            weights.append(cand.torch_model.state_dict())
            assert torch.get_num_threads() == n  # the caller's setting is restored
    finally:
        torch.set_num_threads(threads)
    for (name, a), b in zip(weights[0].items(), weights[1].values()):
        assert torch.equal(a, b), name
