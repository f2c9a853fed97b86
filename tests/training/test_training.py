import json

import numpy as np
import pytest
import torch

from bench.slow_engine import MODULE as SLOW_ENGINE
from bench.slow_engine import slowed
from tasks.core.files import read_json
from tasks.core.params import load_params
from tasks.registry import Registry
from tasks.training.checkpoint import latest_valid_checkpoint, save_checkpoint
from tasks.training.local import run_torchrun, start_torchrun


def test_save_then_load_latest_and_skip_corrupt(tmp_path):
    for step in (10, 20, 30):
        save_checkpoint(tmp_path, step, {"epoch": step, "w": torch.full((3,), float(step))})
    assert sorted(p.name for p in tmp_path.glob("*.pt")) == ["ckpt-000020.pt", "ckpt-000030.pt"]  # keeps 2
    path, state = latest_valid_checkpoint(tmp_path)
    assert state["epoch"] == 30
    blob = path.read_bytes()
    path.write_bytes(blob[: len(blob) // 2])  # torn write
    path, state = latest_valid_checkpoint(tmp_path)
    assert path.name == "ckpt-000020.pt" and state["epoch"] == 20
    assert latest_valid_checkpoint(tmp_path / "missing") is None


def weights(path):
    from tasks.models import load_model

    return {k: v.clone() for k, v in load_model(str(path)).state_dict().items()}


def assert_same_weights(a, b, atol=0.0):
    assert a.keys() == b.keys()
    for k in a:
        if atol == 0.0:
            assert torch.equal(a[k], b[k]), f"{k} differs"
        else:
            torch.testing.assert_close(a[k], b[k], atol=atol, rtol=0)


def params(**kw):
    base = dict(epochs=6, checkpoint_every=10, log_every=1, nproc=2)
    return load_params().train.replace(**{**base, **kw})


def wait_for_step(out, step, proc, timeout=60):
    """Block until metrics.jsonl shows `step` done; fails if the launcher ends first."""
    from tasks.core.wait import wait_until

    def reached():
        if proc.poll() is not None:
            raise AssertionError(f"training ended (exit {proc.returncode}) before step {step}")
        lines = (out / "metrics.jsonl").read_text().splitlines() if (out / "metrics.jsonl").exists() else []
        return json.loads(lines[-1])["step"] if lines and json.loads(lines[-1])["step"] >= step else None

    return wait_until(
        reached, timeout_s=timeout, interval_s=0.01, what=f"training step {step}", retry_on=(json.JSONDecodeError,)
    )  # a line being written


@pytest.mark.slow
def test_two_processes_match_one_with_the_same_global_batch(settings, data_version, tmp_path):
    run_torchrun(data_version, tmp_path / "one", params(nproc=1))
    run_torchrun(data_version, tmp_path / "two", params(nproc=2))
    m1, m2 = read_json(tmp_path / "one" / "train_metrics.json"), read_json(tmp_path / "two" / "train_metrics.json")
    assert (m1["world_size"], m2["world_size"]) == (1, 2) and m1["steps"] == m2["steps"] == 6 * (570 // 64)
    assert m2["rows"] == 570  # rows every LF abstained on are left out
    assert m2["losses"][-1] < m2["losses"][0]
    # Same global batches, split differently: the same weights up to float summation order.
    assert_same_weights(weights(tmp_path / "one" / "model.pt"), weights(tmp_path / "two" / "model.pt"), atol=1e-5)
    # The hierarchical allreduce hook trains the same model (one node: reduce and broadcast inside it).
    run_torchrun(data_version, tmp_path / "hier", params(nproc=2, allreduce="hierarchical"))
    assert_same_weights(weights(tmp_path / "two" / "model.pt"), weights(tmp_path / "hier" / "model.pt"), atol=1e-6)
    lines = [json.loads(x) for x in (tmp_path / "two" / "metrics.jsonl").read_text().splitlines()]
    assert len(lines) == m2["steps"] and {"grad_norm", "update_to_weight", "cpu_percent", "rss_mb"} <= set(lines[0])


@pytest.mark.slow
def test_gradient_accumulation_gives_the_update_of_the_whole_batch(settings, data_version, tmp_path):
    run_torchrun(data_version, tmp_path / "whole", params(epochs=3))
    run_torchrun(data_version, tmp_path / "accum", params(epochs=3, micro_batch_size=5))
    assert_same_weights(weights(tmp_path / "whole" / "model.pt"), weights(tmp_path / "accum" / "model.pt"), atol=1e-5)


@pytest.mark.slow
def test_sigkill_of_a_worker_resumes_bit_identical(settings, data_version, tmp_path):
    import psutil

    slow = slowed("*:0.002")  # ~64 ms a step, time to aim the kill
    p = params()
    run_torchrun(data_version, tmp_path / "clean", p)
    proc = start_torchrun(data_version, tmp_path / "killed", p, **slow)
    killed_at = wait_for_step(tmp_path / "killed", 25, proc)
    workers = [c for c in psutil.Process(proc.pid).children() if SLOW_ENGINE in " ".join(c.cmdline())]
    workers[-1].kill()  # SIGKILL one rank, mid-run
    assert proc.wait(timeout=120) == 0  # restarted once, finished
    m = read_json(tmp_path / "killed" / "train_metrics.json")
    assert 0 < m["resumed_from_step"] <= killed_at and killed_at - m["resumed_from_step"] <= p.checkpoint_every
    assert_same_weights(weights(tmp_path / "clean" / "model.pt"), weights(tmp_path / "killed" / "model.pt"))
    assert read_json(tmp_path / "clean" / "train_metrics.json")["losses"] == m["losses"]

    # Another step count per checkpoint, or other params: the checkpoint is not theirs, training starts over.
    run_torchrun(data_version, tmp_path / "killed", p.replace(lr=p.lr / 2))
    assert read_json(tmp_path / "killed" / "train_metrics.json")["resumed_from_step"] == 0


@pytest.mark.slow
def test_sigterm_checkpoints_then_a_rerun_redoes_nothing(settings, data_version, tmp_path):
    import signal

    p = params()
    run_torchrun(data_version, tmp_path / "clean", p)
    proc = start_torchrun(data_version, tmp_path / "preempted", p, **slowed("*:0.002"))
    wait_for_step(tmp_path / "preempted", 23, proc)
    proc.send_signal(signal.SIGTERM)  # what a node drain or `kill` sends
    assert proc.wait(timeout=120) != 0
    steps = [json.loads(x)["step"] for x in (tmp_path / "preempted" / "metrics.jsonl").read_text().splitlines()]
    stopped_at = steps[-1]
    _, state = latest_valid_checkpoint(tmp_path / "preempted" / "checkpoints")
    assert state["step"] == stopped_at and len(state["rng"]) == 2  # every rank's RNG state
    assert all(r["torch"].dtype == torch.uint8 for r in state["rng"])
    run_torchrun(data_version, tmp_path / "preempted", p)  # the Airflow retry
    m = read_json(tmp_path / "preempted" / "train_metrics.json")
    assert m["resumed_from_step"] == stopped_at  # checkpointed at the very step it stopped
    assert_same_weights(weights(tmp_path / "clean" / "model.pt"), weights(tmp_path / "preempted" / "model.pt"))


@pytest.mark.slow
def test_balancing_moves_rows_off_a_slow_rank_without_changing_the_update(settings, data_version, tmp_path):
    slow = slowed("1:0.002")  # rank 1 is slow per sample
    run_torchrun(data_version, tmp_path / "static", params(epochs=3), **slow)
    run_torchrun(data_version, tmp_path / "balanced", params(epochs=3, balance_every=4), **slow)
    splits = read_json(tmp_path / "balanced" / "train_metrics.json")["final_splits"]
    assert sum(splits) == 64 and splits[1] < splits[0] / 3  # most rows moved to the fast rank
    assert read_json(tmp_path / "static" / "train_metrics.json")["final_splits"] == [32, 32]
    assert_same_weights(
        weights(tmp_path / "static" / "model.pt"), weights(tmp_path / "balanced" / "model.pt"), atol=1e-5
    )


def test_the_micro_batch_hook_runs_each_step_inside_the_timed_compute(settings, data_version, tmp_path, monkeypatch):
    """The engine's only slowdown is the one a caller injects (bench/slow_engine.py): called once a
    step with the micro-batch's rows, and its time is the rank's compute that balancing measures."""
    import signal
    import time

    from tasks.training.engine import run_training

    monkeypatch.delenv("WORLD_SIZE", raising=False)  # one process, in this one
    monkeypatch.setattr(signal, "signal", lambda *a: None)  # keep pytest's SIGTERM handler
    calls = []

    def hook(rank, rows):
        calls.append((rank, rows))
        time.sleep(0.05)

    result = run_training(
        data_version, str(tmp_path / "out"), params(nproc=1, epochs=1, log_every=2), on_micro_batch=hook
    )
    assert calls == [(0, 64)] * result["steps"] and result["steps"] == 570 // 64
    lines = [json.loads(x) for x in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert lines and all(m["rank0_compute_s"] >= 0.05 for m in lines)


def test_slow_engine_spec():
    from bench.slow_engine import seconds_per_row

    assert [seconds_per_row("0:0.002,1:0.004", r) for r in (0, 1, 2)] == [0.002, 0.004, 0.0]
    assert seconds_per_row("*:0.5,1:0.1", 1) == 0.1 and seconds_per_row("*:0.5", 3) == 0.5
    assert seconds_per_row("", 0) == 0.0


@pytest.mark.slow
def test_torchrun_failure_is_reported(settings, tmp_path):
    p = load_params().train.replace(epochs=1)
    with pytest.raises(RuntimeError, match="torchrun exited"):
        run_torchrun("data-v1", tmp_path / "train", p)  # no registry: the workers fail


@pytest.mark.slow
def test_training_processes_listen_on_loopback_only(settings, data_version, tmp_path):
    import threading

    import psutil

    p = params(epochs=60, checkpoint_every=1000)
    done = threading.Event()
    errors = []

    def train():
        try:
            run_torchrun(data_version, tmp_path / "train", p)
        except Exception as exc:  # noqa: BLE001 - surfaced by the assertion below
            errors.append(exc)
        finally:
            done.set()

    threading.Thread(target=train, daemon=True).start()
    me, seen = psutil.Process(), set()
    while not done.is_set():
        pids = {c.pid for c in me.children(recursive=True)}
        for c in psutil.net_connections("inet"):
            if c.status == psutil.CONN_LISTEN and c.pid in pids:
                seen.add((c.laddr.ip, c.laddr.port))
        done.wait(0.05)
    assert not errors, errors
    assert seen, "the gloo workers should have listened on some socket"
    assert all(ip in ("127.0.0.1", "::1") for ip, _ in seen), seen


@pytest.mark.extended
@pytest.mark.slow
def test_warm_start_picks_up_a_previous_model(settings, data_version, tmp_path):
    from tasks.models import load_model, save_model
    from tasks.plugins.mlp.net import MLP

    p = params(epochs=10, checkpoint_every=100)
    run_torchrun(data_version, tmp_path / "prod", p)
    cold = read_json(tmp_path / "prod" / "train_metrics.json")
    warm_p = p.replace(epochs=2)
    run_torchrun(data_version, tmp_path / "warm", warm_p, init_from=str(tmp_path / "prod" / "model.pt"))
    warm = read_json(tmp_path / "warm" / "train_metrics.json")
    assert warm["warm_started_from"] == str(tmp_path / "prod" / "model.pt")
    assert warm["losses"][0] < cold["losses"][0] * 0.8  # it starts where the prod model left off
    # The input scaling came with the weights.
    assert torch.equal(
        load_model(str(tmp_path / "warm" / "model.pt")).mean, load_model(str(tmp_path / "prod" / "model.pt")).mean
    )
    # Another architecture: trained from scratch, said so.
    other = tmp_path / "other.pt"
    save_model(MLP(load_model(str(tmp_path / "prod" / "model.pt")).arch["n_features"], (8,)), str(other))
    run_torchrun(data_version, tmp_path / "cold", warm_p, init_from=str(other))
    assert read_json(tmp_path / "cold" / "train_metrics.json")["warm_started_from"] is None


def three_partitions(reg, emails, tmp_path):
    """Three partitions (550 trainable rows), so that batches span partitions."""
    from tests.training.test_training_data import labeled_partition

    parts = {
        f"batch-000{i}": labeled_partition(emails, tmp_path, f"p{i}", slice(200 * (i - 1), 200 * i))
        for i in range(1, 4)
    }
    return reg.snapshot(parts, {"rows_by_batch": {}})["data_version"]


@pytest.mark.slow
def test_streaming_with_a_tiny_cache_trains_the_same_model(settings, emails, tmp_path):
    version = three_partitions(Registry(settings), emails, tmp_path)
    p = params(epochs=3, checkpoint_every=1000)
    run_torchrun(version, tmp_path / "roomy", p)
    run_torchrun(version, tmp_path / "tight", p.replace(stream_cache_mb=0.001))
    assert_same_weights(weights(tmp_path / "roomy" / "model.pt"), weights(tmp_path / "tight" / "model.pt"))
    roomy, tight = (read_json(tmp_path / k / "train_metrics.json") for k in ("roomy", "tight"))
    assert roomy["partitions"] == 3 and roomy["partition_loads"] == 3  # read once, kept
    assert tight["partition_loads"] > 3 * 3  # re-read every epoch
    # Gradient variance across the two ranks is measured on every logged step.
    lines = [json.loads(x) for x in (tmp_path / "roomy" / "metrics.jsonl").read_text().splitlines()]
    assert all(m["grad_var_across_ranks"] > 0 and np.isfinite(m["grad_var_relative"]) for m in lines)


@pytest.mark.slow
@pytest.mark.parametrize("strategy", [pytest.param("ddp", marks=pytest.mark.extended), "fsdp2"])
def test_a_pod_publishes_to_s3_and_a_new_pod_resumes_from_there(
    strategy, settings, emails, tmp_path, s3_server, monkeypatch
):
    """Storage-compute separation: the registry is cloned from git and its data read from the S3
    remote; outputs and checkpoints go to an S3 URI; a killed pod's replacement, on a fresh disk,
    resumes from the published checkpoint and ends bit-identical to an uninterrupted run. Under
    fsdp2 the checkpoint is a folder of shards, published by each rank, COMPLETE last."""
    import os
    import signal
    import subprocess

    import boto3

    from tasks.core.context import StepContext
    from tasks.core.records import TrainPlanRecord
    from tasks.core.settings import Settings
    from tasks.core.wait import wait_until
    from tasks.train import collect
    from tests.conftest import S3_BUCKET

    monkeypatch.setenv("SLUICE_DVC_REMOTE", f"s3://{S3_BUCKET}/registry")
    monkeypatch.setenv("SLUICE_S3_ENDPOINT_URL", s3_server)
    reg = Registry(Settings.from_env())
    version = three_partitions(reg, emails, tmp_path)
    clone = tmp_path / "pod-clone"  # what a pod sees: git + the DVC remote, no cache
    subprocess.run(["git", "clone", "-q", str(reg.root), str(clone)], check=True)
    monkeypatch.setenv("SLUICE_REGISTRY_URL", str(clone))

    p = params(epochs=8, checkpoint_every=10, strategy=strategy)
    clean_uri, uri = f"s3://{S3_BUCKET}/runs/clean/train", f"s3://{S3_BUCKET}/runs/r1/train"
    run_torchrun(version, clean_uri, p, workdir=tmp_path / "pod0")
    s3 = boto3.client("s3", endpoint_url=s3_server)

    def published() -> list[str]:
        return [o["Key"] for o in s3.list_objects_v2(Bucket=S3_BUCKET, Prefix="runs/r1/").get("Contents", [])]

    marker = {"ddp": "ckpt-000020.sha256", "fsdp2": "ckpt-000020/COMPLETE"}[strategy]
    proc = start_torchrun(version, uri, p, workdir=tmp_path / "pod1")

    # The checkpoint of step 20 is published off the step loop (async save, then upload): kill the pod
    # once its marker is on the store, not at a step count, which a loaded machine's upload can trail.
    def marker_published() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"training ended (exit {proc.returncode}) before {marker} was published")
        return f"runs/r1/train/checkpoints/{marker}" in published()

    wait_until(marker_published, timeout_s=120, interval_s=0.05, what=f"{marker} on the store")
    os.killpg(proc.pid, signal.SIGKILL)  # the pod is gone, its disk with it
    proc.wait()
    keys = published()
    if strategy == "fsdp2":  # every rank's shard is there beside the marker that lists it
        assert {
            "runs/r1/train/checkpoints/ckpt-000020/__0_0.distcp",
            "runs/r1/train/checkpoints/ckpt-000020/__1_0.distcp",
        } <= set(keys)
    run_torchrun(version, uri, p, workdir=tmp_path / "pod2")  # a fresh disk
    resumed = read_json(tmp_path / "pod2" / "train_metrics.json")
    assert resumed["resumed_from_step"] >= 20 and resumed["strategy"] == strategy
    for run, out_uri in (("r1", uri), ("clean", clean_uri)):  # the pipeline side: fetch and record
        plan = TrainPlanRecord(
            name="t", run_id=run, data_version=version, params="{}", out_uri=out_uri, registry_url="", init_from=""
        )
        collect(StepContext.create(run, settings), plan_train=plan)
    trained = settings.layout.run_dir("r1") / "train" / "model.pt"
    assert_same_weights(weights(trained), weights(settings.layout.run_dir("clean") / "train" / "model.pt"))
    assert read_json(settings.layout.run_dir("r1") / "steps" / "train.json")["outputs"] == uri
