"""The torch modules of the text plug-ins (tasks/models/bow.py, transformer.py): token ids in,
the positive class's logit out. Id 0 is padding (tasks/models/tokens.py): masked everywhere."""

from __future__ import annotations

import torch
from torch import nn

from tasks.models.losses import class_probabilities


def masked_mean(h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over the sequence of `h` [n, L, d] where `mask` [n, L] is 1 (a row of padding only: zeros)."""
    m = mask.unsqueeze(-1).to(h.dtype)
    return (h * m).sum(1) / m.sum(1).clamp_min(1.0)


def with_outputs(arch: dict, outputs: int) -> int:
    """Record a head of K > 2 logits in `arch` (a binary model's arch omits it, as before K classes)."""
    if outputs != 1:
        arch["outputs"] = int(outputs)
    return int(outputs)


def logits(out: torch.Tensor, outputs: int) -> torch.Tensor:
    """The head's output: [n] for one logit (binary), [n, K] for K."""
    return out.squeeze(-1) if outputs == 1 else out


class BagOfEmbeddings(nn.Module):
    """fastText-style: the mean of the tokens' embeddings, one hidden layer, a logit."""

    sluice_plugin = "tasks.models.bow"

    def __init__(self, vocab_size: int, max_len: int, dim: int, head_width: int, outputs: int = 1):
        super().__init__()
        self.arch = {"vocab_size": vocab_size, "max_len": max_len, "dim": dim, "head_width": head_width}
        self.outputs = with_outputs(self.arch, outputs)
        self.embed = nn.Embedding(vocab_size, dim, padding_idx=0)
        self.head = nn.Sequential(nn.Linear(dim, head_width), nn.ReLU(), nn.Linear(head_width, outputs))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return logits(self.head(masked_mean(self.embed(ids), ids != 0)), self.outputs)


class Block(nn.Module):
    """A pre-norm transformer encoder block: self-attention over the unpadded tokens, then an MLP."""

    def __init__(self, width: int, heads: int, ffn: int, dropout: float):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.attn = nn.MultiheadAttention(width, heads, dropout=dropout, batch_first=True)
        self.ffn = nn.Sequential(nn.Linear(width, ffn), nn.GELU(), nn.Linear(ffn, width))
        self.drop = nn.Dropout(dropout)

    def forward(self, h: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
        x = self.norm1(h)
        a, _ = self.attn(x, x, x, key_padding_mask=pad, need_weights=False)
        h = h + self.drop(a)
        return h + self.drop(self.ffn(self.norm2(h)))


class TransformerClassifier(nn.Module):
    """Token and position embeddings, `depth` encoder blocks, masked mean pooling, a logit."""

    sluice_plugin = "tasks.models.transformer"

    def __init__(
        self,
        vocab_size: int,
        max_len: int,
        width: int,
        depth: int,
        heads: int,
        ffn: int,
        dropout: float,
        outputs: int = 1,
    ):
        super().__init__()
        self.arch = {
            "vocab_size": vocab_size,
            "max_len": max_len,
            "width": width,
            "depth": depth,
            "heads": heads,
            "ffn": ffn,
            "dropout": dropout,
        }
        self.outputs = with_outputs(self.arch, outputs)
        self.embed = nn.Embedding(vocab_size, width, padding_idx=0)
        self.position = nn.Embedding(max_len, width)
        self.blocks = nn.ModuleList(Block(width, heads, ffn, dropout) for _ in range(depth))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, outputs)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        keep = ids != 0
        # A row of padding only would attend to nothing (NaN softmax): let it attend to its first slot.
        pad = ~keep
        pad = pad & ~(pad.all(1, keepdim=True) & (torch.arange(ids.shape[1], device=ids.device) == 0))
        positions = torch.arange(ids.shape[1], device=ids.device).unsqueeze(0)
        h = self.embed(ids) + self.position(positions)
        for block in self.blocks:
            h = block(h, pad)
        return logits(self.head(masked_mean(self.norm(h), keep)), self.outputs)


class Probability(nn.Module):
    """What is exported and served: token ids -> P(positive) [n], or the K class probabilities [n, K]."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return class_probabilities(self.model(input_ids))
