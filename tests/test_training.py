import dataclasses

import numpy as np
import pytest
import torch

from tasks.params import load_params
from tasks.registry import Registry
from tasks.stepio import read_json
from tasks.training.checkpoint import latest_valid_checkpoint, save_checkpoint
from tasks.training.launch import run_torchrun


@pytest.fixture
def data_version(settings, emails, tmp_path):
    """A registry data version of 600 real rows; gold labels stand in for weak ones."""
    df = emails.iloc[:600].drop(columns=["spam"]).copy()
    df["label"] = emails["spam"].iloc[:600].to_numpy()
    df.loc[df.index[:30], "label"] = -1                      # some rows every LF abstained on
    df["label_prob"] = df["label"].clip(lower=0).astype(float)
    df.loc[df["label"] == -1, "label_prob"] = np.nan
    path = tmp_path / "part.parquet"
    df.to_parquet(path, index=False)
    return Registry(settings).snapshot({"batch-0001": path}, {"rows_by_batch": {"batch-0001": len(df)}})["data_version"]


def test_save_then_load_latest_and_skip_corrupt(tmp_path):
    for step in (10, 20, 30):
        save_checkpoint(tmp_path, step, {"epoch": step, "w": torch.full((3,), float(step))})
    assert sorted(p.name for p in tmp_path.glob("*.pt")) == ["ckpt-000020.pt", "ckpt-000030.pt"]  # keeps 2
    path, state = latest_valid_checkpoint(tmp_path)
    assert state["epoch"] == 30
    blob = path.read_bytes()
    path.write_bytes(blob[: len(blob) // 2])                  # torn write
    path, state = latest_valid_checkpoint(tmp_path)
    assert path.name == "ckpt-000020.pt" and state["epoch"] == 20
    assert latest_valid_checkpoint(tmp_path / "missing") is None


@pytest.mark.slow
def test_torchrun_two_processes_train_and_resume(settings, data_version, tmp_path):
    p = dataclasses.replace(load_params().train, epochs=12, checkpoint_every=4, nproc=2)
    out = tmp_path / "train"
    run_torchrun(data_version, out, p)
    m = read_json(out / "train_metrics.json")
    assert m["world_size"] == 2 and m["rows"] == 570          # abstained rows are left out
    assert len(m["losses"]) == 12 and m["losses"][-1] < m["losses"][0]
    assert (out / "model.pt").exists()
    assert [c.name for c in sorted((out / "checkpoints").glob("*.pt"))] == ["ckpt-000004.pt", "ckpt-000008.pt"]

    # A retry of the task finds the checkpoint and continues from it, ending where a clean run ends.
    (out / "model.pt").unlink()
    run_torchrun(data_version, out, p)
    resumed = read_json(out / "train_metrics.json")
    assert resumed["resumed_from_epoch"] == 8
    assert resumed["losses"][:8] == m["losses"][:8]
    np.testing.assert_allclose(resumed["losses"][8:], m["losses"][8:], rtol=1e-5)

    # The hierarchical allreduce hook gives the same training (1 node: reduce + broadcast inside it).
    hier = dataclasses.replace(p, allreduce="hierarchical")
    run_torchrun(data_version, tmp_path / "hier", hier)
    np.testing.assert_allclose(read_json(tmp_path / "hier" / "train_metrics.json")["losses"], m["losses"], rtol=1e-4)

    # Other hyperparameters: the checkpoint is not theirs, training starts over.
    run_torchrun(data_version, out, dataclasses.replace(p, lr=p.lr / 2))
    assert read_json(out / "train_metrics.json")["resumed_from_epoch"] == 0


@pytest.mark.slow
def test_torchrun_failure_is_reported(settings, tmp_path):
    p = dataclasses.replace(load_params().train, epochs=1)
    with pytest.raises(RuntimeError, match="torchrun exited"):
        run_torchrun("data-v1", tmp_path / "train", p)          # no registry: the workers fail


@pytest.mark.slow
def test_training_processes_listen_on_loopback_only(settings, data_version, tmp_path):
    import threading

    import psutil

    p = dataclasses.replace(load_params().train, epochs=60, checkpoint_every=1000)
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


@pytest.mark.slow
def test_warm_start_picks_up_a_previous_model(settings, data_version, tmp_path):
    from tasks.training.model import SpamMLP, load_model, save_model

    p = dataclasses.replace(load_params().train, epochs=10, checkpoint_every=100)
    run_torchrun(data_version, tmp_path / "prod", p)
    cold = read_json(tmp_path / "prod" / "train_metrics.json")
    warm_p = dataclasses.replace(p, epochs=2)
    run_torchrun(data_version, tmp_path / "warm", warm_p, init_from=tmp_path / "prod" / "model.pt")
    warm = read_json(tmp_path / "warm" / "train_metrics.json")
    assert warm["warm_started_from"] == str(tmp_path / "prod" / "model.pt")
    assert warm["losses"][0] < cold["losses"][0] * 0.8          # it starts where the prod model left off
    # The input scaling came with the weights.
    assert torch.equal(load_model(str(tmp_path / "warm" / "model.pt")).mean,
                       load_model(str(tmp_path / "prod" / "model.pt")).mean)
    # Another architecture: trained from scratch, said so.
    other = tmp_path / "other.pt"
    save_model(SpamMLP(load_model(str(tmp_path / "prod" / "model.pt")).arch["n_features"], (8,)), str(other))
    run_torchrun(data_version, tmp_path / "cold", warm_p, init_from=other)
    assert read_json(tmp_path / "cold" / "train_metrics.json")["warm_started_from"] is None
