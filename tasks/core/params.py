"""params.yaml -> frozen, typed pydantic models that reject bad values by key name.

Light (PyYAML and pydantic): the DAG files may import this at run time. Each section
is a model with a docstring per field; unknown keys are refused, and every error
names the file and the key (`params.yaml: train.epochs: ...`).

params.yaml is the one home of every value (it is what DVC tracks and what a person edits): no
field has a default in code, so a key missing from the file is an error
(`params.yaml: missing key canary.max_psi`), never a silent fallback. Tests and benchmarks start
from the file too (`repo_params()`, the tests' `params` fixture). The dataset plug-in's own
parameters live in `dataset.params`, validated by the plug-in's `Params` model.
"""

from __future__ import annotations

import hashlib
import json
import re
import typing
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from tasks.core.compression_config import CompressionSearchConfig
from tasks.core.settings import REPO_ROOT, Settings
from tasks.core.tuning_config import TuningParams
from tasks.core.versions import DATA_VERSION_PATTERN

DEFAULT_PARAMS_FILE = REPO_ROOT / "params.yaml"  # SLUICE_PARAMS names another file

ModulePath = Annotated[str, Field(pattern=r"^[A-Za-z_][\w.]*$")]
Fraction = Annotated[float, Field(gt=0, lt=1, allow_inf_nan=False)]
Unit = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
Widths = Annotated[tuple[Annotated[StrictInt, Field(ge=1)], ...], Field(min_length=1)]


class ParamsError(ValueError):
    """A value in params.yaml (or an override) is missing, unknown or out of range."""


class Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    def replace(self, **changes: Any) -> Any:
        """A copy with `changes`, validated like the file (model_copy would not validate)."""
        return type(self).model_validate({**self.model_dump(), **changes})


class DatasetParams(Section):
    module: ModulePath
    """The dataset plug-in (its protocol: tasks/core/plugins.py)."""
    params: dict[str, Any]
    """The plug-in's own parameters ({}: none). A plug-in that takes some declares a pydantic model
    `Params` in its module; when this is not empty, reading params.yaml imports the plug-in and
    validates them with it (tasks.datasets.dataset_params gives the validated model, and checks an
    empty one too). A plug-in without `Params` takes none."""

    @field_validator("params")
    @classmethod
    def _plugin_params(cls, v: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        module = info.data.get("module")
        if v and module is not None:  # a bad dataset.module is reported by itself
            validate_plugin_params(module, v)
        return v


def validate_plugin_params(module: str, values: dict[str, Any], at: str = "dataset.params") -> BaseModel | None:
    """`values` validated by the `Params` model the plug-in `module` declares (None when it declares
    none and `values` is empty). Raises ValueError naming each bad key as <at>.<key> (`at`: where the
    values live in params.yaml, dataset.params or train.model.params). The module is imported by name:
    core depends on neither tasks/datasets nor tasks/models."""
    import importlib

    from tasks.core.moved import current

    try:
        mod = importlib.import_module(current(module))
    except ImportError as exc:
        raise ValueError(f"cannot import the plug-in {module} to validate its params: {exc}") from None
    model = getattr(mod, "Params", None)
    if model is None:
        if values:
            raise ValueError(f"{module} declares no Params, so it takes none; got {sorted(values)}")
        return None
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise ValueError(f"{module}.Params must be a pydantic model, got {model!r}")
    try:
        return model.model_validate(values)
    except ValidationError as exc:
        raise ValueError(
            "; ".join(
                ".".join([at, *map(str, e["loc"])])
                + ": "
                + ("missing key" if e["type"] == "missing" else f"{e['msg']} (got {e['input']!r})")
                for e in exc.errors()
            )
        ) from None


class DemoParams(Section):
    batch_size: StrictInt = Field(ge=10)
    """Rows per nightly landing batch replayed from the demo dataset."""
    dev_fraction: float = Field(gt=0, lt=0.5)
    """Gold-labeled dev set (LF and label-model quality), never trained on."""
    test_fraction: float = Field(gt=0, lt=0.5)
    """Gold-labeled test set (model gates), never trained on."""
    seed: StrictInt
    traffic_rows: StrictInt = Field(ge=1)
    """Demo only (tasks/canary/demo_traffic.py): rows of the next nights' batches served through
    /v1/predict per run of the demo traffic feed."""
    feedback_rate: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
    """Demo only: share of those served rows whose true label arrives as delayed feedback."""
    feedback_delay_s: Annotated[float, Field(ge=0, le=3600, allow_inf_nan=False)]
    """Demo only: seconds between a served row's answer and its feedback."""
    traffic_rate: Annotated[float, Field(gt=0, allow_inf_nan=False)]
    """Demo only: requests per second of the demo traffic feed."""

    @field_validator("test_fraction")
    @classmethod
    def _leaves_batches(cls, v: float, info: ValidationInfo) -> float:
        if info.data.get("dev_fraction", 0) + v >= 0.8:
            raise ValueError("dev_fraction + test_fraction must leave at least 20% for the nightly batches")
        return v


class EmbeddingLFParams(Section):
    """The embedding LF (tasks/labeling/embedding_lf.py): a logistic regression on the gold dev rows'
    sentence embeddings from train.pretrained's frozen encoder, kept only where it measures a gain."""

    enabled: StrictBool
    """Build it every run (loads train.pretrained's checkpoint; the model plug-in must have a frozen trunk)."""
    vote_at: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)]
    """Vote the most probable class when its probability reaches this; abstain below."""
    folds: StrictInt = Field(ge=2, le=20)
    """Stratified folds of the gold dev rows for its out-of-fold votes there."""
    min_per_class: StrictInt = Field(ge=2)
    """Fewer gold dev rows of some class than this (or than `folds`): the LF is not built."""
    c: Annotated[float, Field(gt=0, allow_inf_nan=False)]
    """The logistic regression's inverse regularization strength (sklearn's C)."""
    min_gain: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
    """Kept when the label model's dev ROC AUC with it exceeds the one without it by more than this."""


