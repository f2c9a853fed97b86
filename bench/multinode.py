"""Multi-node training on a real network (`bench/cluster.py`: namespaced hosts, tbf-shaped links),
the Indexed Job's pods (`bench/multinode_pods.py`), and what happens when a node is lost.

- hier_step_time_ratio: median step time with hierarchical allreduce over flat, 2 nodes x 2
  processes, the bench model (params.yaml scaling.bench_hidden), each node's link shaped to
  SHAPED_MBIT with tbf (communication dominates there); the same ratio on unshaped links beside
  it. Goal <= 0.75 on the shaped link (the bytes each direction of the inter-node link carries
  fall from 1.5x to 1x the gradient, so 2/3 is the bound; intra-node traffic stays on the host).
- fsdp_step_time_ratio_world4: median step time under train.strategy fsdp2 over ddp (flat), 2 nodes
  x 2 processes (world 4), the bench model, unshaped links: the namespaced-host counterpart of
  bench/fsdp.py's world-2 fsdp_step_time_ratio (gloo on CPU; says nothing of NCCL). Goal <= 1.3.
- multinode_recovery_s: a node is lost (SIGKILL of every process on it), its pod is replaced after
  RESTART_PAUSE_S; seconds from the kill to the first step the resumed run finishes, minus the
  pause. Goal <= 30 (the seed claims 5 minutes).
- multinode_redo_ratio: steps done before the kill that the resumed run did again, over the
  checkpoint interval. Goal <= 1.

The scenario functions are shared with tests/cluster/test_multinode.py.
"""

from __future__ import annotations

import json
import re
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.cluster import Cluster
from bench.multinode_pods import Job, seed_registry
from bench.record import Record
from tasks.core.params import TrainParams, load_params
from tasks.core.wait import wait_until
from tasks.training.kubernetes import job_name
from tasks.training.outputs import COMPLETE_MARKER

RUN_ID = "multinode"
SHAPED_MBIT = 25  # ~38 MB of gradient per step: about 12 s on the link alone for flat (1.5x), 8 s hierarchical
RESTART_PAUSE_S = 3.0
# a checkpoint file (ddp) or folder (fsdp2)
RESUMED = re.compile(r"^(\d+\.\d+) \[sluice\] resumed from ckpt-\d+(?:\.pt)? at step (\d+)")
PEER_LOST = re.compile(r"^(\d+\.\d+) \[sluice\] rank (\d+) on .*: a collective failed at step (\d+)")


def train_params(**kw) -> TrainParams:
    """Small runs: no warm start, CPU, a metrics line every step (the step clock of the figures)."""
    base = dict(warm_start=False, device="cpu", precision="fp32", log_every=1, nproc=2)
    return load_params().train.replace(**{**base, **kw})


