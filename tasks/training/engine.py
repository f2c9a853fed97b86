"""Training entrypoint: the same code for 1 process, N, or M nodes under torchrun
(gloo on CPU, NCCL on GPU with bf16 autocast).

    python -m torch.distributed.run --nproc-per-node=2 ... -m tasks.training.engine \
        --data-version data-v2 --out runs/<run_id>/train --params '<json of params.train>'

Streams the data version's partitions from the registry by tag (through DVC; see
`data.py`) and trains on the weak labels (soft targets: the label source's class probabilities),
step by step: each step one global batch, split into per-rank micro-batches
(re-split by throughput when balancing), gradients accumulated and averaged exactly.
`train.strategy` wraps the model in DDP or shards it with FSDP2 (`sharded.py`).
Checkpoints every `checkpoint_every` steps (asynchronously) and on SIGTERM: one file by
rank 0 under DDP, one DCP shard per rank under FSDP2; resumes from the newest valid
checkpoint of the same training (`state.py`), of either kind and at any world size. The time the step
loop spends blocked by checkpointing is summed (`checkpoint_blocked_s` in
train_metrics.json; the `checkpoint_overhead` benchmark's figure). Only rank 0 logs
and writes files; with `--out` a URI (a pod), rank 0 publishes them there (`outputs.py`).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import re
import signal
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Callable

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from tasks.core.files import atomic_write_json
from tasks.core.log import Progress, log
from tasks.core.moved import current
from tasks.core.params import TrainParams
from tasks.core.settings import Settings
from tasks.core.versions import is_model_version
from tasks.datasets import load_dataset
from tasks.models import (
    LEGACY_PLUGIN,
    attach_tokenizer,
    load_model_plugin,
    model_blob,
    read_blob,
    rebuilt_with,
    save_model,
)
from tasks.training.batching import equal_splits, rank_slice, rebalance
from tasks.training.checkpoint import AsyncCheckpointer, latest_valid_checkpoint, load_checkpoint
from tasks.training.data import StreamingVersion, version_texts
from tasks.training.hierarchical import HierarchicalState, hierarchical_allreduce_hook
from tasks.training.inputs import decide_tokenizer, frozen_trunk, inputs_record, row_inputs, takes_tokens
from tasks.training.loop import accumulate_gradients, make_loss, make_model, make_optimizer
from tasks.training.outputs import CHECKPOINTS, OUTPUTS, OutputStore
from tasks.training.peers import describe_loss, gather_hosts, is_collective_failure, leave_process_group
from tasks.training.sharded import (
    MARKER,
    METADATA,
    SMALL_STATE,
    ShardedCheckpointer,
    full_model_state,
    is_sharded,
    load_sharded,
    local,
    shard_model,
    square_sums,
)
from tasks.training.spread import SpreadState, measured_hook
from tasks.training.state import TrainState, rng_state, training_fingerprint
from tasks.training.telemetry import TrainingMetrics

_STEP = re.compile(r"\d+")  # a checkpoint file's step (ckpt-000040.pt)

# Called each step with (rank, rows of this rank's micro-batch) just before its forward-backward;
# its time counts as this rank's compute, as load balancing measures it (benchmarks slow ranks this way).
MicroBatchHook = Callable[[int, int], None]
# Called on every rank after each finished epoch with (epochs done, the model): True stops the training
# there (rank 0's answer decides, so every rank stops at the same step). A tuning trial evaluates the
# model on the gold dev set here and reports to its study, whose pruner may stop it.
EpochHook = Callable[[int, torch.nn.Module], bool]


def pick_device(p: TrainParams) -> torch.device:
    """cuda:LOCAL_RANK when asked for (or "auto" and a GPU is there), else the CPU."""
    if p.device == "cuda" or (p.device == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise RuntimeError("train.device is 'cuda' but torch sees no GPU on this machine")
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
        return device
    return torch.device("cpu")


def autocast_for(p: TrainParams, device: torch.device):
    """bf16 autocast on a GPU ("auto" or "bf16"); fp32 on the CPU unless bf16 is asked for."""
    bf16 = p.precision == "bf16" or (p.precision == "auto" and device.type == "cuda")
    if not bf16:
        return contextlib.nullcontext
    return lambda: torch.autocast(device_type=device.type, dtype=torch.bfloat16)


def init_process_group(device: torch.device, store_dir: str | Path | None = None, timeout_s: int = 300) -> None:
    """NCCL on GPU, gloo on CPU. On one machine the local backend names a FileStore folder
    (`--store-dir`): torch's TCPStore server always listens on every interface, a file store on
    none. Across machines (Kubernetes) the launcher's env:// rendezvous is used."""
    backend = "nccl" if device.type == "cuda" else "gloo"
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    timeout = timedelta(seconds=timeout_s)
    if store_dir:
        # One store per restart: a restarted group must not read the dead group's keys.
        attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        store = dist.FileStore(str(Path(store_dir) / f"store-{attempt}"), world)
        dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout)
    else:
        dist.init_process_group(backend, timeout=timeout)


