"""What an M-node pod needs on a real network, in the rendered Job (no cluster needed)."""

import pytest

from tasks.core.params import load_params
from tasks.training.kubernetes import KubernetesTraining, render_manifests, validate_manifests


def job_container(cfg: KubernetesTraining) -> dict:
    """The training container of the Job (M nodes) or the Pod (one node)."""
    manifest = render_manifests("scheduled__2026-12-01", "data-v1", load_params().train, cfg)[0]
    validate_manifests([manifest])
    spec = manifest["spec"]["template"]["spec"] if manifest["kind"] == "Job" else manifest["spec"]
    return spec["containers"][0]


def test_multinode_pods_use_the_pod_interface_a_fresh_worker_store_and_restart_on_a_lost_peer():
    c = job_container(KubernetesTraining(nodes=2, socket_ifname="ens5", dist_timeout_s=45, max_restarts=2))
    env = {e["name"]: e["value"] for e in c["env"]}
    assert env["GLOO_SOCKET_IFNAME"] == env["NCCL_SOCKET_IFNAME"] == "ens5"
    assert env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1" and env["SLUICE_DIST_TIMEOUT_S"] == "45"
    assert "--max-restarts=2" in c["args"]


def test_one_node_pods_keep_torchrun_standalone_defaults():
    c = job_container(KubernetesTraining(nodes=1))
    env = {e["name"]: e["value"] for e in c["env"]}
    assert "GLOO_SOCKET_IFNAME" not in env and env["SLUICE_DIST_TIMEOUT_S"] == "300"
    assert c["command"] == ["torchrun"] and "--standalone" in c["args"]


def test_bad_network_settings_are_refused_with_their_name():
    with pytest.raises(ValueError, match="socket_ifname"):
        KubernetesTraining(nodes=2, socket_ifname="eth0; rm -rf /")
    with pytest.raises(ValueError, match="dist_timeout_s"):
        KubernetesTraining(nodes=2, dist_timeout_s=0)
