"""A model plug-in started from pretrained weights in a local safetensors file: pinned by sha256,
laid into the freshly built model only where they fit, the rest listed as fresh."""

import hashlib

import pytest
import torch
from safetensors.torch import save_file

from tasks.core.params import PretrainedWeights, load_params
from tasks.models import build_model
from tasks.models.pretrained import PretrainedError, load_pretrained
from tasks.training.data import FeatureStats
from tasks.training.loop import make_model

MLP = "tasks.plugins.mlp"
STATS = FeatureStats(1, torch.zeros(6), torch.ones(6), (0.7, 0.3))


def _mlp(hidden, seed):
    torch.manual_seed(seed)
    return build_model(MLP, STATS, {"hidden": hidden})


def _write(path, tensors) -> PretrainedWeights:
    save_file({k: v.detach().contiguous().clone() for k, v in tensors.items()}, str(path))
    sha256 = hashlib.sha256(path.read_bytes()).hexdigest()
    return PretrainedWeights(path=str(path), sha256=sha256, tokenizer=None, tokenizer_sha256=None)


def test_the_files_weights_replace_the_fresh_ones_and_what_it_lacks_stays_fresh(tmp_path):
    source = _mlp([8, 4], seed=1)
    spec = _write(tmp_path / "w.safetensors", source.state_dict())
    model = _mlp([8, 4], seed=2)
    info = load_pretrained(model, spec)
    assert info == {
        "path": spec.path,
        "sha256": spec.sha256,
        "tensors": len(source.state_dict()),
        "fresh": [],
        "unused": [],
        "tokenizer_sha256": None,
    }
    for (k, a), b in zip(source.state_dict().items(), model.state_dict().values()):
        assert torch.equal(a, b), k

    # an encoder without its head: the head keeps the seeded initialization, and is named
    head = "net.4"
    partial = {k: v for k, v in source.state_dict().items() if not k.startswith(head)}
    spec = _write(tmp_path / "encoder.safetensors", partial)
    fresh, model = _mlp([8, 4], seed=3).state_dict(), _mlp([8, 4], seed=3)
    info = load_pretrained(model, spec)
    assert info["fresh"] == [f"{head}.bias", f"{head}.weight"] and info["tensors"] == len(partial)
    for k, v in model.state_dict().items():
        assert torch.equal(v, (fresh if k.startswith(head) else source.state_dict())[k]), k


def test_make_model_starts_from_the_params_pretrained_weights(tmp_path):
    source = _mlp([8, 4], seed=1)
    spec = _write(tmp_path / "w.safetensors", source.state_dict())
    p = load_params().train.replace(model={"module": MLP, "params": {"hidden": [8, 4]}}, pretrained=spec.model_dump())
    model = make_model(STATS, p)
    assert model.sluice_pretrained["sha256"] == spec.sha256
    assert all(torch.equal(a, b) for a, b in zip(source.state_dict().values(), model.state_dict().values()))


def test_a_file_that_is_not_the_pinned_one_or_does_not_fit_is_refused_by_name(tmp_path):
    spec = _write(tmp_path / "w.safetensors", _mlp([8, 4], seed=1).state_dict())
    other = "0" * 64
    with pytest.raises(PretrainedError, match=f"has sha256 {spec.sha256}, not the {other} params pin"):
        load_pretrained(_mlp([8, 4], seed=2), spec.replace(sha256=other))
    with pytest.raises(PretrainedError, match="does not exist"):
        load_pretrained(_mlp([8, 4], seed=2), spec.replace(path=str(tmp_path / "missing.safetensors")))
    model = _mlp([16, 4], seed=2)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(
        PretrainedError,
        match=r"other shape or dtype: net.0.bias \(8,\) torch.float32 \(the model's: \(16,\) torch.float32\), net.0.w",
    ):
        load_pretrained(model, spec)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # nothing half-loaded
    stray = _write(tmp_path / "stray.safetensors", {"encoder.weight": torch.zeros(2, 2)})
    with pytest.raises(PretrainedError, match=r"not weights of the model: encoder.weight$"):
        load_pretrained(model, stray)
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"not a safetensors file")
    with pytest.raises(PretrainedError, match="cannot be read as safetensors"):
        load_pretrained(model, spec.replace(path=str(junk), sha256=hashlib.sha256(junk.read_bytes()).hexdigest()))
    with pytest.raises(ValueError, match="tokenizer and tokenizer_sha256 go together"):
        PretrainedWeights(path="w.safetensors", sha256=spec.sha256, tokenizer="tokenizer.json", tokenizer_sha256=None)


def test_without_safetensors_installed_the_error_names_the_extra(tmp_path, monkeypatch):
    """What a training on an image without the `pretrained` extra meets (the images do not carry it yet)."""
    spec = _write(tmp_path / "w.safetensors", _mlp([8, 4], seed=1).state_dict())
    monkeypatch.setitem(__import__("sys").modules, "safetensors.torch", None)  # import fails as if absent
    with pytest.raises(PretrainedError, match=r"needs safetensors: pip install 'sluice\[pretrained\]'"):
        load_pretrained(_mlp([8, 4], seed=2), spec)
