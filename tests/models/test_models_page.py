"""docs/models.md followed as written: its logistic-regression plug-in loads, trains through the
engine's pieces, exports to ONNX, compresses where it says it may, and is refused where it does not."""

import re
import shlex
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score

import tasks.plugins
from tasks.core.context import parse_overrides
from tasks.core.errors import CompressionError
from tasks.core.params import ParamsError, repo_params
from tasks.models import ModelPluginError, build_model, load_model_plugin, model_blob, model_from_blob
from tasks.training.data import FeatureStats

PAGE = Path(__file__).resolve().parents[2] / "docs" / "models.md"


def _page_module_code() -> str:
    text = PAGE.read_text()
    step = text[text.index("## Step by step") :]
    code = re.search(r"```python\n(.*?)```", step, re.S).group(1)
    return "\n".join(line[3:] if line.startswith("   ") else line for line in code.splitlines())


def _step3_sets() -> list[str]:
    text = PAGE.read_text()
    command = re.search(r"```bash\n(.*?)```", text[text.index("3. Name it") :], re.S).group(1)
    words = shlex.split(command)
    assert words[:3] == [".venv/bin/python", "-m", "tasks.train"]
    return [words[i + 1] for i, w in enumerate(words) if w == "--set"]


@pytest.fixture
def linear_plugin(tmp_path, monkeypatch):
    """Step 1: the page's module, written in a folder of its own where `tasks.plugins.linear` is found."""
    folder = tmp_path / "plugins"
    (folder / "linear").mkdir(parents=True)
    (folder / "linear" / "__init__.py").write_text(_page_module_code())
    monkeypatch.setattr(tasks.plugins, "__path__", [*tasks.plugins.__path__, str(folder)])
    load_model_plugin.cache_clear()
    yield "tasks.plugins.linear"
    load_model_plugin.cache_clear()
    import sys

    sys.modules.pop("tasks.plugins.linear", None)


def test_the_page_plugin_loads_trains_exports_and_compresses_as_it_says(linear_plugin, tmp_path):
    from tasks.compression.chain import CompressionData, apply_chain
    from tasks.compression.export import open_session, predict
    from tasks.training.loop import fit_in_memory

    plugin = load_model_plugin(linear_plugin)  # step 2: loads, nothing missing
    sets = _step3_sets()
    assert sets == ["train.model.module=tasks.plugins.linear", "train.model.params={}"]
    train = repo_params(overrides=parse_overrides(sets)).train.replace(epochs=30, batch_size=32)
    assert train.model.module == linear_plugin and train.model.params == {}

    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 6)).astype(np.float32) * 3 + 1
    y = (X[:, 0] - X[:, 2] > 0).astype(np.float32)
    model, losses = fit_in_memory(torch.from_numpy(X), torch.from_numpy(y), train)
    assert model.sluice_plugin == linear_plugin and losses[-1] < 0.6 * losses[0]
    again = model_from_blob(model_blob(model))  # what model.pt holds rebuilds the same model
    assert torch.equal(again.out.weight, model.out.weight)

    data = CompressionData(X, y.astype(int))
    cand = apply_chain(model, ["int8_dynamic"], data, tmp_path / "c")
    p_int8 = predict(open_session(cand.onnx_path), X)
    p_fp32 = predict(open_session(cand.parent.onnx_path), X)
    with torch.no_grad():
        p_torch = plugin.probabilities(model, torch.from_numpy(X)).numpy()
    assert np.abs(p_fp32 - p_torch).max() < 1e-5 and np.abs(p_int8 - p_fp32).max() < 0.05
    assert roc_auc_score(y, p_fp32) > 0.97  # it learned the rule
    assert open_session(cand.parent.onnx_path).get_inputs()[0].name == plugin.INPUT
    with pytest.raises(CompressionError, match=r"\['lowrank'\] do not apply to model plug-in linear"):
        apply_chain(model, repo_params().compress.chain(["lowrank(2)"]), data, tmp_path / "c")


def test_the_default_tuning_space_is_refused_by_the_study_for_a_plugin_that_does_not_tune_hidden(linear_plugin):
    from tasks.core.tuning_config import check_space

    params = repo_params(overrides=parse_overrides(_step3_sets()))  # training needs no other space
    with pytest.raises(ValueError, match=r"unknown parameter 'hidden'; tunable: \['batch_size', 'epochs', 'lr'"):
        check_space(params.tuning.space, params.train)  # what tune_plan runs first
    own = repo_params(overrides=parse_overrides([*_step3_sets(), "tuning.space={lr: {low: 0.001, high: 0.1}}"]))
    check_space(own.tuning.space, own.train)


def test_a_bound_the_plugin_refuses_is_caught_when_params_are_read():
    with pytest.raises(ParamsError, match=r"params\.yaml: tuning\.space\.hidden: \[0\] is not a valid train\.hidden"):
        repo_params(overrides=parse_overrides(["tuning.space.hidden={choices: [[0], [8]]}"]))


def test_a_plugin_lacking_pieces_is_refused_naming_them(tmp_path, monkeypatch):
    folder = tmp_path / "plugins"
    folder.mkdir()
    code = _page_module_code()
    cut = code[: code.index("def shard_units")]  # the module without shard_units and what follows
    (folder / "partial.py").write_text(cut.replace("def loss(", "def not_loss("))
    monkeypatch.setattr(tasks.plugins, "__path__", [*tasks.plugins.__path__, str(folder)])
    load_model_plugin.cache_clear()
    with pytest.raises(ModelPluginError, match=r"lacks \['loss', 'shard_units', 'export_wrapper', 'example_input'\]"):
        load_model_plugin("tasks.plugins.partial")
    load_model_plugin.cache_clear()


