"""What every step gets and where its records live: the run, the deployment settings, params.yaml
loaded once with the plug-ins it names resolved once, and the run folder's step records. Running a
step (its CLI, its Airflow task body, the monitoring hook) is one floor up, in tasks/runner/."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

from tasks.core.files import atomic_write_json, read_json
from tasks.core.params import Params, ParamsError, load_params
from tasks.core.plugins import load_dataset, load_model_plugin
from tasks.core.records import RECORDS, Record
from tasks.core.settings import Settings


@dataclass(frozen=True)
class StepContext:
    """What every step gets: the run, the deployment settings, params.yaml loaded once, and the dataset
    and model plug-ins those params name, each resolved (imported and checked) once, on first use:
    a step hands them to the subsystems it calls, which never look a plug-in up by name."""

    run_id: str
    settings: Settings
    params: Params

    @classmethod
    def create(
        cls, run_id: str, settings: Settings | None = None, overrides: dict[str, dict[str, Any]] | None = None
    ) -> "StepContext":
        settings = settings or Settings.from_env()
        return cls(run_id, settings, load_params(overrides=overrides, settings=settings))

    @property
    def run_dir(self) -> Path:
        return self.settings.layout.run_dir(self.run_id)

    @cached_property
    def dataset(self) -> ModuleType:
        """The dataset plug-in (params `dataset.module`)."""
        return load_dataset(self.params.dataset.module)

    @cached_property
    def model(self) -> ModuleType:
        """The model plug-in training builds (params `train.model.module`)."""
        return load_model_plugin(self.params.train.model.module)


def record_path(run_dir: Path, name: str) -> Path:
    return run_dir / "steps" / f"{name}.json"


def record_refusal(run_dir: Path, task: str, reason: str) -> None:
    """A step refused by a store (nothing changed): its reason, kept for the run's report."""
    atomic_write_json(run_dir / "refused" / f"{task}.json", {"task": task, "reason": reason})


def load_refusals(run_dir: Path) -> dict[str, str]:
    folder = run_dir / "refused"
    return {p.stem: read_json(p)["reason"] for p in sorted(folder.glob("*.json"))} if folder.is_dir() else {}


def load_records(run_dir: Path) -> dict[str, Record]:
    """Every step record of a run, typed (the report reads them all)."""
    folder = run_dir / "steps"
    if not folder.is_dir():
        return {}
    return {
        p.stem: RECORDS[p.stem].model_validate(read_json(p)) for p in sorted(folder.glob("*.json")) if p.stem in RECORDS
    }


def parse_overrides(pairs: list[str]) -> dict[str, dict[str, Any]]:
    """["train.epochs=5", "train.lr=1e-3"] -> {"train": {"epochs": 5, "lr": 0.001}} (values as YAML); a
    deeper key stays dotted ("train.model.params.hidden=[8]" -> {"train": {"model.params.hidden": [8]}}),
    and `load_params` sets just that nested value."""
    from tasks.core.params import _Loader

    out: dict[str, dict[str, Any]] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        section, dot, name = key.partition(".")
        if not sep or not dot or not section or not name:
            raise ParamsError(f"--set {pair!r}: expected SECTION.KEY=VALUE, e.g. train.epochs=5")
        out.setdefault(section, {})[name] = yaml.load(value, Loader=_Loader)
    return out
