"""What a model version is rebuilt from, read from its record; every reason it cannot be, at once."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tasks.core.errors import RefusedError
from tasks.core.params import Params, ParamsError, parse_params
from tasks.core.versions import is_model_version

SHA = re.compile(r"^[0-9a-f]{7,40}$")


class ReproductionError(RefusedError):
    """This model version cannot be reproduced; the message names what is missing or wrong."""


@dataclass(frozen=True)
class Plan:
    model_version: str
    info: dict[str, Any]  # the model record (models/model-vN.json at its tag)
    params: Params  # the full resolved params it was trained with
    commit: str  # the code commit to check out (without -dirty)
    dirty: bool  # the recorded checkout had local changes
    data_version: str
    warm_start: str | None  # the parent model it warm-started from (model-vN), if any
    world_size: int
    device: str
    chosen: str | None  # the compression candidate served ("fp32": uncompressed)
    chain: list[dict[str, Any]]  # its techniques' configs, in order
    served_artifact: str
    versions: dict[str, str | None]


def commit_known(repo: Path, sha: str) -> bool:
    proc = subprocess.run(["git", "-C", str(repo), "cat-file", "-e", f"{sha}^{{commit}}"], capture_output=True)
    return proc.returncode == 0


def make_plan(registry: Any, version: str, repo: Path, info: dict[str, Any] | None = None) -> Plan:
    """The plan for `version` (its record read through the registry unless `info` is given).
    Raises ReproductionError naming everything that stands in the way."""
    from tasks.registry.serving import served_artifact_of

    info = registry.model_version_info(version) if info is None else info  # RegistryError: no such version
    rep = info.get("reproduce")
    if not isinstance(rep, dict):
        raise ReproductionError(
            f"{version} cannot be reproduced: its record holds no 'reproduce' inputs (it was registered before "
            f"they were recorded), only hashes: params {info.get('params_hash')}, code {info.get('code_commit')}"
        )
    problems: list[str] = []
    params = None
    try:
        params = parse_params(rep.get("params"), f"{version}'s recorded params")
    except ParamsError as exc:
        problems.append(f"its recorded params are not valid params ({exc})")
    if params is not None and params.digest() != info.get("params_hash"):
        problems.append(
            f"its recorded params do not match the params hash it was registered with (params hash "
            f"{params.digest()}, recorded {info.get('params_hash')}): the params were edited after "
            f"registration, so they are not the ones it was trained with"
        )
    data_version = info.get("data_version") or rep.get("data_version")
    have = registry.tags("data")
    if data_version not in have:
        problems.append(
            f"its data version {data_version} does not exist in the registry (have: {', '.join(have) or 'none'})"
        )
    else:
        contracts = registry.data_version_info(data_version).get("contracts") or {}
        if contracts != (rep.get("contracts") or {}):
            problems.append(
                f"the data contracts' hashes of {data_version} ({contracts}) are not the recorded "
                f"ones ({rep.get('contracts')})"
            )
    warm = rep.get("warm_start")
    if warm and is_model_version(warm) and warm not in registry.tags("model"):
        problems.append(f"the parent model {warm} it warm-started from does not exist in the registry")
    elif warm and not is_model_version(warm):
        problems.append(f"it warm-started from a file ({warm}), not a registered model version")
    recorded = str(rep.get("code_commit") or info.get("code_commit") or "")
    sha = recorded.removesuffix("-dirty")
    if not SHA.match(sha):
        problems.append(
            f"its code commit {recorded!r} is not a git commit (an image built without SLUICE_CODE_COMMIT?)"
        )
    elif not commit_known(repo, sha):
        problems.append(
            f"its code commit {sha} is unknown to the repository at {repo} (an image build from "
            f"another clone, or a commit not fetched here: fetch it first)"
        )
    if problems:
        raise ReproductionError(f"{version} cannot be reproduced: " + "; ".join(problems))
    compression = rep.get("compression") or info.get("compression") or {}
    return Plan(
        model_version=version,
        info=info,
        params=params,
        commit=sha,
        dirty=recorded.endswith("-dirty"),
        data_version=data_version,
        warm_start=warm,
        world_size=int(rep["world_size"]),
        device=str(rep["device"]),
        chosen=compression.get("chosen"),
        chain=list(compression.get("chain") or []),
        served_artifact=served_artifact_of(info),
        versions=dict(rep.get("versions") or {}),
    )
