"""reproduce_identical: the fraction of the models of three consecutive nightly-like runs that
`python -m tasks.reproduce` rebuilds bit-identically (goal 1.0).

A fresh SLUICE_HOME; three nightly-like runs, each through the steps themselves (`nightly_like`:
ingest -> validate_raw -> weak_label -> validate_labeled -> snapshot -> train -> evaluate ->
compress -> register, then promote, as a run whose canary passed), with small epochs so each
warm-starts from the previous prod model. Then each model version is reproduced (depth 0: its
parent's weights read through the registry) from its recorded commit in a git worktree. The
project's checkout must have that commit: run it on a committed tree (a dirty one is reproduced
from its commit, without the local changes, and the verdict says so; a commit whose code does not
run, or a reproduction that fails, counts as not identical, its error in the details).
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.record import Record

EPOCHS = 3
FAST_COMPRESS = {
    "candidates": [["int8_dynamic"], ["prune_structured(0.5)", "int8_dynamic"]],
    "fine_tune_epochs": 1,
    "latency_repeats": 5,
    "tune_rows": 500,
}


def nightly_like(
    settings,
    run_id: str,
    epochs: int = EPOCHS,
    overrides: dict[str, dict[str, Any]] | None = None,
    promote: bool = True,
) -> dict[str, Any]:
    """One nightly run through the steps (the demo feed delivers the next batch), up to register and,
    when `promote`, the prod pointer moved to the new model. Returns the records by step name."""
    from tasks.compress import compress
    from tasks.core.context import StepContext
    from tasks.evaluate import evaluate
    from tasks.ingest import ingest
    from tasks.promote import promote as promote_step
    from tasks.register import register
    from tasks.snapshot import snapshot
    from tasks.train import train
    from tasks.validate_labeled import validate_labeled
    from tasks.validate_raw import validate_raw
    from tasks.weak_label import weak_label

    over = {"train": {"epochs": epochs}, "compress": FAST_COMPRESS}
    for section, values in (overrides or {}).items():
        over[section] = {**over.get(section, {}), **values}
    ctx = StepContext.create(run_id, settings, overrides=over)
    r: dict[str, Any] = {"ingest": ingest(ctx)}
    r["validate_raw"] = validate_raw(ctx, ingest=r["ingest"])
    assert r["validate_raw"].passed, r["validate_raw"].why
    r["weak_label"] = weak_label(ctx, ingest=r["ingest"])
    r["validate_labeled"] = validate_labeled(ctx, weak_label=r["weak_label"])
    assert r["validate_labeled"].passed, r["validate_labeled"].why
    r["snapshot"] = snapshot(
        ctx,
        ingest=r["ingest"],
        weak_label=r["weak_label"],
        validate_raw=r["validate_raw"],
        validate_labeled=r["validate_labeled"],
    )
    r["train"] = train(ctx, snapshot=r["snapshot"])
    r["evaluate"] = evaluate(ctx, train=r["train"])
    r["compress"] = compress(ctx, train=r["train"])
    assert r["compress"].passed, r["compress"].why
    r["register"] = register(ctx, train=r["train"], evaluate=r["evaluate"], compress=r["compress"])
    if promote:
        r["promote"] = promote_step(ctx, register=r["register"])
    return r


def run() -> list[Record]:
    from tasks.core.settings import Settings
    from tasks.reproduction import reproduce_model

    with tempfile.TemporaryDirectory(prefix="sluice-bench-reproduce-") as tmp:
        env = {"SLUICE_HOME": str(Path(tmp) / "home"), "DVC_NO_ANALYTICS": "1", "GX_ANALYTICS_ENABLED": "false"}
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            settings = Settings.from_env()
            t0 = time.monotonic()
            versions = [nightly_like(settings, f"bench-night-{i}")["register"].model_version for i in (1, 2, 3)]
            build_s = time.monotonic() - t0
            results, t1 = [], time.monotonic()
            for v in versions:
                try:
                    rec = reproduce_model(settings, v, work_dir=Path(tmp) / "reproduce" / v)
                except Exception as exc:  # noqa: BLE001 - a model that cannot be rebuilt counts as not identical
                    results.append({"model_version": v, "verdict": "failed", "error": f"{type(exc).__name__}: {exc}"})
                    continue
                results.append(
                    {
                        "model_version": v,
                        "verdict": rec.verdict,
                        "warm_start": rec.warm_start,
                        "code_commit": rec.code_commit,
                        "weights_max_abs": rec.weights["max_abs"],
                        "inputs_differed": rec.inputs_differed,
                        "summary": rec.summary,
                    }
                )
            reproduce_s = time.monotonic() - t1
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    identical = sum(r["verdict"] == "identical" for r in results)
    return [
        Record(
            "reproduce_identical",
            identical / len(results),
            "fraction",
            ">= 1.0",
            {"models": results, "epochs": EPOCHS, "build_s": round(build_s, 1), "reproduce_s": round(reproduce_s, 1)},
        )
    ]


if __name__ == "__main__":
    for rec in run():
        print(rec.to_dict())
