"""A model-server replica with no registry on its disk (a pod's emptyDir) follows the registry through
its git URL (SLUICE_REGISTRY_URL): the serving state from the fetched branch, the model files from the
DVC remote the repository names."""

from __future__ import annotations

import subprocess

import httpx
import pytest
import yaml

from ops.model_server import ServerProcess
from tasks.core.settings import REPO_ROOT, Settings
from tasks.registry import Registry
from tasks.registry.follow import RemoteRegistry
from tasks.registry.repo import RegistryError
from tests.helpers.server import wait_for, write_onnx

pytestmark = pytest.mark.slow


def test_a_replica_follows_the_registry_through_its_git_url(tmp_path):
    from tasks.datasets import load_dataset

    bare = tmp_path / "git-server" / "registry.git"
    subprocess.run(["git", "init", "-q", "--bare", str(bare)], check=True)
    pipeline = Settings.from_env({"SLUICE_HOME": str(tmp_path / "airflow"), "SLUICE_REGISTRY_GIT_REMOTE": str(bare)})
    reg = Registry(pipeline)
    n = len(load_dataset().FEATURE_NAMES)
    models = [write_onnx(tmp_path / f"m{i}" / "model.int8.onnx", n, seed=i) for i in (1, 2)]
    reg.register_model("run-1", {"model.int8.onnx": models[0]}, {"data_version": "data-v1"})
    reg.promote("model-v1", "test")

    pod = Settings.from_env({"SLUICE_HOME": str(tmp_path / "pod"), "SLUICE_REGISTRY_URL": str(bare)})
    follower = RemoteRegistry(pod)
    assert follower.serving().champion.model_version == "model-v1"
    assert follower.read_model_artifact("model-v1", "model.int8.onnx") == models[0].read_bytes()
    assert not (pod.home / "registry" / "registry.json").exists()  # nothing was read from a local registry
    with pytest.raises(RegistryError, match="git fetch .* failed"):
        RemoteRegistry(pod, url=str(tmp_path / "no-such.git")).serving()

    raw = yaml.safe_load((REPO_ROOT / "params.yaml").read_text())
    raw["serving"]["poll_s"] = 0.2
    params_file = tmp_path / "params.yaml"
    params_file.write_text(yaml.safe_dump(raw))
    with ServerProcess(pod.home, params_file, env={"SLUICE_REGISTRY_URL": str(bare)}).start() as server:

        def serving() -> dict:
            return httpx.get(server.url + "/v1/serving", timeout=5).json()

        assert serving()["variants"]["champion"]["model_version"] == "model-v1"
        body = {"inputs": [{"name": "features", "shape": [1, n], "datatype": "FP32", "data": [0.0] * n}]}
        url = f"{server.url}/v2/models/{serving()['model_name']}/infer"
        answer = httpx.post(url, json=body, timeout=10)
        assert answer.status_code == 200, answer.text
        # The pipeline promotes another version: the replica follows it without a restart.
        reg.register_model("run-2", {"model.int8.onnx": models[1]}, {"data_version": "data-v1"})
        reg.promote("model-v2", "test")
        wait_for(
            lambda: serving()["variants"]["champion"]["model_version"] == "model-v2",
            60,
            "the replica to serve model-v2",
        )
        assert httpx.post(url, json=body, timeout=10).json()["model_version"] == "model-v2"
