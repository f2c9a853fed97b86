"""Which model a training run starts from (incremental training), for both backends."""

from __future__ import annotations

from tasks.core.params import TrainParams
from tasks.core.settings import Settings


def warm_start_version(settings: Settings, p: TrainParams) -> str | None:
    """The prod model version to start from, if there is one and `train.warm_start` asks for it."""
    from tasks.registry import Registry

    prod = Registry(settings).state()["prod_model"]
    return prod if (p.warm_start and prod) else None
