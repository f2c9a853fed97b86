"""Multi-node training on a real network: 2 node hosts and a storage host, each a network namespace
(bench/cluster.py), running the Indexed Job's pods as rendered by tasks/training/kubernetes.py
(bench/multinode_pods.py): `torchrun --nnodes=2` with the c10d rendezvous at job-NAME-0.NAME, the
registry cloned over git:// and the data and checkpoints on S3, both on the storage host.

One cluster for the module. Runs: 1 node x 4 processes; 2 x 2 flat (the uninterrupted run); 2 x 2
hierarchical; 2 x 2 fsdp2 (sharded checkpoints, each node's shards on its own disk and published to
S3), and the same again losing node 1 (bit-identical to the undisturbed fsdp2 run); and one disrupted
2 x 2 flat run that first loses node 1 (SIGKILL of every process
on it, its pod replaced after a pause) and later is partitioned (node 1 cut off for longer than the
collective timeout), and must still end bit-identical to the uninterrupted run.
"""

from __future__ import annotations

import json

import pytest
import torch

from bench.cluster import SUBNET, Cluster, unavailable_reason
from bench.multinode import RUN_ID, lose_node, partition, train_params, wait_for_checkpoint
from bench.multinode_pods import Job, seed_registry
from tasks.training.kubernetes import job_name

pytestmark = pytest.mark.slow

EPOCHS, INTERVAL = 20, 20  # 600 rows / batch 64: 9 steps an epoch, 180 steps; a checkpoint every 20
COLLECTIVE_TIMEOUT_S = 8  # the disrupted run's SLUICE_DIST_TIMEOUT_S (pod env)
FSDP2_ROOT = "s3://sluice-registry/fsdp2"
SAME_WEIGHTS_ATOL = 1e-5  # 2 x 2 vs 1 x 4: same global batch and ranks' slices, only the reduction order differs


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    reason = unavailable_reason()
    if reason:
        pytest.skip(f"no cluster of network namespaces here: {reason}")
    c = Cluster(tmp_path_factory.mktemp("cluster"), nodes=2, job=job_name(RUN_ID))
    try:
        c.start()
        yield c
    finally:
        c.close()


@pytest.fixture(scope="module")
def version(cluster):
    return seed_registry(cluster, rows=600, parts=2)


def params(allreduce="flat", strategy="ddp"):
    return train_params(
        epochs=EPOCHS,
        batch_size=64,
        checkpoint_every=INTERVAL,
        hidden=(32, 16),
        allreduce=allreduce,
        strategy=strategy,
    )


def weights(job: Job, dest) -> dict[str, torch.Tensor]:
    from tasks.models import load_model

    return dict(load_model(str(job.outputs(dest, "model.pt") / "model.pt")).state_dict())


def finish(job: Job, timeout_s: float = 300, restart_failed: bool = False) -> None:
    codes = job.wait(timeout_s=timeout_s, restart_failed=restart_failed)
    assert codes == [0] * len(job.pods), f"pods exited {codes}:\n{job.logs()[-4000:]}"


@pytest.fixture(scope="module")
def reference(cluster, version, tmp_path_factory):
    """The four undisturbed runs' weights (1 x 4; 2 x 2 flat, hierarchical and fsdp2), what listened
    where while the 2 x 2 flat run trained, and where the fsdp2 run's checkpoint shards went."""
    out = tmp_path_factory.mktemp("reference")
    found = {}
    one = Job(cluster, RUN_ID, version, params(), nodes=1, nproc=4, out_root="s3://sluice-registry/one-node")
    finish(one.start_all())
    found["1x4"] = weights(one, out / "1x4")
    flat = Job(cluster, RUN_ID, version, params(), nodes=2, nproc=2, out_root="s3://sluice-registry/flat").start_all()
    wait_for_checkpoint(flat, INTERVAL)  # training is under way: every socket is open
    found["listeners"] = {ns: cluster.listeners(ns) for ns in [None, *cluster.namespaces]}
    found["cluster_pids"] = {pid for h in cluster.hosts for pid in cluster.pids(h)}
    finish(flat)
    found["2x2 flat"] = weights(flat, out / "flat")
    hier = Job(cluster, RUN_ID, version, params("hierarchical"), nodes=2, nproc=2, out_root="s3://sluice-registry/hier")
    finish(hier.start_all())
    found["2x2 hierarchical"] = weights(hier, out / "hier")
    sharded = Job(cluster, RUN_ID, version, params(strategy="fsdp2"), nodes=2, nproc=2, out_root=FSDP2_ROOT)
    finish(sharded.start_all())
    found["2x2 fsdp2"] = weights(sharded, out / "fsdp2")
    found["fsdp2 disks"] = [sorted(p.name for p in sharded.local_out(i).glob("checkpoints/ckpt-*/*")) for i in (0, 1)]
    found["fsdp2 folders"] = [sorted(p.name for p in sharded.local_out(i).glob("checkpoints/ckpt-*")) for i in (0, 1)]
    found["fsdp2 published"] = sharded.outputs(out / "fsdp2-published", "checkpoints/") / "checkpoints"
    return found


