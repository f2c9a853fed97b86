"""A frozen encoder's sentence embeddings (tasks/models/embeddings.py, tasks/training/inputs.py FrozenTrunk):
the content-addressed cache computes each text once and reads back what another writer kept; the head on
cached embeddings is the same function as the whole BERT classifier on ids (2-layer copy of the real
checkpoint, tests/helpers/checkpoints.py); the fingerprint follows the trunk's weights and ids, not the head."""

import numpy as np
import pytest
import torch

from tasks.core.params import load_params
from tasks.models import build_model, plugin_of
from tasks.models.embeddings import EmbeddingCache, trunk_fingerprint
from tasks.models.pretrained import load_pretrained, pretrained_tokenizer
from tasks.training.data import FeatureStats
from tasks.training.inputs import FrozenTrunk
from tests.helpers.checkpoints import truncated_checkpoint

BERT = "tasks.plugins.bert"
STATS = FeatureStats(1, torch.zeros(1), torch.ones(1), (0.5, 0.5))  # binary: one logit
TEXTS = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "A man is riding a horse.",
    "The quick brown fox jumps over the lazy dog while the farmer watches from the old wooden gate.",
    "Terrible tea. Would not buy again!",
]
FP = "ab" * 32


class Counting:
    """compute(texts) -> one vector per text, derived from the text alone; the texts it was asked for kept."""

    def __init__(self):
        self.asked: list[str] = []

    def __call__(self, texts: list[str]) -> np.ndarray:
        self.asked.extend(texts)
        return np.stack([_vector(t) for t in texts])


def _vector(text: str) -> np.ndarray:
    return np.array([len(text), sum(map(ord, text)) % 997, text.count(" ")], dtype=np.float32)


def _expected(texts):
    return np.stack([_vector(t) for t in texts])


def test_the_cache_computes_only_the_texts_it_lacks_once_and_answers_in_order(tmp_path):
    cache, compute = EmbeddingCache(tmp_path, FP, 3), Counting()
    first = ["b", "a", "b", "c", "a"]
    np.testing.assert_array_equal(cache.embed(first, compute), _expected(first))
    assert sorted(compute.asked) == ["a", "b", "c"]  # duplicates in one call: computed once
    second = ["d", "c", "a", "e", "d"]
    np.testing.assert_array_equal(cache.embed(second, compute), _expected(second))
    assert sorted(compute.asked) == ["a", "b", "c", "d", "e"]  # only the texts it lacked
    again = ["e", "b", "a"]
    np.testing.assert_array_equal(cache.embed(again, compute), _expected(again))
    assert len(compute.asked) == 5  # nothing new: nothing computed, nothing written
    assert len(list(cache.folder.glob("*.npz"))) == 2 and cache.folder == tmp_path / FP[:32]


def test_a_new_cache_object_reads_what_another_wrote_and_another_fingerprint_is_another_folder(tmp_path):
    writer = EmbeddingCache(tmp_path, FP, 3)
    writer.embed(TEXTS[:3], Counting())
    writer.embed(TEXTS[2:], Counting())
    reader, compute = EmbeddingCache(tmp_path, FP, 3), Counting()
    np.testing.assert_array_equal(reader.embed(TEXTS[::-1], compute), _expected(TEXTS[::-1]))
    assert compute.asked == []  # every text in the other's shards
    # the same object keeps reading shards written after its first call
    writer.embed(["written later"], Counting())
    reader.embed(["written later"], compute)
    assert compute.asked == []
    other, recomputed = EmbeddingCache(tmp_path, "cd" * 32, 3), Counting()
    other.embed(TEXTS, recomputed)
    assert sorted(recomputed.asked) == sorted(TEXTS) and other.folder != writer.folder
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([FP[:32], "cd" * 16])


def test_two_writers_of_the_same_texts_leave_one_shard_and_no_temp_file(tmp_path):
    """As two ranks or trials racing: b reads the folder (empty), a writes its shard, then b computes
    and writes the same texts: a's shard is left as it is, and no temp file."""
    a, b = EmbeddingCache(tmp_path, FP, 3), EmbeddingCache(tmp_path, FP, 3)
    ca, cb = Counting(), Counting()

    def b_computes_after_a_wrote(texts):
        a.embed(TEXTS, ca)
        return cb(texts)

    np.testing.assert_array_equal(b.embed(TEXTS, b_computes_after_a_wrote), _expected(TEXTS))
    assert sorted(ca.asked) == sorted(cb.asked) == sorted(TEXTS)
    files = [p.name for p in a.folder.iterdir()]
    assert len(files) == 1 and files[0].endswith(".npz") and not files[0].startswith("."), files


# ---- the BERT plug-in's frozen trunk, on a 2-layer copy of the real checkpoint ----


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    return truncated_checkpoint(tmp_path_factory.mktemp("bert"), layers=2)


