"""The served artifact: the chosen candidate is registered under one stable name, and each
model version says in its record which of its files serving loads.

    models/model-vN/model.served.onnx     the compress step's chosen file (any chain, or fp32)
    models/model-vN.json  "compression": {"artifact": "model.served.onnx", "chosen", "chain", ...}

Versions registered before the search have no "compression" key and serve the registry's
default (tasks/registry/serving.py SERVED_ARTIFACT, model.int8.onnx); `served_artifact` answers
for both, so promote, canary and rollback put the right file in the serving state.
"""

from __future__ import annotations

from typing import Any

SERVED_NAME = "model.served.onnx"


def served_artifact_of(info: dict[str, Any]) -> str:
    """The served file's name from a model version's record (Registry.model_version_info)."""
    from tasks.registry.serving import SERVED_ARTIFACT

    name = (info.get("compression") or {}).get("artifact")
    if name:
        return str(name)
    return SERVED_NAME if SERVED_NAME in (info.get("artifacts") or {}) else SERVED_ARTIFACT


def served_artifact(registry, version: str) -> str:
    """The file of `version` that serving loads."""
    return served_artifact_of(registry.model_version_info(version))
