"""The registry: a git + DVC repository under SLUICE_HOME that the pipeline owns.

The DVC data-registry pattern: data partitions and model artifacts are DVC-tracked
(content in the cache and the remote), their small .dvc pointers, metadata and the
pointer file `registry.json` are git-tracked. Every change is one git commit made
under a file lock; versions are immutable git tags (`data-vN`, `model-vN`).

    registry.json                   current_data, prod_model, serving state, model stages
    audit.jsonl                     one line per pointer move (who, when, from, to, why)
    data/<dataset>/<batch>.parquet  one partition per batch (DVC-tracked; the plug-in's NAME)
    data/versions/data-vN.json      the partitions in that version + lineage
    models/model-vN/                model.pt, model.fp32.onnx, model.int8.onnx (DVC-tracked)
    models/model-vN.json            lineage: data version, code commit, params hash, metrics, sha256s
    gold/labels/gold-vN.jsonl       gold labels from feedback that version added (+ refused/, versions/)

The parts:
    repo.py     the repository: git/DVC plumbing, lock, transaction(), recovery, commits, audit
    data.py     data versions: snapshot, open/read a version
    models.py   model versions and stages: register, promote, rollback; served_artifact (which file is served)
    serving.py  the serving state (ServingState: champion, challenger, weight, mode), the served file's
                name in a model record: pure
    canary.py   canary releases: start_canary, set_canary_weight, rollback_canary
    gold.py     gold labels from feedback: gold-vN tags (add_gold, gold_rows), test rows refused, conflicts kept
    follow.py   RemoteRegistry: the serving state and model files read through the registry's git URL, read-only
                (a model-server replica on a cluster, SLUICE_REGISTRY_URL)

A killed transaction leaves an uncommitted working tree; the next one starts by
resetting to the last commit, so readers only ever see whole versions.
"""

from __future__ import annotations

from tasks.core.versions import DATA_VERSION, MODEL_VERSION
from tasks.registry.canary import CanaryReleases
from tasks.registry.data import BATCH_ID, DEFAULT_DATASET, DataVersions
from tasks.registry.gold import FEEDBACK, TEST_REFUSAL, GoldStore, is_gold_version
from tasks.registry.models import ModelVersions, file_digest, served_artifact
from tasks.registry.repo import ANY, EMPTY_STATE, MirrorError, RegistryError, RepoBase, check_version, code_commit
from tasks.registry.serving import (
    CHALLENGER,
    CHAMPION,
    MODES,
    SERVED_ARTIFACT,
    SERVED_NAME,
    VARIANTS,
    ServedModel,
    ServingState,
    served_artifact_of,
    serving_state,
)


class Registry(DataVersions, CanaryReleases, GoldStore):
    """The whole registry: data versions, gold versions, model versions, stages and serving, on one repository."""


__all__ = [
    "Registry",
    "RegistryError",
    "MirrorError",
    "ANY",
    "RepoBase",
    "DataVersions",
    "GoldStore",
    "FEEDBACK",
    "TEST_REFUSAL",
    "is_gold_version",
    "ModelVersions",
    "CanaryReleases",
    "check_version",
    "code_commit",
    "serving_state",
    "ServingState",
    "ServedModel",
    "served_artifact",
    "served_artifact_of",
    "SERVED_NAME",
    "CHAMPION",
    "CHALLENGER",
    "VARIANTS",
    "file_digest",
    "EMPTY_STATE",
    "SERVED_ARTIFACT",
    "MODES",
    "BATCH_ID",
    "DEFAULT_DATASET",
    "DATA_VERSION",
    "MODEL_VERSION",
]
