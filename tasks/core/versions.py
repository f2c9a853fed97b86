"""Version names, the one place their pattern lives: data-vN, model-vN (N from 1, at most 9 digits).

Standard library only: the DAG files use the patterns in their Params.
"""

from __future__ import annotations

import re

DATA_VERSION_PATTERN = r"^data-v[1-9][0-9]{0,8}$"
MODEL_VERSION_PATTERN = r"^model-v[1-9][0-9]{0,8}$"
DATA_VERSION = re.compile(r"^data-v([1-9][0-9]{0,8})$")
MODEL_VERSION = re.compile(r"^model-v([1-9][0-9]{0,8})$")


def is_data_version(name: str) -> bool:
    return bool(DATA_VERSION.match(name or ""))


def is_model_version(name: str) -> bool:
    return bool(MODEL_VERSION.match(name or ""))


def version_number(name: str) -> int:
    """data-v12 -> 12, model-v3 -> 3; a ValueError for anything else."""
    m = DATA_VERSION.match(name or "") or MODEL_VERSION.match(name or "")
    if not m:
        raise ValueError(f"{name!r} is not a version (data-vN or model-vN)")
    return int(m.group(1))


def library_versions() -> dict[str, str | None]:
    """The versions of what the model's numbers depend on (installed distributions; None: absent)."""
    import platform
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in ("torch", "onnxruntime", "onnx", "apache-airflow", "numpy"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out