@dataclass(frozen=True)
class Ranks:
    """This process's place in the job (torchrun's RANK, WORLD_SIZE, LOCAL_*), and every rank's host
    (`peers.my_host`: to name the lost ones when a collective fails)."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0
    local_world: int = 1
    hosts: tuple[str, ...] = ()

    @property
    def distributed(self) -> bool:
        return self.world > 1

    @property
    def master(self) -> bool:
        return self.rank == 0


def join_process_group(device: torch.device, store_dir: str | Path | None, timeout_s: int) -> Ranks:
    """Join the job's process group when there is more than one process."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return Ranks()
    init_process_group(device, store_dir, timeout_s)
    world = dist.get_world_size()
    return Ranks(
        dist.get_rank(),
        world,
        int(os.environ.get("LOCAL_RANK", "0")),
        int(os.environ.get("LOCAL_WORLD_SIZE", world)),
        gather_hosts(world),
    )


@contextlib.contextmanager
def naming_lost_peers(ranks: Ranks, state: TrainState, timeout_s: int):
    """A collective that fails in the block (a dead peer's reset, a partition's timeout) becomes a
    PeerLost naming the lost ranks and their hosts (`peers.describe_loss`), raised within the
    collective timeout plus a short roll call; the launcher then re-rendezvouses or exits."""
    try:
        yield
    except Exception as exc:
        if not (ranks.distributed and is_collective_failure(exc)):
            raise
        grace_s = min(5.0, max(1.0, timeout_s / 4))
        error = describe_loss(exc, ranks.rank, ranks.hosts, state.step + 1, timeout_s, grace_s)
        log(str(error))
        raise error from exc


def read_init_model(init_from: str, registry_url: str | None, settings: Settings | None = None) -> dict:
    """A previous model's blob: a registered version (model-vN, read by tag through DVC, as a
    pod does) or a model.pt path. `settings`: the process's (else read from the environment)."""
    if is_model_version(init_from):
        from tasks.registry import Registry

        settings = settings if settings is not None else Settings.from_env()
        return read_blob(Registry(settings).read_model_artifact(init_from, "model.pt", repo_url=registry_url))
    return read_blob(init_from)


def warm_start(
    model, init_from: str | None, registry_url: str | None = None, settings: Settings | None = None
) -> str | None:
    """Load a previous model's weights (and its input scaling) when the architecture matches."""
    if not init_from:
        return None
    blob, mine = read_init_model(init_from, registry_url, settings), model_blob(model)
    theirs = (current(blob.get("plugin", LEGACY_PLUGIN)), blob["arch"])
    if theirs != (mine["plugin"], mine["arch"]):
        log(f"not warm-starting: {init_from} is {theirs[0]} {theirs[1]}, this run {mine['plugin']} {mine['arch']}")
        return None
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    # Plain or sharded (FSDP2: every rank holds the whole dict and keeps its own shard).
    set_model_state_dict(model, blob["state_dict"], options=StateDictOptions(full_state_dict=True))
    return init_from


