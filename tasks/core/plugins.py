"""Plug-ins by module path: the one place where a path that params.yaml (or a registered record)
names becomes a module, checked against its kind's protocol. Two kinds: datasets and models.
Generic code receives the module (a step gets both from its StepContext) and never imports a
plug-in by name itself.

# Datasets
Datasets are plug-ins: one folder each, chosen by params.yaml `dataset.module`.

A plug-in is a package (`tasks/plugins/<name>/`, or a user's own package outside the tree, named by
its module path) holding everything about one dataset: its dataset module (the package's
`__init__.py`), its labeling functions (`lfs.py`), its two contracts (`raw.json`, `labeled.json`)
and its demo's params (`demo.yaml`, read by `make run DEMO=<name>`). The generic code knows a plug-in
only through what this module checks and returns; it never imports one by name. docs/datasets.md
starts from copying a folder.

The dataset module provides (checked when it is loaded):

    NAME              short name; partitions live under data/<NAME>/ in the registry
    ID_COLUMN         unique row id;  TIME_COLUMN: orders the nightly replay (None: no time column)
    GOLD_COLUMN       the gold label (a class index 0..K-1), present only in the source and the gold sets
    RAW_COLUMNS       the columns of a landing batch
    FEATURE_NAMES     names of the model's input features
    featurize(df)     raw rows -> float32 matrix [n, len(FEATURE_NAMES)]
    load_source()     -> pd.DataFrame: the labeled source the demo feed splits into gold sets and batches
    LF_MODULE         module path of its labeling functions (exposing make_lfs(dev, y_dev)); in a
                      folder, f"{__name__}.lfs"
    RAW_CONTRACT      path of the Great Expectations suite (.json) of landing batches; in a folder,
                      str(Path(__file__).with_name("raw.json"))
    LABELED_CONTRACT  path of the suite of labeled batches (labeled.json)

Optional:

    CLASS_NAMES       the K classes' names, label k named CLASS_NAMES[k] (K >= 2; the labeling queue's
                      buttons, reports). Without it the dataset is binary: ("0", "1"). K = 2 keeps
                      every binary shape (P(class 1) per row); K > 2 gives K probabilities per row
    texts(df)         -> list[str]: the cleaned texts a text model plug-in (bow, transformer)
                      tokenizes, in training, the server's /v1 rows and its self-test alike; those
                      plug-ins refuse a dataset without it (an OIP BYTES `text` input skips it: the
                      client sends the texts themselves)
    TEXT_COLUMN       str: by convention, a text dataset's raw text column, read by its own LFs;
                      generic code never reads it
    slices(df)        gold rows -> {slice name: boolean mask over df's rows}; the compress step
                      holds every compressed candidate to its quality floor on each slice as well
                      as overall (without it, only the overall figures are gated)
    replay_order      "time", "source" or "shuffle": how the demo feed orders the nightly batches
    Params            a pydantic model of the plug-in's own parameters, params.yaml `dataset.params`
                      (validated when the file is read; `dataset_params` gives the model). Without
                      it the plug-in takes none, and `dataset.params` must be {}.

Registered artifacts and params files name module paths as they were when written: `MOVED` maps the
paths of plug-ins that have moved since to where they are now, so those keep loading.

See docs/datasets.md for adding one.

# Models
Models are plug-ins: one module each, chosen by params.yaml `train.model.module`, as datasets are.

A model module provides (checked when it is loaded, with an error naming what is missing):

    NAME                  short name, recorded in lineage and the model card
    Params                a pydantic model of its own parameters, params.yaml `train.model.params`
    TUNABLE               {name in Params: "choices" | "int" | "float"}: what a tuning study may search
    BATCH_FORMAT          "dense": a float32 matrix [n, features] from the dataset's `featurize`;
                          "tokens": int64 ids [n, max_len] (0: padding) of the dataset's `texts`,
                          from a tokenizer trained with the model (tasks/models/tokens.py); its
                          Params then have `vocab_size` and `max_len`
    INPUT, OUTPUT         the served tensor names (OIP) of the exported graph; OUTPUT names a binary
                          model's P(class 1) [n] (clients rely on it), a K > 2 class model serves
                          K_CLASS_OUTPUT [n, K] instead (served_output)
    build(stats, params)  a new module for inputs described by `stats` (`.mean`, `.std` per feature,
                          `.classes`: K, `.class_shares`), seeded by the caller; one logit when binary,
                          K when K > 2 (losses.logit_count); its weights are what training changes
    arch(model) / from_arch(arch)
                          the architecture as plain values, and a module built from it (saved beside
                          the weights, so an artifact rebuilds without params.yaml)
    loss(class_shares)    the noise-aware loss on soft targets with row weights: binary targets `[n]` or
                          `[n, 2]` (P(class 1), row weight), K classes `[n, K + 1]` (class probabilities,
                          row weight); gold rows hard at weight 1, weak rows the label model's
                          probabilities at the weak weight; summed over rows (losses.noise_aware_loss)
    probabilities(model, x)
                          binary: P(class 1) of each row, shape [n]; K classes: [n, K]
    shard_units(model)    the blocks a sharded strategy wraps one by one (then the root)
    export_wrapper(model) raw inputs -> probabilities, what ONNX export traces
    example_input(model, n)
                          a batch of n rows of raw inputs for tracing
    COMPRESSION           the compression techniques (tasks/core/compression_config.py names) that apply
    narrower(model, widths)
                          a new module of the same kind with other hidden widths and the same input
                          handling (distillation and structured pruning build their students with it);
                          required only when "distil" or "prune_structured" is in COMPRESSION
    prunable(model)       for each width `narrower` takes, the (producer, consumer) Linear layers'
                          names whose units it counts: structured pruning keeps the producer's
                          strongest rows and the consumer's matching columns; required only when
                          "prune_structured" is in COMPRESSION
    low_rank_layers(model)
                          (a Sequential, the positions of the Linear layers in it that low rank may
                          factorize in place); required only when "lowrank" is in COMPRESSION

See docs/models.md for adding one. `tasks.plugins.mlp` is the default.
"""

