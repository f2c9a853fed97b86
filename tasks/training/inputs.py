"""What a training's rows become before the model sees them: the dataset's features, or, for a
token model plug-in, ids from a tokenizer that belongs to this training.

The tokenizer is decided once per training, on rank 0, and handed to every rank (a broadcast:
training one on each rank could give ranks different vocabularies). In order: the one this training
already wrote (`tokenizer.json` in its output folder, fetched back on a pod: a resumed training keeps
its ids), the warm-start model's (its embedding rows mean those ids), the pretrained weights' (for the
same reason; `train.pretrained.tokenizer`), or a new one trained on the data version's
trainable texts. Tokenizer training is not deterministic in every version of the
library, so nothing that must reproduce retrains it.
"""

from __future__ import annotations

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


def row_inputs(p: TrainParams, dataset, tokenizer_json: str | None) -> Callable:
    """rows -> the model's input array, as the stream needs it: the dataset's features, or token ids
    (tasks.models.tokens.Encoder, the path evaluation and serving take too)."""
    if tokenizer_json is None:
        return dataset.featurize
    from tasks.models.tokens import Encoder

    encoder = Encoder(tokenizer_json, p.model.params["max_len"], p.model.params["vocab_size"])
    return lambda df: encoder.encode(dataset.texts(df))
