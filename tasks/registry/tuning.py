"""Tuned params overlays: a tuning study's result as an immutable registry version (`tuned-vN`).

    tuning/tuned-vN.json   study name, data version, objective, the trial table, the chosen trial and
                           `train`: the values it sets over params.yaml's train section

Made like every registry change (one transaction, the tag as the commit point, an audit line);
idempotent per tuning run. The train step applies one when params.yaml `train.params_overlay` says
so (`latest` resolves to the newest when the step starts) and the model's lineage names it.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from typing import Any

from tasks.core.files import atomic_write_json
from tasks.core.log import log
from tasks.registry.repo import RegistryError, RepoBase

TUNED = re.compile(r"^tuned-v([1-9][0-9]{0,8})$")


def is_tuned_version(name: str) -> bool:
    return bool(TUNED.match(name or ""))


class TunedOverlays(RepoBase):
    """The registry's tuned overlays (same repository, lock and transactions as data and models)."""

    def overlay_versions(self) -> list[str]:
        if not (self.root / ".git").is_dir():
            return []
        names = [t for t in self.git("tag", "--list", "tuned-v*").splitlines() if is_tuned_version(t)]
        return sorted(names, key=lambda t: int(TUNED.match(t).group(1)))

    def overlay_info(self, version: str) -> dict[str, Any]:
        if not is_tuned_version(version):
            raise RegistryError(f"{version!r} is not a tuned overlay version (expected tuned-v<N>, e.g. tuned-v2)")
        if version not in self.overlay_versions():
            raise RegistryError(f"tuned overlay {version} does not exist (have: {self.overlay_versions() or 'none'})")
        return json.loads(self.git("show", f"{version}:tuning/{version}.json"))

    def resolve_overlay(self, spec: str) -> str | None:
        """`none` -> None; `latest` -> the newest tuned-vN (None when there is none); `tuned-vN` itself."""
        if spec == "none":
            return None
        if spec == "latest":
            versions = self.overlay_versions()
            return versions[-1] if versions else None
        self.overlay_info(spec)  # refuses an unknown one, naming it
        return spec

    def register_overlay(self, run_id: str, overlay: dict[str, Any], who: str | None = None) -> dict[str, Any]:
        """A new tuned-vN holding `overlay` (study, data_version, trials, chosen, train). Idempotent per run id."""
        if not isinstance(overlay.get("train"), dict) or not overlay["train"]:
            raise RegistryError("a tuned overlay needs the train values of its chosen trial")
        with self.transaction():
            for existing in self.overlay_versions():
                info = self.overlay_info(existing)
                if info.get("run_id") == run_id:
                    log(f"registry: tuning run {run_id} already registered as {existing}")
                    return {"version": existing, "created": False, **info}
            versions = self.overlay_versions()
            version = f"tuned-v{int(TUNED.match(versions[-1]).group(1)) + 1 if versions else 1}"
            info = {
                "version": version,
                "run_id": run_id,
                "created_at": datetime.now(timezone.utc).isoformat(),
                **overlay,
            }
            atomic_write_json(self.root / "tuning" / f"{version}.json", info)
            self._audit(
                "tuned_overlay",
                who=who,
                version=version,
                study=overlay.get("study"),
                data_version=overlay.get("data_version"),
            )
            commit = self._commit(
                f"{version}: tuned overlay from study {overlay.get('study')} (run {run_id})", tag=version
            )
            log(f"registry: {version} registered at {commit[:10]}: train {overlay['train']}")
            return {"version": version, "created": True, "commit": commit, **info}
