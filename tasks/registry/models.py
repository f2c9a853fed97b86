"""Model versions, their stages, and the prod pointer.

    models/model-vN/        the artifacts (DVC-tracked): model.pt, model.fp32.onnx, model.int8.onnx
    models/model-vN.json    lineage (data version, code commit, params hash, metrics) and, per
                            artifact, its sha256 and size: {"artifacts": {name: {"sha256", "bytes"}}}

Stages (registry.json "models"): candidate (registered), canary (the serving challenger),
prod (the champion), archived (replaced by a newer prod), rolled_back (replaced by a
rollback, or a challenger retired by rollback_canary).

`promote` and `rollback` also set the serving state (serving.py): the champion is the prod
model and any challenger is cleared.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from tasks.core.files import atomic_write_json
from tasks.core.log import log
from tasks.core.settings import redact
from tasks.registry.gto_tags import sync as sync_gto_tags
from tasks.registry.held import hold_left_out, release
from tasks.registry.repo import (
    ANY,
    MirrorError,
    RegistryError,
    RepoBase,
    check_expected,
    check_version,
    remote_read_errors,
)
from tasks.registry.serving import (
    ServedModel,
    ServingState,
    artifact_path,
    check_artifact_name,
    served_artifact_of,
    serving_state,
)


def file_digest(path: Path) -> dict[str, Any]:
    """{"sha256": hex, "bytes": size} of a file, read in 1 MiB blocks."""
    h, size = hashlib.sha256(), 0
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
            size += len(block)
    return {"sha256": h.hexdigest(), "bytes": size}


def served_artifact(registry: ModelVersions, version: str) -> str:
    """The file of `version` that serving loads (a file name in its version folder): the file its
    pointer names while it is served (champion or challenger), else the one its model record names."""
    pointer = registry.serving().pointer(version)
    if pointer is not None:
        return pointer.artifact_name
    return served_artifact_of(registry.model_version_info(version))


class ModelVersions(RepoBase):
    def state(self) -> dict[str, Any]:
        """registry.json, its serving value in the current shape (an old one is normalized)."""
        state = super().state()
        state["serving"] = serving_state(state)
        return state

    def serving(self) -> ServingState:
        """The serving state, typed (what the model server follows)."""
        return ServingState.of(super().state())

    def _mirror(self) -> None:
        """Before each push to the git mirror (and at the end of every transaction): GTO tags for what
        the committed registry.json says (gto_tags.py), so the mirror gets them with the commit."""
        try:
            added = sync_gto_tags(self.root, json.loads(self.git("show", "HEAD:registry.json")))
        except RuntimeError as exc:
            raise MirrorError(f"committed, but the GTO tags could not be written (a retry writes them): {exc}") from exc
        if added:
            log(f"registry: GTO tags {', '.join(added)}")
        super()._mirror()

    def model_version_info(self, version: str) -> dict[str, Any]:
        check_version("model", version)
        if version not in self.tags("model"):
            raise RegistryError(f"model version {version} does not exist (have: {self.tags('model') or 'none'})")
        return json.loads(self.git("show", f"{version}:models/{version}.json"))

    def register_model(self, run_id: str, artifacts: dict[str, Path], lineage: dict[str, Any]) -> dict[str, Any]:
        """New immutable model version (stage: candidate), each artifact's sha256 recorded.
        Idempotent per run id."""
        for name in artifacts:
            check_artifact_name(name)
        with self.transaction():
            for existing in self.tags("model"):
                info = self.model_version_info(existing)
                if info.get("run_id") == run_id:
                    log(f"registry: run {run_id} already registered as {existing}")
                    self._push()
                    return {"model_version": existing, "created": False, **info}
            version = self._next_version("model")
            folder = self.root / "models" / version
            folder.mkdir(parents=True, exist_ok=True)
            for name, src in artifacts.items():
                # Never write through a hardlink into the DVC cache: a registration killed after its
                # `dvc add` leaves the folder (ignored, so recovery keeps it) linked to the cache.
                (folder / name).unlink(missing_ok=True)
                shutil.copyfile(src, folder / name)
            digests = {name: file_digest(folder / name) for name in sorted(artifacts)}
            with self._dvc() as repo:
                repo.add(str(folder))
            info = {
                "version": version,
                "run_id": run_id,
                "artifacts": digests,
                "created_at": datetime.now(timezone.utc).isoformat(),
                **lineage,
            }
            atomic_write_json(self.root / "models" / f"{version}.json", info)
            state = self.state()
            state["models"][version] = {"stage": "candidate"}
            self._write_state(state)
            self._audit("register", model_version=version, run_id=run_id, data_version=lineage.get("data_version"))
            commit = self._commit(f"{version}: register from run {run_id}", tag=version)
            self._push([str(folder)])
            log(f"registry: {version} registered at {commit[:10]} (candidate)")
            return {"model_version": version, "created": True, "commit": commit, **info}

    def model_path(self, version: str, artifact: str) -> Path:
        check_version("model", version)
        return self.root / "models" / version / artifact

    def read_model_artifact(self, version: str, artifact: str, repo_url: str | None = None) -> bytes:
        """A registered model's file, read by tag through DVC (from the remote with `repo_url`).

        In the local registry the version's file is in the workspace (versions are immutable, and the
        file is the DVC cache's object, hardlinked): read it directly, which spares the model server
        importing DVC at start. Callers that need integrity check the recorded sha256 either way."""
        check_version("model", version)
        local = self.root / "models" / version / artifact
        if repo_url is None and "/" not in artifact and local.is_file():
            return local.read_bytes()
        from dvc.api import DVCFileSystem

        where = repo_url or str(self.root)
        with remote_read_errors(f"model version {version}", where):  # redacted: a URL may carry a password
            fs = DVCFileSystem(where, rev=version)
            try:
                return fs.read_bytes(f"models/{version}/{artifact}")
            except FileNotFoundError:
                raise RegistryError(f"model version {version} has no {artifact} in {redact(where)}") from None

    def _pointer(self, version: str, artifact: str) -> dict[str, Any]:
        """What the server loads for `version` (a ServedModel as registry.json holds it).
        The sha256 comes from the model record; a record made before they were recorded has the
        registered file hashed. Refused if the version has no such artifact."""
        check_artifact_name(artifact)
        recorded = self.model_version_info(version).get("artifacts")  # a dict; a list in old records
        path = self.model_path(version, artifact)
        listed = recorded is None or artifact in recorded  # no list at all: trust the folder
        if not listed or (not isinstance(recorded, dict) and not path.is_file()):
            raise RegistryError(
                f"model version {version} has no artifact {artifact!r} "
                f"(has: {', '.join(sorted(recorded or [])) or 'none'})"
            )
        sha = recorded[artifact]["sha256"] if isinstance(recorded, dict) else file_digest(path)["sha256"]
        return ServedModel(model_version=version, artifact=artifact_path(version, artifact), sha256=sha).model_dump()

    def promote(
        self,
        version: str,
        reason: str,
        artifact: str | None = None,
        who: str | None = None,
        *,
        expect_champion: Any = ANY,
        expect_data: Any = ANY,
    ) -> dict[str, Any]:
        """Move the prod pointer to `version`: the previous prod becomes archived, and the serving
        state becomes champion=version, no challenger (a displaced challenger is archived).
        `artifact` None: the file the version is served from (`served_artifact`). Idempotent.

        Compare-and-set: with `expect_champion` (the prod model `version` was evaluated against; None:
        none yet) and/or `expect_data` (the data version it was trained on, which must still be the
        current one), a registry that moved since is refused (RegistryError naming what moved)."""
        check_version("model", version)
        if artifact is not None:
            check_artifact_name(artifact)
        with self.transaction():
            if version not in self.tags("model"):
                raise RegistryError(f"model version {version} does not exist")
            artifact = artifact or served_artifact(self, version)
            state = self.state()
            previous, before = state["prod_model"], state["serving"]
            serving = serving_state({"serving": {"champion": self._pointer(version, artifact)}})
            if previous == version and before == serving:
                return {"prod_model": version, "previous": previous, "changed": False}
            check_expected(state, f"promote {version}", prod_model=expect_champion, current_data=expect_data)
            challenger = (before["challenger"] or {}).get("model_version")
            for retired in {previous, challenger} - {None, version}:
                state["models"].setdefault(retired, {})["stage"] = "archived"
            state["models"].setdefault(version, {})["stage"] = "prod"
            state["prod_model"], state["serving"] = version, serving
            self._write_state(state)
            self._audit(
                "promote",
                who=who,
                model_version=version,
                previous=previous,
                challenger=challenger,
                artifact=artifact,
                reason=reason,
            )
            commit = self._commit(f"promote {version} to prod (was {previous}): {reason}")
            log(f"registry: prod model {previous} -> {version}")
            return {"prod_model": version, "previous": previous, "changed": True, "commit": commit, "serving": serving}

    def rollback_to_prod_lineage(
        self,
        reason: str,
        who: str | None = None,
        *,
        expect_prod: Any = ANY,
        expect_data: Any = ANY,
        quarantine_after: int | None,
    ) -> dict[str, Any]:
        """After a rejected challenger: prod stays, and the data pointer returns to the version
        prod was trained on, so data and model move back together. No prod yet: nothing changes.
        The batches the pointer leaves out are held (tasks/registry/held.py): they re-enter the next
        snapshot, and the `quarantine_after`-th rejection in a row marks them quarantined (the
        result's `quarantined`; the pipeline moves their files to quarantine/). `quarantine_after`
        None: the challenger was not judged (held.hold_left_out); the hold is no rejection.

        Read and write in one transaction (a rollback cannot slip in between). Compare-and-set:
        with `expect_prod` (the prod model the run evaluated against) and/or `expect_data` (the
        data version the run made and trained on), a registry that moved since is refused."""
        with self.transaction():
            state = self.state()
            action = "putting the data pointer back to the prod model's lineage"
            check_expected(state, action, prod_model=expect_prod)
            prod = state["prod_model"]
            if prod is None:
                return {"changed": False, "reason": "no prod model yet: nothing to roll back to"}
            lineage = self.model_version_info(prod)["data_version"]
            if state["current_data"] != lineage:  # already there (a retry): nothing to compare
                check_expected(state, action, current_data=expect_data)
            return self._rollback(lineage, prod, reason, who, None, hold=(True, quarantine_after))

    def rollback(
        self,
        data_version: str | None,
        model_version: str | None,
        reason: str,
        who: str | None = None,
        artifact: str | None = None,
    ) -> dict[str, Any]:
        """Put the current-data pointer, the prod model and the serving state back, as one commit.

        Either version may be None (that pointer stays). Both are validated before anything
        changes; versions are never deleted. The champion becomes the prod model (`artifact`,
        default: the file it is served from, `served_artifact`) and any
        challenger is retired (stage rolled_back). Running it again is a no-op (`changed: False`).
        """
        problems = []  # every problem at once: a missing reason must not hide a bad version
        if data_version is None and model_version is None:
            problems.append("rollback needs a data version, a model version, or both")
        for kind, version in (("data", data_version), ("model", model_version)):
            if version is not None:
                try:
                    check_version(kind, version)
                except RegistryError as exc:
                    problems.append(str(exc))
        if not reason or not reason.strip():
            problems.append("rollback needs a reason (it goes into the audit log)")
        if problems:
            raise RegistryError("; ".join(problems))
        if artifact is not None:
            check_artifact_name(artifact)
        with self.transaction():
            return self._rollback(data_version, model_version, reason, who, artifact, hold=(False, 0))

    def _rollback(
        self,
        data_version: str | None,
        model_version: str | None,
        reason: str,
        who: str | None,
        artifact: str | None,
        *,
        hold: tuple[bool, int | None],
    ) -> dict[str, Any]:
        """`rollback`'s move, inside a transaction the caller holds (arguments already checked).
        `hold`: (a rejected challenger's?, its quarantine limit) for the batches the data pointer
        leaves out (held.hold_left_out); an operator's rollback holds them until a readmit."""
        for kind, version in (("data", data_version), ("model", model_version)):
            if version is not None and version not in self.tags(kind):
                raise RegistryError(
                    f"cannot roll back to {version}: no such {kind} version "
                    f"(have: {', '.join(self.tags(kind)) or 'none'})"
                )
        state = self.state()
        before = {"data_version": state["current_data"], "model_version": state["prod_model"]}
        after = {
            "data_version": data_version or before["data_version"],
            "model_version": model_version or before["model_version"],
        }
        model = after["model_version"]
        champion = self._pointer(model, artifact or served_artifact(self, model)) if model else None
        serving = serving_state({"serving": {"champion": champion}})
        if before == after and state["serving"] == serving:
            log(f"registry: already at {after}; nothing to roll back")
            return {"changed": False, "from": before, "to": after}
        challenger = (state["serving"]["challenger"] or {}).get("model_version")
        if challenger and challenger != after["model_version"]:
            state["models"].setdefault(challenger, {})["stage"] = "rolled_back"
        state["current_data"] = after["data_version"]
        left_out, quarantined = self._hold_left_out(state, before["data_version"], after["data_version"], reason, hold)
        if model_version and model_version != before["model_version"]:
            if before["model_version"]:
                state["models"][before["model_version"]]["stage"] = "rolled_back"
            state["models"].setdefault(model_version, {})["stage"] = "prod"
        state["prod_model"], state["serving"] = after["model_version"], serving
        self._write_state(state)
        self._audit("rollback", who=who, reason=reason, challenger=challenger, **{"from": before, "to": after})
        commit = self._commit(f"rollback to {after['data_version']} / {after['model_version']}: {reason}")
        log(f"registry: rolled back {before} -> {after} ({reason})")
        return {
            "changed": True,
            "from": before,
            "to": after,
            "commit": commit,
            "serving": serving,
            "retired_challenger": challenger if challenger != after["model_version"] else None,
            "held": left_out,
            "quarantined": quarantined,
        }

    def _hold_left_out(
        self, state: dict[str, Any], before: str | None, after: str | None, reason: str, hold: tuple[bool, int | None]
    ) -> tuple[list[str], list[str]]:
        """The partitions of `before` that `after` lacks are held; those in `after` are no longer.
        Returns (the batch ids held now, those quarantined now)."""
        if before is None or before == after:
            return [], []
        kept = {p["batch_id"] for p in self.data_version_info(after)["partitions"]} if after else set()
        release(state, sorted(kept))
        left_out = [p for p in self.data_version_info(before)["partitions"] if p["batch_id"] not in kept]
        rejected, limit = hold
        quarantined = hold_left_out(state, left_out, before, reason=reason, rejected=rejected, limit=limit)
        return [p["batch_id"] for p in left_out], quarantined