from __future__ import annotations

import functools
import importlib
from types import ModuleType
from typing import TYPE_CHECKING

from tasks.core.moved import current
from tasks.core.params import ParamsError, load_params, validate_plugin_params

if TYPE_CHECKING:
    from pydantic import BaseModel

    from tasks.core.params import DatasetParams
    from tasks.core.settings import Settings

DATASET_REQUIRED = (
    "NAME",
    "ID_COLUMN",
    "TIME_COLUMN",
    "GOLD_COLUMN",
    "RAW_COLUMNS",
    "FEATURE_NAMES",
    "featurize",
    "load_source",
    "LF_MODULE",
    "RAW_CONTRACT",
    "LABELED_CONTRACT",
)

BINARY = ("0", "1")  # the classes of a dataset that names none


class DatasetError(ValueError):
    """A dataset module is missing or incomplete."""


def load_dataset(module: str | None = None, *, settings: Settings | None = None) -> ModuleType:
    """The dataset plug-in named by `module`, or by params.yaml `dataset.module` (steps pass
    theirs from the params they were given; `settings`: the process's, naming the params file)."""
    if module is None:
        module = load_params(settings=settings).dataset.module
    return _load_plugin(module)


def dataset_params(dataset: DatasetParams, source: str = "params.yaml") -> BaseModel | None:
    """The plug-in's own parameters (`dataset.params`) validated by the `Params` model its module
    declares, or None when it declares none (then `dataset.params` is {}). Reading params.yaml
    already validated a non-empty `dataset.params`; this also checks an empty one against a model
    that requires keys. Raises ParamsError naming the file and the key."""
    _load_plugin(dataset.module)  # a complete plug-in first
    try:
        return validate_plugin_params(dataset.module, dataset.params)
    except ValueError as exc:
        raise ParamsError(f"{source}: {exc}") from None


def import_plugin_module(module: str, what: str = "dataset module") -> ModuleType:
    """The module at `module`, or where it moved (MOVED); DatasetError naming it if it cannot be imported."""
    try:
        return importlib.import_module(current(module))
    except ImportError as exc:
        raise DatasetError(f"{what} {module!r} cannot be imported: {exc}") from exc