class WeakLabelParams(Section):
    label_model_epochs: StrictInt = Field(ge=1)
    label_model_lr: Fraction
    seed: StrictInt
    lf_module: Annotated[str, Field(pattern=r"^([A-Za-z_][\w.]*)?$")]
    """Empty: the dataset's own LF module; else a module exposing make_lfs."""
    drift_max_coverage_change: Annotated[float, Field(gt=0, le=1)]
    """Drift flags: the absolute change from the previous data version's labeling that is reported."""
    drift_max_conflict_change: Annotated[float, Field(gt=0, le=1)]
    drift_max_balance_change: Annotated[float, Field(gt=0, le=1)]
    gold_budget: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
    """Fraction of each batch's rows that carry a gold label the end model trains on (the demo replays
    them from the dataset's true labels, drawn by a seeded hash of the row id; never a test row)."""
    mix: Literal["weak_plus_gold", "weak_only", "gold_only"]
    """What the end model trains on: weak labels plus the gold that exists (gold wins), or one alone."""
    weak_weight: Literal["auto"] | Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
    """Weak rows' weight in the noise-aware loss (their target is the label model's probabilities);
    auto: chosen on gold dev folds (tasks/labeling/weak_weight.py), 0 when weak labels do not help."""
    weak_weight_se: Annotated[float, Field(ge=0, le=10, allow_inf_nan=False)]
    """auto: weights within this many standard errors of the best out-of-fold ROC AUC count as best."""
    weak_weight_repeats: StrictInt = Field(ge=1, le=50)
    """auto: the cross-validation repeated this often with reshuffled folds, the scores averaged."""
    weak_weight_bootstrap: StrictInt = Field(ge=20, le=10_000)
    """auto: bootstrap resamples of the judging rows for those standard errors."""
    trust_label_model_auc: Unit
    """auto: among the near-best weights, the largest when the label model's dev ROC AUC reaches this,
    else the smallest (tasks/labeling/weak_weight.py `one_se_choice`)."""
    class_balance_prior: StrictBool
    """The label model's class balance from the gold dev labels (false: Snorkel's uniform prior)."""
    feedback_gold: StrictBool
    """Use the gold labels from /v1/feedback (tasks/labeling/feedback.py): extra gold rows in the mix and a
    growing gold dev set. False: they are still versioned (gold-vN), but the nightly ignores them."""
    feedback_dev_fraction: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
    """Share of the feedback gold rows (a seeded hash of the row id) that joins the gold dev set; the
    rest trains. A row never does both."""
    feedback_settle_s: Annotated[float, Field(ge=0, le=86_400, allow_inf_nan=False)]
    """Feedback younger than this waits for the next run (its prediction's chunk may not be flushed yet)."""
    embedding_lf: EmbeddingLFParams
    """The LF on the pretrained encoder's sentence embeddings (off by default: it loads the checkpoint)."""


