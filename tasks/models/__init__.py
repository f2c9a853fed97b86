"""Models are plug-ins: one module each, chosen by params.yaml `train.model.module`, as datasets are.
The protocol (what a model module provides) is documented and checked in tasks/core/plugins.py;
this package holds what works on any plug-in's models: building, saving and reading them, their
tokenizers and input encoders. The plug-ins themselves are folders in tasks/plugins/ (`tasks.plugins.mlp`
is the default).
"""

from __future__ import annotations

import io
from pathlib import Path
from types import ModuleType
from typing import Any

from tasks.core.moved import current
from tasks.core.plugins import ModelPluginError, load_model_plugin

__all__ = ["ModelPluginError", "load_model_plugin"]  # the protocol's, re-exported where models are used

K_CLASS_OUTPUT = "class_probabilities"  # the served output of a K > 2 class model: [n, K], rows summing to 1
# Models saved before plug-ins existed carry no plug-in name: the MLP was the only model then.
LEGACY_PLUGIN = "tasks.models.mlp"


def plugin_of(model) -> ModuleType:
    """The plug-in that built `model` (`build` and `from_arch` tag what they return)."""
    module = getattr(model, "sluice_plugin", None)
    if module is None:
        raise ModelPluginError(f"{type(model).__name__} was not built by a model plug-in (no sluice_plugin)")
    return load_model_plugin(module)


def served_output(plugin: ModuleType, classes: int) -> str:
    """The served output tensor's name: the plug-in's OUTPUT for a binary model, K_CLASS_OUTPUT for K > 2."""
    return plugin.OUTPUT if classes == 2 else K_CLASS_OUTPUT


def build_model(module: str, stats, params: dict[str, Any]):
    """A new model of plug-in `module` for inputs described by `stats`, from its params (validated)."""
    plugin = load_model_plugin(module)
    return _tagged(plugin.build(stats, plugin.Params.model_validate(params)), module)


def _tagged(model, module: str):
    model.sluice_plugin = current(module)  # a file written before its plug-in moved: tagged where it is now
    return model


