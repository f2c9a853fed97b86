"""FSDP2 (train.strategy fsdp2): the same training as DDP, exact accumulation and uneven splits,
sharded checkpoints that reshard on resume, the safe reader, and a plain model.pt at the end."""

import json
import os
import subprocess
import sys

import onnx
import pytest
import torch

from bench.fsdp import resume_copy
from tasks.core.files import read_json
from tasks.core.params import ParamsError, load_params
from tasks.training.command import entry, launcher
from tasks.training.local import run_torchrun, worker_env
from tests.training.test_training import assert_same_weights, params, weights

CPU = torch.device("cpu")


def step_losses(out):
    """{step: global loss} from metrics.jsonl (log_every 1: every step)."""
    return {m["step"]: m["loss"] for m in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())}


def assert_losses_close(a, b, rtol):
    assert a.keys() == b.keys() and a
    for step in a:
        assert a[step] == pytest.approx(b[step], rel=rtol, abs=0), step


def test_fsdp2_refuses_the_ddp_only_features(tmp_path):
    from tests.conftest import write_params

    for change, cause in (({"allreduce": "hierarchical"}, "HSDP"), ({"balance_every": 4}, "balance_every")):
        path = write_params(tmp_path / "params.yaml", {"train": {"strategy": "fsdp2", **change}})
        with pytest.raises(ParamsError, match=cause):
            load_params(path)


@pytest.mark.slow  # torchrun, two processes: the whole machine, in the serial part
def test_uneven_splits_give_the_global_mean_gradient(tmp_path):
    """FSDP2 averages over ranks: the engine's world / batch scaling makes any split (and chunked
    accumulation with set_requires_gradient_sync) give the whole batch's gradient; a per-rank mean
    (the control) does not when the split is uneven."""
    store = tmp_path / "store"
    store.mkdir()
    out = tmp_path / "result.json"
    cmd = [*launcher(2, file_store=store), *entry("tests.training.fsdp_uneven_worker", str(store), str(out))]
    env = {**worker_env(), "PYTHONPATH": os.pathsep.join(sys.path)}
    subprocess.run(cmd, env=env, check=True, timeout=180)
    r = read_json(out)
    assert r["engine_40_24"] < 1e-6 and r["engine_32_32"] < 1e-6, r
    assert r["per_rank_mean_32_32"] < 1e-6, r  # even: a per-rank mean is the global mean too
    assert r["per_rank_mean_40_24"] > 1e-3, r  # uneven: it is not


