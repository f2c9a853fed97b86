"""What the two text plug-ins share: token inputs, their Params' common keys, export and loss.
Light (no torch at import); see tasks/core/plugins.py for the plug-in interface."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt

BATCH_FORMAT = "tokens"
INPUT, OUTPUT = "input_ids", "p_positive"
COMPRESSION = ("int8_dynamic", "int8_static", "fp16", "prune")  # int8_static calibrates on token ids


class TokenParams(BaseModel):
    """The keys every token plug-in has: the tokenizer's size and where text is cut."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    vocab_size: Annotated[StrictInt, Field(ge=16, le=1_000_000)]
    """Ids the embedding holds; the tokenizer trained for the model has at most this many."""
    max_len: Annotated[StrictInt, Field(ge=4, le=8192)]
    """Tokens kept per text (longer texts are truncated; the model records it)."""


def arch(model) -> dict[str, Any]:
    return dict(model.arch)


def loss(class_shares):
    from tasks.models.losses import noise_aware_loss

    return noise_aware_loss(class_shares)


def probabilities(model, x):
    from tasks.models.losses import class_probabilities

    return class_probabilities(model(x))


def export_wrapper(model):
    from tasks.models.text_net import Probability

    return Probability(model)


def example_input(model, n: int):
    """n rows of ids (varying, so tracing sees real tokens and padding) of the model's max length."""
    import torch

    ids = torch.arange(n * model.arch["max_len"]).reshape(n, -1) % (model.arch["vocab_size"] - 2) + 2
    ids[:, model.arch["max_len"] // 2 :] = 0
    return ids
