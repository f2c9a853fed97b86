"""What a training's rows become before the model sees them: the dataset's features, or, for a
token model plug-in, ids from a tokenizer that belongs to this training.

The tokenizer is decided once per training, on rank 0, and handed to every rank (a broadcast:
training one on each rank could give ranks different vocabularies). In order: the one this training
already wrote (`tokenizer.json` in its output folder, fetched back on a pod: a resumed training keeps
its ids), the warm-start model's (its embedding rows mean those ids), the pretrained weights' (for the
same reason; `train.pretrained.tokenizer`), or a new one trained on the data version's
trainable texts. Tokenizer training is not deterministic in every version of the
library, so nothing that must reproduce retrains it.

A plug-in whose encoder is frozen (`frozen_trunk(model)` is not None: the BERT plug-in's `finetune:
frozen`) trains its head on the trunk's outputs instead of ids: rank 0 embeds every trainable text once
into the content-addressed cache (tasks/models/embeddings.py) while the other ranks wait, then every
rank reads them from there. The trained model still takes ids (its export, evaluation, serving).
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Callable

from tasks.core.files import atomic_write_bytes
from tasks.core.log import log
from tasks.core.moved import current
from tasks.core.params import TrainParams
from tasks.models.pretrained import pretrained_tokenizer
from tasks.models.tokens import tokenizer_sha256, train_tokenizer

TOKENIZER = "tokenizer.json"


def takes_tokens(plugin: ModuleType) -> bool:
    return plugin.BATCH_FORMAT == "tokens"


def decide_tokenizer(
    plugin: ModuleType,
    p: TrainParams,
    dataset,
    texts: Callable[[], list[str]],
    store,
    ranks,
    init_blob: dict | None,
) -> str | None:
    """The tokenizer JSON this training reads with (None: the model plug-in `plugin`, the one
    `p.model` names, takes dense features). `texts` gives the data version's trainable texts (called
    on rank 0, only when a new one is trained)."""
    if plugin.BATCH_FORMAT != "tokens":
        if p.pretrained and p.pretrained.tokenizer is not None:
            raise ValueError(f"train.pretrained: {plugin.NAME} reads dense features; it takes no tokenizer")
        return None
    if not hasattr(dataset, "texts"):
        raise ValueError(f"model {plugin.NAME} reads text, and the dataset {dataset.NAME} has no texts(df)")
    if p.pretrained and p.pretrained.tokenizer is None:
        raise ValueError(
            f"train.pretrained: {plugin.NAME} reads token ids, and its pretrained weights' embedding rows "
            "mean the ids of the tokenizer they were trained with: give it (pretrained.tokenizer, tokenizer_sha256)"
        )
    chosen = [None]
    if ranks.master:
        chosen[0] = _rank0_tokenizer(p, texts, store, init_blob)
    if ranks.distributed:
        import torch.distributed as dist

        dist.broadcast_object_list(chosen, src=0)
    return chosen[0]


def _rank0_tokenizer(p: TrainParams, texts, store, init_blob: dict | None) -> str:
    path = store.local / TOKENIZER
    store.fetch(TOKENIZER)
    if path.exists():
        found = path.read_text()
        log(f"tokenizer: this training's own {TOKENIZER} (sha256 {tokenizer_sha256(found)[:12]})")
        return found
    same_plugin = init_blob is not None and current(init_blob.get("plugin", "")) == current(p.model.module)
    if same_plugin and init_blob.get("tokenizer"):
        found = init_blob["tokenizer"]
        log(f"tokenizer: the warm-start model's (sha256 {tokenizer_sha256(found)[:12]})")
    elif p.pretrained is not None and p.pretrained.tokenizer is not None:
        found = pretrained_tokenizer(p.pretrained)
        log(f"tokenizer: the pretrained weights' {p.pretrained.tokenizer} (sha256 {tokenizer_sha256(found)[:12]})")
    else:
        corpus = texts()
        found = train_tokenizer(corpus, p.model.params["vocab_size"])
        log(f"tokenizer: trained on {len(corpus)} texts (sha256 {tokenizer_sha256(found)[:12]})")
    atomic_write_bytes(path, found.encode())
    store.publish(path)
    return found


def row_inputs(p: TrainParams, dataset, tokenizer_json: str | None, frozen: "FrozenTrunk | None" = None) -> Callable:
    """rows -> the model's input array, as the stream needs it: the dataset's features, token ids
    (tasks.models.tokens.Encoder, the path evaluation and serving take too), or a frozen trunk's
    outputs for those ids (kept in its cache)."""
    if tokenizer_json is None:
        return dataset.featurize
    if frozen is not None:
        return lambda df: frozen.embed(dataset.texts(df))
    encoder = _encoder(p, tokenizer_json)
    return lambda df: encoder.encode(dataset.texts(df))


def _encoder(p: TrainParams, tokenizer_json: str):
    from tasks.models.tokens import Encoder

    return Encoder(tokenizer_json, p.model.params["max_len"], p.model.params["vocab_size"])


def inputs_record(p: TrainParams, tokenizer_json: str | None, texts, frozen: "FrozenTrunk | None") -> dict | None:
    """What lineage keeps of a token model's inputs (None for dense features): the tokenizer's sha256,
    where text is cut and how many of the trainable texts were (`texts()`), the frozen encoder's cache."""
    if tokenizer_json is None:
        return None
    encoder = _encoder(p, tokenizer_json)
    corpus = texts()
    record = {
        "tokenizer_sha256": encoder.sha256,
        "max_len": encoder.max_len,
        "texts": len(corpus),
        "truncated_texts": encoder.truncated(corpus),
    }
    if frozen is not None:
        record["embedding_cache"] = frozen.cache.fingerprint
    return record


