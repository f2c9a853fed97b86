"""Fully sharded training (FSDP2) and its sharded checkpoints (train.strategy fsdp2).

Wrapping: `fully_shard` on each unit the model's plug-in names (`shard_units(model)`), then on the
root, over a 1-D device mesh of all ranks: each rank holds 1/world of every weight, its
gradient and its AdamW moments; a unit's weights are all-gathered for its forward (and,
with `fsdp.reshard_after_forward`, again for its backward) and its gradients
reduce-scattered. Gradient accumulation chunks other than the last skip that reduction
(`set_requires_gradient_sync(False)`), so accumulation stays exact, as DDP's `no_sync` is.
FSDP2 averages the reduced gradient over ranks, as DDP does: the engine scales each rank's
summed loss by world / global batch on both paths, so any split of the batch gives the
gradient of the global mean. One process shards nothing: the model runs as it is.

Checkpoints (`ShardedCheckpointer`): a folder `ckpt-NNNNNN/` per checkpoint, written by
torch.distributed.checkpoint (DCP) on a background thread of every rank, over a
process group of its own (its collectives never interleave with the step loop's):

    __R_0.distcp                rank R's shard of the weights and AdamW moments (tensors only)
    .metadata                   DCP's index of the shards (written by rank 0 after every shard)
    state.pt                    the small state (step, losses, RNG, splits, fingerprint, the
                                optimizer's param_groups), a weights_only torch file
    COMPLETE                    written last by rank 0, once every rank's save has finished and
                                `.metadata` exists: every file's sha256 (each rank hashes its
                                own shards and the digests are gathered, so the marker lists
                                every shard even where the ranks' disks are not shared)

A folder without COMPLETE, or whose files do not match it, is never resumed from.

On a pod (`--out` a URI) each rank publishes its own shard files as soon as they are written,
and rank 0 then publishes `.metadata`, `state.pt` and, last, COMPLETE (`publish_shards` and
`on_saved`): a published folder without COMPLETE is still being written, or was cut off, and a
replaced pod fetches only folders whose COMPLETE is there (`outputs.OutputStore`).

Reading goes through `SafeReader`: DCP's own FileSystemReader unpickles `.metadata` with
plain `pickle.load` (any `__reduce__` runs) and loads non-tensor entries with
`torch.load(weights_only=False)`. SafeReader reads `.metadata` with `MetadataUnpickler`,
which builds only DCP's metadata classes, torch.Size, dtypes, layouts and paths, and
refuses any non-tensor (bytes) entry: a checkpoint, like the single-file kind
(`checkpoint.py`), never runs code.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import pickle
import re
import shutil
import warnings
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist
from torch import nn

from tasks.core.files import atomic_write_bytes
from tasks.core.params import TrainParams
from tasks.models import plugin_of
from tasks.training.outputs import COMPLETE_MARKER
from tasks.training.writer import BackgroundWriter

MARKER = COMPLETE_MARKER
SMALL_STATE = "state.pt"
METADATA = ".metadata"
_DIR = re.compile(r"^ckpt-(\d{6})$")


class CheckpointRefused(RuntimeError):
    """A sharded checkpoint that is incomplete, fails its checksums or holds more than tensors."""


# ---------------------------------------------------------------------------------------------
# Wrapping


def shard_model(model: nn.Module, p: TrainParams, device: torch.device, distributed: bool) -> Callable:
    """fully_shard the model's units and its root (in place); returns the `no_sync` context for
    accumulation chunks that must not reduce their gradients. One process: nothing to shard."""
    if not distributed:
        return contextlib.nullcontext
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    if p.fsdp.mixed_precision == "bf16":
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    else:
        policy = MixedPrecisionPolicy()
    # The model returns a view (squeeze); the engine does no in-place op on it, which is what the warning is about.
    warnings.filterwarnings("ignore", message=r"FSDP2-wrapped module .* returned a view tensor")
    units = list(plugin_of(model).shard_units(model))
    if p.fsdp.activation_checkpointing:
        units = [_checkpointed(model, unit) for unit in units]
    for unit in units:
        fully_shard(unit, mesh=mesh, reshard_after_forward=p.fsdp.reshard_after_forward, mp_policy=policy)
    fully_shard(model, mesh=mesh, reshard_after_forward=p.fsdp.reshard_after_forward, mp_policy=policy)

    @contextlib.contextmanager
    def no_sync():
        model.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            model.set_requires_gradient_sync(True)

    return no_sync


def _checkpointed(model: nn.Module, unit: nn.Module) -> nn.Module:
    """Put `unit` inside a checkpoint_wrapper where it sits in `model` (recomputed in backward).
    The state dict helpers (get_model_state_dict) drop the wrapper's name from the keys."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    for parent in model.modules():
        for name, child in parent.named_children():
            if child is unit:
                wrapped = checkpoint_wrapper(unit)
                setattr(parent, name, wrapped)
                return wrapped
    raise ValueError(f"shard_units(model) named a module that is not inside the model: {type(unit).__name__}")


