"""The serving state in registry.json: what the model server loads, and how traffic is split.

    "serving": {
      "champion":   {"model_version": "model-v2", "artifact": "models/model-v2/model.int8.onnx",
                     "sha256": "<hex of the artifact file>"} | null,
      "challenger": {same shape} | null,
      "challenger_weight": 0..100,    # percent of requests to the challenger (shadow: mirrored to it)
      "mode": "split" | "shadow"      # shadow: the challenger scores mirrored traffic, the champion answers all
    }

Pure functions only (no git, no DVC): the server can read a registry.json with `serving_state`.
Registries written before canaries had `{"model_version", "artifact"}` (or null) here;
`serving_state` reads those as a champion with no challenger (sha256 null).
"""

from __future__ import annotations

from typing import Any

from tasks.registry.repo import RegistryError

SERVED_ARTIFACT = "model.int8.onnx"  # the default artifact served (the compression step will choose)
MODES = ("split", "shadow")


def serving_state(state: dict[str, Any] | None) -> dict[str, Any]:
    """The serving value of a registry state (registry.json) in the current shape; an old-format
    or missing value is normalized. Never raises on a missing key; never changes `state`."""
    raw = (state or {}).get("serving") or {}
    if "champion" not in raw and raw.get("model_version"):  # the pre-canary shape
        raw = {"champion": raw}
    challenger = _pointer(raw.get("challenger"))
    return {
        "champion": _pointer(raw.get("champion")),
        "challenger": challenger,
        "challenger_weight": int(raw.get("challenger_weight") or 0) if challenger else 0,
        "mode": raw.get("mode") if challenger and raw.get("mode") in MODES else "split",
    }


def _pointer(p: dict[str, Any] | None) -> dict[str, Any] | None:
    if not p or not p.get("model_version"):
        return None
    version = p["model_version"]
    return {
        "model_version": version,
        "artifact": p.get("artifact") or f"models/{version}/{SERVED_ARTIFACT}",
        "sha256": p.get("sha256"),
    }


def check_artifact_name(name: str) -> str:
    """An artifact is a plain file name inside its version's folder (no path, no '..')."""
    if (
        not isinstance(name, str)
        or not name
        or "/" in name
        or "\\" in name
        or name in (".", "..")
        or name.startswith(".")
    ):
        raise RegistryError(f"{name!r} is not an artifact name (a file name such as {SERVED_ARTIFACT})")
    return name


def check_weight(weight: int) -> int:
    if isinstance(weight, bool) or not isinstance(weight, int) or not 0 <= weight <= 100:
        raise RegistryError(f"challenger weight must be an integer percent 0..100, got {weight!r}")
    return weight


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise RegistryError(f"serving mode must be one of {', '.join(MODES)}, got {mode!r}")
    return mode


def check_reason(action: str, reason: str | None) -> str:
    if not isinstance(reason, str) or not reason.strip():
        raise RegistryError(f"{action} needs a reason (it goes into the audit log)")
    return reason