class AcquisitionWeights(Section):
    """The labeling queue's acquisition score: the weighted mean of the signals present (>= 0 each)."""

    conflict: Annotated[float, Field(ge=0, le=100, allow_inf_nan=False)]
    """LF conflict: the share of a row's votes in the minority class, doubled."""
    entropy: Annotated[float, Field(ge=0, le=100, allow_inf_nan=False)]
    """The label model's binary entropy (bits) of P(positive); a row no LF votes on counts as 1."""
    uncertainty: Annotated[float, Field(ge=0, le=100, allow_inf_nan=False)]
    """The prod model's 1 - |2 s - 1| (left out of the mean while no prod model exists)."""


class QueueParams(Section):
    """The labeling queue a person works through (tasks/labeling/acquisition.py, tasks/labeling/queue.py)."""

    k: StrictInt = Field(ge=0, le=100_000)
    """Rows of each nightly batch put into the queue (0: none)."""
    random_share: Unit
    """Share of the K drawn uniformly at random from the rest of the batch (importance weight 1 / pi),
    so estimates from the queue's gold stay unbiased."""
    diversity: Unit
    """Greedy diversity: each pick maximises (1 - d) * score + d * its distance to the rows picked."""
    weights: AcquisitionWeights
    seed: StrictInt
    """Seeds the random share's draw (with the run id: each night draws anew, a re-run the same)."""
    model_scores: StrictBool
    """Score the batch with the prod model's served ONNX for the uncertainty signal (when there is one)."""


Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


class PretrainedWeights(Section):
    """Where a model starts: weights in a local safetensors file (tasks/models/pretrained.py), pinned
    by their sha256 like a model revision, and for a token plug-in the tokenizer those weights read with
    (its embedding rows mean its ids)."""

    path: str = Field(min_length=1)
    """The safetensors file (relative: to the repository root), readable by every training process."""
    sha256: Sha256
    """The file's sha256: another file is refused (the error gives the sha256 it found)."""
    tokenizer: str | None
    """A token plug-in's tokenizer.json (relative: to the repository root); null for a dense plug-in."""
    tokenizer_sha256: Sha256 | None
    """The tokenizer file's sha256 (given with `tokenizer`)."""

    @model_validator(mode="after")
    def _tokenizer_pinned(self) -> "PretrainedWeights":
        if (self.tokenizer is None) != (self.tokenizer_sha256 is None):
            raise ValueError("pretrained: tokenizer and tokenizer_sha256 go together")
        return self


