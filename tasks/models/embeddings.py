"""Sentence embeddings of a frozen encoder, computed once per text and kept content-addressed.

A model plug-in whose encoder does not train (the BERT plug-in's `finetune: frozen`) names that part,
its frozen trunk (`frozen_trunk(model)`: token ids -> the head's input). Its outputs depend only on the
trunk's weights and the text's ids, so they are kept under `$SLUICE_HOME/cache/embeddings/<trunk>/`,
`<trunk>` the sha256 of the trunk's weights and the tokenizer's ids: a partition embedded by one night
is read back by the next, by tuning trials and by the labeling step's embedding LF, never computed twice.
A changed checkpoint, tokenizer or max length is another folder; nothing is ever overwritten.

Each call that computes writes one shard (`<sha256 of its keys>.npz`: the texts' keys and their
vectors, written atomically), so concurrent writers (ranks, trials) at worst compute a text twice.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from tasks.core.files import atomic_create_with
from tasks.core.log import log


def trunk_fingerprint(trunk, ids_digest: str) -> str:
    """sha256 of the trunk's architecture (`trunk.arch`, values no weight's shape shows: heads, eps),
    its weights (names, shapes, bytes) and what makes its ids (`ids_digest`: the tokenizer's sha256
    and max length)."""
    h = hashlib.sha256(ids_digest.encode())
    h.update(json.dumps(getattr(trunk, "arch", None), sort_keys=True).encode())
    for name, tensor in sorted(trunk.state_dict().items()):
        if hasattr(tensor, "full_tensor"):  # an FSDP2 shard (a collective: every rank fingerprints)
            tensor = tensor.full_tensor()
        h.update(f"{name}{tuple(tensor.shape)}{tensor.dtype}".encode())
        h.update(tensor.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


class EmbeddingCache:
    """Vectors by text under `root/<fingerprint[:32]>/`; `embed(texts, compute)` returns them in order,
    computing (`compute(list of texts) -> [n, d] float32`) only the texts not kept yet."""

    def __init__(self, root: Path, fingerprint: str, width: int):
        self.folder, self.width = Path(root) / fingerprint[:32], width
        self.fingerprint = fingerprint
        self._known: dict[str, np.ndarray] = {}
        self._read_shards: set[str] = set()

    @staticmethod
    def key(text: str) -> str:
        return hashlib.sha256(text.encode()).hexdigest()

    def _refresh(self) -> None:
        if not self.folder.is_dir():
            return
        for shard in sorted(self.folder.glob("*.npz")):
            if shard.name not in self._read_shards:
                with np.load(shard) as z:
                    self._known.update(zip(z["keys"].tolist(), z["vectors"]))
                self._read_shards.add(shard.name)

    def embed(self, texts: list[str], compute: Callable[[list[str]], np.ndarray]) -> np.ndarray:
        self._refresh()
        keys = [self.key(t) for t in texts]
        missing = sorted({k: t for k, t in zip(keys, texts) if k not in self._known}.items())
        if missing:
            log(f"embeddings: {len(missing)} of {len(texts)} texts not in the cache {self.folder.name[:12]}: computing")
            vectors = np.asarray(compute([t for _, t in missing]), dtype=np.float32)
            new_keys = np.asarray([k for k, _ in missing])
            self._write(new_keys, vectors)
            self._known.update(zip(new_keys.tolist(), vectors))
        return np.stack([self._known[k] for k in keys]) if texts else np.zeros((0, self.width), np.float32)

    def _write(self, keys: np.ndarray, vectors: np.ndarray) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        name = hashlib.sha256("".join(keys.tolist()).encode()).hexdigest()[:32] + ".npz"
        target = self.folder / name
        if target.exists():  # another process wrote the same texts' vectors: they are the same
            return

        def write(tmp: Path) -> None:
            with open(tmp, "wb") as f:
                np.savez(f, keys=keys, vectors=vectors)

        try:
            atomic_create_with(target, write)
        except FileExistsError:
            pass
        self._read_shards.add(name)
