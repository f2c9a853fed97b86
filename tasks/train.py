"""train: distributed training on a data version (local backend: torchrun processes).

Writes runs/<run_id>/train/{model.pt, train_metrics.json, metrics.jsonl, checkpoints/}.
A retry resumes from the newest valid checkpoint rather than starting over. On the
Kubernetes backend the pods write to SLUICE_TRAIN_OUT_URI and `collect` brings the
outputs into the same folder, so the steps after train see no difference.
"""

from __future__ import annotations

import json
from pathlib import Path

from tasks.core.context import StepContext
from tasks.core.files import read_json
from tasks.core.records import DriftRetrainRecord, SnapshotRecord, TrainPlanRecord, TrainRecord
from tasks.core.versions import is_data_version
from tasks.runner import step


@step(help={"data_version": "train on this version (default: the one this run's snapshot made)"})
def train(
    ctx: StepContext,
    snapshot: SnapshotRecord | None = None,
    drift_retrain: DriftRetrainRecord | None = None,
    *,
    data_version: str | None = None,
) -> TrainRecord:
    """`drift_retrain`: a drift-triggered run with no new batch trains on the current data version."""
    from tasks.training.local import run_torchrun
    from tasks.training.warm_start import warm_start_version
    from tasks.tuning.overlay import apply_overlay

    version = data_version or (snapshot.data_version if snapshot else None)
    version = version or (drift_retrain.data_version if drift_retrain else None)
    if not version or not is_data_version(version):
        raise ValueError(
            f"train needs a data version like data-v3 (got {version!r}): pass --data-version or run snapshot first"
        )
    out = ctx.run_dir / "train"
    p, overlay, values = apply_overlay(ctx.settings, ctx.params.train)  # train.params_overlay: a tuned-vN
    run_torchrun(version, out, p, init_from=warm_start_version(ctx.settings, p), dataset=ctx.params.dataset.module)
    return _record(out, overlay=overlay, overlay_values=values)


@step(record_as="train")
def collect(ctx: StepContext, plan_train: TrainPlanRecord) -> TrainRecord:
    """Kubernetes backend: bring a finished pod run's outputs from the plan's URI into the run folder."""
    from tasks.training.outputs import OUTPUTS, fetch_outputs

    out = ctx.run_dir / "train"
    fetch_outputs(plan_train.out_uri, out, OUTPUTS)
    overlay = json.loads(plan_train.params).get("params_overlay", "none")
    return _record(out, plan_train.out_uri, overlay=None if overlay == "none" else overlay)


def _record(
    out: Path, out_uri: str | None = None, overlay: str | None = None, overlay_values: dict | None = None
) -> TrainRecord:
    from tasks.training.telemetry import summarize

    m = read_json(out / "train_metrics.json")
    lines = (out / "metrics.jsonl").read_text().splitlines() if (out / "metrics.jsonl").exists() else []
    keep = (
        "data_version",
        "rows",
        "partitions",
        "epochs",
        "world_size",
        "device",
        "final_loss",
        "seconds",
        "resumed_from_step",
        "steps",
        "n_parameters",
    )
    return TrainRecord(
        **{k: m[k] for k in keep},
        warm_start=m["warm_started_from"],
        pretrained=m.get("pretrained"),  # absent from trainings older than pretrained weights
        inputs=m.get("inputs"),
        strategy=m["strategy"],
        resumed_from=m["resumed_from"],
        metrics=summarize([json.loads(x) for x in lines]),
        model=str(out / "model.pt"),
        outputs=out_uri or str(out),
        params_overlay=overlay,
        overlay_values=overlay_values,
    )


if __name__ == "__main__":
    raise SystemExit(train.main())