class FrozenTrunk:
    """A frozen encoder's outputs for texts, through the embedding cache: `embed(texts) -> [n, d]`."""

    def __init__(self, trunk, p: TrainParams, tokenizer_json: str, cache_root: Path, chunk_rows: int = 64):
        from tasks.models.embeddings import EmbeddingCache, trunk_fingerprint

        self.trunk, self.encoder, self.chunk_rows = trunk.eval(), _encoder(p, tokenizer_json), chunk_rows
        self.cache = EmbeddingCache(cache_root, trunk_fingerprint(trunk, self.ids_digest), trunk.width)

    @property
    def ids_digest(self) -> str:
        return f"{self.encoder.sha256}:{self.encoder.max_len}"

    def _compute(self, texts: list[str]):
        import numpy as np
        import torch

        out = []
        for start in range(0, len(texts), self.chunk_rows):
            ids = torch.from_numpy(self.encoder.encode(texts[start : start + self.chunk_rows]))
            with torch.no_grad():
                out.append(self.trunk(ids).numpy())
            if (start // self.chunk_rows) % 10 == 9:
                log(f"embeddings: {start + len(ids)}/{len(texts)} texts")
        return np.concatenate(out)

    def embed(self, texts: list[str]):
        return self.cache.embed(texts, self._compute)

    def check(self, model) -> None:
        """Refuse a model whose frozen trunk is not the one the inputs came from (a warm start or a
        resumed checkpoint with another encoder)."""
        from tasks.models import plugin_of
        from tasks.models.embeddings import trunk_fingerprint

        found = trunk_fingerprint(plugin_of(model).frozen_trunk(model), self.ids_digest)
        if found != self.cache.fingerprint:
            raise ValueError(
                f"the model's frozen encoder (sha256 {found[:12]}) is not the one its inputs were embedded "
                f"with ({self.cache.fingerprint[:12]}): a warm-start or resumed model whose encoder was "
                "trained (finetune full or top); train it with that mode, or without warm_start"
            )


def embedding_cache_root(settings) -> Path:
    """Where every frozen encoder's sentence embeddings are kept (one folder per trunk fingerprint)."""
    return settings.home / "cache" / "embeddings"


def build_frozen_trunk(
    plugin: ModuleType, p: TrainParams, classes: int, tokenizer_json: str, cache_root: Path
) -> FrozenTrunk | None:
    """The FrozenTrunk of the model `p` describes (seeded, with the pretrained weights), as a training
    builds it; None when the plug-in's encoder trains (`frozen_trunk(model)` None)."""
    from types import SimpleNamespace

    from tasks.training.loop import make_model

    probe = make_model(SimpleNamespace(classes=classes), p)
    trunk = plugin.frozen_trunk(probe) if hasattr(plugin, "frozen_trunk") else None
    return None if trunk is None else FrozenTrunk(trunk, p, tokenizer_json, cache_root)


def frozen_trunk(plugin: ModuleType, p: TrainParams, dataset, tokenizer_json: str | None, settings, ranks, texts):
    """The FrozenTrunk of a plug-in whose encoder this training leaves as it is, with every trainable
    text (`texts()`) embedded by rank 0 before the others read them; None for any other training."""
    if tokenizer_json is None or not hasattr(plugin, "frozen_trunk"):
        return None
    from tasks.core.plugins import class_names

    frozen = build_frozen_trunk(plugin, p, len(class_names(dataset)), tokenizer_json, embedding_cache_root(settings))
    if frozen is None:
        return None
    if ranks.master:
        frozen.embed(texts())
        log(f"embeddings: every trainable text's in {frozen.cache.folder}")
    if ranks.distributed:
        import torch.distributed as dist

        dist.barrier()
    return frozen


def pretrained_frozen_trunk(p: TrainParams, classes: int, settings) -> FrozenTrunk:
    """train.pretrained's frozen encoder outside a training (the labeling step's embedding LF), built as a
    first `finetune: frozen` training builds its own (the pretrained weights, their tokenizer, max_len),
    so both read and write the same cache folder: a text either embeds is never embedded again."""
    from tasks.core.plugins import load_model_plugin

    plugin = load_model_plugin(p.model.module)
    if p.pretrained is None or p.pretrained.tokenizer is None or plugin.BATCH_FORMAT != "tokens":
        raise ValueError(
            f"sentence embeddings need a token model plug-in started from pretrained weights with their "
            f"tokenizer (train.pretrained); train.model is {p.model.module}, pretrained {p.pretrained}"
        )
    frozen = build_frozen_trunk(plugin, p, classes, pretrained_tokenizer(p.pretrained), embedding_cache_root(settings))
    if frozen is None:
        raise ValueError(
            f"{p.model.module} with these params trains its encoder: no frozen trunk to embed with "
            "(the BERT plug-in's finetune: frozen has one)"
        )
    return frozen