def is_sharded(model: nn.Module) -> bool:
    from torch.distributed.tensor import DTensor

    return any(isinstance(t, DTensor) for t in model.parameters())


def local(t: torch.Tensor) -> torch.Tensor:
    """This rank's part of a (possibly sharded) tensor."""
    from torch.distributed.tensor import DTensor

    return t.to_local() if isinstance(t, DTensor) else t


def square_sums(model: nn.Module, before: list[torch.Tensor], distributed: bool) -> tuple[float, float, float]:
    """(||grad||^2, ||w - before||^2, ||before||^2) over the whole model, from each rank's shards
    (`before`: each parameter's local part before the step). Every rank must call it: one allreduce."""
    params = list(model.parameters())
    grad = sum((local(q.grad).detach().float().pow(2).sum() for q in params if q.grad is not None), torch.zeros(()))
    delta = sum(((local(q).detach() - b).float().pow(2).sum() for q, b in zip(params, before)), torch.zeros(()))
    weight = sum((b.float().pow(2).sum() for b in before), torch.zeros(()))
    sums = torch.stack([grad, delta, weight]).to(torch.float64)
    if distributed:
        dist.all_reduce(sums)
    g, d, w = sums.tolist()
    return g, d, w


def full_model_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The whole model's weights as plain CPU tensors, on rank 0 (empty on the others): every rank
    must call it (each unit is all-gathered in turn). A rank-0 `model.state_dict()` under FSDP2 holds
    only that rank's DTensor shards, which a plain model cannot load."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


# ---------------------------------------------------------------------------------------------
# The safe reader


class MetadataUnpickler(pickle.Unpickler):
    """Builds DCP's metadata and nothing else: its dataclasses, torch.Size, dtypes, layouts and
    paths. Any other global (a `__reduce__` payload's os.system, builtins.exec) is refused before
    it is looked up, so no code runs."""

    _METADATA = "torch.distributed.checkpoint.metadata"
    _ALLOWED = {
        ("torch", "Size"),
        ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
        ("torch.serialization", "_get_layout"),
        ("collections", "OrderedDict"),
        ("pathlib", "PosixPath"),
        ("pathlib", "PurePosixPath"),
        ("pathlib", "WindowsPath"),
        ("pathlib", "PureWindowsPath"),
    }

    def find_class(self, module: str, name: str) -> Any:
        if module == self._METADATA:
            import torch.distributed.checkpoint.metadata as md

            obj = getattr(md, name, None)
            if isinstance(obj, type) and obj.__module__ == self._METADATA:
                return obj
        elif module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        elif (module, name) in self._ALLOWED:
            return super().find_class(module, name)
        raise CheckpointRefused(
            f"the checkpoint's {METADATA} names {module}.{name}, which is not DCP metadata: refused, nothing was run"
        )


def read_metadata_safely(data: bytes):
    """DCP's Metadata from `.metadata` bytes, refusing any other object and any non-tensor entry."""
    from torch.distributed.checkpoint.metadata import BytesStorageMetadata, Metadata

    try:
        metadata = MetadataUnpickler(io.BytesIO(data)).load()
    except CheckpointRefused:
        raise
    except Exception as exc:
        raise CheckpointRefused(f"the checkpoint's {METADATA} is unreadable ({type(exc).__name__}: {exc})") from None
    if not isinstance(metadata, Metadata):
        raise CheckpointRefused(f"the checkpoint's {METADATA} holds a {type(metadata).__name__}, not DCP Metadata")
    byte_entries = sorted(k for k, v in metadata.state_dict_metadata.items() if isinstance(v, BytesStorageMetadata))
    if byte_entries:
        raise CheckpointRefused(
            f"the checkpoint holds non-tensor entries ({', '.join(byte_entries[:3])}"
            f"{', ...' if len(byte_entries) > 3 else ''}), which DCP would unpickle: refused"
        )
    return metadata


