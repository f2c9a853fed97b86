"""Canary releases: a challenger served beside the champion, then promoted or rolled back.

    start_canary(v, w)      challenger = v at w% of traffic (or mirrored, mode "shadow"); stage canary
    set_canary_weight(w)    the challenger's share moves
    promote(v)              (models.py) v becomes prod and champion; the challenger is cleared
    rollback_canary()       the challenger is retired (stage rolled_back); the champion has 100%

Each is one registry transaction: one commit of registry.json, one audit line. Repeating
one changes nothing (`changed: False`); a refusal (RegistryError) changes nothing.
"""

from __future__ import annotations

from typing import Any

from tasks.core.log import log
from tasks.registry.models import ModelVersions, served_artifact
from tasks.registry.repo import ANY, RegistryError, check_expected, check_version
from tasks.registry.serving import check_artifact_name, check_mode, check_reason, check_weight


class CanaryReleases(ModelVersions):
    def start_canary(
        self,
        version: str,
        weight: int,
        mode: str = "split",
        reason: str | None = None,
        *,
        artifact: str | None = None,
        who: str | None = None,
        expect_champion: Any = ANY,
        expect_data: Any = ANY,
    ) -> dict[str, Any]:
        """Serve `version` as the challenger at `weight` percent. It must exist and not be the
        champion; there must be a champion (the first model is promoted directly), and no other
        challenger (promote or roll that one back first). With the same challenger already in
        place, its weight, mode and artifact are updated. `artifact` None: the file the version is
        served from (models.served_artifact).

        Compare-and-set: with `expect_champion` (the prod model `version` was evaluated against)
        and/or `expect_data` (the data version it was trained on, still current), a registry that
        moved since is refused (RegistryError naming what moved)."""
        check_version("model", version)
        check_weight(weight)
        check_mode(mode)
        if artifact is not None:
            check_artifact_name(artifact)
        check_reason("start_canary", reason)
        with self.transaction():
            if version not in self.tags("model"):
                raise RegistryError(
                    f"model version {version} does not exist (have: {', '.join(self.tags('model')) or 'none'})"
                )
            artifact = artifact or served_artifact(self, version)
            state = self.state()
            before = state["serving"]
            champion, challenger = before["champion"], before["challenger"]
            check_expected(state, f"start_canary {version}", prod_model=expect_champion, current_data=expect_data)
            if champion is None:
                raise RegistryError(
                    f"cannot start a canary of {version}: there is no champion yet (promote the first model directly)"
                )
            if version in (champion["model_version"], state["prod_model"]):
                raise RegistryError(f"cannot start a canary of {version}: it is the champion")
            if challenger and challenger["model_version"] != version:
                raise RegistryError(
                    f"cannot start a canary of {version}: {challenger['model_version']} is "
                    f"already the challenger (promote it or rollback_canary first)"
                )
            after = {
                **before,
                "challenger": self._pointer(version, artifact),
                "challenger_weight": weight,
                "mode": mode,
            }
            if after == before:
                return {"changed": False, "serving": before}
            state["models"].setdefault(version, {})["stage"] = "canary"
            commit = self._move_serving(
                state,
                after,
                "start_canary",
                f"canary {version} at {weight}% ({mode}) beside {champion['model_version']}: {reason}",
                who,
                reason=reason,
                model_version=version,
                weight=weight,
                mode=mode,
                artifact=artifact,
                champion=champion["model_version"],
            )
            return {"changed": True, "from": before, "serving": after, "commit": commit}

    def set_canary_weight(self, weight: int, reason: str | None = None, *, who: str | None = None) -> dict[str, Any]:
        """Move the challenger's share of traffic to `weight` percent (0..100). Needs a challenger."""
        check_weight(weight)
        check_reason("set_canary_weight", reason)
        with self.transaction():
            state = self.state()
            before = state["serving"]
            if before["challenger"] is None:
                raise RegistryError("cannot set the canary weight: there is no challenger (start_canary first)")
            if before["challenger_weight"] == weight:
                return {"changed": False, "serving": before}
            after = {**before, "challenger_weight": weight}
            challenger = before["challenger"]["model_version"]
            commit = self._move_serving(
                state,
                after,
                "set_canary_weight",
                f"canary {challenger} {before['challenger_weight']}% -> {weight}%: {reason}",
                who,
                reason=reason,
                model_version=challenger,
                previous=before["challenger_weight"],
                weight=weight,
            )
            return {"changed": True, "from": before, "serving": after, "commit": commit}

    def rollback_canary(
        self, reason: str | None = None, *, who: str | None = None, expect_challenger: str | None = None
    ) -> dict[str, Any]:
        """Retire the challenger (stage rolled_back): the champion answers all traffic again.
        Without a challenger nothing changes (`changed: False`). With `expect_challenger`, another
        challenger in place (someone else's canary) is refused, not retired."""
        check_reason("rollback_canary", reason)
        with self.transaction():
            state = self.state()
            before = state["serving"]
            if before["challenger"] is None:
                return {"changed": False, "retired": None, "serving": before}
            retired = before["challenger"]["model_version"]
            if expect_challenger is not None and retired != expect_challenger:
                raise RegistryError(
                    f"rollback_canary refused: the challenger is {retired}, not {expect_challenger}; "
                    f"nothing was changed"
                )
            after = {**before, "challenger": None, "challenger_weight": 0, "mode": "split"}
            state["models"].setdefault(retired, {})["stage"] = "rolled_back"
            champion = (before["champion"] or {}).get("model_version")
            commit = self._move_serving(
                state,
                after,
                "rollback_canary",
                f"rollback canary {retired} (champion {champion} back to 100%): {reason}",
                who,
                reason=reason,
                model_version=retired,
                champion=champion,
                weight=before["challenger_weight"],
            )
            return {
                "changed": True,
                "retired": retired,
                "champion": champion,
                "from": before,
                "serving": after,
                "commit": commit,
            }

    def _move_serving(
        self, state: dict[str, Any], serving: dict[str, Any], action: str, message: str, who: str | None, **audit: Any
    ) -> str:
        state["serving"] = serving
        self._write_state(state)
        self._audit(action, who=who, **audit)
        commit = self._commit(message)
        log(f"registry: {message}")
        return commit
