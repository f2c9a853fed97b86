"""A dataset plug-in that takes parameters of its own: the toy plug-in plus a `Params` model
(params.yaml `dataset.params`, tests/core/test_plugin_params.py)."""

from pydantic import BaseModel, ConfigDict, Field

from tests.toy.dataset import (  # noqa: F401  (the plug-in's required names)
    FEATURE_NAMES,
    GOLD_COLUMN,
    ID_COLUMN,
    LABELED_CONTRACT,
    LF_MODULE,
    NAME,
    RAW_COLUMNS,
    RAW_CONTRACT,
    TIME_COLUMN,
    featurize,
    load_source,
)


class Params(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    sites: tuple[str, ...] = Field(min_length=1)
    """Which sites' readings to keep."""
    max_temperature: float = Field(gt=0)