def load_lfs(ds: ModuleType, module: str = "") -> ModuleType:
    """The labeling-function module: `module` (params.yaml weak_label.lf_module) or the dataset's own."""
    lfs = import_plugin_module(module or ds.LF_MODULE, "labeling-function module")
    if not callable(getattr(lfs, "make_lfs", None)):
        raise DatasetError(f"labeling-function module {lfs.__name__!r} has no make_lfs(dev, y_dev)")
    return lfs


@functools.lru_cache(maxsize=None)
def _load_plugin(module: str) -> ModuleType:
    ds = import_plugin_module(module)
    missing = [name for name in DATASET_REQUIRED if not hasattr(ds, name)]
    if missing:
        raise DatasetError(f"dataset module {module!r} lacks {missing} (see tasks/core/plugins.py)")
    names = getattr(ds, "CLASS_NAMES", BINARY)
    if (
        isinstance(names, (str, bytes))
        or not isinstance(names, (tuple, list))
        or len(names) < 2
        or not all(isinstance(n, str) and n.strip() for n in names)
        or len(set(names)) != len(names)
    ):
        raise DatasetError(
            f"dataset module {module!r}: CLASS_NAMES must be a tuple of two or more distinct, non-empty names "
            f"(label k is named CLASS_NAMES[k]), got {names!r}"
        )
    return ds


def class_names(ds: ModuleType) -> tuple[str, ...]:
    """The dataset's K classes: label k is named class_names(ds)[k]."""
    return tuple(getattr(ds, "CLASS_NAMES", BINARY))


def check_labels(ds: ModuleType, labels, what: str) -> None:
    """Raise DatasetError naming the labels of `what` that are not one of the dataset's classes."""
    import numpy as np

    k = len(class_names(ds))
    values = np.asarray(labels)
    bad = sorted({str(v) for v in values.tolist() if not (isinstance(v, (int, np.integer)) and 0 <= v < k)})
    if bad:
        raise DatasetError(
            f"{what}: label(s) {bad[:5]} outside dataset {ds.NAME}'s {k} classes 0..{k - 1} {class_names(ds)}"
        )


# ---- models ----

MODEL_REQUIRED = (
    "NAME",
    "Params",
    "TUNABLE",
    "BATCH_FORMAT",
    "INPUT",
    "OUTPUT",
    "build",
    "arch",
    "from_arch",
    "loss",
    "probabilities",
    "shard_units",
    "export_wrapper",
    "example_input",
    "COMPRESSION",
)
BATCH_FORMATS = ("dense", "tokens")
BUILDS_STUDENTS = ("distil", "prune_structured")


class ModelPluginError(ValueError):
    """A model module is missing, incomplete, or does not fit the artifact it is asked to read."""


@functools.lru_cache(maxsize=None)
def load_model_plugin(module: str) -> ModuleType:
    """The model plug-in `module` (or where it moved: MOVED), checked complete."""
    try:
        mod = importlib.import_module(current(module))
    except ImportError as exc:
        raise ModelPluginError(f"model module {module!r} cannot be imported: {exc}") from exc
    missing = [name for name in MODEL_REQUIRED if not hasattr(mod, name)]
    if any(t in getattr(mod, "COMPRESSION", ()) for t in BUILDS_STUDENTS) and not hasattr(mod, "narrower"):
        missing.append("narrower (it lists distil or prune_structured in COMPRESSION)")
    if "prune_structured" in getattr(mod, "COMPRESSION", ()) and not hasattr(mod, "prunable"):
        missing.append("prunable (it lists prune_structured in COMPRESSION)")
    if "lowrank" in getattr(mod, "COMPRESSION", ()) and not hasattr(mod, "low_rank_layers"):
        missing.append("low_rank_layers (it lists lowrank in COMPRESSION)")
    if missing:
        raise ModelPluginError(f"model module {module!r} lacks {missing} (see tasks/core/plugins.py)")
    if mod.BATCH_FORMAT not in BATCH_FORMATS:
        raise ModelPluginError(
            f"model module {module!r} has BATCH_FORMAT {mod.BATCH_FORMAT!r}; the engine streams {list(BATCH_FORMATS)}"
        )
    return mod
