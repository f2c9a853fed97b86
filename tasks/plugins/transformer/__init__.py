"""Transformer encoder text plug-in, trained from scratch: width, depth and heads from params.
Token ids from the tokenizer trained with it (tasks/models/tokens.py); see tasks/core/plugins.py."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StrictInt, model_validator

from tasks.models.text import (  # noqa: F401 - the plug-in interface, shared with bag-of-embeddings
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

NAME = "transformer"
# prune_structured: the FFN width of every block (prunable); distil: into a narrower FFN (`distil(64)`),
# or into another token plug-in that reads the same ids (DistilConfig.student: a bag-of-embeddings)
COMPRESSION = (*TOKEN_COMPRESSION, "prune_structured", "distil")
TUNABLE = {"width": "choices", "depth": "int", "heads": "choices"}


class Params(TokenParams):
    width: Annotated[StrictInt, Field(ge=4, le=16384)]
    """Model width (embedding and residual stream)."""
    depth: Annotated[StrictInt, Field(ge=1, le=128)]
    """Encoder blocks (each one unit a sharded strategy wraps)."""
    heads: Annotated[StrictInt, Field(ge=1, le=256)]
    """Attention heads; width must divide by it."""
    ffn: Annotated[StrictInt, Field(ge=1, le=65536)]
    """Hidden width of each block's MLP."""
    dropout: Annotated[float, Field(ge=0, lt=1)]

    @model_validator(mode="after")
    def _heads_divide_width(self) -> "Params":
        if self.width % self.heads:
            raise ValueError(f"width {self.width} does not divide by heads {self.heads}")
        return self


def build(stats, params: Params):
    from tasks.models.losses import logit_count

    from .net import TransformerClassifier

    fields = ("vocab_size", "max_len", "width", "depth", "heads", "ffn", "dropout")
    return TransformerClassifier(**{k: getattr(params, k) for k in fields}, outputs=logit_count(stats.classes))


def from_arch(spec: dict):
    from .net import TransformerClassifier

    return TransformerClassifier(**spec)


def shard_units(model) -> list:
    return list(model.blocks)


def narrower(model, widths: list[int]):
    """The same transformer with every block's FFN `widths[0]` wide (what structured pruning keeps)."""
    if len(widths) != 1:
        raise ValueError(f"a transformer has one width to narrow, its blocks' FFN (e.g. distil(64)); got {widths}")
    return from_arch({**model.arch, "ffn": int(widths[0])})


def prunable(model) -> list[list[tuple[str, str]]]:
    """One width, the FFN's, shared by every block: each block's first FFN Linear makes its units, the
    second reads them (attention heads are not pruned: MultiheadAttention's packed projections)."""
    return [[(f"blocks.{i}.ffn.0", f"blocks.{i}.ffn.2") for i in range(len(model.blocks))]]
