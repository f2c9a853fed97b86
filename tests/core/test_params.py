import re

import pytest
import yaml

from tasks.core.params import DEFAULT_PARAMS_FILE, ParamsError, load_params, parse_params
from tests.conftest import params_dict, write_params


def test_defaults_load_and_digest_is_stable():
    a, b = load_params(), load_params()
    assert a.train.nproc == 2 and a.train.batch_size % a.train.nproc == 0
    assert a.digest() == b.digest() and len(a.digest()) == 16


def test_resolved_params_written_as_json_load_back_the_same(tmp_path):
    """What reproduction hands the recorded commit's processes (SLUICE_PARAMS): the resolved params
    of a run, overrides applied, dumped to JSON."""
    import json

    p = load_params(overrides={"train": {"epochs": 7}, "dataset": {"module": "tasks.plugins.reviews"}})
    (tmp_path / "p.json").write_text(json.dumps(p.model_dump(mode="json")))
    again = load_params(tmp_path / "p.json")
    assert again == p and again.digest() == p.digest()


def test_override_changes_digest():
    base = load_params()
    other = load_params(overrides={"train": {"epochs": base.train.epochs + 1}})
    assert other.train.epochs == base.train.epochs + 1
    assert other.digest() != base.digest()


def test_none_override_keeps_file_value():
    assert load_params(overrides={"train": {"epochs": None}}).train.epochs == load_params().train.epochs


@pytest.mark.parametrize(
    "text, key",
    [
        ("train:\n  epochs: 0\n", "train.epochs"),
        ("train:\n  epochs: ten\n", "train.epochs"),
        ("train:\n  batch_size: 1\n", "train.batch_size"),
        ("train:\n  model:\n    params:\n      hidden: []\n", "train.model.params.hidden"),
        ("train:\n  model:\n    params:\n      width: 3\n", "train.model.params.width"),
        ("train:\n  model:\n    module: tasks.models.nope\n", "cannot import the plug-in tasks.models.nope"),
        ("train:\n  learning_rate: 0.1\n", "unknown key"),
        ("evaluate:\n  min_roc_auc: 1.5\n", "evaluate.min_roc_auc"),
        ("demo:\n  dev_fraction: 0.6\n", "demo.dev_fraction"),
        ("surprise: {}\n", "unknown section"),
        ("scaling:\n  profile: huge\n", "scaling.profile"),
        ("scaling:\n  profiles: {smoke: {nodes: 0, gpus_per_node: 1}}\n", "scaling.profiles.smoke"),
        ("compress:\n  candidates: [[int8_dynamic, prune(0.5)]]\n", "compress.candidates"),
        ("compress:\n  candidates: [[distil(0)]]\n", "compress.candidates"),
        ("compress:\n  candidates: []\n", "compress.candidates"),
        ("compress:\n  floor_ratio: 1.5\n", "compress.floor_ratio"),
        ("compress:\n  max_roc_auc_drop: 0.02\n", "unknown key"),
    ],
)
def test_bad_values_name_the_key(tmp_path, text, key):
    path = write_params(tmp_path / "params.yaml", yaml.safe_load(text))
    with pytest.raises(ParamsError, match=key.replace(".", r"\.")):
        load_params(path)


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(ParamsError, match="not found"):
        load_params(tmp_path / "nope.yaml")


def test_compress_section_is_the_search_config():
    from tasks.core.compression_config import CompressionSearchConfig

    c = load_params().compress
    assert isinstance(c, CompressionSearchConfig) and c.floor_ratio <= 1 and c.parity_atol > 0
    assert all(chain for chain in c.chains())


@pytest.mark.parametrize(
    "text, message",
    [
        ("train:\n  lr: 1e-3\n", None),  # YAML 1.1 would read a string
        ("train: [\n", "not valid YAML"),
        ("compress:\n  parity_atol: .inf\n", "compress.parity_atol"),  # would turn the parity gate off
        ("train:\n  nproc: 100000\n", "train.nproc"),
        (
            "scaling:\n  profiles: {smoke: {nodes: 1, gpus_per_node: 1, gpu: 2}}\n",
            "scaling.profiles.smoke.gpu: unknown key",
        ),
    ],
)
def test_values_are_read_as_meant_or_refused_by_key(tmp_path, text, message):
    path = tmp_path / "params.yaml"
    if message is None:  # the literal as written: the file's train section with lr spelled 1e-3
        text = re.sub(r"\n  lr: [^\n]*\n", "\n  lr: 1e-3\n", DEFAULT_PARAMS_FILE.read_text(), count=1)
        assert "\n  lr: 1e-3\n" in text
        path.write_text(text)
    elif message == "not valid YAML":
        path.write_text(text)
    else:
        write_params(path, yaml.safe_load(text))
    if message is None:
        assert load_params(path).train.lr == 0.001
    else:
        with pytest.raises(ParamsError, match=message.replace(".", r"\.")):
            load_params(path)


@pytest.mark.parametrize("key", ["canary.max_psi", "compress.latency_budget_ms", "train.epochs", "tuning.space"])
def test_a_missing_key_is_an_error_naming_the_file_and_the_key(tmp_path, key):
    """No default in code: deleting a line of params.yaml is an error, never a silently changed gate."""
    section, name = key.split(".")
    raw = params_dict()
    del raw[section][name]
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ParamsError) as exc:
        load_params(path)
    assert str(exc.value) == f"{path}: missing key {key}"


def test_a_missing_section_and_a_missing_nested_key_are_named():
    raw = params_dict()
    del raw["canary"]
    del raw["monitoring"]["alerts"]["util_floor"]
    with pytest.raises(ParamsError) as exc:
        parse_params(raw)
    assert str(exc.value).splitlines() == [
        "params.yaml: missing section canary",
        "params.yaml: missing key monitoring.alerts.util_floor",
    ]


def test_the_checkouts_file_names_itself_as_params_yaml(tmp_path, monkeypatch):
    text = DEFAULT_PARAMS_FILE.read_text()
    assert "\n  max_psi: 2.0\n" in text
    monkeypatch.chdir(tmp_path)  # relative to the checkout, wherever the process runs
    with pytest.raises(ParamsError, match=r"^params\.yaml: missing key canary\.max_psi$"):
        parse_params(yaml.safe_load(text.replace("\n  max_psi: 2.0\n", "\n")), "params.yaml")


def test_no_section_has_a_default_in_code():
    """params.yaml is the one home of every value: every field of every section is required (the
    exceptions: per-entry fields of lists the file leaves empty, and technique configs' own knobs)."""
    from pydantic import BaseModel

    from tasks.core.params import NotifierSpec, Params

    def defaults(model, prefix=""):
        for name, field in model.model_fields.items():
            if not field.is_required():
                yield prefix + name
            ann = field.annotation
            if isinstance(ann, type) and issubclass(ann, BaseModel):
                yield from defaults(ann, f"{prefix}{name}.")

    assert list(defaults(Params)) == []
    assert list(defaults(NotifierSpec)) == ["kwargs"]