@pytest.fixture(scope="module")
def tokenizer(small):
    return pretrained_tokenizer(small.spec)


@pytest.fixture(scope="module")
def train_params(small):
    model = {"module": BERT, "params": {**small.params, "finetune": "frozen"}}
    return load_params().train.replace(model=model, pretrained=small.spec.model_dump(mode="json"))


def _frozen_model(small, seed=0):
    torch.manual_seed(seed)
    model = build_model(BERT, STATS, {**small.params, "finetune": "frozen"})
    load_pretrained(model, small.spec)
    return model.eval()


def _trunk(model, p, tokenizer, root, **kw):
    return FrozenTrunk(plugin_of(model).frozen_trunk(model), p, tokenizer, root, **kw)


def test_the_head_on_cached_embeddings_is_the_model_on_ids(small, tokenizer, train_params, tmp_path):
    model = _frozen_model(small)
    frozen = _trunk(model, train_params, tokenizer, tmp_path, chunk_rows=2)  # chunks of 2: rows cut differently
    embedded = frozen.embed(TEXTS)
    assert embedded.shape == (len(TEXTS), 384) and embedded.dtype == np.float32
    ids = torch.from_numpy(frozen.encoder.encode(TEXTS))
    with torch.no_grad():
        on_ids = model(ids)
        on_cache = model(torch.from_numpy(frozen.embed(TEXTS[::-1])[::-1].copy()))  # read back, other order
    torch.testing.assert_close(on_cache, on_ids, atol=1e-5, rtol=0)
    # another FrozenTrunk of the same weights and ids reads the same folder, and computes nothing
    again = _trunk(_frozen_model(small, seed=1), train_params, tokenizer, tmp_path)
    assert again.cache.folder == frozen.cache.folder
    again._compute = lambda texts: pytest.fail(f"recomputed {texts}")
    np.testing.assert_array_equal(again.embed(TEXTS), embedded)


def test_check_accepts_the_model_and_refuses_one_whose_encoder_changed(small, tokenizer, train_params, tmp_path):
    model = _frozen_model(small)
    frozen = _trunk(model, train_params, tokenizer, tmp_path)
    frozen.check(model)
    other_head = _frozen_model(small, seed=3)  # another seeded head, the same encoder
    assert not torch.equal(other_head.head.weight, model.head.weight)
    frozen.check(other_head)
    trained = _frozen_model(small)
    with torch.no_grad():
        trained.encoder.layer[1].output.dense.weight.add_(1e-3)
    with pytest.raises(ValueError, match="frozen encoder"):
        frozen.check(trained)


def test_the_fingerprint_follows_the_weights_and_the_ids_not_the_head(small):
    model = _frozen_model(small)
    trunk = plugin_of(model).frozen_trunk(model)
    base = trunk_fingerprint(trunk, "tok:64")
    assert base == trunk_fingerprint(plugin_of(model).frozen_trunk(_frozen_model(small)), "tok:64")
    assert trunk_fingerprint(trunk, "tok:32") != base  # another max_len
    assert trunk_fingerprint(trunk, "other:64") != base  # another tokenizer
    with torch.no_grad():
        model.head.weight.add_(1.0)
        model.head.bias.add_(1.0)
    assert trunk_fingerprint(trunk, "tok:64") == base  # the head is not the trunk
    with torch.no_grad():
        model.embeddings.word_embeddings.weight[5, 0] += 1e-3
    assert trunk_fingerprint(trunk, "tok:64") != base
    # what no weight's shape shows: 6 heads of 64 instead of 12 of 32, another eps
    for changes in ({"heads": 6}, {"layer_norm_eps": 1e-3}):
        torch.manual_seed(0)
        other = build_model(BERT, STATS, {**small.params, "finetune": "frozen", **changes})
        load_pretrained(other, small.spec)
        assert trunk_fingerprint(plugin_of(other).frozen_trunk(other), "tok:64") != base, changes


def test_no_texts_are_no_rows_of_the_trunks_width(tmp_path):
    assert EmbeddingCache(tmp_path, FP, 3).embed([], Counting()).shape == (0, 3)


def test_the_ids_digest_is_the_tokenizer_and_max_len(small, tokenizer, train_params, tmp_path):
    model = _frozen_model(small)
    a = _trunk(model, train_params, tokenizer, tmp_path)
    params32 = {**train_params.model.params, "max_len": 32}
    b = _trunk(model, train_params.replace(model={"module": BERT, "params": params32}), tokenizer, tmp_path)
    assert a.ids_digest.endswith(":64") and b.ids_digest.endswith(":32")
    assert a.ids_digest.split(":")[0] == b.ids_digest.split(":")[0] == small.tokenizer_sha256
    assert a.cache.fingerprint != b.cache.fingerprint and a.cache.folder != b.cache.folder