def _safe_reader_class():
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import StorageMeta
    from torch.distributed.checkpoint.planner import LoadItemType

    class SafeReader(FileSystemReader):
        """FileSystemReader whose metadata goes through MetadataUnpickler and that reads tensors only
        (DCP loads them with torch.load(weights_only=True))."""

        def read_metadata(self, *args: Any, **kwargs: Any):
            path = self._get_metadata_path(kwargs.get("rank"))
            with self.fs.create_stream(path, "rb") as f:
                metadata = read_metadata_safely(f.read())
            if metadata.storage_meta is None:
                metadata.storage_meta = StorageMeta()
            metadata.storage_meta.load_id = self.load_id
            return metadata

        def read_data(self, plan, planner):
            if any(item.type == LoadItemType.BYTE_IO for item in plan.items):
                raise CheckpointRefused("the load plan asks for non-tensor entries: refused")
            return super().read_data(plan, planner)

    return SafeReader


def safe_reader(path: Path):
    """A DCP StorageReader for `path` that unpickles nothing it does not allow (`SafeReader`)."""
    return _safe_reader_class()(path)


# ---------------------------------------------------------------------------------------------
# Checkpoints


def _sha(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _copy(obj: Any) -> Any:
    """A detached CPU copy of a (nested) state of tensors and DTensors (training goes on changing them)."""
    from torch.distributed.tensor import DTensor

    if isinstance(obj, DTensor):
        return DTensor.from_local(
            obj.to_local().detach().to("cpu", copy=True),
            obj.device_mesh,
            obj.placements,
            shape=obj.shape,
            stride=obj.stride(),
        )
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        return {k: _copy(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_copy(v) for v in obj)
    return obj


def tensor_state(model: nn.Module, optimizer: torch.optim.Optimizer) -> tuple[dict, list]:
    """({"model": ..., "optimizer": AdamW's per-parameter state}, the optimizer's param_groups), keyed
    by parameter name (so a DDP and an FSDP2 run, at any world size, name the same entries). The
    tensors are live (shards under FSDP2); param_groups are plain values for the small state."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

    osd = get_optimizer_state_dict(model, optimizer)
    return {"model": get_model_state_dict(model), "optimizer": osd["state"]}, osd["param_groups"]


class ShardedCheckpointer(BackgroundWriter):
    """Every rank's background writer of sharded checkpoints (one write in flight at a time).
    `save` copies this rank's shards now (fast) and writes them on a thread (slow); every rank's
    `publish_shards(files)` runs once its own shard files are written, rank 0's `on_saved(folder)`
    after the COMPLETE marker. Build it on every rank at the same point:
    it creates a process group (every rank creates groups in the same order)."""

    def __init__(
        self,
        folder: Path,
        rank: int,
        distributed: bool,
        keep: int = 2,
        on_saved: Callable[[Path], None] | None = None,
        publish_shards: Callable[[list[Path]], None] | None = None,
    ):
        super().__init__("sharded-checkpoint")
        self.folder, self.rank, self.keep, self.on_saved = folder, rank, keep, on_saved
        self.publish_shards = publish_shards
        self.group = dist.new_group(backend="gloo") if distributed else None

    def save(
        self, step: int, model: nn.Module, optimizer: torch.optim.Optimizer, small: dict, wait: bool = False
    ) -> None:
        self.wait()
        tensors, groups = tensor_state(model, optimizer)
        self._submit(self._write, step, _copy(tensors), _copy({**small, "param_groups": groups}), wait=wait)

    def _write(self, step: int, tensors: dict, small: dict) -> None:
        import torch.distributed.checkpoint as dcp

        path = self.folder / f"ckpt-{step:06d}"
        if self.rank == 0:
            (path / MARKER).unlink(missing_ok=True)  # a rewrite of this step is not complete until re-marked
        path.mkdir(parents=True, exist_ok=True)
        dcp.save(tensors, storage_writer=dcp.FileSystemWriter(path), process_group=self.group)
        mine = sorted(path.glob(f"__{self.rank}_*.distcp"))  # this rank's own shard file(s)
        if self.publish_shards:
            self.publish_shards(mine)
        digests = [{shard.name: _sha(shard) for shard in mine}]
        if self.rank == 0:
            buf = io.BytesIO()
            torch.save(small, buf)
            atomic_write_bytes(path / SMALL_STATE, buf.getvalue())
        if self.group is not None:  # every rank's shards are written (and published): their digests
            gathered: list[dict[str, str] | None] = [None] * dist.get_world_size(self.group)
            dist.all_gather_object(gathered, digests[0], group=self.group)
            digests = gathered
        if self.rank != 0:
            # On a disk of its own (another node) nobody else removes this rank's old folders. One more is
            # kept than rank 0 keeps: on a shared disk rank 0 may not have marked this step complete yet.
            self._prune(self.keep + 1)
            return
        self._mark_complete(path, {name: sha for d in digests for name, sha in d.items()})
        self._prune(self.keep)
        if self.on_saved:
            self.on_saved(path)

    def _prune(self, keep: int) -> None:
        """Remove all but the newest `keep` checkpoint folders on this rank's disk."""
        for old in sorted(p for p in self.folder.iterdir() if _DIR.match(p.name))[:-keep]:
            shutil.rmtree(old, ignore_errors=True)

    @staticmethod
    def _mark_complete(path: Path, shards: dict[str, str]) -> None:
        """COMPLETE from every rank's shard digests, after checking that DCP wrote its index and
        that no shard file on this disk is missing from what the ranks reported."""
        if not (path / METADATA).exists():
            raise CheckpointRefused(f"{path.name}: DCP finished without writing {METADATA}")
        unreported = sorted({p.name for p in path.glob("*.distcp")} - set(shards))
        if unreported:
            raise CheckpointRefused(f"{path.name}: shard(s) {', '.join(unreported)} reported by no rank")
        files = {METADATA: _sha(path / METADATA), SMALL_STATE: _sha(path / SMALL_STATE), **shards}
        atomic_write_bytes(path / MARKER, json.dumps({"files": files}, sort_keys=True).encode())


def read_sharded_state(path: Path) -> dict[str, Any]:
    """A sharded checkpoint's small state, after checking it is complete (COMPLETE exists, every file
    matches its sha256, every shard is listed) and that its metadata holds DCP metadata and tensor
    entries only. Raises CheckpointRefused naming the cause."""
    marker = path / MARKER
    if not marker.exists():
        raise CheckpointRefused(f"{path.name} has no {MARKER} marker (cut off mid-write)")
    try:
        files = json.loads(marker.read_text())["files"]
    except (ValueError, KeyError, TypeError) as exc:
        raise CheckpointRefused(f"{path.name}: unreadable {MARKER} marker ({exc})") from None
    shards = {p.name for p in path.glob("*.distcp")}
    if not {METADATA, SMALL_STATE} <= set(files) or shards != {n for n in files if n.endswith(".distcp")}:
        raise CheckpointRefused(f"{path.name}: its files do not match its {MARKER} marker")
    for name, digest in files.items():
        if not (path / name).exists() or _sha(path / name) != digest:
            raise CheckpointRefused(f"{path.name}: {name} fails its checksum")
    read_metadata_safely((path / METADATA).read_bytes())
    try:
        small = torch.load(path / SMALL_STATE, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise CheckpointRefused(f"{path.name}: {SMALL_STATE} holds more than plain values ({exc})") from None
    return {**small, "sharded": True}


def load_sharded(path: Path, model: nn.Module, optimizer: torch.optim.Optimizer, param_groups: list) -> None:
    """Weights and AdamW moments from a sharded checkpoint into `model` (sharded or not, any world
    size: DCP reads the parts of each saved shard this rank's own shard covers), through SafeReader."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException
    from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_optimizer_state_dict

    target, _ = tensor_state(model, optimizer)  # initializes AdamW's state, so there are tensors to fill
    try:
        dcp.load(target, storage_reader=safe_reader(path))
    except CheckpointException as exc:  # a BaseException: made an ordinary error naming the cause
        cause = re.search(r"the (?:checkpoint|load plan)[^;\n]*refused[^;\n]*", str(exc))
        raise CheckpointRefused(f"{path.name}: not loaded: {cause.group(0) if cause else str(exc)}") from None
    set_model_state_dict(model, target["model"])
    set_optimizer_state_dict(model, optimizer, {"state": target["optimizer"], "param_groups": param_groups})


def load_full(blob: dict, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Weights and AdamW moments from a full (single-file, DDP) checkpoint into `model`, sharded or not:
    every rank holds the whole dict and keeps its own part."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    full = StateDictOptions(full_state_dict=True)
    set_model_state_dict(model, blob["model"], options=full)
    set_optimizer_state_dict(model, optimizer, blob["optimizer"], options=full)
