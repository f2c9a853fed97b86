"""Sluice's Airflow Assets: a user's own DAG can be scheduled on a new data or model version.

    from airflow.sdk import dag
    from tasks.core.assets import MODEL_VERSIONS     # or Asset.ref(name="sluice_model_version")

    @dag(schedule=[MODEL_VERSIONS])
    def on_new_model(): ...

Who emits what (each event's `extra` carries the version; see docs/assets.md):

    DATA_VERSIONS   `snapshot` (nightly_pipeline): {"event": "snapshot", "data_version", "created", "total_rows",
                    "run_id"}; the `rollback` DAG when it moves the current-data pointer: {"event": "rollback",
                    "data_version", "previous", "run_id"}
    MODEL_VERSIONS  `register` (nightly_pipeline): {"event": "register", "model_version", "data_version",
                    "created", "run_id"}; the `rollback` DAG when it moves the prod model: {"event": "rollback",
                    "model_version", "previous", "run_id"}

Imported by DAG files at parse time: Airflow's task SDK and nothing else.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import Asset, AssetAlias

DATA_VERSIONS = Asset(name="sluice_data_version", uri="sluice://registry/data", group="sluice")
MODEL_VERSIONS = Asset(name="sluice_model_version", uri="sluice://registry/model", group="sluice")
# The rollback DAG emits through an alias: only for the pointers it actually moved.
ROLLBACK_MOVES = AssetAlias(name="sluice_rollback_moves", group="sluice")


def snapshot_extra(record: Any, run_id: str) -> dict[str, Any]:
    """The DATA_VERSIONS event's extra for a SnapshotRecord."""
    return {
        "event": "snapshot",
        "data_version": record.data_version,
        "created": record.created,
        "total_rows": record.total_rows,
        "run_id": run_id,
    }


def register_extra(record: Any, run_id: str) -> dict[str, Any]:
    """The MODEL_VERSIONS event's extra for a RegisterRecord."""
    return {
        "event": "register",
        "model_version": record.model_version,
        "data_version": record.data_version,
        "created": record.created,
        "run_id": run_id,
    }


def rollback_events(record: Any, run_id: str) -> list[tuple[Asset, dict[str, Any]]]:
    """(asset, extra) for each pointer a RollbackRecord moved: none when nothing changed."""
    out = []
    for asset, key in ((DATA_VERSIONS, "data_version"), (MODEL_VERSIONS, "model_version")):
        before, after = record.before.get(key), record.after.get(key)
        if record.changed and after and after != before:
            out.append((asset, {"event": "rollback", key: after, "previous": before, "run_id": run_id}))
    return out