def metrics_lines(job: Job) -> list[dict]:
    """metrics.jsonl lines of every pod's working folder (rank 0 writes them, wherever it runs)."""
    lines = []
    for i in range(len(job.pods)):
        path = job.local_out(i) / "metrics.jsonl"
        if path.exists():
            lines += [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    return lines


def last_step(job: Job) -> int:
    return max((m["step"] for m in metrics_lines(job)), default=0)


def checkpoints_at_least(job: Job, step: int) -> list[int]:
    """Steps of the complete checkpoints in the pods' folders, >= `step`: a DDP checkpoint's checksum
    file, or a sharded (FSDP2) checkpoint folder's completion marker (both written last)."""
    found = []
    for i in range(len(job.pods)):
        ckpts = job.local_out(i) / "checkpoints"
        for f in [*ckpts.glob("ckpt-*.sha256"), *(m.parent for m in ckpts.glob(f"ckpt-*/{COMPLETE_MARKER}"))]:
            n = int(re.sub(r"\D", "", f.name.split(".")[0]))
            if n >= step:
                found.append(n)
    return sorted(found)


def log_events(job: Job, pattern: re.Pattern, after: float) -> list[tuple[float, int, re.Match]]:
    """(time, pod index, match) of the pods' log lines matching `pattern` at or after `after`."""
    events = []
    for pod in job.pods:
        text = pod.log.read_text(errors="replace") if pod.log.exists() else ""
        for line in text.splitlines():
            m = pattern.match(line)
            if m and float(m.group(1)) >= after:
                events.append((float(m.group(1)), pod.index, m))
    return sorted(events, key=lambda e: e[0])


def wait_for_checkpoint(job: Job, step: int, timeout_s: float = 240) -> int:
    def seen() -> int | None:
        for pod in job.pods:
            if pod.proc and pod.proc.poll() not in (None, 0):
                raise RuntimeError(f"pod {pod.index} exited {pod.proc.returncode} before checkpoint {step}")
        found = checkpoints_at_least(job, step)
        return found[0] if found else None

    return wait_until(seen, timeout_s=timeout_s, interval_s=0.05, what=f"a checkpoint at step >= {step}")


@dataclass
class NodeLoss:
    kill_at: float
    restart_at: float
    pause_s: float
    steps_before_kill: int
    survivor_error_at: float | None  # the surviving node's PeerLost line
    survivor_error: str
    resumed_from: int
    first_resumed_step_at: float

    @property
    def recovery_s(self) -> float:
        return self.first_resumed_step_at - self.kill_at - self.pause_s

    @property
    def redone(self) -> int:
        return self.steps_before_kill - self.resumed_from


def lose_node(job: Job, node: int, after_checkpoint: int, pause_s: float = RESTART_PAUSE_S) -> NodeLoss:
    """Once a checkpoint at `after_checkpoint` or later exists, SIGKILL every process of `node`; after
    `pause_s`, start its pod again (a Job's replacement). Returns once the run has resumed a step."""
    wait_for_checkpoint(job, after_checkpoint)
    kill_at = job.kill(node)
    before = last_step(job)
    time.sleep(pause_s)
    restart_at = time.time()
    job.start(node)

    def resumed() -> tuple | None:
        got = log_events(job, RESUMED, kill_at)
        if not got:
            return None
        resumed_from = int(got[0][2].group(2))
        # after the restart: a step the survivors finished just as the kill landed does not count
        done = [m["time"] for m in metrics_lines(job) if m["time"] > restart_at and m["step"] == resumed_from + 1]
        return (resumed_from, min(done)) if done else None

    resumed_from, first = wait_until(resumed, timeout_s=300, interval_s=0.2, what="the first resumed step")
    errors = [e for e in log_events(job, PEER_LOST, kill_at) if e[1] != node]
    return NodeLoss(
        kill_at,
        restart_at,
        pause_s,
        before,
        errors[0][0] if errors else None,
        errors[0][2].string if errors else "",
        resumed_from,
        first,
    )


@dataclass
class Partition:
    cut_at: float
    healed_at: float
    errors: dict[int, tuple[float, str]]  # pod index -> (time, line) of its first PeerLost line


def partition(job: Job, node: int, after_checkpoint: int, hold_s: float) -> Partition:
    """Once a checkpoint at `after_checkpoint` or later exists, cut `node` off the network; keep
    it cut until every pod has logged a PeerLost line and `hold_s` has passed; then heal it."""
    wait_for_checkpoint(job, after_checkpoint)
    cluster = job.cluster
    cut_at = time.time()
    cluster.cut(cluster.nodes[node])
    try:

        def every_pod_failed() -> dict | None:
            first: dict[int, tuple[float, str]] = {}
            for t, index, m in log_events(job, PEER_LOST, cut_at):
                first.setdefault(index, (t, m.string))
            return first if len(first) == len(job.pods) else None

        errors = wait_until(
            every_pod_failed, timeout_s=hold_s + 120, interval_s=0.2, what="a PeerLost line from every pod"
        )
        time.sleep(max(0.0, cut_at + hold_s - time.time()))
    finally:
        cluster.heal(cluster.nodes[node])
    return Partition(cut_at, time.time(), errors)


def median_step_s(job: Job, skip: int = 2) -> float:
    times = sorted(m["time"] for m in metrics_lines(job))
    gaps = [b - a for a, b in zip(times, times[1:])][skip:]
    return statistics.median(gaps)


def step_time(
    cluster: Cluster, version: str, allreduce: str, steps: int, out_root: str, strategy: str = "ddp"
) -> float:
    from bench.gpu_check import BENCH_HIDDEN

    p = train_params(
        hidden=BENCH_HIDDEN, allreduce=allreduce, strategy=strategy, batch_size=128, epochs=1, checkpoint_every=1000
    )
    job = Job(cluster, RUN_ID, version, p, nodes=2, nproc=2, out_root=out_root).start_all()
    codes = job.wait(timeout_s=600)
    if codes != [0, 0]:
        raise RuntimeError(f"pods exited {codes}:\n{job.logs()[-3000:]}")
    assert last_step(job) >= steps, (last_step(job), steps)
    return median_step_s(job)


def run() -> list[Record]:
    with tempfile.TemporaryDirectory() as tmp, Cluster(Path(tmp), nodes=2, job=job_name(RUN_ID)) as cluster:
        steps = 6
        step_version = seed_registry(cluster, rows=128 * steps, parts=1)
        times = {}
        for rate in (SHAPED_MBIT, None):
            cluster.shape(rate)
            for allreduce in ("flat", "hierarchical"):
                root = f"s3://sluice-registry/bench-{allreduce}-{rate or 'unshaped'}"
                times[(rate, allreduce)] = step_time(cluster, step_version, allreduce, steps, root)
        cluster.shape(None)
        times[(None, "fsdp2")] = step_time(
            cluster, step_version, "flat", steps, "s3://sluice-registry/bench-fsdp2", "fsdp2"
        )
        shaped = times[(SHAPED_MBIT, "hierarchical")] / times[(SHAPED_MBIT, "flat")]
        unshaped = times[(None, "hierarchical")] / times[(None, "flat")]

        interval = 20  # the node loss: the small model on the same data, 16 steps an epoch
        p = train_params(epochs=10, batch_size=64, checkpoint_every=interval, hidden=(32, 16))
        job = Job(cluster, RUN_ID, step_version, p, nodes=2, nproc=2, dist_timeout_s=30).start_all()
        loss = lose_node(job, node=1, after_checkpoint=interval)
        codes = job.wait(timeout_s=300, restart_failed=True)
        if codes != [0, 0]:
            raise RuntimeError(f"pods exited {codes}:\n{job.logs()[-3000:]}")
    step_details = {f"{a}_{r or 'unshaped'}_s": round(t, 4) for (r, a), t in times.items()}
    loss_details = {
        "restart_pause_s": loss.pause_s,
        "kill_to_first_resumed_step_s": round(loss.first_resumed_step_at - loss.kill_at, 2),
        "survivor_error_after_s": round(loss.survivor_error_at - loss.kill_at, 2) if loss.survivor_error_at else None,
        "steps_before_kill": loss.steps_before_kill,
        "resumed_from": loss.resumed_from,
        "checkpoint_every": interval,
    }
    return [
        Record(
            "hier_step_time_ratio",
            shaped,
            "ratio",
            "<= 0.75",
            {"link_mbit": SHAPED_MBIT, "unshaped_ratio": round(unshaped, 3), **step_details, "nodes": 2, "local": 2},
        ),
        Record(
            "fsdp_step_time_ratio_world4",
            times[(None, "fsdp2")] / times[(None, "flat")],
            "ratio",
            "<= 1.3",
            {
                "fsdp2_unshaped_s": round(times[(None, "fsdp2")], 4),
                "ddp_flat_unshaped_s": round(times[(None, "flat")], 4),
            },
        ),
        Record("multinode_recovery_s", loss.recovery_s, "s", "<= 30", loss_details),
        Record("multinode_redo_ratio", loss.redone / interval, "ratio", "<= 1", loss_details),
    ]
