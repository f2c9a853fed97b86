"""Validated configs of the compression techniques, chains and the search.

Every technique has a frozen pydantic model (unknown keys refused, ranges checked), with a
`kind` tag, so a chain is a list of configs that serializes to JSON and goes into every
artifact's ONNX metadata (`sluice.compression`). Chains can be written in a short form,
handy in params.yaml: "prune_structured(0.5)", "lowrank(64)", "distil(32,16)", "prune(0.8)",
"fp16", "int8_dynamic", "int8_static"; or as a dict {"kind": ..., field: value}.

Chain order (checked by `check_chain`): torch-side techniques first, in the order
distil -> prune_structured -> lowrank -> prune, then the ONNX export, then at most one
precision change (fp16, int8_dynamic or int8_static). Why this order: distillation replaces
the model, so anything done before it is lost; low-rank factors and slicing re-densify an
unstructured sparsity mask, so magnitude pruning comes last on the torch side; and ONNX-side
precision changes cannot be undone by torch-side retraining, nor stacked on each other.

Defaults. The values params.yaml `compress` holds for every chain entry (`fine_tune_epochs`,
`calibration_rows`, `seed`: CHAIN_DEFAULTS) have no default here: a chain is parsed with them
(`CompressionSearchConfig.chain`, or `parse_chain(specs, defaults)`), and an entry may set its own.
What the file does not hold and a short form cannot say (a fine-tune's learning rate and batch,
the student's epochs, int8's calibration method, ...) keeps its per-technique default, so that
"prune_structured(0.5)" stays a complete chain entry. The search config itself has no defaults:
params.yaml is its one home.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from tasks.core.errors import CompressionError

Ratio = Annotated[float, Field(gt=0, lt=1, allow_inf_nan=False)]
Epochs = Annotated[StrictInt, Field(ge=0, le=1000)]
LearningRate = Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)]


class TechniqueBase(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    @property
    def label(self) -> str:
        """The short form, e.g. prune_structured(0.5)."""
        return self.kind  # type: ignore[attr-defined]


class FineTune(TechniqueBase):
    fine_tune_epochs: Epochs
    """Epochs of recovery training on the parent's soft targets after the change (0: none);
    params.yaml compress.fine_tune_epochs unless the chain entry sets its own."""
    fine_tune_lr: LearningRate = 1e-3
    """Adam learning rate of the recovery training."""
    batch_size: StrictInt = Field(128, ge=1)
    seed: StrictInt
    """params.yaml compress.seed unless the chain entry sets its own."""


class StudentSpec(BaseModel):
    """A distillation student of another model plug-in than the teacher's: as params.yaml
    `train.model`, a module and its own params (validated by the plug-in when the student is built)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    module: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
    params: dict[str, Any]
    """The student plug-in's params. A token student reads the teacher's ids: its `vocab_size` and
    `max_len` are the teacher's (filled in when left out; other values are refused)."""


