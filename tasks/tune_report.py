"""tune_report: a tuning study's result. The trial table (runs/<run_id>/tuning/trials.json), the Pareto
front of gold dev ROC AUC against ledger cost and its plot (tuning/pareto.svg), the chosen trial (the
cheapest within `tuning.choose_within` of the best ROC AUC), and a tuned params overlay in the
registry (tuned-vN: study, data version, trial table, chosen trial, its train values), which the
nightly pipeline's train step applies when params.yaml `train.params_overlay` says so.
"""

from __future__ import annotations

from collections import Counter

from tasks.core.context import StepContext
from tasks.core.files import atomic_write_json
from tasks.core.log import log
from tasks.core.records import TunePlanRecord, TuneReportRecord
from tasks.runner import step


@step
def tune_report(ctx: StepContext, tune_plan: TunePlanRecord) -> TuneReportRecord:
    from tasks.registry.tuning import TunedOverlays
    from tasks.tuning.pareto import choose, front, pareto_svg
    from tasks.tuning.space import decode
    from tasks.tuning.study import open_study, spent, trial_rows

    p = ctx.params
    study = open_study(
        ctx.settings.home, tune_plan.study, p.tuning, tune_plan.seed, p.train.epochs, ctx.settings.tuning_storage
    )
    rows = trial_rows(study)
    folder = ctx.run_dir / "tuning"
    table = folder / "trials.json"
    atomic_write_json(table, rows)
    chosen = choose(rows, p.tuning.choose_within)
    on_front = [r["number"] for r in front(rows)]
    plot = pareto_svg(
        rows, chosen["number"] if chosen else None, folder / "pareto.svg", f"study {tune_plan.study}: quality vs cost"
    )
    version = None
    if chosen:
        overlay = {
            "study": tune_plan.study,
            "data_version": tune_plan.data_version,
            "objective": "gold dev ROC AUC (maximize); cost from the ledger's prices",
            "seed": tune_plan.seed,
            "trials": rows,
            "front": on_front,
            "chosen": {k: v for k, v in chosen.items() if k != "neg_auc"},
            "train": decode(chosen["params"], p.tuning.space),
        }
        version = TunedOverlays(ctx.settings).register_overlay(ctx.run_id, overlay)["version"]
    counts = dict(Counter(r["state"] for r in rows))
    best = max((r["value"] for r in rows if r["state"] == "COMPLETE" and r["value"] is not None), default=None)
    log(
        f"study {tune_plan.study}: {counts}, spent {spent(study):.5f}; best dev ROC AUC {best}; "
        f"chosen trial {chosen['number'] if chosen else None} -> {version or 'no overlay (no trial completed)'}"
    )
    return TuneReportRecord(
        study=tune_plan.study,
        data_version=tune_plan.data_version,
        trials=counts,
        spent=spent(study),
        best_value=best,
        chosen={k: v for k, v in chosen.items() if k != "neg_auc"} if chosen else None,
        front=on_front,
        overlay_version=version,
        plot=str(plot),
        table=str(table),
    )


if __name__ == "__main__":
    raise SystemExit(tune_report.main())
