"""Hardening of the training engine: checkpoints load as data only, the workers' environment is
an allowlist (no Airflow secrets), loopback-only sockets for NCCL too, and the checkpoint
benchmark's figure is the time the training thread is blocked (it fails for a blocking saver)."""

import gc
import hashlib
import io
import time

import pytest
import torch

from tasks.training.checkpoint import latest_valid_checkpoint, save_checkpoint
from tests.training.test_training import params


class _Payload:
    """Unpickling this calls open(marker, "w"): code run by whoever could write the checkpoint."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return open, (self.marker, "w")


def plant_checkpoint(folder, step, state):
    """A checkpoint file with a matching checksum, as someone with write access to the bucket could."""
    folder.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    torch.save(state, buf)
    path = folder / f"ckpt-{step:06d}.pt"
    path.write_bytes(buf.getvalue())
    path.with_suffix(".sha256").write_text(hashlib.sha256(buf.getvalue()).hexdigest())
    return path


def test_a_checkpoint_carrying_code_is_refused_and_the_older_one_used(tmp_path, capsys):
    marker = tmp_path / "payload-ran"
    folder = tmp_path / "checkpoints"
    save_checkpoint(folder, 10, {"step": 10, "w": torch.ones(3)})
    plant_checkpoint(folder, 20, {"step": 20, "w": torch.ones(3), "x": _Payload(marker)})
    path, state = latest_valid_checkpoint(folder)
    assert not marker.exists(), "loading a checkpoint ran code from it"
    assert path.name == "ckpt-000010.pt" and state["step"] == 10
    assert "ckpt-000020.pt refused" in capsys.readouterr().err and not marker.exists()
    # Nothing older: a fresh start.
    (folder / "ckpt-000010.pt").unlink()
    assert latest_valid_checkpoint(folder) is None and not marker.exists()


def _one_process(monkeypatch):
    import signal

    monkeypatch.delenv("WORLD_SIZE", raising=False)  # one process, in this one
    monkeypatch.setattr(signal, "signal", lambda *a: None)  # keep pytest's SIGTERM handler


def test_the_engine_starts_fresh_rather_than_run_a_planted_checkpoint(settings, data_version, tmp_path, monkeypatch):
    from tasks.training.engine import run_training

    _one_process(monkeypatch)
    marker = tmp_path / "payload-ran"
    plant_checkpoint(tmp_path / "out" / "checkpoints", 4, {"step": 4, "x": _Payload(marker)})
    result = run_training(data_version, str(tmp_path / "out"), params(nproc=1, epochs=1, checkpoint_every=100))
    assert result["resumed_from_step"] == 0 and not marker.exists()


def test_rng_states_survive_a_data_only_checkpoint():
    """Python's and numpy's global generators too, as plain ints and tensors (weights_only loads them)."""
    import random

    import numpy as np

    from tasks.training.state import rng_state, set_rng_state

    cpu = torch.device("cpu")
    random.random(), np.random.rand(), torch.rand(1), random.gauss(0, 1), np.random.randn()
    buf = io.BytesIO()
    torch.save([rng_state(cpu)], buf)
    expected = (random.random(), random.gauss(0, 1), np.random.rand(3).tolist(), np.random.randn(), torch.rand(2))
    set_rng_state(torch.load(io.BytesIO(buf.getvalue()), weights_only=True)[0], cpu)
    got = (random.random(), random.gauss(0, 1), np.random.rand(3).tolist(), np.random.randn(), torch.rand(2))
    assert got[:4] == expected[:4] and torch.equal(got[4], expected[4])


SECRETS = {
    "AIRFLOW__API_AUTH__JWT_SECRET": "jwt",
    "AIRFLOW__CORE__FERNET_KEY": "fernet",
    "AIRFLOW__API__SECRET_KEY": "session",
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": "postgresql://u:pw@db/a",
    "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": "/x/passwords.json",
    "GITHUB_TOKEN": "t",
    "SOME_SERVICE_PASSWORD": "pw",
    "AIRFLOW_CONN_S3": "aws://k:s@",
    "SSH_AUTH_SOCK": "/tmp/agent",
}
NEEDED = {
    "PATH": "/usr/bin",
    "HOME": "/home/u",
    "LANG": "C.UTF-8",
    "PYTHONPATH": "/repo",
    "VIRTUAL_ENV": "/repo/.venv",
    "TMPDIR": "/tmp",
    "SLUICE_HOME": "/state",
    "SLUICE_DVC_REMOTE": "s3://b/r",
    "AWS_ACCESS_KEY_ID": "k",
    "AWS_SECRET_ACCESS_KEY": "s",
    "DVC_NO_ANALYTICS": "1",
    "MKL_NUM_THREADS": "1",
    "CUDA_VISIBLE_DEVICES": "0,1",
    "NCCL_DEBUG": "INFO",
    "TORCH_LOGS": "+dynamo",
    "GLOO_DEVICE_TRANSPORT": "TCP",
}


def test_the_workers_environment_is_an_allowlist():
    from tasks.training.local import worker_env

    env = worker_env({**SECRETS, **NEEDED, "OMP_NUM_THREADS": "8"})
    assert not set(SECRETS) & set(env), set(SECRETS) & set(env)
    assert {k: env[k] for k in NEEDED} == NEEDED
    assert env["OMP_NUM_THREADS"] == "1" and env["PYTHONUNBUFFERED"] == "1"
    assert env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"


def test_the_local_backend_keeps_gloo_and_nccl_on_loopback():
    from tasks.training.local import worker_env

    env = worker_env({"NCCL_SOCKET_IFNAME": "eth0", "GLOO_SOCKET_IFNAME": "eth0"})
    assert env["GLOO_SOCKET_IFNAME"] == "lo" and env["NCCL_SOCKET_IFNAME"] == "lo"


def test_the_launcher_gets_the_allowlisted_environment(tmp_path, monkeypatch):
    """start_torchrun passes worker_env's result, not the parent's environment."""
    from tasks.core.params import load_params
    from tasks.training import local

    for k, v in SECRETS.items():
        monkeypatch.setenv(k, v)
    seen = {}

    class FakePopen:
        def __init__(self, cmd, env=None, **kw):
            seen.update(cmd=cmd, env=env, **kw)

    monkeypatch.setattr(local.subprocess, "Popen", FakePopen)
    local.start_torchrun("data-v1", tmp_path / "out", load_params().train)
    assert seen["env"] is not None and not set(SECRETS) & set(seen["env"])
    assert seen["env"]["NCCL_SOCKET_IFNAME"] == "lo" and seen["env"]["PATH"]


def test_kubernetes_pods_do_not_pin_nccl_to_loopback():
    """Across nodes gloo and NCCL must use the pod network: the loopback pin is the local backend's
    only (the pods' environment is built in kubernetes.py, not by worker_env)."""
    import inspect

    from tasks.core.params import load_params
    from tasks.training import kubernetes

    for nodes in (1, 2):
        manifest = kubernetes.render_manifests(
            "scheduled__2026-12-01", "data-v1", load_params().train, kubernetes.KubernetesTraining(nodes=nodes)
        )[0]
        spec = manifest["spec"]["template"]["spec"] if manifest["kind"] == "Job" else manifest["spec"]
        env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
        assert "lo" not in (env.get("GLOO_SOCKET_IFNAME"), env.get("NCCL_SOCKET_IFNAME")), env
    assert "worker_env" not in inspect.getsource(kubernetes)


@pytest.mark.slow  # a timing figure: it needs the whole machine (ops/test_run.py's serial part)
def test_a_blocking_checkpoint_saver_fails_the_checkpoint_benchmark(settings, data_version, tmp_path, monkeypatch):
    """The benchmark's figure (training time blocked by checkpointing over training time) is large
    when saving blocks the step loop, small with the asynchronous saver: the claim can fail."""
    from bench.training import CHECKPOINT_GOAL, blocked_fraction
    from tasks.training import checkpoint as ckpt
    from tasks.training.engine import run_training

    _one_process(monkeypatch)
    real_save = ckpt.save_checkpoint

    def slow_save(*a, **kw):  # a slow disk: 80 ms a checkpoint
        time.sleep(0.08)
        return real_save(*a, **kw)

    monkeypatch.setattr(ckpt, "save_checkpoint", slow_save)
    p = params(nproc=1, epochs=3, checkpoint_every=8, log_every=100)  # 24 steps, checkpoints at 8, 16
    figures = {}
    # The benchmark runs in a fresh process; this test runs in pytest's, whose heap the rest of the suite
    # has grown. A full collection of that heap landing inside a checkpoint call (CI: 0.83 of an async
    # run) is not checkpointing: freeze what exists, so a collection sees only what training allocates.
    gc.collect()
    gc.freeze()
    try:
        for sync in (False, True):
            result = run_training(
                data_version,
                str(tmp_path / f"sync-{sync}"),
                p,
                on_micro_batch=lambda rank, rows: time.sleep(0.02),
                sync_checkpoints=sync,
            )
            assert result["checkpoints"] == 2
            figures[sync] = blocked_fraction(result)
            print(f"sync={sync}: blocked {result['checkpoint_blocked_s']:.3f} s of {result['seconds']:.3f} s")
    finally:
        gc.unfreeze()
    assert figures[True] > 0.1 > CHECKPOINT_GOAL, figures
    assert figures[False] <= CHECKPOINT_GOAL, figures
