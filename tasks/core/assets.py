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
    SERVING_DRIFT   `monitor` (monitor_serving), only when a window of served traffic drifted or skewed, through
                    the alias SERVING_DRIFT_EVENTS: {"event": "serving_drift", "run_id", "window_start",
                    "window_end", "model_versions", "data_versions", "drifted", "skew", "why"}; nightly_pipeline
                    is scheduled on it (and on its cron)

Imported by DAG files at parse time: Airflow's task SDK and nothing else.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import Asset, AssetAlias

DATA_VERSIONS = Asset(name="sluice_data_version", uri="sluice://registry/data", group="sluice")
MODEL_VERSIONS = Asset(name="sluice_model_version", uri="sluice://registry/model", group="sluice")
# The rollback DAG emits through an alias: only for the pointers it actually moved.
ROLLBACK_MOVES = AssetAlias(name="sluice_rollback_moves", group="sluice")
SERVING_DRIFT = Asset(name="sluice_serving_drift", uri="sluice://serving/drift", group="sluice")
# monitor_serving emits through an alias too: an event only for a window that drifted.
SERVING_DRIFT_EVENTS = AssetAlias(name="sluice_serving_drift_events", group="sluice")


def drift_causes(context: Any) -> list[dict[str, Any]]:
    """The extras of the SERVING_DRIFT events that triggered this DAG run ([] for a run of the cron, a
    manual one, or one of `airflow dags test`): an Asset-triggered run carries no conf."""
    events = context.get("triggering_asset_events") or {}
    try:
        found = events[SERVING_DRIFT]
    except KeyError:
        return []
    return [dict(e.extra or {}) for e in found]


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
