"""Data versions: `data-vN` tags, each the parent's partitions plus the new ones.

    data/<dataset>/<batch>.parquet   one partition per batch (DVC-tracked, hardlinked from the cache)
    data/versions/data-vN.json       the partitions of that version (+ md5, rows), parent, lineage

Readers take a version by tag through `DVCFileSystem`: from this workspace, or (with
`repo_url`) from a clone of the registry's git repository, streaming from the DVC remote.
"""

from __future__ import annotations

import json
import re
import shutil
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from tasks.core.files import atomic_write_json
from tasks.core.log import log
from tasks.core.settings import redact
from tasks.registry.held import mark_reentered, mark_to_reenter, reentering, release, waiting
from tasks.registry.repo import RegistryError, RepoBase, check_version, remote_read_errors

BATCH_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
DEFAULT_DATASET = "dataset"  # for callers that name none (tools, tests); the snapshot step names the plug-in


class DataVersions(RepoBase):
    def data_version_info(self, version: str) -> dict[str, Any]:
        check_version("data", version)
        if version not in self.tags("data"):
            raise RegistryError(f"data version {version} does not exist (have: {self.tags('data') or 'none'})")
        return json.loads(self.git("show", f"{version}:data/versions/{version}.json"))

    def snapshot(
        self,
        partitions: dict[str, Path],
        meta: dict[str, Any],
        dataset: str = DEFAULT_DATASET,
        *,
        sources: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """Add labeled partitions ({batch_id: parquet file}) as a new data version: the current
        version's partitions plus these. Only the new files are hashed and pushed.

        `sources` ({batch_id: sha256 of the delivered file}) is recorded with each new partition
        (`source_sha256`): a batch's identity is its content, not only its name.

        Batches held after a rejected challenger (tasks/registry/held.py) re-enter here: the new
        version also holds their stored partitions (`reentered`), and lists what is still held.

        Idempotent: if every batch is already in the current data version with the same content,
        that version is returned. The same batch id with other content (a corrected re-delivery)
        is refused: it would otherwise be taken as "nothing to add". Content is the delivered file's
        sha256 when both sides have one, else the partition file's md5.
        """
        if not partitions:
            raise RegistryError("a snapshot needs at least one partition")
        if not BATCH_ID.match(dataset):
            raise RegistryError(f"dataset name {dataset!r} is not a safe name")
        for batch_id in partitions:
            if not BATCH_ID.match(batch_id):
                raise RegistryError(f"batch id {batch_id!r} is not a safe name")
        with self.transaction():
            state = self.state()
            current = state["current_data"]
            parent = self.data_version_info(current) if current else {"partitions": [], "dataset": dataset}
            if parent["dataset"] != dataset:
                raise RegistryError(
                    f"this registry holds dataset {parent['dataset']!r}, not {dataset!r}: "
                    f"use another SLUICE_HOME for another dataset"
                )
            parts = parent["partitions"]
            have = {p["batch_id"] for p in parts}
            if set(partitions) <= have:
                self._check_same_content(partitions, sources or {}, parts, current)
                log(f"registry: {sorted(partitions)} already in {current}; nothing to add")
                self._push()
                return {"data_version": current, "created": False, **self.data_version_info(current)}
            if set(partitions) & have:
                raise RegistryError(f"batches {sorted(set(partitions) & have)} are already in {current}")
            back = reentering(state, have | set(partitions))  # held after a rejection: back with their labels

            version = self._next_version("data")
            new, targets = self._add_partitions(partitions, dataset, meta.get("rows_by_batch", {}), sources or {})
            info = {
                "version": version,
                "dataset": dataset,
                "parent": current,
                "partitions": [*parts, *back, *new],
                "created_at": datetime.now(timezone.utc).isoformat(),
                **{k: v for k, v in meta.items() if k != "rows_by_batch"},
            }
            info["total_rows"] = sum(p.get("rows") or 0 for p in info["partitions"])
            info["reentered"] = [p["batch_id"] for p in back]
            mark_reentered(state, info["reentered"], version)
            info["held"] = sorted(waiting(state))  # still out after this version: waiting or quarantined
            atomic_write_json(self.root / "data" / "versions" / f"{version}.json", info)
            state["current_data"] = version
            self._write_state(state)
            self._audit(
                "snapshot",
                data_version=version,
                previous=current,
                batches=sorted(partitions),
                reentered=info["reentered"],
            )
            added = sorted(partitions) + [f"{b} (held, re-entered)" for b in info["reentered"]]
            commit = self._commit(f"{version}: add partition(s) {', '.join(added)}", tag=version)
            self._push([str(t) for t in targets])  # only what is new
            log(f"registry: {version} tagged at {commit[:10]} with {len(info['partitions'])} partitions, pushed")
            return {"data_version": version, "created": True, "commit": commit, **info}

    def _add_partitions(
        self, partitions: dict[str, Path], dataset: str, rows: dict[str, int], sources: dict[str, str]
    ) -> tuple[list[dict[str, Any]], list[Path]]:
        """Copy the new partitions into the registry and `dvc add` them (inside the caller's transaction):
        their entries for the version's record, and their paths (what is pushed)."""
        targets = {}
        for batch_id, src in partitions.items():
            rel = Path("data") / dataset / f"{batch_id}.parquet"
            dest = self.root / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.unlink(missing_ok=True)  # never write through a hardlink into the cache
            shutil.copyfile(src, dest)
            targets[batch_id] = rel
        with self._dvc() as repo:
            repo.add([str(self.root / rel) for rel in targets.values()])
        new = [
            {
                "batch_id": b,
                "path": str(rel),
                "md5": _dvc_md5(self.root / f"{rel}.dvc"),
                "rows": rows.get(b),
                **({"source_sha256": sources[b]} if sources.get(b) else {}),
            }
            for b, rel in targets.items()
        ]
        return new, [self.root / rel for rel in targets.values()]

    @staticmethod
    def _check_same_content(
        partitions: dict[str, Path], sources: dict[str, str], parts: list[dict[str, Any]], current: str | None
    ) -> None:
        recorded = {p["batch_id"]: p for p in parts}
        for batch_id, path in partitions.items():
            part = recorded[batch_id]
            if part.get("source_sha256") and sources.get(batch_id):
                same, what = part["source_sha256"] == sources[batch_id], "delivered file's sha256"
            elif sources.get(batch_id):  # a version recorded before source hashes: no way to tell
                log(f"registry: {batch_id} in {current} has no recorded source hash; taking it as the same batch")
                continue
            else:
                same, what = part.get("md5") == _file_md5(Path(path)), "partition's md5"
            if not same:
                raise RegistryError(
                    f"batch {batch_id} is already in {current} with other content (the {what} differs): a "
                    f"corrected re-delivery is not taken under a known batch id, and the versioned original is "
                    f"kept. Deliver it under a new batch id (e.g. {batch_id}-r2), or remove it from landing/"
                )

    # ---- held batches (tasks/registry/held.py) ----------------------------------------------------
    def held(self) -> dict[str, dict[str, Any]]:
        """{batch_id: entry} of the batches out of the current data (held, left out, quarantined)."""
        return waiting(self.state())

    def readmit_held(self, batch_id: str, who: str | None = None) -> dict[str, Any] | None:
        """A batch an operator's rollback left out re-enters the next snapshot (one commit); None when
        no batch is held that way under this id."""
        with self.transaction():
            state = self.state()
            entry = mark_to_reenter(state, batch_id)
            if entry is None:
                return None
            self._write_state(state)
            self._audit("readmit_held", who=who, batch_id=batch_id)
            self._commit(f"{batch_id}: readmitted, re-enters the next snapshot")
            return entry

    def release_held(self, batch_id: str, who: str | None = None) -> bool:
        """A quarantined held batch went back to landing (it will be labeled and snapshotted anew):
        the registry stops listing it. False when it was not held."""
        with self.transaction():
            state = self.state()
            if batch_id not in waiting(state):
                return False
            release(state, [batch_id])
            self._write_state(state)
            self._audit("release_held", who=who, batch_id=batch_id)
            self._commit(f"{batch_id}: released from held (back to landing)")
            return True

    def open_data_version(self, version: str, repo_url: str | None = None) -> tuple[Any, dict[str, Any]]:
        """(a DVC filesystem at the version's tag, the version's metadata): read partitions with
        `fs.open(part["path"], "rb")`, one at a time if need be.

        From this registry's workspace and cache by default; with `repo_url` (a git URL or path
        of the registry, as a training pod sees it) DVC clones the tag and streams the
        partitions from the DVC remote: no disk shared with the pipeline.
        """
        from dvc.api import DVCFileSystem

        check_version("data", version)
        where = repo_url or str(self.root)
        with remote_read_errors(f"data version {version}", where):
            fs = DVCFileSystem(where, rev=version)
            try:
                info = json.loads(fs.read_text(f"data/versions/{version}.json"))
            except FileNotFoundError:
                raise RegistryError(f"data version {version} has no metadata in {redact(where)}") from None
        return fs, info

    def read_data_version(self, version: str, repo_url: str | None = None) -> "Any":
        """All partitions of a data version as one DataFrame, read by tag through DVC."""
        import pandas as pd

        fs, info = self.open_data_version(version, repo_url)
        frames = []
        with remote_read_errors(f"data version {version}", repo_url or self.root):
            for part in info["partitions"]:
                with fs.open(part["path"], "rb") as f:
                    frames.append(pd.read_parquet(f))
        return pd.concat(frames, ignore_index=True)


def _file_md5(path: Path) -> str:
    """The md5 DVC records for a file: of its bytes."""
    import hashlib

    h = hashlib.md5()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def _dvc_md5(dvc_file: Path) -> str:
    import yaml

    outs = yaml.safe_load(dvc_file.read_text())["outs"]
    return outs[0]["md5"]