@pytest.mark.slow
def test_fsdp2_trains_like_ddp_and_resumes_at_any_world_size_and_strategy(settings, data_version, tmp_path):
    p = params(epochs=4, checkpoint_every=10, hidden=(32, 16))
    ddp, fsdp = p.replace(strategy="ddp"), p.replace(strategy="fsdp2")
    run_torchrun(data_version, tmp_path / "ddp", ddp)
    run_torchrun(data_version, tmp_path / "fsdp", fsdp)
    m = read_json(tmp_path / "fsdp" / "train_metrics.json")
    assert (m["strategy"], m["world_size"], m["resumed_from"]) == ("fsdp2", 2, None)
    # The same training: losses and final weights within float tolerance (reduction order differs).
    assert_losses_close(step_losses(tmp_path / "fsdp"), step_losses(tmp_path / "ddp"), rtol=1e-5)
    assert m["losses"] == pytest.approx(read_json(tmp_path / "ddp" / "train_metrics.json")["losses"], rel=1e-5)
    assert_same_weights(weights(tmp_path / "ddp" / "model.pt"), weights(tmp_path / "fsdp" / "model.pt"), atol=1e-5)
    # model.pt is a plain model's: full tensors, not rank 0's DTensor shards.
    blob = torch.load(tmp_path / "fsdp" / "model.pt", weights_only=True)
    assert all(type(t) is torch.Tensor for t in blob["state_dict"].values())
    assert blob["state_dict"]["net.0.weight"].shape == (32, blob["arch"]["n_features"])
    lines = [json.loads(x) for x in (tmp_path / "fsdp" / "metrics.jsonl").read_text().splitlines()]
    assert lines[3]["grad_norm"] == pytest.approx(
        json.loads((tmp_path / "ddp" / "metrics.jsonl").read_text().splitlines()[3])["grad_norm"], rel=1e-4
    )

    # Sharded checkpoints: one shard per rank, the small state, and the marker with every file's digest.
    ckpt = tmp_path / "fsdp" / "checkpoints" / "ckpt-000020"
    names = {f.name for f in ckpt.iterdir()}
    assert names == {"__0_0.distcp", "__1_0.distcp", ".metadata", "state.pt", "COMPLETE"}
    assert set(json.loads((ckpt / "COMPLETE").read_text())["files"]) == names - {"COMPLETE"}
    steps = 4 * (570 // 64)

    def resumed(src, name, changes):
        resume_copy(tmp_path / src, tmp_path / name, 20)
        run_torchrun(data_version, tmp_path / name, p.replace(**changes))
        return read_json(tmp_path / name / "train_metrics.json")

    # Same world, same strategy: bit-identical.
    same = resumed("fsdp", "same", dict(strategy="fsdp2"))
    assert same["resumed_from"] == {
        "step": 20,
        "world_size": 2,
        "strategy": "fsdp2",
        "to_world_size": 2,
        "to_strategy": "fsdp2",
    }
    assert same["losses"] == m["losses"] and step_losses(tmp_path / "same") == step_losses(tmp_path / "fsdp")
    assert_same_weights(weights(tmp_path / "fsdp" / "model.pt"), weights(tmp_path / "same" / "model.pt"))

    # 2 -> 1 (the shards read into one plain model), 2 -> 4, FSDP2 -> DDP, DDP -> FSDP2: within 1e-5.
    for src, name, changes in (
        ("fsdp", "to-one", dict(strategy="fsdp2", nproc=1)),
        ("fsdp", "to-four", dict(strategy="fsdp2", nproc=4)),
        ("fsdp", "to-ddp", dict(strategy="ddp")),
        ("ddp", "to-fsdp", dict(strategy="fsdp2")),
    ):
        r = resumed(src, name, changes)
        assert r["resumed_from_step"] == 20 and r["steps"] == steps, name
        assert (r["resumed_from"]["world_size"], r["resumed_from"]["to_world_size"]) == (2, changes.get("nproc", 2))
        assert_losses_close(step_losses(tmp_path / name), step_losses(tmp_path / src), rtol=1e-5)
        assert_same_weights(weights(tmp_path / src / "model.pt"), weights(tmp_path / name / "model.pt"), atol=1e-5)

    # 1 -> 2 and 4 -> 2: a one-process fsdp2 run's checkpoint (DCP, unsharded) and a four-rank run's
    # four shards, each read into two ranks' shards.
    for world in (1, 4):
        src = f"world-{world}"
        run_torchrun(data_version, tmp_path / src, fsdp.replace(nproc=world))
        assert len(list((tmp_path / src / "checkpoints" / "ckpt-000020").glob("*.distcp"))) == world
        r = resumed(src, f"{src}-to-two", dict(strategy="fsdp2", nproc=2))
        assert r["resumed_from"]["world_size"] == world and r["final_splits"] == [32, 32]
        assert_losses_close(step_losses(tmp_path / f"{src}-to-two"), step_losses(tmp_path / src), rtol=1e-5)
        assert_same_weights(
            weights(tmp_path / src / "model.pt"), weights(tmp_path / f"{src}-to-two" / "model.pt"), atol=1e-5
        )


def small_sharded_checkpoint(folder):
    """A one-process sharded checkpoint (DCP, through ShardedCheckpointer) of a tiny trained model."""
    from tasks.models.losses import binary_loss as mlp_loss
    from tasks.plugins.mlp.net import MLP
    from tasks.training.loop import accumulate_gradients, make_optimizer
    from tasks.training.sharded import ShardedCheckpointer

    p = load_params().train.replace(hidden=(8,))
    model = MLP(5, tuple(p.value("hidden")))
    opt = make_optimizer(model, p)
    g = torch.Generator().manual_seed(0)
    accumulate_gradients(model, mlp_loss(0.3), torch.randn(16, 5, generator=g), torch.rand(16, generator=g), 1 / 16)
    opt.step()
    writer = ShardedCheckpointer(folder, rank=0, distributed=False)
    writer.save(1, model, opt, {"step": 1, "fingerprint": "f"}, wait=True)
    writer.close()
    return folder / "ckpt-000001", model, opt


class Payload:
    """What a hostile .metadata would carry: unpickling it creates `target` (os.system)."""

    def __init__(self, target):
        self.target = target

    def __reduce__(self):
        return (os.system, (f"touch {self.target}",))


def remark(path):
    """Rewrite COMPLETE with the files' current checksums: whoever can plant a file can do that too,
    so the checksums do not protect here; the reader must."""
    from tasks.training.sharded import _sha

    marker = json.loads((path / "COMPLETE").read_text())
    marker["files"] = {name: _sha(path / name) for name in marker["files"]}
    (path / "COMPLETE").write_text(json.dumps(marker))


def test_sharded_checkpoint_round_trip_and_incomplete_ones_are_skipped(tmp_path):
    from tasks.plugins.mlp.net import MLP
    from tasks.training.checkpoint import latest_valid_checkpoint
    from tasks.training.loop import make_optimizer
    from tasks.training.sharded import load_sharded

    path, model, opt = small_sharded_checkpoint(tmp_path)
    found, small = latest_valid_checkpoint(tmp_path)
    assert found == path and small["step"] == 1 and small["sharded"]
    other = MLP(5, (8,))
    other_opt = make_optimizer(other, load_params().train)
    load_sharded(path, other, other_opt, small["param_groups"])
    for k, v in model.state_dict().items():
        assert torch.equal(v, other.state_dict()[k]), k
    a, b = opt.state_dict()["state"], other_opt.state_dict()["state"]
    assert all(torch.equal(a[i]["exp_avg_sq"], b[i]["exp_avg_sq"]) for i in a)
    # A shard whose bytes changed, then a folder without its marker: never resumed from.
    shard = path / "__0_0.distcp"
    data = shard.read_bytes()
    shard.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    assert latest_valid_checkpoint(tmp_path) is None
    shard.write_bytes(data)
    assert latest_valid_checkpoint(tmp_path) is not None
    (path / "COMPLETE").unlink()
    assert latest_valid_checkpoint(tmp_path) is None


def test_a_planted_payload_in_the_metadata_runs_nothing_and_is_refused(tmp_path):
    import pickle

    from tasks.training.checkpoint import load_checkpoint
    from tasks.training.sharded import CheckpointRefused, load_sharded, read_metadata_safely

    path, model, opt = small_sharded_checkpoint(tmp_path / "ckpt")
    target = tmp_path / "pwned"
    metadata = pickle.loads((path / ".metadata").read_bytes())
    metadata.planner_data = Payload(target)  # inside otherwise genuine DCP metadata
    planted = pickle.dumps(metadata)
    with pytest.raises(CheckpointRefused, match=r"names posix\.system, which is not DCP metadata"):
        read_metadata_safely(planted)
    (path / ".metadata").write_bytes(planted)
    remark(path)
    with pytest.raises(ValueError, match=r"ckpt-000001 refused: .*posix\.system"):
        load_checkpoint(path)
    with pytest.raises(CheckpointRefused, match=r"posix\.system"):  # DCP's own load, through the safe reader
        load_sharded(path, model, opt, [])
    assert not target.exists()
    # The control: plain pickle (what DCP's FileSystemReader uses) runs it.
    pickle.loads(planted)
    assert target.exists()


def test_a_non_tensor_entry_is_refused_before_anything_is_unpickled(tmp_path):
    import torch.distributed.checkpoint as dcp

    from tasks.training.sharded import CheckpointRefused, safe_reader

    target = tmp_path / "pwned"
    dcp.save({"w": torch.ones(3), "evil": Payload(target)}, checkpoint_id=tmp_path / "ck")
    assert not target.exists()
    into = {"w": torch.zeros(3), "evil": None}
    with pytest.raises(BaseException, match=r"non-tensor entries \(evil\)"):  # DCP's CheckpointException
        dcp.load(into, storage_reader=safe_reader(tmp_path / "ck"))
    with pytest.raises(CheckpointRefused, match=r"non-tensor entries \(evil\)"):
        safe_reader(tmp_path / "ck").read_metadata()
    assert not target.exists()
    # The control: DCP's default reader loads the entry with torch.load(weights_only=False), running it.
    dcp.load({"w": torch.zeros(3), "evil": None}, storage_reader=dcp.FileSystemReader(tmp_path / "ck"))
    assert target.exists()


@pytest.mark.extended
@pytest.mark.slow
def test_activation_checkpointing_and_bf16_parameters_train(settings, data_version, tmp_path):
    """Activation checkpointing recomputes the same forward (the same losses to float rounding);
    bf16 parameters with fp32 reduction train, their losses near fp32's (bf16 has 8 bits of mantissa)."""
    p = params(epochs=1, checkpoint_every=1000, strategy="fsdp2", micro_batch_size=20)
    fsdp = p.fsdp.model_dump()
    run_torchrun(data_version, tmp_path / "plain", p)
    run_torchrun(data_version, tmp_path / "ac", p.replace(fsdp={**fsdp, "activation_checkpointing": True}))
    run_torchrun(data_version, tmp_path / "bf16", p.replace(fsdp={**fsdp, "mixed_precision": "bf16"}))
    plain = step_losses(tmp_path / "plain")
    assert_losses_close(step_losses(tmp_path / "ac"), plain, rtol=1e-6)
    bf16 = step_losses(tmp_path / "bf16")
    assert bf16.keys() == plain.keys() and bf16 != plain
    assert all(abs(bf16[s] - plain[s]) < 0.05 * plain[s] for s in plain), (bf16, plain)
    # model.pt is fp32 either way (the sharded parameters stay fp32; bf16 is the compute copy).
    blob = torch.load(tmp_path / "bf16" / "model.pt", weights_only=True)
    assert all(t.dtype == torch.float32 for t in blob["state_dict"].values())
    # Without checkpoint_wrapper's name in the keys: a plain MLP loads it.
    assert weights(tmp_path / "ac" / "model.pt").keys() == weights(tmp_path / "plain" / "model.pt").keys()


@pytest.mark.extended
@pytest.mark.slow
def test_sigterm_under_fsdp2_writes_a_complete_sharded_checkpoint_and_the_rerun_is_bit_identical(
    settings, data_version, tmp_path
):
    import signal

    from bench.slow_engine import slowed
    from tasks.training.checkpoint import latest_valid_checkpoint
    from tasks.training.local import start_torchrun
    from tests.training.test_training import wait_for_step

    p = params(epochs=4, strategy="fsdp2")
    run_torchrun(data_version, tmp_path / "clean", p)
    proc = start_torchrun(data_version, tmp_path / "preempted", p, **slowed("*:0.002"))
    wait_for_step(tmp_path / "preempted", 13, proc)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) != 0
    stopped = max(step_losses(tmp_path / "preempted"))
    path, small = latest_valid_checkpoint(tmp_path / "preempted" / "checkpoints")
    assert path.is_dir() and (path / "COMPLETE").exists() and small["step"] == stopped and len(small["rng"]) == 2
    run_torchrun(data_version, tmp_path / "preempted", p)  # the Airflow retry
    m = read_json(tmp_path / "preempted" / "train_metrics.json")
    assert m["resumed_from_step"] == stopped and m["resumed_from"]["world_size"] == 2
    assert m["losses"] == read_json(tmp_path / "clean" / "train_metrics.json")["losses"]
    assert_same_weights(weights(tmp_path / "clean" / "model.pt"), weights(tmp_path / "preempted" / "model.pt"))