def test_two_nodes_train_the_weights_of_one_node_with_the_same_global_batch(reference):
    one = reference["1x4"]
    for kind in ("2x2 flat", "2x2 hierarchical", "2x2 fsdp2"):
        assert one.keys() == reference[kind].keys()
        for k in one:
            torch.testing.assert_close(reference[kind][k], one[k], atol=SAME_WEIGHTS_ATOL, rtol=0, msg=f"{kind}: {k}")


def test_fsdp2_shards_stay_on_their_node_and_the_published_checkpoint_lists_every_rank(reference):
    node0, node1 = reference["fsdp2 disks"]
    assert "__0_0.distcp" in node0 and "__1_0.distcp" in node0 and not any(n.startswith(("__2", "__3")) for n in node0)
    assert "__2_0.distcp" in node1 and "__3_0.distcp" in node1 and "COMPLETE" not in node1  # rank 0 marks it
    published = reference["fsdp2 published"]
    kept = sorted(p.name for p in published.iterdir())
    assert kept == [f"ckpt-{s:06d}" for s in (EPOCHS * 9 - 2 * INTERVAL, EPOCHS * 9 - INTERVAL)], kept  # older removed
    on0, on1 = reference["fsdp2 folders"]  # each node's own disk is pruned too (node 1's by its ranks)
    assert on0 == kept and on1 == [f"ckpt-{s:06d}" for s in (EPOCHS * 9 - 3 * INTERVAL, *(int(k[5:]) for k in kept))]
    last = published / kept[-1]
    files = json.loads((last / "COMPLETE").read_text())["files"]
    shards = {f"__{r}_0.distcp" for r in range(4)}
    assert shards <= set(files) and shards <= {p.name for p in last.iterdir()}


@pytest.fixture(scope="module")
def sharded_loss(cluster, version, reference, tmp_path_factory):
    """A 2 x 2 fsdp2 run that loses node 1 (every process SIGKILLed) after its first sharded checkpoint;
    the replaced pod fetches the published shards from S3 and the run resumes."""
    job = Job(
        cluster,
        RUN_ID,
        version,
        params(strategy="fsdp2"),
        nodes=2,
        nproc=2,
        dist_timeout_s=COLLECTIVE_TIMEOUT_S,
        out_root="s3://sluice-registry/fsdp2-disrupted",
    ).start_all()
    loss = lose_node(job, node=1, after_checkpoint=INTERVAL, pause_s=2.0)
    finish(job, restart_failed=True)
    return {"loss": loss, "weights": weights(job, tmp_path_factory.mktemp("fsdp2-disrupted"))}


def test_a_lost_node_under_fsdp2_resumes_from_its_sharded_checkpoint_bit_identical(sharded_loss, reference):
    loss = sharded_loss["loss"]
    assert loss.resumed_from % INTERVAL == 0 and 0 <= loss.steps_before_kill - loss.resumed_from <= INTERVAL, loss
    ref = reference["2x2 fsdp2"]
    assert all(torch.equal(sharded_loss["weights"][k], ref[k]) for k in ref), "not bit-identical to the undisturbed run"


