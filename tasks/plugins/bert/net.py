"""A BERT encoder (post-norm blocks, absolute positions, mean pooling) whose weights have the names
and shapes of a Hugging Face `BertModel` checkpoint (`embeddings.*`, `encoder.layer.<i>.*`), so a
pretrained file loads into it tensor by tensor (tasks/models/pretrained.py checks every one), and a
classification head over the masked mean of the last layer (the sentence-transformers pooling).

Which weights train is part of the architecture (`train_top`): None trains every weight; N trains
the top N layers and the head, the embeddings and lower layers frozen (0: the head alone).
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from tasks.models.text_net import logits, masked_mean, with_outputs


class Embeddings(nn.Module):
    def __init__(self, vocab_size: int, width: int, max_positions: int, type_vocab: int, eps: float, dropout: float):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, width, padding_idx=0)
        self.position_embeddings = nn.Embedding(max_positions, width)
        self.token_type_embeddings = nn.Embedding(type_vocab, width)
        self.LayerNorm = nn.LayerNorm(width, eps=eps)
        self.dropout = nn.Dropout(dropout)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1], device=ids.device).unsqueeze(0)
        # one segment: every token is of type 0
        h = self.word_embeddings(ids) + self.position_embeddings(positions) + self.token_type_embeddings.weight[0]
        return self.dropout(self.LayerNorm(h))


class SelfAttention(nn.Module):
    def __init__(self, width: int, heads: int, head_dim: int, dropout: float):
        super().__init__()
        self.heads, self.head_dim, self.dropout = heads, head_dim, dropout
        inner = heads * head_dim
        self.query, self.key, self.value = nn.Linear(width, inner), nn.Linear(width, inner), nn.Linear(width, inner)

    def forward(self, h: torch.Tensor, attend: torch.Tensor) -> torch.Tensor:
        n, length, _ = h.shape

        def split(x: torch.Tensor) -> torch.Tensor:
            return x.view(n, length, self.heads, self.head_dim).transpose(1, 2)

        q, k, v = split(self.query(h)), split(self.key(h)), split(self.value(h))
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim) + attend
        weights = F.dropout(torch.softmax(scores, dim=-1), self.dropout, self.training)
        return (weights @ v).transpose(1, 2).reshape(n, length, self.heads * self.head_dim)


class Output(nn.Module):
    """A projection back to the width, added to the block's input and normalized (post-norm)."""

    def __init__(self, inner: int, width: int, eps: float, dropout: float):
        super().__init__()
        self.dense = nn.Linear(inner, width)
        self.LayerNorm = nn.LayerNorm(width, eps=eps)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(residual + self.dropout(self.dense(x)))


class Attention(nn.Module):
    def __init__(self, width: int, heads: int, head_dim: int, eps: float, dropout: float):
        super().__init__()
        self.self = SelfAttention(width, heads, head_dim, dropout)
        self.output = Output(heads * head_dim, width, eps, dropout)

    def forward(self, h: torch.Tensor, attend: torch.Tensor) -> torch.Tensor:
        return self.output(self.self(h, attend), h)


class Intermediate(nn.Module):
    def __init__(self, width: int, ffn: int):
        super().__init__()
        self.dense = nn.Linear(width, ffn)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.dense(h))


class Layer(nn.Module):
    """One encoder block (a unit a sharded strategy wraps): attention, then the feed-forward MLP."""

    def __init__(self, width: int, heads: int, head_dim: int, ffn: int, eps: float, dropout: float):
        super().__init__()
        self.attention = Attention(width, heads, head_dim, eps, dropout)
        self.intermediate = Intermediate(width, ffn)
        self.output = Output(ffn, width, eps, dropout)

    def forward(self, h: torch.Tensor, attend: torch.Tensor) -> torch.Tensor:
        h = self.attention(h, attend)
        return self.output(self.intermediate(h), h)


class Encoder(nn.Module):
    def __init__(self, layers: list[Layer]):
        super().__init__()
        self.layer = nn.ModuleList(layers)