def sharded_night(settings, monkeypatch, params_path) -> tuple:
    """The nightly DAG under the params file `params_path` (train.strategy fsdp2 on 2 processes, one
    epoch), checked for what every sharded night shows: success, FSDP2 at world 2, a model of at least
    20M parameters, complete sharded checkpoints on the way, model-v1 deployed. Returns the run folder
    and the train record."""
    from tasks.core.settings import REPO_ROOT
    from tests.airflow_helpers import dags_test, migrate

    monkeypatch.setenv("SLUICE_PARAMS", str(params_path))
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT))
    migrate(settings)
    run_id, state, proc = dags_test(settings, {"epochs": 1})
    assert state == "success", proc.stdout[-3000:] + proc.stderr[-3000:]
    run = settings.layout.run_dir(run_id)
    train = read_json(run / "steps" / "train.json")
    assert (train["strategy"], train["world_size"], train["epochs"]) == ("fsdp2", 2, 1), train
    assert train["n_parameters"] >= 20_000_000, train["n_parameters"]
    ckpts = sorted((run / "train" / "checkpoints").iterdir())
    assert ckpts and all((c / "COMPLETE").exists() and (c / "__1_0.distcp").exists() for c in ckpts), ckpts
    summary = read_json(run / "summary.json")
    assert summary["outcome"] == "deployed model-v1", summary
    assert summary["train"]["strategy"] == "fsdp2" and summary["train"]["n_parameters"] == train["n_parameters"]
    return run, train