class DistilConfig(TechniqueBase):
    """Knowledge distillation into a smaller student trained on the teacher's scores (soft
    targets) over the rows given; no labels are needed. The student is the teacher's plug-in
    at other `hidden` widths (its `narrower`), or a model of another plug-in (`student`) that
    takes the same inputs: a transformer distilled into a bag-of-embeddings, say."""

    kind: Literal["distil"] = "distil"
    hidden: tuple[Annotated[StrictInt, Field(ge=1)], ...] | None = Field(None, min_length=1)
    """Hidden widths of the student (the teacher's plug-in; (32, 16) when neither this nor
    `student` is given); none with `student`."""
    student: StudentSpec | None = None
    """A student of another plug-in, instead of a narrower teacher."""
    epochs: StrictInt = Field(30, ge=1, le=1000)
    """Student training epochs over the rows."""
    lr: LearningRate = 3e-3
    batch_size: StrictInt = Field(128, ge=1)
    temperature: float = Field(1.0, gt=0, le=20, allow_inf_nan=False)
    """Softens the teacher's and the student's logits alike (1: the plain probabilities)."""
    seed: StrictInt
    """params.yaml compress.seed unless the chain entry sets its own."""

    @model_validator(mode="before")
    @classmethod
    def _hidden_or_student(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        if data.get("student") is None:
            return {**data, "hidden": (32, 16)} if data.get("hidden") is None else data
        if data.get("hidden") is not None:
            raise ValueError(
                "give `hidden` (a narrower model of the teacher's plug-in) or `student` (a model of "
                "another plug-in), not both"
            )
        return data

    @property
    def label(self) -> str:
        if self.student is not None:  # distil(bow): the student's module, last part
            return f"distil({self.student.module.rsplit('.', 1)[-1]})"
        return f"distil({','.join(map(str, self.hidden or ()))})"


class PruneStructuredConfig(FineTune):
    """Remove whole hidden neurons: the `ratio` of each hidden layer with the smallest L2 norm
    of incoming weights; the Linear layers are sliced, so the model is really smaller."""

    kind: Literal["prune_structured"] = "prune_structured"
    ratio: Ratio = 0.5

    @property
    def label(self) -> str:
        return f"prune_structured({self.ratio:g})"


class LowRankConfig(FineTune):
    """Truncated SVD of each Linear layer where it saves parameters: W ~ (U_r S_r) V_r."""

    kind: Literal["lowrank"] = "lowrank"
    rank: StrictInt = Field(16, ge=1)

    @property
    def label(self) -> str:
        return f"lowrank({self.rank})"


class PruneConfig(FineTune):
    """Unstructured magnitude pruning: the `ratio` of each Linear weight with the smallest |w| set to 0."""

    kind: Literal["prune"] = "prune"
    ratio: Ratio = 0.5

    @property
    def label(self) -> str:
        return f"prune({self.ratio:g})"


class Fp16Config(TechniqueBase):
    """Weights and compute in float16; inputs and outputs stay float32 (keep_io_types)."""

    kind: Literal["fp16"] = "fp16"
    keep_io_types: Literal[True] = True


class Int8DynamicConfig(TechniqueBase):
    """Dynamic int8: int8 weights, activations quantized per batch at run time."""

    kind: Literal["int8_dynamic"] = "int8_dynamic"
    per_channel: bool = True
    reduce_range: bool = True
    """Weights in 7 bits: on x86 CPUs without VNNI (AVX2 only, e.g. this project's AMD EPYC machines)
    onnxruntime's u8s8 kernels add pairs of products in int16 and saturate with full 8-bit weights
    (measured: a served MLP off by up to 0.995 in P(class 1)). The served file may run on any CPU, so
    the file that is gated is the one that is safe everywhere."""


class Int8StaticConfig(TechniqueBase):
    """Static int8 in QDQ format, per-channel weights, activation ranges calibrated on training rows."""

    kind: Literal["int8_static"] = "int8_static"
    per_channel: bool = True
    reduce_range: bool = True
    """Weights in 7 bits, as for dynamic int8 (its note says why)."""
    calibration_rows: StrictInt = Field(ge=2, le=100_000)
    """Training rows sampled (stratified by class) to calibrate the activation ranges; params.yaml
    compress.calibration_rows unless the chain entry sets its own."""
    method: Literal["minmax", "percentile", "entropy"] = "minmax"
    activation_type: Literal["int8", "uint8"] = "int8"
    seed: StrictInt
    """params.yaml compress.seed unless the chain entry sets its own."""


TechniqueConfig = Annotated[
    Union[
        DistilConfig, PruneStructuredConfig, LowRankConfig, PruneConfig, Fp16Config, Int8DynamicConfig, Int8StaticConfig
    ],
    Field(discriminator="kind"),
]
TORCH_ORDER = ("distil", "prune_structured", "lowrank", "prune")
ONNX_KINDS = ("fp16", "int8_dynamic", "int8_static")
_BY_KIND = {
    c.model_fields["kind"].default: c
    for c in (
        DistilConfig,
        PruneStructuredConfig,
        LowRankConfig,
        PruneConfig,
        Fp16Config,
        Int8DynamicConfig,
        Int8StaticConfig,
    )
}
# the fields of chain entries that params.yaml `compress` gives (a chain entry may set its own)
CHAIN_DEFAULTS = ("fine_tune_epochs", "calibration_rows", "seed")
# the short form's positional argument(s) -> field
_POSITIONAL = {"distil": "hidden", "prune_structured": "ratio", "lowrank": "rank", "prune": "ratio"}
_SHORT = re.compile(r"^\s*([a-z0-9_]+)\s*(?:\((.*)\))?\s*$")


def parse_technique(
    spec: str | dict[str, Any] | TechniqueBase, defaults: dict[str, Any] | None = None
) -> TechniqueBase:
    """A technique config from its short form, a dict or a config. `defaults` fill fields the
    spec leaves out (only those the technique has): the compress section's CHAIN_DEFAULTS, which
    have no default of their own. Raises CompressionError naming the spec."""
    if isinstance(spec, TechniqueBase):
        return spec
    if isinstance(spec, str):
        m = _SHORT.match(spec)
        if not m:
            raise CompressionError(f"technique {spec!r}: not of the form name or name(args)")
        kind, args = m.group(1), m.group(2)
        fields: dict[str, Any] = {"kind": kind}
        if args is not None and args.strip():
            if kind not in _POSITIONAL:
                raise CompressionError(f"technique {spec!r}: {kind} takes no argument")
            values = [a.strip() for a in args.strip().strip("[]").split(",")]
            try:
                parsed = [json.loads(v) for v in values]
            except json.JSONDecodeError as exc:
                raise CompressionError(f"technique {spec!r}: argument is not a number") from exc
            fields[_POSITIONAL[kind]] = parsed if kind == "distil" else parsed[0]
            if kind != "distil" and len(parsed) != 1:
                raise CompressionError(f"technique {spec!r}: {kind} takes one argument")
    elif isinstance(spec, dict):
        fields = dict(spec)
        kind = fields.get("kind")
    else:
        raise CompressionError(f"technique {spec!r}: expected a string, a dict or a config")
    cls = _BY_KIND.get(kind)  # type: ignore[arg-type]
    if cls is None:
        raise CompressionError(f"technique {spec!r}: unknown kind {kind!r} (known: {', '.join(_BY_KIND)})")
    for key, value in (defaults or {}).items():
        if key in cls.model_fields and key not in fields:
            fields[key] = value
    unset = [k for k in CHAIN_DEFAULTS if k in cls.model_fields and k not in fields]
    if unset:
        raise CompressionError(
            f"technique {spec!r}: {', '.join(unset)} not given: params.yaml compress gives them to every chain "
            f"entry (parse with CompressionSearchConfig.chain, or parse_chain(specs, defaults))"
        )
    try:
        return cls.model_validate(fields)
    except ValidationError as exc:
        errs = "; ".join(f"{'.'.join(map(str, e['loc'])) or kind}: {e['msg']}" for e in exc.errors())
        raise CompressionError(f"technique {spec!r}: {errs}") from exc


def check_chain(chain: list[TechniqueBase] | tuple[TechniqueBase, ...]) -> None:
    """Raise CompressionError if the chain is out of order, repeats a technique or stacks precisions."""
    kinds = [c.kind for c in chain]  # type: ignore[attr-defined]
    order_text = " -> ".join(TORCH_ORDER) + " -> export -> one of " + ", ".join(ONNX_KINDS)
    labels = [c.label for c in chain]
    for kind in set(kinds):
        if kinds.count(kind) > 1:
            raise CompressionError(f"chain {labels}: {kind} appears {kinds.count(kind)} times (at most once)")
    onnx_side = [k for k in kinds if k in ONNX_KINDS]
    if len(onnx_side) > 1:
        raise CompressionError(
            f"chain {labels}: {' and '.join(onnx_side)} both change the precision; choose one (order: {order_text})"
        )
    rank = {k: i for i, k in enumerate(TORCH_ORDER)} | {k: len(TORCH_ORDER) for k in ONNX_KINDS}
    for a, b in zip(chain, chain[1:]):
        if rank[a.kind] > rank[b.kind]:  # type: ignore[attr-defined]
            raise CompressionError(
                f"chain {labels} is out of order: {b.label} must come before {a.label} (order: {order_text})"
            )


def parse_chain(specs: list | tuple, defaults: dict[str, Any] | None = None) -> tuple[TechniqueBase, ...]:
    chain = tuple(parse_technique(s, defaults) for s in specs)
    check_chain(chain)
    return chain


def chain_label(chain: list[TechniqueBase] | tuple[TechniqueBase, ...]) -> str:
    return "+".join(c.label for c in chain) or "fp32"


def chain_to_dicts(chain) -> list[dict[str, Any]]:
    return [c.model_dump(mode="json") for c in chain]


ChainSpec = tuple[Union[str, dict[str, Any]], ...]
# Every technique alone and chained: the list bench/compression.py's idea of "all" starts from
# (not a default of compress.candidates, which params.yaml holds: the nightly demo's short list).
DEFAULT_CANDIDATES: tuple[ChainSpec, ...] = (
    ("int8_dynamic",),
    ("int8_static",),
    ("fp16",),
    ("prune(0.5)",),
    ("prune_structured(0.5)",),
    ("lowrank(16)",),
    ("distil(32,16)",),
    ("prune_structured(0.5)", "int8_dynamic"),
    ("prune_structured(0.75)", "int8_dynamic"),
    ("lowrank(16)", "int8_dynamic"),
    ("distil(32,16)", "int8_dynamic"),
    ("distil(32,16)", "int8_static"),
)


class CompressionSearchConfig(BaseModel):
    """The compress step's search: which chains to try and how to choose among them.
    The `compress` section of params.yaml (frozen, unknown keys refused, every field required:
    the file is the one home of these values; tests and benchmarks start from it)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    floor_ratio: float = Field(gt=0, le=1)
    """A candidate must keep ROC AUC >= floor_ratio x the uncompressed model's, overall and on every slice."""
    latency_budget_ms: float | None = Field(gt=0)
    """Batch-1 median latency (onnxruntime, one thread) a candidate may not exceed; null: no budget."""
    fine_tune_epochs: Epochs
    """Recovery epochs of pruning and low-rank (a chain entry may set its own)."""
    calibration_rows: StrictInt = Field(ge=2, le=100_000)
    """Calibration rows of static int8 (a chain entry may set its own)."""
    parity_atol: float = Field(gt=0, le=0.1)
    """fp32 ONNX vs torch, max abs difference of probabilities (the gate)."""
    latency_repeats: StrictInt = Field(ge=3, le=10_000)
    """Timed runs per latency figure (the median is reported)."""
    seed: StrictInt
    """Every chain entry's seed (a chain entry may set its own)."""
    # after the chain defaults: its validator parses each chain with them
    candidates: tuple[ChainSpec, ...] = Field(min_length=1)
    """Chains to try, each a list of techniques (short form "prune_structured(0.5)" or a dict with
    `kind`); the uncompressed fp32 export is always measured too (the reference, and the fallback)."""

    def chain_defaults(self) -> dict[str, Any]:
        """What this config gives every chain entry that does not set its own (CHAIN_DEFAULTS)."""
        return {k: getattr(self, k) for k in CHAIN_DEFAULTS}

    def chain(self, specs: list | tuple) -> tuple[TechniqueBase, ...]:
        """One chain (short forms, dicts or configs) parsed with this config's chain defaults."""
        return parse_chain(list(specs), self.chain_defaults())

    def chains(self) -> tuple[tuple[TechniqueBase, ...], ...]:
        """The candidates parsed into configs, with this config's defaults filled in."""
        return tuple(self.chain(c) for c in self.candidates)

    @field_validator("candidates")
    @classmethod
    def _chains_parse(cls, v: tuple, info: ValidationInfo) -> tuple:
        """Each chain parses (with the chain defaults) and is in order; the error names the chain."""
        if any(k not in info.data for k in CHAIN_DEFAULTS):
            return v  # a chain default is itself bad: that error is reported, not a chain's
        defaults = {k: info.data[k] for k in CHAIN_DEFAULTS}
        for i, chain in enumerate(v):
            try:
                parse_chain(list(chain), defaults)
            except CompressionError as exc:
                raise ValueError(f"candidate {i} {list(chain)}: {exc}") from None
        return v
