"""The transformer encoder network: token and position embeddings, pre-norm blocks, masked mean
pooling, the head's logits (id 0 is padding, masked)."""

from __future__ import annotations

import torch
from torch import nn

from tasks.models.text_net import logits, masked_mean, with_outputs


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

    sluice_plugin = "tasks.plugins.transformer"

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