def resume_or_warm_start(
    state: TrainState,
    store: OutputStore,
    ranks: Ranks,
    device: torch.device,
    init_from: str | None,
    registry_url: str | None,
    settings: Settings | None = None,
) -> str | None:
    """Continue from the newest valid checkpoint of this same training (its fingerprint), else
    start from `init_from`'s weights when the architecture matches. Returns (the warm start used,
    where the run resumed from: step, world size and strategy that wrote the checkpoint, or None).
    A checkpoint of either kind loads into either strategy at any world size: a DDP file (full state
    dicts) or an FSDP2 folder (DCP shards, resharded on load)."""
    if ranks.local_rank == 0:
        store.fetch_checkpoints()  # one fetch per node: each pod has its own disk
    if ranks.distributed:
        dist.barrier()  # fetched before anyone reads the folder
    found = latest_valid_checkpoint(store.local / CHECKPOINTS)
    if found and found[1].get("fingerprint") != state.fingerprint:
        if ranks.master:
            log(f"ignoring {found[0].name}: it belongs to another data version, other params or another start")
        found = None
    found = agree_on_checkpoint(found, store.local / CHECKPOINTS, ranks)
    if found:
        path, blob = found
        if blob.get("sharded"):
            load_sharded(path, state.model, state.optimizer, blob["param_groups"])
            origin = state.load_small(blob, ranks.rank, device)
        else:
            origin = state.load_dict(blob, ranks.rank, device)
        if ranks.master:
            moved = (origin["world_size"], origin["strategy"]) != (state.world, state.strategy)
            log(
                f"resumed from {path.name} at step {state.step}"
                + (
                    f" (written by {origin['world_size']} x {origin['strategy']}, now {state.world} x {state.strategy})"
                    if moved
                    else ""
                )
            )
        return None, origin
    warm = warm_start(state.model, init_from, registry_url, settings)
    if warm and ranks.master:
        log(f"warm start from {warm}")
    return warm, None


def agree_on_checkpoint(found: tuple[Path, dict] | None, folder: Path, ranks: Ranks) -> tuple[Path, dict] | None:
    """Every rank resumes from the same step: the oldest of the ranks' newest checkpoints (-1: none,
    a fresh start for all). Nodes' disks can differ: a checkpoint written on rank 0's node but not yet
    published when that node was cut off or lost is on that disk only, and a replaced pod has only
    the published ones."""
    if not ranks.distributed:
        return found
    mine = int(_STEP.search(found[0].name).group()) if found else -1
    steps: list[int] = [mine] * ranks.world
    dist.all_gather_object(steps, mine)
    target = min(steps)
    if target == mine:
        return found
    if ranks.master:
        log(f"ranks' newest checkpoints differ (steps {steps}): every rank resumes from step {max(target, 0)}")
    if target < 0:
        return None
    for path in (folder / f"ckpt-{target:06d}", folder / f"ckpt-{target:06d}.pt"):
        if path.exists():
            try:
                return path, load_checkpoint(path)
            except ValueError as exc:
                log(f"rank {ranks.rank}: {exc}")
    raise RuntimeError(f"rank {ranks.rank}: the agreed checkpoint of step {target} is missing or fails its checks")


@dataclass
class Wrapped:
    """The model as the step runs it: DDP (or the model itself in one process), DDP's `no_sync`
    for accumulation chunks, and the comm hook's state that measures gradient spread."""

    module: torch.nn.Module
    no_sync: Callable
    spread: SpreadState


def wrap(model: torch.nn.Module, p: TrainParams, device: torch.device, ranks: Ranks) -> Wrapped:
    """The model as train.strategy runs it: DDP (`wrap_for_ddp`) or FSDP2 (`sharded.shard_model`, in
    place: the optimizer must be built after it, on the sharded parameters)."""
    if p.strategy == "fsdp2":
        return Wrapped(model, shard_model(model, p, device, ranks.distributed), SpreadState())
    return wrap_for_ddp(model, p, device, ranks)