class ModelParams(Section):
    module: ModulePath
    """The model plug-in (its protocol: tasks/core/plugins.py; tasks.plugins.mlp is the default)."""
    params: dict[str, Any]
    """The plug-in's own parameters, validated by the `Params` model its module declares (for the
    MLP: `hidden`, the hidden layers' widths)."""

    @field_validator("params")
    @classmethod
    def _plugin_params(cls, v: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        module = info.data.get("module")
        if module is not None:  # a bad train.model.module is reported by itself
            validated = validate_plugin_params(module, v, at="train.model.params")
            if validated is not None:
                return validated.model_dump(mode="json")
        return v


class FsdpParams(Section):
    """FSDP2's knobs (train.strategy fsdp2; tasks/training/sharded.py)."""

    reshard_after_forward: StrictBool
    """Free each unit's gathered weights after its forward and gather them again for its backward
    (less memory, one more all-gather per unit); false keeps them gathered until the backward."""
    mixed_precision: Literal["fp32", "bf16"]
    """bf16: parameters cast to bf16 for compute, gradients reduced in fp32 (MixedPrecisionPolicy),
    meant for GPUs. On this CPU bf16 was 1.7x faster a step but changed the losses by several percent
    within 5 steps, so params.yaml keeps fp32 (the same numbers as DDP; docs/training.md)."""
    activation_checkpointing: StrictBool
    """Recompute each unit's activations in the backward instead of keeping them (checkpoint_wrapper)."""


class TrainParams(Section):
    epochs: StrictInt = Field(ge=1, le=1000)
    nproc: StrictInt = Field(ge=1, le=256)
    """torchrun processes per node on the local backend."""
    batch_size: StrictInt = Field(ge=1)
    """The global batch: one optimizer step, whatever the processes and splits."""
    micro_batch_size: StrictInt = Field(ge=0)
    """Gradient accumulation chunk on each rank (0: the rank's whole slice)."""
    lr: Fraction
    weight_decay: float = Field(ge=0)
    model: ModelParams
    """The model trained: its plug-in and the plug-in's own parameters."""
    pretrained: PretrainedWeights | None
    """The weights `model` starts from (docs/models.md); null: the plug-in's seeded initialization."""
    checkpoint_every: StrictInt = Field(ge=1)
    """Steps between checkpoints (also written on SIGTERM)."""
    balance_every: StrictInt = Field(ge=0)
    """Steps between re-splits of the global batch by rank throughput (0: off)."""
    log_every: StrictInt = Field(ge=1)
    seed: StrictInt
    allreduce: Literal["flat", "hierarchical"]
    """hierarchical: reduce in each node, allreduce among node leaders, broadcast."""
    strategy: Literal["ddp", "fsdp2"]
    """ddp: every rank holds all weights, gradients and AdamW moments; fsdp2: each rank holds a shard
    of them (fully_shard on the units the model names, then the root), checkpoints sharded (DCP)."""
    fsdp: FsdpParams
    warm_start: StrictBool
    """Start from the prod model's weights when the architecture matches."""
    device: Literal["auto", "cpu", "cuda"]
    precision: Literal["auto", "fp32", "bf16"]
    stream_cache_mb: float = Field(gt=0)
    """Megabytes of featurized partitions kept in memory; larger data versions stream."""
    params_overlay: Annotated[str, Field(pattern=r"^(none|latest|tuned-v[1-9][0-9]{0,8})$")]
    """A tuned overlay from the registry (tasks/registry/tuning.py) over these values: none, latest
    (the newest, resolved when the train step starts) or tuned-vN; the model's lineage names it."""

    def replace(self, **changes: Any) -> "TrainParams":
        """A copy with `changes`; a name that is the model plug-in's parameter (a tuning value such as the
        MLP's `hidden`) changes `model.params`."""
        own = {k: v for k, v in changes.items() if k in type(self).model_fields}
        theirs = {k: v for k, v in changes.items() if k not in own}
        if theirs:
            model = own.get("model", self.model)
            model = model if isinstance(model, dict) else model.model_dump(mode="json")
            own["model"] = {**model, "params": {**model["params"], **theirs}}
        return super().replace(**own)

    def value(self, name: str) -> Any:
        """A train field's value, or the model plug-in's parameter `name` (tuning's names)."""
        if name in type(self).model_fields:
            return self.model_dump(mode="json")[name]
        if name in self.model.params:
            return self.model.params[name]
        raise KeyError(f"{name!r} is neither a train field nor a parameter of {self.model.module}")

    @field_validator("batch_size")
    @classmethod
    def _one_row_per_process(cls, v: int, info: ValidationInfo) -> int:
        if v < info.data.get("nproc", 1):
            raise ValueError(f"must be at least train.nproc={info.data['nproc']}, got {v}")
        return v

    @model_validator(mode="after")
    def _ddp_only_features(self) -> TrainParams:
        if self.strategy == "fsdp2" and self.allreduce == "hierarchical":
            raise ValueError(
                "train.allreduce hierarchical is a DDP comm hook: with train.strategy fsdp2 use flat "
                "(the sharded counterpart, HSDP on a 2-D device mesh, is not built; docs/training.md)"
            )
        if self.strategy == "fsdp2" and self.balance_every:
            raise ValueError(
                "train.balance_every needs train.strategy ddp: under fsdp2 every unit's all-gather waits "
                "for the slowest rank, so per-rank compute time cannot be measured (set balance_every: 0)"
            )
        return self


class EvaluateParams(Section):
    min_roc_auc: Unit
    """Absolute floor on the gold test set."""
    max_regression: Unit
    """The challenger may trail the prod champion's ROC AUC by at most this."""


class HeldParams(Section):
    """Batches a rejected model left out of the data (tasks/registry/held.py): held, then re-entered."""

    quarantine_after_rejections: StrictInt = Field(ge=1, le=100)
    """A held batch whose model is rejected this many times in a row is quarantined with every reason
    (1: at the first rejection, no re-entry)."""


class CompressParams(Section, CompressionSearchConfig):
    """The compress step's search (tasks/compression, CompressionSearchConfig): the chains tried on
    the trained model, how one is chosen (quality floor overall and per slice on the gold dev set,
    latency budget, smallest on the size/latency Pareto front) and the gate (fp32 parity with torch).
    The nightly demo's candidates are params.yaml's; the full list (every technique alone and
    chained) is tasks.core.compression_config.DEFAULT_CANDIDATES, which bench/compression.py runs."""

    tune_rows: StrictInt = Field(ge=16, le=1_000_000)
    """Training rows (a seeded sample of the data version's labeled rows) for recovery fine-tunes,
    distillation and static int8 calibration."""


class ServingParams(Section):
    """The model server (tasks/serving): where it listens and how it follows the registry."""

    host: str
    """Bind address (params.yaml: loopback)."""
    port: StrictInt = Field(ge=0, le=65535)
    """0: a free port chosen at start (written to SLUICE_HOME/serving/address.json)."""
    poll_s: float = Field(gt=0, le=60)
    """Seconds between reads of the registry's serving state."""
    max_rows: StrictInt = Field(ge=1)
    """Rows per request at most."""
    max_body_bytes: StrictInt = Field(ge=1024)
    replicas: StrictInt = Field(ge=1, le=16)
    """Model-server replicas `make up` starts; more than 1: behind HAProxy (tasks/serving/balancer.py)."""
    drain_s: float = Field(ge=0, le=60)
    """On SIGTERM a replica answers 503 on /v2/health/ready this long (the balancer takes it out), then
    stops accepting and finishes the requests in flight."""
    check_interval_ms: StrictInt = Field(ge=50, le=10_000)
    """HAProxy's health check interval per replica (down after 2 failed checks, up after 1 good one)."""
    restart_alert_count: StrictInt = Field(ge=1)
    """Replica restarts within `restart_window_s` that raise the critical `replica_restarts` alert."""
    restart_window_s: float = Field(gt=0)
    """The window of `restart_alert_count` (seconds)."""
    log_flush_s: float = Field(gt=0, le=60)
    """Seconds between a replica's writes of its prediction-log chunk to the object store."""
    log_flush_rows: StrictInt = Field(ge=1)
    """Records after which a replica writes its chunk before log_flush_s (bounds what a crash loses)."""
    log_retention_h: float = Field(gt=0)
    """Hours the shared prediction log keeps a chunk; request ids for /v1/feedback expire after as long."""


class CanaryParams(Section):
    """The nightly canary: challenger weights per step and the thresholds that judge it."""

    steps: tuple[Annotated[StrictInt, Field(ge=1, le=100)], ...] = Field(min_length=1)
    """Challenger traffic percent at each analysis step; the last must be 100."""
    requests_per_step: StrictInt = Field(ge=10)
    """Replayed requests per step on the embedded default."""
    replay_rate: float = Field(gt=0)
    """Requests per second of the replay client."""
    min_samples: StrictInt = Field(ge=1)
    """Requests per variant below which a step cannot judge (fails closed)."""
    min_labeled: StrictInt = Field(ge=1)
    """Labeled predictions per variant before online ROC AUC is judged (fewer: noted, not judged)."""
    error_rate_margin: Unit
    """The challenger fails on errors only when its error rate is significantly above the champion's
    (one-sided two-proportion test at `confidence`) and above it by more than this."""
    p99_budget_ms: float = Field(gt=0)
    """The one serving latency budget: the canary's latency rule and the p99_latency alert use it."""
    latency_margin_ms: float = Field(ge=0)
    """A challenger fails on latency only when its p99 is significantly (a one-sided bootstrap bound)
    this many ms above the champion's, `latency_margin_ratio` above it, and over the budget."""
    latency_margin_ratio: float = Field(ge=0)
    failures_before_rollback: StrictInt = Field(ge=1, le=10)
    """A failing step is measured again (fresh traffic, each attempt in the evidence, judged on all the
    canary's traffic so far) until it fails this many times in a row (Flagger's `threshold`); one
    passing attempt passes the step."""
    max_psi: float = Field(gt=0)
    """Population stability index of the challenger's scores against the champion's."""
    max_auc_drop: Unit
    """Online ROC AUC (from feedback labels): the CI's lower bound of challenger - champion must exceed -this."""
    confidence: float = Field(gt=0.5, lt=1)
    bootstrap: StrictInt = Field(ge=100)
    seed: StrictInt

    @field_validator("steps")
    @classmethod
    def _ends_at_full(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        if list(v) != sorted(set(v)) or v[-1] != 100:
            raise ValueError(f"must rise strictly and end at 100, got {list(v)}")
        return v


class ExperimentParams(Section):
    """What the DVC stages in dvc.yaml (dvc repro / dvc exp run) train on."""

    data_version: Annotated[str, Field(pattern=DATA_VERSION_PATTERN)]


CpuQuantity = Annotated[str, Field(pattern=r"^\d+(\.\d+)?m?$")]
"""A Kubernetes CPU quantity: "8", "500m"."""
MemQuantity = Annotated[str, Field(pattern=r"^\d+(\.\d+)?(Ki|Mi|Gi|Ti|K|M|G|T)?$")]
"""A Kubernetes memory or storage quantity: "32Gi", "512Mi"."""


class ScalingProfile(Section):
    """One stage: its shape, and what each node's training pod asks for (requests = limits)."""

    nodes: StrictInt = Field(ge=1)
    gpus_per_node: StrictInt = Field(ge=1)
    cpu: CpuQuantity
    memory: MemQuantity
    shm_size: MemQuantity
    """/dev/shm, a memory-backed emptyDir (the data loader's workers and NCCL use it)."""
    ephemeral_storage: MemQuantity
    """The pod's disk: outputs, checkpoints, /tmp, the data cache."""
    tmp_size: MemQuantity


class ScalingParams(Section):
    """Stages of scaling for the Kubernetes backend: nodes x GPUs per node, by name."""

    profiles: dict[str, ScalingProfile] = Field(min_length=1)
    profile: str
    bench_hidden: Widths
    """The benchmark model (~9.6M parameters)."""
    bench_text_models: dict[str, ModelParams]
    """The text benchmarks' models by role (`bow`, `transformer`: bench/text_models.py), each a model
    plug-in and its params as in `train.model`."""
    sharded_hidden: Widths
    """The MLP that needs sharding (train.strategy fsdp2; ~36M parameters with the demo features)."""
    sharded_sequence_model: ModelParams
    """The sequence model that needs sharding (train.strategy fsdp2; ~23M parameters, 16-token texts),
    a model plug-in and its params as in `train.model`."""

    @field_validator("profile")
    @classmethod
    def _known_profile(cls, v: str, info: ValidationInfo) -> str:
        profiles = info.data.get("profiles")
        if profiles is not None and v not in profiles:
            raise ValueError(f"{v!r} is not one of {sorted(profiles)}")
        return v

    @property
    def selected(self) -> ScalingProfile:
        return self.profiles[self.profile]


class CostParams(Section):
    """Prices of the cost ledger (tasks/monitoring/cost.py), in `currency`. params.yaml holds list
    prices of a public cloud in 2026 (on-demand, one region), rounded; set your own."""

    currency: str
    gpu_hour: float = Field(ge=0)
    """One accelerator for one hour (an on-demand data-center GPU)."""
    cpu_hour: float = Field(ge=0)
    """One vCPU for one hour."""
    memory_gb_hour: float = Field(ge=0)
    """One GB of memory for one hour."""
    storage_gb_month: float = Field(ge=0)
    """One GB stored for one month (object storage), prorated per day (30-day month)."""
    manual_label: float = Field(ge=0)
    """One label made by hand (what a weak label avoids)."""
    engineer_hour: float = Field(ge=0)
    """One hour of an engineer (incidents: quarantines, rejected models, canary rollbacks, manual rollbacks)."""
    engineer_hours_per_incident: float = Field(ge=0)
    """Engineer time one incident costs (someone reads the report and decides)."""


class NotifierSpec(Section):
    """An Airflow notifier to deliver alerts through: its class path and keyword arguments."""

    class_path: Annotated[str, Field(pattern=r"^[A-Za-z_][\w.]*\.[A-Za-z_]\w*$")]
    """e.g. airflow.providers.smtp.notifications.smtp.SmtpNotifier"""
    kwargs: dict[str, Any] = Field(default_factory=dict)
    """Passed to the class (no secrets here: notifiers take an Airflow connection id). An entry of a
    list params.yaml leaves empty, so its one default (none) is here."""


class AlertParams(Section):
    """Alert rules evaluated on the metrics store (tasks/monitoring/alerts.py); 0 turns a rule off."""

    loss_spike_ratio: float = Field(ge=0)
    """A logged loss above this x the median of the lines before it."""
    grad_variance_ratio: float = Field(ge=0)
    """Gradient variance across ranks above this x its median over the run (an explosion)."""
    sustain_lines: int = Field(ge=1, le=100)
    """Consecutive metrics lines the two training rules must hold for (one minibatch's reading is noisy)."""
    util_floor: Unit
    """Accelerator utilization under this is idle: an alert when a task's mean is under it, and waste in the ledger."""
    online_auc_drop: Unit
    """Online ROC AUC of the served model this far under the previous run's."""
    cost_jump_ratio: float = Field(ge=0)
    """A day's cost above this x the previous day's."""
    min_cost_for_jump: float = Field(ge=0)
    """Days cheaper than this are not compared (noise)."""


class DriftParams(Section):
    """Serving drift and skew (the monitor_serving DAG, tasks/monitoring/serving_drift.py)."""

    schedule: str = Field(min_length=9)
    """Cron (UTC) of the monitor_serving DAG, read when the DAG file is parsed."""
    window_h: float = Field(gt=0, le=168)
    """Each run judges the predictions served in the last window_h hours."""
    tails: tuple[Unit, ...] = Field(min_length=1)
    """...and the latest parts of it, as fractions of window_h (1.0: the whole window): a shift that began
    late in the window fills its last quarter while it is still a small share of the whole."""
    family_alpha: Unit
    """The chance of any false alert over a horizon of unshifted traffic (Bonferroni over its tests)."""
    horizon_runs: int = Field(ge=1)
    """Runs in a horizon (168: a week of hourly runs); each test's p-value must be under
    family_alpha / (tests per run x horizon_runs), a run's tests being (features + 2 classes) x tails."""
    min_psi: float = Field(ge=0)
    """And its PSI must reach this (an effect size): a tiny shift is significant in heavy traffic."""
    psi_bins: int = Field(ge=2, le=100)
    """PSI bins, cut at the reference's quantiles."""
    min_rows: int = Field(ge=2)
    """A model version with fewer served rows in the window is not judged (listed as such)."""
    reference_rows: int = Field(ge=2)
    """Training rows sampled (seeded) as the reference."""
    skew_tolerance: float = Field(ge=0)
    """A served score further than this from the offline score of the same raw row is a skewed row."""
    skew_max_share: Unit
    """More skewed rows than this share of the window: skew."""
    seed: int


class MonitoringParams(Section):
    """The metrics store, hardware sampling and alerts (tasks/monitoring, docs/monitoring.md)."""

    enabled: StrictBool
    """Record every step's usage and metrics in SLUICE_HOME/monitoring/metrics.sqlite."""
    sample_every_s: float = Field(gt=0, le=600)
    """Seconds between hardware samples (psutil; NVML when a GPU is present) during a task."""
    alerts: AlertParams
    drift: DriftParams
    notifiers: tuple[NotifierSpec, ...]
    """Airflow notifiers that receive alerts (e.g. the SMTP provider's SmtpNotifier); [] for none."""


class Params(Section):
    """Every section of params.yaml, each required: the file is the one home of these values (no
    field has a default in code), and a missing key is an error naming it."""

    dataset: DatasetParams
    demo: DemoParams
    weak_label: WeakLabelParams
    queue: QueueParams
    train: TrainParams
    evaluate: EvaluateParams
    held: HeldParams
    compress: CompressParams
    serving: ServingParams
    canary: CanaryParams
    experiment: ExperimentParams
    scaling: ScalingParams
    cost: CostParams
    monitoring: MonitoringParams
    tuning: TuningParams

    @model_validator(mode="after")
    def _space_fits_train(self) -> "Params":
        """The bounds of the tuning space's names that the train section and its model plug-in know. A
        name neither knows (a parameter of another model plug-in, a typo) is refused by the study's
        first task (tune_plan), not here: training another plug-in must not need another space."""
        from tasks.core.tuning_config import check_space, tunable

        known = tunable(self.train)
        try:
            check_space({k: v for k, v in self.tuning.space.items() if k in known}, self.train)
        except ValueError as exc:
            raise ValueError(f"tuning.space.{exc}") from None
        return self

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def digest(self) -> str:
        """Stable hash of every hyperparameter: recorded in model lineage. Prices and monitoring are not
        hyperparameters (they change no model), so they are left out."""
        hyper = {k: v for k, v in self.to_dict().items() if k not in _NOT_HYPERPARAMETERS}
        if not hyper["dataset"]["params"]:  # no plug-in params: the hash of models registered before they had a place
            del hyper["dataset"]["params"]
        return hashlib.sha256(json.dumps(hyper, sort_keys=True).encode()).hexdigest()[:16]


_NOT_HYPERPARAMETERS = ("cost", "monitoring", "tuning", "held")  # tuning: its result enters as train.params_overlay


class _Loader(yaml.SafeLoader):
    """YAML 1.1 reads `1e-3` as a string (it wants `1.0e-3`); read every float literal as a float."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
                  |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
                  |\.[0-9_]+(?:[eE][-+][0-9]+)?
                  |[-+]?\.(?:inf|Inf|INF)
                  |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)


def _explain(source: str, exc: ValidationError) -> str:
    lines = []
    for e in exc.errors():
        key = ".".join(str(p) for p in e["loc"])
        if e["type"] == "extra_forbidden":
            section = e["loc"][:-1]
            model: Any = Params
            for part in section:  # walk down to the model that refused the key (dicts: their values)
                field = getattr(model, "model_fields", {}).get(str(part))
                model = field.annotation if field else (typing.get_args(model) or (None, None))[-1]
            known = sorted(getattr(model, "model_fields", {}))
            what = "unknown section" if not section else "unknown key"
            lines.append(f"{source}: {key}: {what}" + (f"; known: {known}" if known else ""))
        elif e["type"] == "missing":  # no default in code: the file is the one home of every value
            lines.append(f"{source}: missing {'section' if len(e['loc']) == 1 else 'key'} {key}")
        elif e["type"] == "value_error" and not e["loc"]:  # a check across sections, naming its own key
            lines.append(f"{source}: {e['msg'].removeprefix('Value error, ')}")
        elif e["type"] == "value_error" and e["msg"].removeprefix("Value error, ").startswith(f"{key}."):
            # a nested model's own errors (dataset.params), each already named by its dotted key
            lines.extend(f"{source}: {m}" for m in e["msg"].removeprefix("Value error, ").split("; "))
        else:
            lines.append(f"{source}: {key}: {e['msg']} (got {e.get('input')!r})")
    return "\n".join(lines)


def parse_params(raw: Any, source: str = "params.yaml") -> Params:
    """Validate a mapping (as read from YAML) into Params, or raise ParamsError naming every bad key."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ParamsError(f"{source}: the top level must be a mapping of sections, got {type(raw).__name__}")
    try:
        return Params.model_validate(raw)
    except ValidationError as exc:
        raise ParamsError(_explain(source, exc)) from None


def _shown(path: Path) -> str:
    """How errors name a params file: relative to the checkout when inside it (params.yaml), else whole."""
    try:
        return str(path.resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def load_params(
    path: Path | str | None = None,
    overrides: dict[str, dict[str, Any]] | None = None,
    *,
    settings: Settings | None = None,
) -> Params:
    """Read params.yaml (or the file `settings`' SLUICE_PARAMS names: pass the process's Settings
    where there is one, else the environment is read), apply per-section overrides (e.g. DAG run
    Params; None values keep the file's), validate. Every key is required: a missing one is an
    error naming the file and the key (`params.yaml: missing key canary.max_psi`)."""
    if path is None:
        path = (settings if settings is not None else Settings.from_env()).params
    path = Path(path or DEFAULT_PARAMS_FILE)
    shown = _shown(path)
    try:
        raw = yaml.load(path.read_text(), Loader=_Loader) or {}
    except FileNotFoundError:
        raise ParamsError(f"params file not found: {path}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ParamsError(f"{shown}:{where}: not valid YAML: {getattr(exc, 'problem', None) or exc}") from None
    return parse_params(with_overrides(raw, overrides) if isinstance(raw, dict) else raw, shown)


def with_overrides(raw: dict[str, Any], overrides: dict[str, dict[str, Any]] | None) -> dict[str, Any]:
    """A params file's values with per-section overrides applied ({section: {dotted key: value}}, as
    `--set`, a DAG run's Params and a demo's demo.yaml give them; None values keep the file's)."""
    raw = dict(raw)
    for section, values in (overrides or {}).items():
        if section not in Params.model_fields:
            raise ParamsError(f"override: unknown section {section!r}; known: {sorted(Params.model_fields)}")
        raw[section] = _overlaid(raw.get(section) or {}, {k: v for k, v in values.items() if v is not None})
    return raw


def _overlaid(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """`base` with each change applied; a dotted key (`model.params.hidden`) replaces that one nested
    value and keeps its siblings."""
    out = dict(base)
    for key, value in changes.items():
        head, dot, rest = key.partition(".")
        if dot:
            inner = out.get(head)
            out[head] = _overlaid(inner if isinstance(inner, dict) else {}, {rest: value})
        else:
            out[key] = value
    return out


def repo_params(overrides: dict[str, dict[str, Any]] | None = None) -> Params:
    """The checkout's params.yaml (never SLUICE_PARAMS), with per-section overrides: what tests
    (their `params` fixture) and benchmarks start from, instead of defaults in code (there are none)."""
    return load_params(DEFAULT_PARAMS_FILE, overrides)
