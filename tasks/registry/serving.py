"""The serving state in registry.json, and which file of a model version is served.

    "serving": {
      "champion":   {"model_version": "model-v2", "artifact": "models/model-v2/model.served.onnx",
                     "sha256": "<hex of the artifact file>"} | null,
      "challenger": {same shape} | null,
      "challenger_weight": 0..100,    # percent of requests to the challenger (shadow: mirrored to it)
      "mode": "split" | "shadow"      # shadow: the challenger scores mirrored traffic, the champion answers all
    }

`ServingState` is the one schema of that value: the registry reads and writes it through the model
(Registry.state(), Registry.serving()), and the model server follows it (tasks/serving/variants.py).
It reads what older registries wrote: the pre-canary `{"model_version", "artifact"}` (or null) is
a champion with no challenger (sha256 null); a pointer without an artifact names
models/<version>/model.int8.onnx; without a challenger the weight is 0 and the mode split. A value
it cannot read (a weight outside 0..100, an unknown mode, a version that is not a string) is a
pydantic ValidationError naming the field.

Which file of a version is served: `served_artifact(registry, version)` (models.py) is the one
answer, for the steps (evaluate, promote, deploy_canary, rollback) and the registry's own moves; the
server loads what the pointers name (`ServedModel.artifact_name`). A version served now is served
from its pointer's file; any other from the file its model record names (`served_artifact_of`
here: the compression search's choice, registered as model.served.onnx; versions registered before
the search serve model.int8.onnx).

Pure functions and models only (no git, no DVC).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, StrictStr, field_validator, model_validator

from tasks.registry.repo import RegistryError

CHAMPION, CHALLENGER = "champion", "challenger"
VARIANTS = (CHAMPION, CHALLENGER)
MODES = ("split", "shadow")
SERVED_ARTIFACT = "model.int8.onnx"  # what versions registered before the compression search serve
SERVED_NAME = "model.served.onnx"  # the compress step's chosen file (any chain, or fp32), under one name


def artifact_path(version: str, name: str) -> str:
    """A version's file as the serving state names it: its path in the registry."""
    return f"models/{version}/{name}"


class ServedModel(BaseModel):
    """One variant's pointer: the model version, its file in the registry, the file's recorded sha256."""

    model_config = ConfigDict(frozen=True)

    model_version: StrictStr
    artifact: StrictStr
    """The path in the registry, e.g. models/model-v2/model.served.onnx."""
    sha256: StrictStr | None = None
    """None: a pointer written before sha256s were recorded (not checked)."""

    @field_validator("sha256")
    @classmethod
    def _lower(cls, v: str | None) -> str | None:
        return v.lower() if v else None

    @property
    def artifact_name(self) -> str:
        """The file's name inside its version folder (what Registry.read_model_artifact takes)."""
        prefix = artifact_path(self.model_version, "")
        return self.artifact[len(prefix) :] if self.artifact.startswith(prefix) else self.artifact.rsplit("/", 1)[-1]


Weight = Annotated[Union[StrictInt, StrictFloat], Field(ge=0, le=100)]


class ServingState(BaseModel):
    """What the registry says to serve. Immutable (and hashable), replaced whole."""

    model_config = ConfigDict(frozen=True)

    champion: ServedModel | None = None
    challenger: ServedModel | None = None
    challenger_weight: Weight = 0
    mode: Literal["split", "shadow"] = "split"

    @model_validator(mode="before")
    @classmethod
    def _older_shapes(cls, raw: Any) -> Any:
        if raw is None:
            return {}
        if not isinstance(raw, dict):
            return raw  # refused by the model with the type it got
        if "champion" not in raw and "model_version" in raw:  # the pre-canary pointer
            raw = {"champion": raw}
        champion, challenger = _pointer(raw.get("champion")), _pointer(raw.get("challenger"))
        if challenger is None:
            return {"champion": champion}
        given = {k: raw[k] for k in ("challenger_weight", "mode") if raw.get(k) is not None}
        return {**given, "champion": champion, "challenger": challenger}

    @classmethod
    def of(cls, state: dict[str, Any] | None) -> ServingState:
        """The serving state of a registry state (registry.json as a dict; None: an empty registry)."""
        return cls.model_validate((state or {}).get("serving"))

    def variants(self) -> dict[str, ServedModel]:
        """variant -> pointer, for the variants that are set (champion first)."""
        return {v: p for v, p in ((CHAMPION, self.champion), (CHALLENGER, self.challenger)) if p is not None}

    def pointer(self, version: str) -> ServedModel | None:
        """The pointer that serves `version` now (champion or challenger), or None."""
        return next((p for p in self.variants().values() if p.model_version == version), None)


def _pointer(p: Any) -> Any:
    """A pointer without a version is no pointer; one without an artifact names the older default."""
    if not isinstance(p, dict):
        return p  # None, or refused by the model
    if not p.get("model_version"):
        return None
    if not p.get("artifact") and isinstance(p["model_version"], str):
        return {**p, "artifact": artifact_path(p["model_version"], SERVED_ARTIFACT)}
    return p


def serving_state(state: dict[str, Any] | None) -> dict[str, Any]:
    """The serving value of a registry state in the current shape, as registry.json holds it.
    Never raises on a missing key; never changes `state`."""
    return ServingState.of(state).model_dump()


def served_artifact_of(info: dict[str, Any]) -> str:
    """The served file's name from a model version's record (Registry.model_version_info)."""
    name = (info.get("compression") or {}).get("artifact")
    if name:
        return str(name)
    return SERVED_NAME if SERVED_NAME in (info.get("artifacts") or {}) else SERVED_ARTIFACT


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
