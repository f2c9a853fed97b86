"""evaluate: the challenger on the gold test set, against the prod champion (a gate).

The champion is scored afresh with the int8 ONNX model it serves, on the same rows.
Passes when ROC AUC clears `evaluate.min_roc_auc` and trails the champion by at
most `evaluate.max_regression`.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from tasks.evaluation.quality import fmt_quality
from tasks.core.params import load_params
from tasks.registry import Registry
from tasks.evaluation.scoring import gold_quality, load_gold_test, predict_onnx, predict_torch
from tasks.core.settings import Settings
from tasks.core.files import read_json
from tasks.core.log import log
from tasks.core.steps import record_step, step_cli


def model_gate(challenger: dict[str, float], champion: dict[str, float] | None, min_auc: float,
               max_regression: float) -> list[str]:
    """Reasons to reject the challenger (empty: it passes). Pure."""
    reasons = []
    if not challenger["roc_auc"] >= min_auc:
        reasons.append(f"test ROC AUC {challenger['roc_auc']:.3f} is below the floor {min_auc:.3f}")
    if champion and not challenger["roc_auc"] >= champion["roc_auc"] - max_regression:
        reasons.append(f"test ROC AUC {challenger['roc_auc']:.3f} trails the prod champion's "
                       f"{champion['roc_auc']:.3f} by more than {max_regression:.3f}")
    return reasons


def evaluate(run_id: str, settings: Settings, train_result: dict[str, Any]) -> dict[str, Any]:
    p = load_params().evaluate
    gold = load_gold_test(settings.layout.gold)
    challenger = gold_quality(predict_torch(Path(train_result["model"]), gold), gold)
    registry = Registry(settings)
    prod = registry.state()["prod_model"]
    champion = gold_quality(predict_onnx(registry.model_path(prod, "model.int8.onnx"), gold), gold) if prod else None
    reasons = model_gate(challenger, champion, p.min_roc_auc, p.max_regression)
    log(f"challenger: {fmt_quality(challenger)}; champion {prod or '(none)'}: {fmt_quality(champion)}; "
        f"{'PASS' if not reasons else 'FAIL: ' + '; '.join(reasons)}")
    return record_step(settings.layout.run_dir(run_id), "evaluate", {
        "passed": not reasons, "reasons": reasons, "challenger": challenger, "champion": champion,
        "champion_version": prod, "test_rows": len(gold)})


def main(argv: list[str] | None = None) -> int:
    return step_cli(__doc__.splitlines()[0], lambda p: None,
                    lambda a, s: evaluate(a.run_id, s, read_json(s.layout.run_dir(a.run_id) / "steps/train.json")),
                    argv)


if __name__ == "__main__":
    raise SystemExit(main())
