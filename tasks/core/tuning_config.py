"""The tuning section's typed params and its search space (params.yaml `tuning.space`).

A space maps a tunable name of the `train` section to a range (`{low, high, log}`; integers for
`batch_size` and `epochs`) or a list of `choices`. An empty or inverted range, a log range that
reaches 0, an unknown name, or a bound that `train` itself would refuse is an error naming the key.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    StrictBool,
    StrictInt,
    Tag,
    field_validator,
    model_validator,
)

# The train fields a study may set, and how: a float range, an integer range, or choices only. The
# model plug-in adds its own (its TUNABLE, over train.model.params: the MLP's `hidden` widths).
TRAIN_TUNABLE: dict[str, str] = {"lr": "float", "weight_decay": "float", "batch_size": "int", "epochs": "int"}
KINDS = ("float", "int", "choices")


def tunable(train: Any) -> dict[str, str]:
    """Every name a study may draw for `train` (TrainParams): its fields, then its model plug-in's
    (imported by name: core does not depend on tasks/models)."""
    import importlib

    from tasks.core.moved import current

    plugin = importlib.import_module(current(train.model.module))
    return {**TRAIN_TUNABLE, **plugin.TUNABLE}


class RangeSpec(BaseModel):
    """A numeric range: uniform, or log-uniform with `log: true` (then low > 0)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
    low: float
    high: float
    log: StrictBool = False

    @model_validator(mode="after")
    def _not_empty(self) -> "RangeSpec":
        if not self.low < self.high:
            raise ValueError(f"empty or inverted range: low {self.low} must be below high {self.high}")
        if self.log and self.low <= 0:
            raise ValueError(f"a log range must stay above 0, got low {self.low}")
        return self


class ChoiceSpec(BaseModel):
    """A list of values, one drawn per trial (widths are lists: `[[32, 16], [64, 32]]`)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
    choices: Annotated[tuple[Any, ...], Field(min_length=1)]

    @field_validator("choices")
    @classmethod
    def _distinct(cls, v: tuple) -> tuple:
        v = tuple(tuple(c) if isinstance(c, list) else c for c in v)
        if len(set(v)) != len(v):
            raise ValueError(f"choices repeat a value: {list(v)}")
        return v


def _kind(v: Any) -> str:
    """A mapping with `choices` is a ChoiceSpec, any other a range: one error list per spec, not two."""
    if isinstance(v, dict):
        return "choices" if "choices" in v else "range"
    return "choices" if isinstance(v, ChoiceSpec) else "range"


Spec = Annotated[Annotated[RangeSpec, Tag("range")] | Annotated[ChoiceSpec, Tag("choices")], Discriminator(_kind)]


def check_space(space: dict[str, Spec], train: Any) -> None:
    """Each name tunable, each range's kind right, and both ends of each range (every choice)
    a value `train` (TrainParams) accepts; raises ValueError naming the parameter."""
    kinds = tunable(train)
    for name, spec in space.items():
        if name not in kinds:
            raise ValueError(f"unknown parameter {name!r}; tunable: {sorted(kinds)}")
        if isinstance(spec, RangeSpec):
            if kinds[name] == "choices":
                raise ValueError(f"{name}: give `choices` (lists of widths), not a range")
            values = [spec.low, spec.high]
            if kinds[name] == "int":
                if spec.low != int(spec.low) or spec.high != int(spec.high):
                    raise ValueError(f"{name}: an integer range, got {spec.low}..{spec.high}")
                values = [int(spec.low), int(spec.high)]
        else:
            values = [list(c) if isinstance(c, tuple) else c for c in spec.choices]
        for value in values:
            try:
                train.replace(**{name: value})
            except Exception as exc:  # pydantic's error, reduced to its message
                msg = exc.errors()[0]["msg"] if hasattr(exc, "errors") else str(exc)
                raise ValueError(f"{name}: {value!r} is not a valid train.{name} ({msg})") from None


class TuningParams(BaseModel):
    """Cost-aware automatic tuning (tasks/tuning, dags/tuning.py, docs/tuning.md): the study's
    space, its defaults for a run (each a Param of the `tuning` DAG) and how the result is chosen."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
    space: dict[str, Spec] = Field(min_length=1)
    """name -> {low, high, log} or {choices}; names are train fields or the model plug-in's tunables
    (`tunable`; checked with the train section when params.yaml is read); the rest of `train` is kept."""
    n_trials: StrictInt = Field(ge=1, le=10_000)
    max_parallelism: StrictInt = Field(ge=1, le=64)
    """The trial task's max_active_tis_per_dag (read when the DAG file is parsed)."""
    parallelism: StrictInt = Field(ge=1, le=64)
    """Trials at once in a run (the DAG's Param; at most max_parallelism)."""
    cost_ceiling: float = Field(ge=0)
    """What a study may spend in all, in the cost section's currency (0: no ceiling). A trial that
    would cross it is pruned; a ceiling below one trial's cost is refused at the start."""
    seed: StrictInt
    nproc: StrictInt = Field(ge=1, le=64)
    """Processes per trial (torchrun on the local backend)."""
    min_epochs: StrictInt = Field(ge=1)
    """Hyperband's smallest budget (epochs) before a trial can be pruned."""
    reduction_factor: StrictInt = Field(ge=2)
    """Hyperband's eta: each rung keeps about 1/eta of the trials."""
    n_startup_trials: StrictInt = Field(ge=0)
    """TPE's random trials before it models the space."""
    trial_seconds_estimate: float = Field(gt=0)
    """Seconds of the cheapest trial before the study has finished one (start-up and one epoch):
    the floor the cost ceiling is checked against."""
    choose_within: Annotated[float, Field(ge=0, le=1)]
    """The chosen trial: the cheapest whose dev ROC AUC is within this of the best."""
    heartbeat_s: StrictInt = Field(ge=1)
    """Seconds between a running trial's heartbeats; one silent for 4x this is failed (and retried once)."""
    trial_timeout_s: StrictInt = Field(ge=10)
    objective: Literal["dev_roc_auc"]
    """Gold dev ROC AUC (never the gold test set)."""

    @field_validator("parallelism")
    @classmethod
    def _within_max(cls, v: int, info) -> int:
        top = info.data.get("max_parallelism")
        if top is not None and v > top:
            raise ValueError(f"must be at most tuning.max_parallelism={top}, got {v}")
        return v

    def replace(self, **changes: Any) -> "TuningParams":
        return type(self).model_validate({**self.model_dump(), **changes})