@pytest.mark.slow
@pytest.mark.extended  # CI runs the sequence model's night below: the same engine path, on a transformer
def test_the_nightly_dag_trains_the_sharded_profile_with_fsdp2_on_two_processes(settings, tmp_path, monkeypatch):
    """The profile of an MLP that needs sharding (scaling.sharded_hidden, ~36M parameters) through
    the nightly DAG's train step: FSDP2 on 2 local processes, sharded checkpoints on the way, and the
    gathered plain model carried through evaluate, compress and the canary like any other."""
    from tests.conftest import write_params

    hidden = load_params().scaling.sharded_hidden
    path = write_params(
        tmp_path / "params.yaml",
        {
            "train": {
                "strategy": "fsdp2",
                "nproc": 2,
                "epochs": 1,  # a bounded number of steps (7: fewer than log_every, so no metrics window closes)
                "lr": 0.0003,  # the demo's 0.003 diverges at this width
                "checkpoint_every": 4,
                "model": {"module": "tasks.plugins.mlp", "params": {"hidden": list(hidden)}},
            },
            # 143 MB in fp32 (~31 ms a row at batch 1, ~11 ms as int8): the demo's 10 ms budget suits the small model
            "compress": {"candidates": [["int8_dynamic"]], "latency_repeats": 3, "latency_budget_ms": 100},
            "weak_label": {"weak_weight_repeats": 1, "weak_weight_bootstrap": 50},
        },
    )
    run, _ = sharded_night(settings, monkeypatch, path)
    blob = torch.load(run / "train" / "model.pt", weights_only=True)
    assert all(type(t) is torch.Tensor for t in blob["state_dict"].values())
    assert [blob["state_dict"][f"net.{2 * i}.weight"].shape[0] for i in range(len(hidden))] == list(hidden)