def model_blob(model, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """What a model file holds: its plug-in, architecture and weights, its tokenizer (JSON and sha256)
    when it takes tokens, and `extra` (provenance)."""
    plugin = plugin_of(model)
    blob = {"plugin": model.sluice_plugin, "arch": plugin.arch(model), "state_dict": model.state_dict()}
    if plugin.BATCH_FORMAT == "tokens":
        blob["tokenizer"] = tokenizer_of(model)
        blob["tokenizer_sha256"] = model.tokenizer_sha256
    return {**blob, **(extra or {})}


def model_from_blob(blob: dict[str, Any]):
    """The model a file's blob describes, in eval mode; ModelPluginError when the weights do not fit."""
    module = blob.get("plugin", LEGACY_PLUGIN)
    plugin = load_model_plugin(module)
    model = _tagged(plugin.from_arch(blob["arch"]), module)
    try:
        model.load_state_dict(blob["state_dict"])
    except RuntimeError as exc:
        raise ModelPluginError(f"the weights do not fit {module}'s architecture {blob['arch']}: {exc}") from exc
    if plugin.BATCH_FORMAT == "tokens":
        attach_tokenizer(model, blob["tokenizer"], blob["tokenizer_sha256"])
    return model.eval()


def attach_tokenizer(model, tokenizer_json: str, sha256: str | None = None) -> None:
    """Give a token model the tokenizer it reads with (checked: its sha256 when given, its size
    against the embedding, its padding id)."""
    from tasks.models.tokens import Encoder

    encoder = Encoder(tokenizer_json, model.arch["max_len"], model.arch["vocab_size"], sha256)
    model.tokenizer_json, model.tokenizer_sha256 = tokenizer_json, encoder.sha256


def tokenizer_of(model) -> str:
    json_text = getattr(model, "tokenizer_json", None)
    if json_text is None:
        raise ModelPluginError(f"{type(model).__name__} takes tokens but has no tokenizer attached")
    return json_text


def input_encoder(model, dataset):
    """rows (a DataFrame of the dataset's raw columns) -> the model's input array: the dataset's
    `featurize` for dense models; the model's tokenizer over the dataset's `texts` for token models."""
    plugin = plugin_of(model)
    if plugin.BATCH_FORMAT == "dense":
        return dataset.featurize
    if not hasattr(dataset, "texts"):
        raise ModelPluginError(f"{plugin.NAME} reads text, and the dataset {dataset.NAME} has no texts(df)")
    from tasks.models.tokens import Encoder

    encoder = Encoder(tokenizer_of(model), model.arch["max_len"], model.arch["vocab_size"], model.tokenizer_sha256)
    return lambda df: encoder.encode(dataset.texts(df))


def save_model(model, path: str | Path, extra: dict[str, Any] | None = None) -> None:
    """Plug-in, architecture, weights and `extra` in one file, written atomically."""
    import torch

    from tasks.core.files import atomic_write_with

    blob = model_blob(model, extra)
    atomic_write_with(Path(path), lambda tmp: torch.save(blob, tmp))


def read_blob(source: str | Path | bytes) -> dict[str, Any]:
    """A model file's blob, read as data only (tensors and plain values)."""
    import torch

    data = io.BytesIO(source) if isinstance(source, bytes) else source
    return torch.load(data, map_location="cpu", weights_only=True)


def load_model(path: str | Path):
    return model_from_blob(read_blob(path))


PREDICT_CHUNK_ROWS = 128


def predict_proba(model, X) -> Any:
    """The probabilities of each row of X (the model's input array: features, as float32, or int64
    token ids) as float64: binary, P(class 1) [n]; K classes, [n, K]."""
    import numpy as np
    import torch

    X = np.asarray(X)
    x = torch.from_numpy(np.ascontiguousarray(X, dtype=np.float32 if X.dtype.kind == "f" else X.dtype))
    plugin = plugin_of(model)
    if plugin.BATCH_FORMAT != "tokens" or len(x) <= PREDICT_CHUNK_ROWS:
        with torch.no_grad():
            return plugin.probabilities(model, x).double().numpy()
    # Token rows in chunks of similar length: an encoder's work (and memory: attention is [n, heads, L, L])
    # grows with the padded length of its batch, and a model cuts padding columns no row of a chunk uses.
    order = np.argsort((X != 0).sum(1), kind="stable")
    parts = []
    with torch.no_grad():
        for start in range(0, len(order), PREDICT_CHUNK_ROWS):
            rows = torch.from_numpy(order[start : start + PREDICT_CHUNK_ROWS])
            parts.append(plugin.probabilities(model, x[rows]).double().numpy())
    out = np.empty((len(X), *parts[0].shape[1:]), np.float64)
    out[order] = np.concatenate(parts)
    return out


def tokenizer_metadata(model) -> dict[str, Any]:
    """What a served artifact of `model` carries so that anything scoring it reads text as the model
    does: its tokenizer (JSON, sha256) and where text is cut ({} for a dense model)."""
    if plugin_of(model).BATCH_FORMAT != "tokens":
        return {}
    return {
        "tokenizer": tokenizer_of(model),
        "tokenizer_sha256": model.tokenizer_sha256,
        "max_len": model.arch["max_len"],
        "vocab_size": model.arch["vocab_size"],
    }


def metadata_input_encoder(metadata: dict[str, Any], dataset):
    """rows -> an ONNX artifact's input array, from its metadata (`tokenizer_metadata`): the dataset's
    features, or ids from the artifact's own tokenizer (checked by its sha256) over the dataset's texts."""
    if "tokenizer" not in metadata:
        return dataset.featurize
    from tasks.models.tokens import Encoder

    encoder = Encoder(metadata["tokenizer"], metadata["max_len"], metadata["vocab_size"], metadata["tokenizer_sha256"])
    return lambda df: encoder.encode(dataset.texts(df))


def rebuilt_with(model, state_dict: dict[str, Any]):
    """A plain module of `model`'s plug-in and architecture holding `state_dict` (a sharded model's
    gathered weights), with its tokenizer when it has one."""
    plugin = plugin_of(model)
    plain = _tagged(plugin.from_arch(plugin.arch(model)), model.sluice_plugin)
    plain.load_state_dict(state_dict)
    if getattr(model, "tokenizer_json", None) is not None:
        attach_tokenizer(plain, model.tokenizer_json, model.tokenizer_sha256)
    return plain