@pytest.fixture(scope="module")
def disrupted(cluster, version, reference, tmp_path_factory):
    """One 2 x 2 flat run: node 1 lost after the first checkpoint, node 1 partitioned three
    checkpoints later; pods that exit are replaced (a Job's backoff) until the run completes."""
    job = Job(
        cluster,
        RUN_ID,
        version,
        params(),
        nodes=2,
        nproc=2,
        dist_timeout_s=COLLECTIVE_TIMEOUT_S,
        out_root="s3://sluice-registry/disrupted",
    ).start_all()
    loss = lose_node(job, node=1, after_checkpoint=INTERVAL, pause_s=2.0)
    cut = partition(job, node=1, after_checkpoint=loss.resumed_from + 2 * INTERVAL, hold_s=COLLECTIVE_TIMEOUT_S + 4)
    finish(job, restart_failed=True)
    return {
        "job": job,
        "loss": loss,
        "cut": cut,
        "weights": weights(job, tmp_path_factory.mktemp("disrupted")),
        "metrics": job.metrics(tmp_path_factory.mktemp("disrupted-metrics")),
    }


@pytest.mark.extended
def test_a_lost_node_is_replaced_and_the_run_resumes_bit_identical(disrupted, reference, cluster):
    loss = disrupted["loss"]
    # Resumed from the last checkpoint before the kill: no more than one interval redone.
    assert loss.resumed_from % INTERVAL == 0 and 0 <= loss.steps_before_kill - loss.resumed_from <= INTERVAL
    # The survivor did not hang: within 20 s of the kill it named the lost node (then re-rendezvoused).
    assert loss.survivor_error_at is not None and loss.survivor_error_at - loss.kill_at <= 20, loss
    assert cluster.nodes[1].addr in loss.survivor_error and "lost peer(s)" in loss.survivor_error
    ref = reference["2x2 flat"]
    assert all(torch.equal(disrupted["weights"][k], ref[k]) for k in ref), "not bit-identical to the undisturbed run"


def test_a_partition_fails_the_step_within_the_timeout_naming_the_lost_peer(disrupted, cluster):
    cut = disrupted["cut"]
    n0, n1 = cluster.nodes
    # Each side names the other, within the collective timeout plus the roll call (and 10 s of slack
    # for a loaded machine), and well before the link came back.
    t0, line0 = cut.errors[0]
    t1, line1 = cut.errors[1]
    for t in (t0, t1):
        assert COLLECTIVE_TIMEOUT_S - 1 <= t - cut.cut_at <= COLLECTIVE_TIMEOUT_S + 5 + 10
        assert t < cut.healed_at
    named = line0.split("lost peer(s)")[1].split(". Cause:")[0]  # the peers named, not gloo's own text after
    assert n1.addr in named and n0.addr not in named, line0
    assert n0.addr in line1 and "out of reach" in line1
    # After the link returned the run resumed and completed (bit-identity: the test above).
    assert disrupted["metrics"]["steps"] == EPOCHS * 9 and disrupted["metrics"]["resumed_from_step"] % INTERVAL == 0


def test_nothing_listens_outside_the_cluster_namespaces(reference, cluster):
    listeners, ours = reference["listeners"], reference["cluster_pids"]
    # The root namespace: no socket of a cluster process, none on the cluster's subnet.
    for addr, pids in listeners[None]:
        assert not pids & ours, f"a cluster process listens on {addr} in the root namespace"
        assert not addr.startswith(SUBNET + "."), addr
    # Inside: the switch has none; each host only on its own address, loopback, or its namespace's wildcard.
    assert listeners[cluster.switch] == []
    by_ns = {h.ns: h for h in cluster.hosts}
    for ns, found in listeners.items():
        if ns in by_ns:
            for addr, _ in found:
                host = addr.rsplit(":", 1)[0].strip("[]")
                assert host in (by_ns[ns].addr, "0.0.0.0", "*", "::", "127.0.0.1", "::1") or host.startswith("127."), (
                    f"{ns}: {addr}"
                )
    assert any(a.startswith(cluster.storage.addr) for a, _ in listeners[cluster.storage.ns])  # S3 and git
    assert listeners[cluster.nodes[0].ns], "the rendezvous store and gloo listen on node 0"
