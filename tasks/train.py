"""train: distributed training on a data version (local backend: torchrun processes).

Writes runs/<run_id>/train/{model.pt, train_metrics.json, metrics.jsonl, checkpoints/}.
A retry resumes from the newest valid checkpoint rather than starting over. On the
Kubernetes backend the pods write to SLUICE_TRAIN_OUT_URI and `collect` brings the
outputs into the same folder, so the steps after train see no difference.
"""
from __future__ import annotations

from typing import Any

from tasks.core.params import load_params
from tasks.registry import Registry, check_version
from tasks.core.settings import Settings
from tasks.core.files import read_json
from tasks.core.steps import record_step, step_cli
from tasks.training.local import run_torchrun


def train(run_id: str, settings: Settings, data_version: str, epochs: int | None = None) -> dict[str, Any]:
    check_version("data", data_version)
    p = load_params(overrides={"train": {"epochs": epochs}}).train
    out = settings.layout.run_dir(run_id) / "train"
    run_torchrun(data_version, out, p, init_from=warm_start_version(settings, p))
    return _record(run_id, settings, out)


def warm_start_version(settings: Settings, p) -> str | None:
    """The prod model version to start from (incremental training), if any and if asked for."""
    prod = Registry(settings).state()["prod_model"]
    return prod if (p.warm_start and prod) else None


def collect(run_id: str, settings: Settings, out_uri: str) -> dict[str, Any]:
    """Kubernetes backend: bring a finished pod run's outputs from `out_uri` into the run folder."""
    from tasks.training.outputs import OUTPUTS, fetch_outputs

    out = settings.layout.run_dir(run_id) / "train"
    fetch_outputs(out_uri, out, OUTPUTS)
    return _record(run_id, settings, out, out_uri)


def _record(run_id: str, settings: Settings, out, out_uri: str | None = None) -> dict[str, Any]:
    import json

    from tasks.training.telemetry import summarize

    m = read_json(out / "train_metrics.json")
    lines = (out / "metrics.jsonl").read_text().splitlines() if (out / "metrics.jsonl").exists() else []
    summary = {k: m[k] for k in ("data_version", "rows", "partitions", "epochs", "world_size", "device",
                                 "final_loss", "seconds", "resumed_from_step", "steps", "n_parameters")}
    summary["warm_start"] = m["warm_started_from"]
    summary["metrics"] = summarize([json.loads(x) for x in lines])
    return record_step(settings.layout.run_dir(run_id), "train",
                       {**summary, "model": str(out / "model.pt"), "outputs": out_uri or str(out)})


def main(argv: list[str] | None = None) -> int:
    def args(p):
        p.add_argument("--data-version", required=True, help="e.g. data-v3")
        p.add_argument("--epochs", type=int, help="override params.yaml train.epochs")
    return step_cli(__doc__.splitlines()[0], args, lambda a, s: train(a.run_id, s, a.data_version, a.epochs), argv)


if __name__ == "__main__":
    raise SystemExit(main())
