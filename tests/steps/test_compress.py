"""The compress step: the search over params.yaml compress.candidates on a real trained demo model,
the choice on the gold dev set (floor overall and per slice), the gate, the table and the plot."""

import json

import numpy as np
import pytest
import torch

from tasks.compress import compress
from tasks.compression.export import read_metadata
from tasks.core.context import StepContext
from tasks.core.params import ParamsError, load_params
from tasks.datasets.demo_feed import DemoFeed
from tasks.models import save_model
from tasks.plugins import emails as emails_plugin
from tasks.plugins.emails import FEATURE_NAMES, featurize
from tasks.plugins.mlp.net import MLP
from tasks.registry import Registry
from tests.conftest import write_params
from tests.steps.records import train_record

FAST = {
    "candidates": [["int8_dynamic"], ["fp16"], ["prune_structured(0.5)", "int8_dynamic"]],
    "fine_tune_epochs": 1,
    "latency_repeats": 5,
    "tune_rows": 500,
}


@pytest.fixture(scope="module")
def trained(tmp_path_factory, emails):
    """A demo-size MLP trained on the first 2,500 source rows (gold labels as weak labels)."""
    path = tmp_path_factory.mktemp("model") / "model.pt"
    train = emails.iloc[:2500]
    x, y = torch.from_numpy(featurize(train)), torch.tensor(train["spam"].to_numpy(), dtype=torch.float32)
    torch.manual_seed(0)
    model = MLP(len(FEATURE_NAMES), (32, 16))
    model.set_scaling(x.mean(0), x.std(0))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(150):
        opt.zero_grad()
        torch.nn.functional.binary_cross_entropy_with_logits(model(x), y).backward()
        opt.step()
    save_model(model, str(path))
    return path, train


@pytest.fixture
def home(settings, trained, tmp_path):
    """Gold dev/test sets, a data version holding the training rows, and the train step's record."""
    path, train = trained
    layout = settings.layout.ensure()
    DemoFeed(layout, load_params().demo, emails_plugin).ensure_gold()
    part = tmp_path / "part.parquet"
    train.assign(label=train["spam"], label_prob=train["spam"].astype(float)).drop(columns=["spam"]).to_parquet(
        part, index=False
    )
    version = Registry(settings).snapshot({"batch-0001": part}, {"rows_by_batch": {"batch-0001": len(train)}})
    record = train_record(
        data_version=version["data_version"], rows=len(train), model=str(path), outputs=str(path.parent)
    )
    return settings, record


def run(settings, record, run_id="r1", **compress_params):
    ctx = StepContext.create(run_id, settings, overrides={"compress": {**FAST, **compress_params}})
    return compress(ctx, train=record)


def test_search_table_choice_gate_and_lineage(home):
    settings, record = home
    rec = run(settings, record)
    assert rec.passed and rec.reasons == [], rec.reasons
    table = json.loads(open(rec.table).read())
    names = [r["name"] for r in table["rows"]]
    assert names == ["fp32", "int8_dynamic", "fp16", "prune_structured(0.5)+int8_dynamic"]  # every candidate
    for r in table["rows"]:
        assert r["size_bytes"] > 0 and r["latency_b1_ms"] > 0 and r["latency_b256_ms"] > 0
        assert 0.5 < r["overall"]["roc_auc"] <= 1 and set(r["slices"]) == set(table["slices"])
        assert r["chosen"] == (r["name"] == rec.chosen) and (r["why_not"] is None) == r["chosen"]
    assert set(table["slices"]) == {"format=html", "format=plain", "number=none", "number=small", "number=big"}
    base = table["rows"][0]
    # The chosen one keeps the floor overall and on every slice (a one-class slice cannot be judged).
    assert rec.quality["roc_auc"] >= 0.99 * base["overall"]["roc_auc"]
    for name, q in base["slices"].items():
        if q["roc_auc"] == q["roc_auc"]:
            assert rec.slices[name]["roc_auc"] >= 0.99 * q["roc_auc"], name
    assert rec.bytes <= rec.fp32_bytes and rec.parity_max_abs <= 1e-4
    assert rec.test["n"] > 0 and rec.fp32_test["n"] == rec.test["n"]  # test figures reported
    assert rec.latency_b1_ms > 0 and rec.latency_b256_ms > 0
    # The record's chain is the one the served file carries in its metadata.
    meta = read_metadata(rec.path)
    assert meta["chain"] == rec.chain and meta["name"] == rec.chosen
    assert meta["data_version"] == record.data_version and meta["parent"] == "model.fp32.onnx"
    assert [c["kind"] for c in rec.chain] == (
        [] if rec.chosen == "fp32" else [p.split("(")[0] for p in rec.chosen.split("+")]
    )
    svg = open(rec.plot).read()
    assert svg.startswith("<svg") and all(n in svg for n in names)


def test_unreachable_floor_fails_the_gate_naming_it(home):
    settings, record = home
    rec = run(settings, record, "r2", candidates=[["int8_dynamic"]], parity_atol=1e-12)
    assert not rec.passed and any("differs from torch" in r for r in rec.reasons)
    rec = run(settings, record, "r3", candidates=[["int8_dynamic"]], latency_budget_ms=1e-6)
    assert not rec.passed and rec.chosen is None and rec.path is None
    assert "no candidate passes the selection" in rec.reasons[0] and "latency" in rec.reasons[0]


@pytest.mark.parametrize(
    "candidates, fragment",
    [
        ([["int8_dynamic", "prune(0.5)"]], "out of order"),
        ([["prune(1.5)"]], "ratio"),
        ([["quantum"]], "unknown kind"),
        ([["int8_dynamic", "fp16"]], "both change the precision"),
    ],
)
def test_bad_chain_in_params_names_the_key(tmp_path, candidates, fragment):
    path = write_params(tmp_path / "params.yaml", {"compress": {"candidates": candidates}})
    with pytest.raises(ParamsError, match=r"compress\.candidates") as exc:
        load_params(path)
    assert fragment in str(exc.value)


def test_served_artifact_name_from_the_model_record():
    from tasks.registry import SERVED_ARTIFACT, SERVED_NAME, served_artifact_of

    assert served_artifact_of({"compression": {"artifact": SERVED_NAME}}) == SERVED_NAME
    assert served_artifact_of({"artifacts": {SERVED_NAME: {}}}) == SERVED_NAME
    assert served_artifact_of({"artifacts": {"model.int8.onnx": {}}}) == SERVED_ARTIFACT  # older versions


def test_probe_gives_finite_outputs(home):
    settings, record = home
    rec = run(settings, record, "r4", candidates=[["fp16"]])
    from tasks.compression.export import open_session, predict
    from tasks.compression.search import probe_inputs

    out = predict(open_session(rec.path), probe_inputs(np.zeros((2, len(FEATURE_NAMES)), np.float32)))
    assert np.isfinite(out).all()
