"""evaluate: the challenger on the gold test set, against the prod champion (a gate).

The champion is scored afresh with the ONNX file it serves (the registry's serving state), on the same rows.
Passes when ROC AUC clears `evaluate.min_roc_auc` and trails the champion by at
most `evaluate.max_regression`.
"""

from __future__ import annotations

from pathlib import Path

from tasks.core.context import StepContext
from tasks.core.log import log
from tasks.core.records import EvaluateRecord, TrainRecord
from tasks.evaluation.quality import fmt_quality
from tasks.evaluation.scoring import gold_quality, load_gold_test, predict_onnx, predict_torch
from tasks.registry import Registry, served_artifact
from tasks.runner import step


def model_gate(
    challenger: dict[str, float], champion: dict[str, float] | None, min_auc: float, max_regression: float
) -> list[str]:
    """Reasons to reject the challenger (empty: it passes). Pure."""
    reasons = []
    if not challenger["roc_auc"] >= min_auc:
        reasons.append(f"test ROC AUC {challenger['roc_auc']:.3f} is below the floor {min_auc:.3f}")
    if champion and not challenger["roc_auc"] >= champion["roc_auc"] - max_regression:
        reasons.append(
            f"test ROC AUC {challenger['roc_auc']:.3f} trails the prod champion's "
            f"{champion['roc_auc']:.3f} by more than {max_regression:.3f}"
        )
    return reasons


@step
def evaluate(ctx: StepContext, train: TrainRecord) -> EvaluateRecord:
    p = ctx.params.evaluate
    gold = load_gold_test(ctx.settings.layout.gold)
    ds = ctx.dataset
    challenger = gold_quality(predict_torch(Path(train.model), gold, ds), gold, ds)
    registry = Registry(ctx.settings)
    prod = registry.state()["prod_model"]
    champion_file = registry.model_path(prod, served_artifact(registry, prod)) if prod else None
    champion = gold_quality(predict_onnx(champion_file, gold, ds), gold, ds) if prod else None
    reasons = model_gate(challenger, champion, p.min_roc_auc, p.max_regression)
    log(
        f"challenger: {fmt_quality(challenger)}; champion {prod or '(none)'}: {fmt_quality(champion)}; "
        f"{'PASS' if not reasons else 'FAIL: ' + '; '.join(reasons)}"
    )
    return EvaluateRecord(
        passed=not reasons,
        reasons=reasons,
        challenger=challenger,
        champion=champion,
        champion_version=prod,
        test_rows=len(gold),
    )


if __name__ == "__main__":
    raise SystemExit(evaluate.main())
