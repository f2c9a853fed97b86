"""Bag-of-embeddings text plug-in (fastText-style): fast, and the student of the transformer.
Token ids from the tokenizer trained with it (tasks/models/tokens.py); see tasks/core/plugins.py."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StrictInt

from tasks.models.text import (  # noqa: F401 - the plug-in interface, shared with the transformer
    BATCH_FORMAT,
    COMPRESSION,
    INPUT,
    OUTPUT,
    TokenParams,
    arch,
    example_input,
    export_wrapper,
    loss,
    probabilities,
)

NAME = "bow"
TUNABLE = {"dim": "int", "head_width": "int"}


class Params(TokenParams):
    dim: Annotated[StrictInt, Field(ge=2, le=4096)]
    """Embedding width."""
    head_width: Annotated[StrictInt, Field(ge=1, le=65536)]
    """Width of the hidden layer over the mean embedding."""


def build(stats, params: Params):
    from tasks.models.losses import logit_count

    from .net import BagOfEmbeddings

    return BagOfEmbeddings(params.vocab_size, params.max_len, params.dim, params.head_width, logit_count(stats.classes))


def from_arch(spec: dict):
    from .net import BagOfEmbeddings

    return BagOfEmbeddings(**spec)


def shard_units(model) -> list:
    return [model.embed, model.head]
