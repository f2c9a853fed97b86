"""The bag-of-embeddings network: token ids in, the head's logits out (id 0 is padding, masked)."""

from __future__ import annotations

import torch
from torch import nn

from tasks.models.text_net import logits, masked_mean, with_outputs


class BagOfEmbeddings(nn.Module):
    """fastText-style: the mean of the tokens' embeddings, one hidden layer, a logit."""

    sluice_plugin = "tasks.plugins.bow"

    def __init__(self, vocab_size: int, max_len: int, dim: int, head_width: int, outputs: int = 1):
        super().__init__()
        self.arch = {"vocab_size": vocab_size, "max_len": max_len, "dim": dim, "head_width": head_width}
        self.outputs = with_outputs(self.arch, outputs)
        self.embed = nn.Embedding(vocab_size, dim, padding_idx=0)
        self.head = nn.Sequential(nn.Linear(dim, head_width), nn.ReLU(), nn.Linear(head_width, outputs))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return logits(self.head(masked_mean(self.embed(ids), ids != 0)), self.outputs)
