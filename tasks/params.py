"""params.yaml -> frozen, typed dataclasses that reject bad values by key name.

Only the standard library and PyYAML: the DAG files may import this at run time
without pulling in anything heavy.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import yaml

from tasks.settings import REPO_ROOT

DEFAULT_PARAMS_FILE = REPO_ROOT / "params.yaml"      # SLUICE_PARAMS names another file


class ParamsError(ValueError):
    """A value in params.yaml (or an override) is missing, unknown or out of range."""


def _check(cond: bool, key: str, msg: str) -> None:
    if not cond:
        raise ParamsError(f"params.yaml: {key}: {msg}")


@dataclass(frozen=True)
class DemoParams:
    batch_size: int = 500
    dev_fraction: float = 0.10
    test_fraction: float = 0.20
    seed: int = 7

    def __post_init__(self) -> None:
        _check(self.batch_size >= 10, "demo.batch_size", f"must be >= 10, got {self.batch_size}")
        _check(0 < self.dev_fraction < 0.5, "demo.dev_fraction", f"must be in (0, 0.5), got {self.dev_fraction}")
        _check(0 < self.test_fraction < 0.5, "demo.test_fraction", f"must be in (0, 0.5), got {self.test_fraction}")
        _check(self.dev_fraction + self.test_fraction < 0.8, "demo",
               "dev_fraction + test_fraction must leave at least 20% for the nightly batches")


@dataclass(frozen=True)
class DatasetParams:
    module: str = "tasks.datasets.emails"     # the dataset plug-in (tasks/datasets/__init__.py)

    def __post_init__(self) -> None:
        _check(bool(re.match(r"^[A-Za-z_][\w.]*$", self.module)), "dataset.module",
               f"must be a Python module path, got {self.module!r}")


@dataclass(frozen=True)
class WeakLabelParams:
    label_model_epochs: int = 500
    label_model_lr: float = 0.01
    seed: int = 7
    lf_module: str = ""          # empty: the dataset's own LF module; else a module exposing make_lfs
    # Drift flags: absolute change from the previous data version's labeling that is reported.
    drift_max_coverage_change: float = 0.15
    drift_max_conflict_change: float = 0.10
    drift_max_balance_change: float = 0.10

    def __post_init__(self) -> None:
        _check(self.label_model_epochs >= 1, "weak_label.label_model_epochs", "must be >= 1")
        _check(0 < self.label_model_lr < 1, "weak_label.label_model_lr", "must be in (0, 1)")
        _check(self.lf_module == "" or bool(re.match(r"^[A-Za-z_][\w.]*$", self.lf_module)),
               "weak_label.lf_module", f"must be empty or a Python module path, got {self.lf_module!r}")
        for name in ("drift_max_coverage_change", "drift_max_conflict_change", "drift_max_balance_change"):
            _check(0 < getattr(self, name) <= 1, f"weak_label.{name}", "must be in (0, 1]")


@dataclass(frozen=True)
class TrainParams:
    epochs: int = 40
    batch_size: int = 64         # the global batch: one optimizer step, whatever the processes and splits
    micro_batch_size: int = 0    # gradient accumulation chunk on each rank (0: the rank's whole slice)
    lr: float = 0.003
    weight_decay: float = 0.0001
    hidden: tuple[int, ...] = (32, 16)
    nproc: int = 2
    checkpoint_every: int = 50   # steps between checkpoints (also written on SIGTERM)
    balance_every: int = 0       # steps between re-splits of the global batch by rank throughput (0: off)
    log_every: int = 10          # steps between metrics lines
    seed: int = 7
    allreduce: str = "flat"      # "hierarchical": reduce in each node, allreduce among node leaders, broadcast
    warm_start: bool = True      # start from the prod model's weights when the architecture matches
    device: str = "auto"         # auto: a GPU when torch sees one (NCCL), else the CPU (gloo); or cpu, cuda
    precision: str = "auto"      # auto: bf16 autocast on GPU, fp32 on CPU; or fp32, bf16
    stream_cache_mb: float = 256.0  # featurized partitions kept in memory; larger data versions stream

    def __post_init__(self) -> None:
        _check(self.device in ("auto", "cpu", "cuda"), "train.device",
               f"must be 'auto', 'cpu' or 'cuda', got {self.device!r}")
        _check(self.precision in ("auto", "fp32", "bf16"), "train.precision",
               f"must be 'auto', 'fp32' or 'bf16', got {self.precision!r}")
        _check(self.stream_cache_mb > 0, "train.stream_cache_mb", "must be > 0 (megabytes)")
        _check(self.allreduce in ("flat", "hierarchical"), "train.allreduce",
               f"must be 'flat' or 'hierarchical', got {self.allreduce!r}")
        _check(1 <= self.epochs <= 1000, "train.epochs", f"must be in [1, 1000], got {self.epochs}")
        _check(self.nproc >= 1, "train.nproc", f"must be >= 1, got {self.nproc}")
        _check(self.batch_size >= self.nproc, "train.batch_size",
               f"must be at least train.nproc={self.nproc}, got {self.batch_size}")
        _check(0 < self.lr < 1, "train.lr", f"must be in (0, 1), got {self.lr}")
        _check(self.weight_decay >= 0, "train.weight_decay", "must be >= 0")
        _check(len(self.hidden) >= 1 and all(h >= 1 for h in self.hidden), "train.hidden",
               f"must be a non-empty list of positive layer widths, got {list(self.hidden)}")
        _check(self.checkpoint_every >= 1, "train.checkpoint_every", "must be >= 1")
        _check(self.micro_batch_size >= 0, "train.micro_batch_size", "must be >= 0 (0: no accumulation)")
        _check(self.balance_every >= 0, "train.balance_every", "must be >= 0 (0: off)")
        _check(self.log_every >= 1, "train.log_every", "must be >= 1")


@dataclass(frozen=True)
class EvaluateParams:
    min_roc_auc: float = 0.70
    max_regression: float = 0.02

    def __post_init__(self) -> None:
        _check(0 <= self.min_roc_auc <= 1, "evaluate.min_roc_auc", "must be in [0, 1]")
        _check(0 <= self.max_regression <= 1, "evaluate.max_regression", "must be in [0, 1]")


@dataclass(frozen=True)
class CompressParams:
    max_roc_auc_drop: float = 0.02
    parity_atol: float = 1e-4

    def __post_init__(self) -> None:
        _check(0 <= self.max_roc_auc_drop <= 1, "compress.max_roc_auc_drop", "must be in [0, 1]")
        _check(self.parity_atol > 0, "compress.parity_atol", "must be > 0")


@dataclass(frozen=True)
class ExperimentParams:
    """What the DVC stages in dvc.yaml (dvc repro / dvc exp run) train on."""
    data_version: str = "data-v1"

    def __post_init__(self) -> None:
        _check(bool(re.match(r"^data-v[1-9][0-9]*$", self.data_version)), "experiment.data_version",
               f"must be a data version like data-v3, got {self.data_version!r}")


@dataclass(frozen=True)
class ScalingParams:
    """Stages of scaling for the Kubernetes backend: nodes x GPUs per node, by name."""
    profile: str = "smoke"
    profiles: dict = dataclasses.field(default_factory=lambda: {"smoke": {"nodes": 1, "gpus_per_node": 2}})
    bench_hidden: tuple[int, ...] = (2048, 2048, 2048, 512)   # the benchmark model (~9.6M parameters)

    def __post_init__(self) -> None:
        _check(isinstance(self.profiles, dict) and bool(self.profiles), "scaling.profiles",
               "must map profile names to {nodes, gpus_per_node}")
        for name, prof in self.profiles.items():
            _check(isinstance(prof, dict) and set(prof) == {"nodes", "gpus_per_node"}, f"scaling.profiles.{name}",
                   f"must be {{nodes, gpus_per_node}}, got {prof!r}")
            _check(all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in prof.values()),
                   f"scaling.profiles.{name}", f"nodes and gpus_per_node must be positive integers, got {prof!r}")
        _check(len(self.bench_hidden) >= 1 and all(h >= 1 for h in self.bench_hidden), "scaling.bench_hidden",
               f"must be a non-empty list of positive layer widths, got {list(self.bench_hidden)}")
        _check(self.profile in self.profiles, "scaling.profile",
               f"{self.profile!r} is not one of {sorted(self.profiles)}")

    @property
    def selected(self) -> dict:
        return self.profiles[self.profile]


@dataclass(frozen=True)
class Params:
    dataset: DatasetParams
    demo: DemoParams
    weak_label: WeakLabelParams
    train: TrainParams
    evaluate: EvaluateParams
    compress: CompressParams
    experiment: ExperimentParams
    scaling: ScalingParams

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def digest(self) -> str:
        """Stable hash of every hyperparameter: recorded in model lineage."""
        blob = json.dumps(self.to_dict(), sort_keys=True, default=list).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


_SECTIONS = {f.name: f.type for f in fields(Params)}
_CLASSES = {
    "dataset": DatasetParams, "demo": DemoParams, "weak_label": WeakLabelParams, "train": TrainParams,
    "evaluate": EvaluateParams, "compress": CompressParams, "experiment": ExperimentParams,
    "scaling": ScalingParams,
}


def _build(section: str, raw: Any) -> Any:
    cls = _CLASSES[section]
    if raw is None:
        raw = {}
    _check(isinstance(raw, dict), section, f"must be a mapping, got {type(raw).__name__}")
    known = {f.name: f for f in fields(cls)}
    unknown = sorted(set(raw) - set(known))
    _check(not unknown, section, f"unknown key(s) {unknown}; known: {sorted(known)}")
    kwargs = {}
    for name, value in raw.items():
        default = known[name].default
        key = f"{section}.{name}"
        if isinstance(default, tuple):
            _check(isinstance(value, (list, tuple)), key, f"must be a list, got {value!r}")
            value = tuple(value)
            _check(all(isinstance(v, int) and not isinstance(v, bool) for v in value), key,
                   f"must hold integers, got {list(value)}")
        elif isinstance(default, bool):
            _check(isinstance(value, bool), key, f"must be true/false, got {value!r}")
        elif isinstance(default, int):
            _check(isinstance(value, int) and not isinstance(value, bool), key, f"must be an integer, got {value!r}")
        elif isinstance(default, str):
            _check(isinstance(value, str), key, f"must be a string, got {value!r}")
        elif isinstance(default, float):
            _check(isinstance(value, (int, float)) and not isinstance(value, bool), key,
                   f"must be a number, got {value!r}")
            value = float(value)
        kwargs[name] = value
    return cls(**kwargs)


def load_params(path: Path | str | None = None, overrides: dict[str, dict[str, Any]] | None = None) -> Params:
    """Read params.yaml, apply per-section overrides (e.g. from DAG run Params), validate."""
    path = Path(path or os.environ.get("SLUICE_PARAMS") or DEFAULT_PARAMS_FILE)
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except FileNotFoundError:
        raise ParamsError(f"params file not found: {path}") from None
    _check(isinstance(raw, dict), str(path), "top level must be a mapping")
    unknown = sorted(set(raw) - set(_SECTIONS))
    _check(not unknown, str(path), f"unknown section(s) {unknown}; known: {sorted(_SECTIONS)}")
    for section, values in (overrides or {}).items():
        _check(section in _SECTIONS, "override", f"unknown section {section!r}")
        raw[section] = {**(raw.get(section) or {}), **{k: v for k, v in values.items() if v is not None}}
    return Params(**{s: _build(s, raw.get(s)) for s in _SECTIONS})