def test_weights_that_do_not_fit_the_architecture_are_a_clear_error():
    stats = FeatureStats(1, torch.zeros(4), torch.ones(4), (0.5, 0.5))
    blob = model_blob(build_model("tasks.plugins.mlp", stats, {"hidden": [8]}))
    blob["arch"] = {"n_features": 4, "hidden": [9]}
    with pytest.raises(ModelPluginError, match=r"do not fit tasks\.plugins\.mlp's architecture"):
        model_from_blob(blob)


def test_a_model_saved_before_plugins_is_read_as_the_mlp():
    stats = FeatureStats(1, torch.zeros(4), torch.ones(4), (0.5, 0.5))
    blob = model_blob(build_model("tasks.plugins.mlp", stats, {"hidden": [8]}))
    del blob["plugin"]
    assert model_from_blob(blob).sluice_plugin == "tasks.plugins.mlp"


def test_the_pages_pretrained_weights_section_as_written(tmp_path):
    """ "Starting from pretrained weights": the page's save_file line writes the weights of a model of its
    yaml's plug-in, its yaml (with the sha256 values it tells how to get, and the files under tmp_path
    instead of the repository) loads, and the model built from it holds those weights and reads with
    that tokenizer."""
    import hashlib

    import yaml

    from tasks.core.params import load_params
    from tasks.models.pretrained import pretrained_tokenizer
    from tasks.models.tokens import train_tokenizer
    from tasks.training.loop import make_model
    from tests.toy import text as toy_text

    section = PAGE.read_text().split("## Starting from pretrained weights", 1)[1].split("\n## ", 1)[0]
    python, config = (re.search(rf"```{kind}\n(.*?)```", section, re.S).group(1) for kind in ("python", "yaml"))
    spec = yaml.safe_load(config)["train"]["model"]
    stats = FeatureStats(1, torch.zeros(1), torch.ones(1), (0.5, 0.5))
    torch.manual_seed(1)
    model = build_model(spec["module"], stats, spec["params"])
    (tmp_path / "weights").mkdir()
    exec(python.replace('"weights/', f'"{tmp_path}/weights/'), {"model": model})  # the page's lines
    tok = train_tokenizer(toy_text.texts(toy_text.load_source(200)), spec["params"]["vocab_size"])
    (tmp_path / "weights" / "tokenizer.json").write_text(tok)

    def sha(name):
        return hashlib.sha256((tmp_path / "weights" / name).read_bytes()).hexdigest()

    config = (
        config.replace("weights/", f"{tmp_path}/weights/")
        .replace("SHA256_OF_THE_WEIGHTS", sha("encoder.safetensors"))
        .replace("SHA256_OF_THE_TOKENIZER", sha("tokenizer.json"))
    )
    written = yaml.safe_load(config)["train"]
    p = load_params().train.replace(model=written["model"], pretrained=written["pretrained"])
    built = make_model(stats, p)  # seeded with train.seed, then the file laid over it
    assert built.sluice_pretrained["fresh"] == [] and built.sluice_pretrained["tensors"] == len(model.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), built.state_dict().values()))
    assert pretrained_tokenizer(p.pretrained) == tok


def test_the_pages_pretrained_encoder_yaml_is_the_bert_demos_and_loads_the_pinned_checkpoint():
    """ "Pretrained encoders": the page's yaml is what `MODEL=bert` lays over params (its demo.yaml), the
    params it names are the checkpoint's config.json, and the model built from it loads every tensor of
    the pinned file with only the head fresh."""
    import json

    import yaml

    from tasks.core.params import load_params
    from tasks.core.settings import REPO_ROOT
    from tasks.models.pretrained import resolve
    from tasks.training.loop import make_model

    section = PAGE.read_text().split("## Pretrained encoders", 1)[1].split("\n## ", 1)[0]
    written = yaml.safe_load(re.search(r"```yaml\n(.*?)```", section, re.S).group(1))["train"]
    demo = yaml.safe_load((REPO_ROOT / "tasks" / "plugins" / "bert" / "demo.yaml").read_text())["train"]
    assert written["model"] == {"module": demo["model.module"], "params": demo["model.params"]}
    assert written["pretrained"] == demo["pretrained"]
    config = json.loads(resolve(written["pretrained"]["path"]).with_name("config.json").read_text())
    names = {"width": "hidden_size", "depth": "num_hidden_layers", "heads": "num_attention_heads",
             "ffn": "intermediate_size", "max_positions": "max_position_embeddings", "type_vocab": "type_vocab_size",
             "vocab_size": "vocab_size", "layer_norm_eps": "layer_norm_eps"}  # fmt: skip
    assert {k: written["model"]["params"][k] for k in names} == {k: config[v] for k, v in names.items()}
    p = load_params().train.replace(model=written["model"], pretrained=written["pretrained"])
    built = make_model(FeatureStats(1, torch.zeros(1), torch.ones(1), (0.5, 0.5)), p)
    loaded = built.sluice_pretrained
    assert loaded["fresh"] == ["head.bias", "head.weight"] and loaded["tensors"] == 104