def wrap_for_ddp(model: torch.nn.Module, p: TrainParams, device: torch.device, ranks: Ranks) -> Wrapped:
    """DDP with a comm hook that measures each rank's gradient around the allreduce, flat or
    hierarchical (`train.allreduce`)."""
    spread = SpreadState()
    if not ranks.distributed:
        return Wrapped(model, contextlib.nullcontext, spread)
    # The only buffers are the input scaling, identical on every rank: no sync each forward
    # (it would also make fast ranks wait for slow ones before their compute, blinding the balancer).
    ddp = DistributedDataParallel(
        model, forward_sync_buffers=False, device_ids=[device.index] if device.type == "cuda" else None
    )
    # The bucket layout decides the order in which a ring sums each element (bit-level results with
    # more than 2 ranks). DDP rebuilds it after the first step in the order gradients became ready, so
    # a resumed run's first step would use a layout the uninterrupted run used only at step 1: fix
    # the layout now, as static_graph does, so every start reduces alike (resume stays bit-identical).
    ddp.reducer._push_all_rebuilt_params()
    ddp.reducer._rebuild_buckets()
    if p.allreduce == "hierarchical":
        spread.inner, spread.inner_state = hierarchical_allreduce_hook, HierarchicalState.build(ranks.local_world)
    ddp.register_comm_hook(spread, measured_hook)
    return Wrapped(ddp, ddp.no_sync, spread)


