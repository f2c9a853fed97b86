"""Drawing from the search space (tasks/core/tuning_config.py declares it): Optuna suggestions
and decoding a finished trial's params back to train values."""

from __future__ import annotations

from typing import Any

from tasks.core.tuning_config import ChoiceSpec, RangeSpec, Spec


def suggest(trial: Any, space: dict[str, Spec], kinds: dict[str, str]) -> dict[str, Any]:
    """Draw one configuration from an Optuna trial (sorted names: the same draws in the same order);
    `kinds`: each name's kind (tasks.core.tuning_config.tunable)."""
    out: dict[str, Any] = {}
    for name in sorted(space):
        spec = space[name]
        if isinstance(spec, ChoiceSpec):
            labels = [_label(c) for c in spec.choices]
            picked = trial.suggest_categorical(name, labels)
            out[name] = spec.choices[labels.index(picked)]
        elif kinds[name] == "int":
            out[name] = trial.suggest_int(name, int(spec.low), int(spec.high), log=spec.log)
        else:
            out[name] = trial.suggest_float(name, spec.low, spec.high, log=spec.log)
    return {k: list(v) if isinstance(v, tuple) else v for k, v in out.items()}


def decode(params: dict[str, Any], space: dict[str, Spec]) -> dict[str, Any]:
    """A finished trial's params (labels for choices) as train values."""
    out = {}
    for name, value in params.items():
        spec = space.get(name)
        if isinstance(spec, ChoiceSpec):
            labels = [_label(c) for c in spec.choices]
            value = spec.choices[labels.index(value)] if value in labels else value
        out[name] = list(value) if isinstance(value, tuple) else value
    return out


def _label(choice: Any) -> Any:
    """Optuna's categorical values must be None, bool, int, float or str: a list of widths becomes "64x32"."""
    if isinstance(choice, (tuple, list)):
        return "x".join(str(c) for c in choice)
    return choice


def max_epochs(space: dict[str, Spec], default: int) -> int:
    """Hyperband's full budget: the largest epochs a trial may train."""
    spec = space.get("epochs")
    if spec is None:
        return default
    return int(spec.high) if isinstance(spec, RangeSpec) else max(int(c) for c in spec.choices)