@pytest.mark.slow
def test_the_nightly_dag_trains_a_sharded_sequence_model_with_fsdp2_on_two_processes(settings, tmp_path, monkeypatch):
    """A sequence model that needs sharding (scaling.sharded_sequence_model: a ~23M-parameter transformer
    on 16-token reviews) through the nightly DAG: its tokenizer trained on the data version, FSDP2 over
    the plug-in's blocks on 2 local processes with sharded checkpoints, and the gathered plain model
    exported, compressed, registered and promoted by the canary like any other. One epoch of one night's
    ~400 weak labels (6 steps) keeps it to minutes; from scratch it ranks reviews only a little better
    than chance (test ROC AUC ~0.6), so the evaluate floor here is 0.55."""
    from tasks.models import load_model
    from tasks.registry import Registry, served_artifact
    from tests.conftest import write_params_with_model

    path = write_params_with_model(
        tmp_path / "params.yaml",
        {
            "dataset": {"module": "tasks.plugins.reviews", "params": {}},
            "train": {"strategy": "fsdp2", "nproc": 2, "epochs": 1, "lr": 0.0003, "checkpoint_every": 4},
            # 92 MB in fp32, ~35 ms a review at batch 1 (~24 ms as int8): the demo's 10 ms budget suits the small model
            "compress": {"candidates": [["int8_dynamic"]], "latency_repeats": 3, "latency_budget_ms": 100},
            "evaluate": {"min_roc_auc": 0.55},
            "weak_label": {"weak_weight_repeats": 1, "weak_weight_bootstrap": 50},
        },
        load_params().scaling.sharded_sequence_model.model_dump(),
    )
    _, train = sharded_night(settings, monkeypatch, path)
    model = load_model(train["model"])  # a plain module of the plug-in, its tokenizer inside
    assert type(model).__name__ == "TransformerClassifier" and model.tokenizer_json
    assert sum(p.numel() for p in model.parameters()) == train["n_parameters"]
    registry = Registry(settings)
    served = registry.model_path("model-v1", served_artifact(registry, "model-v1"))
    graph = onnx.load(str(served), load_external_data=False).graph
    assert [(i.name, [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim]) for i in graph.input] == [
        ("input_ids", ["batch", "sequence"])
    ]