def chunks_needed(splits: list[int], micro: int) -> int:
    """Accumulation chunks of the largest slice: what every FSDP2 rank runs (its forwards gather)."""
    return max(-(-n // micro) for n in splits) if micro else 1


@dataclass(frozen=True)
class StepStats:
    """What one rank tells the others after each step."""

    loss_sum: float  # summed over its micro-batch
    stop: bool  # it was told to stop (SIGTERM)
    seconds_per_sample: float  # its own compute time per row (load balancing)
    local_grad_sq: float  # ||its own gradient||^2, on logging steps (gradient variance)


def exchange_step_stats(mine: StepStats, ranks: Ranks, device: torch.device) -> list[StepStats]:
    """Every rank's StepStats, in rank order: one small all_gather per step."""
    shared = torch.tensor(
        [mine.loss_sum, float(mine.stop), mine.seconds_per_sample, mine.local_grad_sq],
        dtype=torch.float64,
        device=device,
    )
    per_rank = [shared.clone() for _ in range(ranks.world)]
    if ranks.distributed:
        dist.all_gather(per_rank, shared)
    return [StepStats(loss, bool(stop), sps, sq) for loss, stop, sps, sq in (t.tolist() for t in per_rank)]


class StopSignal:
    """SIGTERM (preemption, `kill`): finish the step, checkpoint, exit. Ranks agree on it each step."""

    def __init__(self):
        self.requested = False
        signal.signal(signal.SIGTERM, self._handle)

    def _handle(self, signum, frame):
        self.requested = True


Checkpointer = AsyncCheckpointer | ShardedCheckpointer  # rank 0's single-file writer (DDP) or every rank's (FSDP2)


def checkpoint(
    state: TrainState, checkpointer: Checkpointer | None, ranks: Ranks, device: torch.device, wait: bool = False
) -> None:
    """Every rank calls this at the same steps: the RNG states of all ranks are gathered (no layer
    draws random numbers today, but a resumed run must not depend on that staying true)."""
    rng = [rng_state(device)] * ranks.world
    if ranks.distributed:
        dist.all_gather_object(rng, rng_state(device))
    if isinstance(checkpointer, ShardedCheckpointer):
        checkpointer.save(state.step, state.model, state.optimizer, state.small_dict(rng), wait=wait)
    elif checkpointer is not None:
        checkpointer.save(state.step, state.to_dict(rng), wait=wait)


def make_checkpointer(store: OutputStore, p: TrainParams, ranks: Ranks) -> Checkpointer | None:
    """The background checkpoint writer: under FSDP2 every rank's (`ShardedCheckpointer`, built on
    every rank: it creates a process group), else rank 0's; with a URI, each checkpoint is published
    once written, the file that marks it complete last (a single file's checksum; a sharded
    folder's COMPLETE, after every rank has published its own shards)."""
    folder = store.local / CHECKPOINTS

    def published(*marked_by: Path) -> None:
        store.publish(*marked_by)
        store.prune_checkpoints({f.name for f in folder.glob("ckpt-*")})
        if (store.local / "metrics.jsonl").exists():
            store.publish(store.local / "metrics.jsonl")

    if p.strategy == "fsdp2":
        return ShardedCheckpointer(
            folder,
            ranks.rank,
            ranks.distributed,
            on_saved=(lambda d: published(d / METADATA, d / SMALL_STATE, d / MARKER)) if store.uri else None,
            publish_shards=(lambda files: store.publish(*files)) if store.uri else None,
        )
    if not ranks.master:
        return None
    return AsyncCheckpointer(folder, on_saved=(lambda f: published(f, f.with_suffix(".sha256"))) if store.uri else None)


@dataclass
class _Run:
    """One training's parts and the step loop's own tallies (run_training builds it, _step advances it)."""

    p: TrainParams
    data: StreamingVersion
    batch: int
    steps_per_epoch: int
    total_steps: int
    ranks: Ranks
    device: torch.device
    state: TrainState
    net: Wrapped
    autocast: Callable
    loss_fn: torch.nn.Module
    checkpointer: Checkpointer | None
    metrics: TrainingMetrics
    stop: StopSignal
    tracker: Progress | None
    on_micro_batch: MicroBatchHook | None
    on_epoch: EpochHook | None
    sync_checkpoints: bool
    blocked_s: float = 0.0  # the step loop's time inside checkpointing, by its own clock
    saves: int = 0
    stopped_at_epoch: int | None = None  # set when on_epoch stops the training early
    resumed: dict | None = None  # the checkpoint's origin (step, world size, strategy) when resumed


def run_training(
    data_version: str,
    out: str,
    p: TrainParams,
    registry_url: str | None = None,
    init_from: str | None = None,
    workdir: Path | None = None,
    *,
    store_dir: str | Path | None = None,
    dist_timeout_s: int = 300,
    on_micro_batch: MicroBatchHook | None = None,
    sync_checkpoints: bool = False,
    on_epoch: EpochHook | None = None,
    settings: Settings | None = None,
    dataset_module: str | None = None,
) -> dict:
    """Train `p.epochs` epochs of `data_version` into `out` (resuming if a checkpoint of this same
    training is there); returns what train_metrics.json holds. `sync_checkpoints`: wait for each
    periodic checkpoint's write in the step loop (a benchmark's control: what the background
    writer saves). `settings`: the process's, passed down (else read from the environment once).
    `dataset_module`: the dataset plug-in the step's params name (else the params file's)."""
    settings = settings if settings is not None else Settings.from_env()
    device = pick_device(p)
    ranks = join_process_group(device, store_dir, dist_timeout_s)
    stop, store = StopSignal(), OutputStore(out, workdir, settings)
    dataset = load_dataset(dataset_module or None, settings=settings)  # the worker's plug-ins, resolved once
    plugin = load_model_plugin(p.model.module)
    # read from the registry once, on rank 0, for whichever of the tokenizer, the frozen encoder's cache
    # and the inputs record needs them
    texts = functools.cache(lambda: version_texts(data_version, dataset, registry_url, settings))
    tokenizer = decide_tokenizer(
        plugin,
        p,
        dataset,
        texts,
        store,
        ranks,
        read_init_model(init_from, registry_url, settings) if init_from and takes_tokens(plugin) else None,
    )
    frozen = frozen_trunk(plugin, p, dataset, tokenizer, settings, ranks, texts)
    data = StreamingVersion(
        data_version,
        registry_url,
        cache_mb=p.stream_cache_mb,
        seed=p.seed,
        settings=settings,
        inputs=row_inputs(p, dataset, tokenizer, frozen),
    )
    batch = min(p.batch_size, len(data))
    steps_per_epoch = max(1, len(data) // batch)  # full global batches only; the order changes each epoch
    total_steps = p.epochs * steps_per_epoch
    model = make_model(data.stats, p).to(device)  # same seed and data on every rank: same start, same scaling
    if tokenizer is not None:
        attach_tokenizer(model, tokenizer)
    pretrained = model.sluice_pretrained
    inputs = inputs_record(p, tokenizer, texts, frozen) if ranks.master else None
    if inputs and inputs["truncated_texts"]:
        cut = inputs["truncated_texts"]
        log(f"{cut} of {inputs['texts']} texts are longer than max_len {inputs['max_len']} tokens: cut there")
    if pretrained and ranks.master:
        log(
            f"pretrained: {pretrained['tensors']} tensors from {pretrained['path']} "
            f"(sha256 {pretrained['sha256'][:12]})" + (f"; fresh: {pretrained['fresh']}" if pretrained["fresh"] else "")
        )
    net = wrap(model, p, device, ranks)  # before the optimizer: FSDP2 replaces the parameters by shards
    state = TrainState(
        model,
        make_optimizer(model, p),
        equal_splits(batch, ranks.world),
        training_fingerprint(data_version, p, init_from),
        ranks.world,
        p.strategy,
    )
    warm, resumed = resume_or_warm_start(state, store, ranks, device, init_from, registry_url, settings)
    if frozen is not None:
        frozen.check(model)
    resumed_from = state.step
    if ranks.master:
        log(
            f"{len(data)} rows in {len(data.counts)} partition(s), {ranks.world} process(es) on {device.type} "
            f"({p.strategy}), "
            f"steps {state.step}->{total_steps}"
        )
    run = _Run(
        p,
        data,
        batch,
        steps_per_epoch,
        total_steps,
        ranks,
        device,
        state,
        net,
        autocast_for(p, device),
        make_loss(model, data.stats, device),
        make_checkpointer(store, p, ranks),
        TrainingMetrics(store.local / "metrics.jsonl", enabled=ranks.master),
        stop,
        Progress("training", total_steps, start=state.step) if ranks.master else None,
        on_micro_batch,
        on_epoch,
        sync_checkpoints,
        resumed=resumed,
    )
    t0 = time.time()
    with naming_lost_peers(ranks, state, dist_timeout_s):
        while state.step < total_steps and not _step(run):
            pass
    if run.checkpointer is not None:
        blocked = time.perf_counter()
        run.checkpointer.close()  # the last write is part of the run's time
        run.blocked_s += time.perf_counter() - blocked
    result = _result(run, data_version, warm, resumed_from, time.time() - t0)
    result.update(pretrained=pretrained, inputs=inputs)
    del run, net  # DDP goes while the process group lives (peers.leave_process_group says why)
    finish(result, model, store, ranks)
    return result


def _result(run: _Run, data_version: str, warm: str | None, resumed_from: int, seconds: float) -> dict:
    """What train_metrics.json holds: the data, the world, the losses, the run's tallies."""
    state, data, p = run.state, run.data, run.p
    return {
        "data_version": data_version,
        "rows": int(len(data)),
        "partitions": len(data.counts),
        "epochs": p.epochs,
        "world_size": run.ranks.world,
        "strategy": p.strategy,
        "device": run.device.type,
        "steps": run.total_steps,
        "resumed_from_step": resumed_from,
        # The checkpoint's origin and this run's layout: a resize (world size or strategy) is in lineage.
        "resumed_from": (
            None
            if run.resumed is None
            else {**run.resumed, "to_world_size": run.ranks.world, "to_strategy": p.strategy}
        ),
        "warm_started_from": warm,
        "losses": state.losses,
        "final_loss": state.losses[-1],
        "final_splits": state.splits,
        "partition_loads": data.cache.loads,
        "seconds": seconds,
        "checkpoints": run.saves,
        "checkpoint_blocked_s": run.blocked_s,
        "n_parameters": sum(t.numel() for t in state.model.parameters()),
        "stopped_at_epoch": run.stopped_at_epoch,
    }


def _step(run: _Run) -> bool:
    """One global batch: gradients accumulated over this rank's slice, one optimizer step, the step's
    statistics exchanged, then metrics, balancing, checkpoints. True when the training stops early."""
    p, state, ranks, device, batch, model = run.p, run.state, run.ranks, run.device, run.batch, run.state.model
    epoch, s = state.position(run.steps_per_epoch)
    lo, hi = rank_slice(state.splits, ranks.rank)
    xb, yb = (t.to(device, non_blocking=True) for t in run.data.rows(epoch, s * batch + lo, s * batch + hi))
    logging = run.metrics.due(state.step, p.log_every)
    before = [local(t).detach().clone() for t in model.parameters()] if logging else None
    run.net.spread.start(logging)
    started = time.perf_counter()
    if run.on_micro_batch is not None:  # e.g. a benchmark's simulated slow rank: timed as compute
        run.on_micro_batch(ranks.rank, len(xb))
    state.optimizer.zero_grad(set_to_none=True)
    # Scaled so that DDP's mean over ranks is the mean over the global batch, whatever the split.
    loss_sum, ready = accumulate_gradients(
        run.net.module,
        run.loss_fn,
        xb,
        yb,
        ranks.world / batch,
        p.micro_batch_size,
        run.net.no_sync,
        run.autocast,
        chunks_needed(state.splits, p.micro_batch_size) if p.strategy == "fsdp2" else 1,
    )
    state.optimizer.step()
    compute_s = ready - started  # this rank's own time (the last backward waits for the others)
    stats = exchange_step_stats(
        StepStats(loss_sum, run.stop.requested, compute_s / max(1, len(xb)), run.net.spread.local_sq), ranks, device
    )
    step_loss = sum(r.loss_sum for r in stats) / batch
    epoch_done = state.finish_step(step_loss, batch, run.steps_per_epoch)
    run.metrics.observe(step_loss)
    if run.tracker is not None:  # 'training: step 120/400 (30%), 12.3 steps/s, ETA 23 s' in the task log
        run.tracker.update(state.step)
    if before is not None:
        sharded = is_sharded(model)  # each rank holds a part of every norm: summed on every rank
        sums = square_sums(model, before, ranks.distributed) if sharded else None
        # FSDP2 reduce-scatters each gradient without the DDP hook that sees each rank's own part.
        local_sq = [r.local_grad_sq for r in stats] if ranks.distributed and not sharded else None
        run.metrics.record(
            state.step,
            epoch,
            step_loss,
            model,
            before,
            state.splits,
            batch,
            compute_s,
            local_grad_sq=local_sq,
            sums=sums,
        )
    if epoch_done and ranks.master and (state.step // run.steps_per_epoch) % max(1, p.epochs // 10) == 0:
        log(f"epoch {state.step // run.steps_per_epoch}/{p.epochs} loss {state.losses[-1]:.4f} splits {state.splits}")
    if p.balance_every and state.step % p.balance_every == 0 and ranks.distributed:
        state.splits = rebalance(state.splits, [r.seconds_per_sample for r in stats], batch)
    if any(r.stop for r in stats):
        stop_with_checkpoint(state, run.checkpointer, ranks, device)
    if (
        epoch_done
        and run.on_epoch is not None
        and epoch_hook_stops(run.on_epoch, state, run.steps_per_epoch, model, ranks, device)
    ):
        run.stopped_at_epoch = state.step // run.steps_per_epoch
        return True
    if state.step % p.checkpoint_every == 0 and state.step < run.total_steps:
        blocked = time.perf_counter()
        checkpoint(state, run.checkpointer, ranks, device, wait=run.sync_checkpoints)
        run.blocked_s, run.saves = run.blocked_s + time.perf_counter() - blocked, run.saves + 1
    return False


def epoch_hook_stops(
    on_epoch: EpochHook,
    state: TrainState,
    steps_per_epoch: int,
    model: torch.nn.Module,
    ranks: Ranks,
    device: torch.device,
) -> bool:
    """Call the epoch hook; rank 0's answer, shared with every rank, says whether to stop."""
    answer = float(bool(on_epoch(state.step // steps_per_epoch, model)))
    stop = torch.tensor([answer], dtype=torch.float64, device=device)
    if ranks.distributed:
        dist.broadcast(stop, src=0)
    return bool(stop.item())


def stop_with_checkpoint(
    state: TrainState, checkpointer: Checkpointer | None, ranks: Ranks, device: torch.device
) -> None:
    """A rank was told to stop: checkpoint this very step (waiting for the write), then exit 143."""
    checkpoint(state, checkpointer, ranks, device, wait=True)
    if ranks.master:
        log(f"stopping on SIGTERM at step {state.step}: checkpoint written")
    if ranks.distributed:
        dist.barrier()
    raise SystemExit(143)


def finish(result: dict, model: torch.nn.Module, store: OutputStore, ranks: Ranks) -> None:
    """Rank 0 writes (and publishes) the model and the run's metrics; every rank leaves the group.
    A sharded model is gathered first (every rank takes part) into a plain module of its plug-in, so
    model.pt loads into a plain model as a DDP run's does."""
    if is_sharded(model):
        full = full_model_state(model)  # plain CPU tensors on rank 0, empty elsewhere
        if ranks.master:
            model = rebuilt_with(model, full)
    if ranks.master:
        save_model(model.cpu(), str(store.local / "model.pt"), {"data_version": result["data_version"]})
        atomic_write_json(store.local / "train_metrics.json", result)
        store.publish(*(store.local / name for name in OUTPUTS if (store.local / name).exists()))
        log(f"trained on {result['rows']} rows x {ranks.world} processes: final loss {result['final_loss']:.4f}")
    if ranks.distributed:
        leave_process_group()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Train a model plug-in on a data version (run under torchrun).")
    parser.add_argument("--data-version", required=True)
    parser.add_argument(
        "--out", required=True, help="output folder, or an fsspec URI (s3://...) to publish to from a pod"
    )
    parser.add_argument("--workdir", type=Path, help="local working folder when --out is a URI")
    parser.add_argument("--params", required=True, help="JSON of the train section of params.yaml")
    parser.add_argument(
        "--dataset",
        help="the dataset plug-in's module, as the step's params name it "
        "(default, or empty: params.yaml's dataset.module, the file SLUICE_PARAMS names)",
    )
    parser.add_argument(
        "--init-from",
        help="model version (model-vN) or model.pt to warm-start from, used when the architecture matches",
    )
    parser.add_argument(
        "--registry-url",
        help="git URL of the registry to read the data version from "
        "(default: SLUICE_REGISTRY_URL, else the local registry)",
    )
    parser.add_argument(
        "--store-dir",
        type=Path,
        help="a folder for the process group's file store, on one machine (default: torchrun's env:// rendezvous)",
    )
    return parser.parse_args(argv)


def main(
    argv: list[str] | None = None,
    on_micro_batch: MicroBatchHook | None = None,
    sync_checkpoints: bool = False,
    on_epoch: EpochHook | None = None,
    settings: Settings | None = None,
) -> int:
    """The torchrun worker: arguments and settings in, `run_training` (`on_micro_batch`: see
    MicroBatchHook; `sync_checkpoints`: see run_training; bench/slow_engine.py passes them;
    `on_epoch`: see EpochHook, tasks/tuning/worker.py passes it; `settings`: a caller's own,
    else read from the environment here, once for the whole run)."""
    args = parse_args(argv)
    settings = settings if settings is not None else Settings.from_env()
    run_training(
        args.data_version,
        args.out,
        TrainParams.model_validate(json.loads(args.params)),
        args.registry_url or settings.registry_url or None,
        args.init_from or None,
        args.workdir,
        store_dir=args.store_dir,
        dist_timeout_s=settings.dist_timeout_s,
        on_micro_batch=on_micro_batch,
        sync_checkpoints=sync_checkpoints,
        on_epoch=on_epoch,
        settings=settings,
        dataset_module=args.dataset,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
