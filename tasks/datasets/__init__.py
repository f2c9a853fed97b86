"""Datasets: the demo feed (demo_feed.py), which replays a dataset plug-in's source as nightly landing
batches. The dataset plug-in protocol (what a plug-in provides, its checks, `load_dataset`, the MOVED
paths) is documented and checked in tasks/core/plugins.py; its names are re-exported here, where the
pipeline's code has always imported them."""

from tasks.core.moved import MOVED
from tasks.core.plugins import (
    BINARY,
    DATASET_REQUIRED,
    DatasetError,
    check_labels,
    class_names,
    dataset_params,
    import_plugin_module,
    load_dataset,
    load_lfs,
)

REQUIRED = DATASET_REQUIRED

__all__ = [
    "BINARY",
    "MOVED",
    "REQUIRED",
    "DatasetError",
    "check_labels",
    "class_names",
    "dataset_params",
    "import_plugin_module",
    "load_dataset",
    "load_lfs",
]