class BertClassifier(nn.Module):
    """Token ids [n, L] (0: padding) -> logits: BERT embeddings, `depth` post-norm blocks, the masked
    mean of the last one (a sentence embedding, `embed`), a linear head."""

    sluice_plugin = "tasks.plugins.bert"

    def __init__(
        self,
        vocab_size: int,
        max_len: int,
        width: int,
        depth: int,
        heads: int,
        ffn: int,
        max_positions: int,
        type_vocab: int,
        layer_norm_eps: float,
        dropout: float,
        train_top: int | None,
        head_dim: int | None = None,
        outputs: int = 1,
    ):
        super().__init__()
        head_dim = head_dim or width // heads
        self.arch = {
            "vocab_size": vocab_size,
            "max_len": max_len,
            "width": width,
            "depth": depth,
            "heads": heads,
            "ffn": ffn,
            "max_positions": max_positions,
            "type_vocab": type_vocab,
            "layer_norm_eps": layer_norm_eps,
            "dropout": dropout,
            "train_top": train_top,
            "head_dim": head_dim,
        }
        self.outputs = with_outputs(self.arch, outputs)
        self.embeddings = Embeddings(vocab_size, width, max_positions, type_vocab, layer_norm_eps, dropout)
        self.encoder = Encoder([Layer(width, heads, head_dim, ffn, layer_norm_eps, dropout) for _ in range(depth)])
        self.head = nn.Linear(width, outputs)
        self.freeze_below(train_top)

    def freeze_below(self, train_top: int | None) -> None:
        """Only the top `train_top` layers and the head train (None: every weight)."""
        if train_top is None:
            return
        frozen = [self.embeddings, *self.encoder.layer[: len(self.encoder.layer) - train_top]]
        for module in frozen:
            module.requires_grad_(False)

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        """The sentence embedding [n, width]: the mean of the last layer over the unpadded tokens."""
        return sentence_embedding(self.embeddings, self.encoder.layer, ids)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Token ids [n, L] -> logits; or, from float sentence embeddings [n, width] (what a frozen
        encoder's training reads from the cache, tasks/models/embeddings.py), the head's logits alone."""
        return logits(self.head(x if x.is_floating_point() else self.embed(x)), self.outputs)


class Trunk(nn.Module):
    """The encoder of a BertClassifier (its own modules, shared, under the same names): ids -> the
    sentence embedding the head reads. What a frozen encoder's cache is keyed and computed by."""

    def __init__(self, model: BertClassifier):
        super().__init__()
        self.embeddings, self.encoder = model.embeddings, model.encoder
        # what the outputs depend on beyond the weights (heads and eps change no tensor's shape)
        self.arch = {k: v for k, v in model.arch.items() if k not in ("train_top", "dropout", "outputs")}
        self.width = model.arch["width"]

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return sentence_embedding(self.embeddings, self.encoder.layer, ids)


def sentence_embedding(embeddings: Embeddings, layers: nn.ModuleList, ids: torch.Tensor) -> torch.Tensor:
    keep = ids != 0
    if not torch.compiler.is_exporting() and ids.shape[1] > 1:
        # padding columns at the end change nothing (masked everywhere): cut them before the work
        used = int(keep.any(0).nonzero().max()) + 1 if bool(keep.any()) else 1
        ids, keep = ids[:, :used], keep[:, :used]
    # A row of padding only would attend to nothing (NaN softmax): let it attend to its first slot.
    attend_to = keep | (~keep.any(1, keepdim=True) & (torch.arange(ids.shape[1], device=ids.device) == 0))
    attend = torch.zeros(attend_to.shape, dtype=torch.float32, device=ids.device)
    attend = attend.masked_fill(~attend_to, torch.finfo(torch.float32).min)[:, None, None, :]
    h = embeddings(ids)
    for layer in layers:
        h = layer(h, attend.to(h.dtype))
    return masked_mean(h, keep)
