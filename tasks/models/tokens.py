"""Subword tokenizers for token-input model plug-ins (`BATCH_FORMAT = "tokens"`).

A tokenizer is trained (Hugging Face `tokenizers`, WordPiece, lower-cased BERT normalization)
on the texts of the data version a model trains on, and travels with the model: its JSON is
kept in model.pt beside the weights (`tokenizer`, with its `tokenizer_sha256`), and written as
`tokenizer.json` beside it. Training a tokenizer is not deterministic in every version of that
library, so a resumed, warm-started or reproduced training reuses the tokenizer it was given
(checked by its sha256) and never trains another. `Encoder` is the one path from raw text to ids:
training, evaluation, export and serving all use it, so they cannot drift.
"""

from __future__ import annotations

import hashlib
from typing import Iterable

import numpy as np

PAD, UNK = "[PAD]", "[UNK]"  # ids 0 and 1: the padding id is what models mask


class TokenizerError(ValueError):
    """A tokenizer that cannot be trained, read, or does not match the model it is given to."""


def tokenizer_sha256(tokenizer_json: str) -> str:
    return hashlib.sha256(tokenizer_json.encode()).hexdigest()


def train_tokenizer(texts: Iterable[str], vocab_size: int) -> str:
    """A WordPiece tokenizer of at most `vocab_size` ids trained on `texts`, as its JSON."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    texts = [t for t in texts if isinstance(t, str) and t.strip()]
    if not texts:
        raise TokenizerError("no text to train a tokenizer on (every row is empty)")
    tok = Tokenizer(models.WordPiece(unk_token=UNK))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=[PAD, UNK], show_progress=False)
    tok.train_from_iterator(texts, trainer)
    return tok.to_str()


class Encoder:
    """Raw texts -> int64 ids [n, max_len], truncated at `max_len` and padded with id 0."""

    def __init__(self, tokenizer_json: str, max_len: int, vocab_size: int, sha256: str | None = None):
        from tokenizers import Tokenizer

        if sha256 is not None and tokenizer_sha256(tokenizer_json) != sha256:
            raise TokenizerError(
                f"tokenizer sha256 {tokenizer_sha256(tokenizer_json)[:12]} is not the recorded {sha256[:12]}"
            )
        try:
            self.tokenizer = Tokenizer.from_str(tokenizer_json)
        except Exception as exc:  # noqa: BLE001 - the library raises its own exception type
            raise TokenizerError(f"not a tokenizer: {exc}") from None
        size = self.tokenizer.get_vocab_size()
        if size > vocab_size:
            raise TokenizerError(f"the tokenizer has {size} ids; the model embeds {vocab_size}")
        if self.tokenizer.token_to_id(PAD) != 0:
            raise TokenizerError(f"the tokenizer's {PAD} is not id 0, which the model masks")
        self.max_len, self.vocab_size = max_len, vocab_size
        self.sha256 = tokenizer_sha256(tokenizer_json)
        self.tokenizer.enable_truncation(max_len)
        self.tokenizer.enable_padding(pad_id=0, pad_token=PAD, length=max_len)

    def truncated(self, texts: list[str]) -> int:
        """How many of `texts` are longer than `max_len` tokens (their ids are cut there)."""
        return sum(1 for e in self.tokenizer.encode_batch(list(texts)) if e.overflowing)

    def encode(self, texts: list[str]) -> np.ndarray:
        bad = [i for i, t in enumerate(texts) if not isinstance(t, str)]
        if bad:
            raise TokenizerError(f"row {bad[0]} holds {type(texts[bad[0]]).__name__}, not text")
        if not texts:
            return np.zeros((0, self.max_len), np.int64)
        return np.asarray([e.ids for e in self.tokenizer.encode_batch(texts)], dtype=np.int64)
