"""The BERT plug-in through the torchrun engine on a reviews data version (a 2-layer copy of the real
checkpoint, tests/helpers/checkpoints.py): fine-tuned under FSDP2 on two processes as under DDP, resumed
from the sharded checkpoint at another world size; frozen, its embeddings computed once and a second
training of the same record reading them all from the cache, bit-identical."""

import json

import pytest
import torch

from tasks.core.files import read_json
from tasks.core.params import load_params
from tasks.datasets.demo_feed import split_demo
from tasks.plugins import reviews
from tasks.training.local import run_torchrun
from tests.conftest import write_params
from tests.helpers.checkpoints import truncated_checkpoint
from tests.training.test_fsdp import assert_losses_close, step_losses
from tests.training.test_training import assert_same_weights, weights


@pytest.fixture(scope="module")
def reviews_version(tmp_path_factory):
    """data-v1 of 300 reviews rows (through both data gates) in a SLUICE_HOME of the module's two tests."""
    from tasks.core.settings import Settings
    from tests.steps.test_bad_input import through_data_gates

    home = tmp_path_factory.mktemp("bert-home")
    path = write_params(home / "params.yaml", {"dataset": {"module": "tasks.plugins.reviews", "params": {}}})
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SLUICE_HOME", str(home / "sluice"))
        mp.setenv("SLUICE_PARAMS", str(path))
        mp.setenv("DVC_NO_ANALYTICS", "1")
        mp.setenv("GX_ANALYTICS_ENABLED", "false")
        settings = Settings.from_env()
        source = reviews.load_source()
        batch = split_demo(source, load_params().demo, reviews)[2][0].iloc[:300]
        (settings.layout.ensure().landing / "b.csv").write_bytes(batch.to_csv(index=False).encode())
        _, version, _ = through_data_gates(settings, "b")
        yield settings, version


@pytest.fixture(autouse=True)
def _in_that_home(reviews_version, monkeypatch):
    settings, _ = reviews_version
    monkeypatch.setenv("SLUICE_HOME", str(settings.home))
    monkeypatch.setenv("SLUICE_PARAMS", str(settings.params))


def _bert(tmp_path, finetune: str, **changes):
    ckpt = truncated_checkpoint(tmp_path, 2, max_len=32)
    base = dict(epochs=1, batch_size=64, checkpoint_every=2, log_every=1, nproc=2, lr=3e-4, warm_start=False)
    return load_params().train.replace(
        **{**base, **changes},
        model={"module": "tasks.plugins.bert", "params": {**ckpt.params, "finetune": finetune}},
        pretrained=ckpt.spec.model_dump(),
    )


@pytest.mark.slow
def test_fsdp2_fine_tunes_the_encoder_like_ddp_and_resumes_at_another_world_size(reviews_version, tmp_path):
    from bench.fsdp import resume_copy

    _, version = reviews_version
    # Both layers train (top_layers 2; the 30,522-row embedding stays); no dropout: each rank draws its own
    # masks, so with dropout a run resumed at another world size trains on, but not to the same numbers.
    p = _bert(tmp_path, "top", epochs=2)
    p = p.replace(model={**p.model.model_dump(), "params": {**p.model.params, "top_layers": 2, "dropout": 0.0}})
    run_torchrun(version, tmp_path / "ddp", p.replace(strategy="ddp"))
    run_torchrun(version, tmp_path / "fsdp", p.replace(strategy="fsdp2"))
    m = read_json(tmp_path / "fsdp" / "train_metrics.json")
    assert (m["strategy"], m["world_size"], m["steps"]) == ("fsdp2", 2, 2 * (m["rows"] // 64))
    assert m["pretrained"]["fresh"] == ["head.bias", "head.weight"]
    assert_losses_close(step_losses(tmp_path / "fsdp"), step_losses(tmp_path / "ddp"), rtol=1e-5)
    assert_same_weights(weights(tmp_path / "ddp" / "model.pt"), weights(tmp_path / "fsdp" / "model.pt"), atol=1e-5)
    # one shard a rank: the encoder layers were the units
    assert len(list((tmp_path / "fsdp" / "checkpoints" / "ckpt-000002").glob("*.distcp"))) == 2
    resume_copy(tmp_path / "fsdp", tmp_path / "to-one", 2)
    run_torchrun(version, tmp_path / "to-one", p.replace(strategy="fsdp2", nproc=1))
    r = read_json(tmp_path / "to-one" / "train_metrics.json")
    assert r["resumed_from"]["world_size"] == 2 and r["resumed_from"]["to_world_size"] == 1
    assert_same_weights(weights(tmp_path / "fsdp" / "model.pt"), weights(tmp_path / "to-one" / "model.pt"), atol=1e-5)


@pytest.mark.slow
def test_a_frozen_encoders_embeddings_are_computed_once_and_the_rerun_is_bit_identical(reviews_version, tmp_path):
    settings, version = reviews_version
    p = _bert(tmp_path, "frozen", epochs=3, nproc=2)
    run_torchrun(version, tmp_path / "first", p)
    run_torchrun(version, tmp_path / "again", p)
    first, again = (read_json(tmp_path / n / "train_metrics.json") for n in ("first", "again"))
    inputs = first["inputs"]
    assert inputs == again["inputs"] and inputs["max_len"] == 32 and inputs["truncated_texts"] > 0
    cache = settings.home / "cache" / "embeddings" / inputs["embedding_cache"][:32]
    shards = list(cache.glob("*.npz"))
    assert len(shards) == 1, "the second training computed embeddings again"
    a, b = (torch.load(tmp_path / n / "model.pt", weights_only=True)["state_dict"] for n in ("first", "again"))
    assert all(torch.equal(a[k], b[k]) for k in a)
    # the encoder is the checkpoint's, bit for bit: only the head trained
    from safetensors.torch import load_file

    from tasks.models.pretrained import resolve

    pretrained = load_file(str(resolve(p.pretrained.path)))
    assert all(torch.equal(a[k], pretrained[k]) for k in a if not k.startswith("head."))
    assert not torch.equal(a["head.weight"], torch.zeros_like(a["head.weight"]))
    log = json.loads((tmp_path / "first" / "metrics.jsonl").read_text().splitlines()[-1])
    assert log["step"] == first["steps"]
