"""Steps declared the way tasks/ declares them, for the monitoring tests: each runs through the real
Step.run (and so the real monitoring hook), returning a real record type."""

from __future__ import annotations

import subprocess
import sys
import time

from tasks.core.context import StepContext
from tasks.core.records import CanaryAnalysisRecord, QuarantineRecord, WeakLabelRecord
from tasks.core.settings import REPO_ROOT
from tasks.runner import step


def burn(seconds: float) -> None:
    """Busy CPU in this process for `seconds` (what a labeling step does to a core)."""
    end = time.perf_counter() + seconds
    x = 0
    while time.perf_counter() < end:
        x += 1


def weak_label_record(rows: int = 500, abstained: int = 55) -> WeakLabelRecord:
    return WeakLabelRecord(
        labeled="labeled.parquet",
        rows=rows,
        lf_module="tasks.plugins.emails.lfs",
        lf_module_hash="0",
        labeling_stats={"coverage": 0.89, "conflict_rate": 0.102, "class_shares": [0.8, 0.2]},
        drift=[],
        drift_compared_with=None,
        n_lfs=2,
        coverage=0.89,
        abstained_rows=abstained,
        chosen="majority_vote",
        quality_dev={
            "label_model": {"roc_auc": 0.852, "f1": 0.458, "accuracy": 0.885},
            "majority_vote": {"roc_auc": 0.865, "f1": 0.455, "accuracy": 0.798},
        },
        lf_table=[
            {"lf": "lf_a", "polarity": [0], "coverage": 0.33, "overlaps": 0.33, "conflicts": 0.05, "dev_accuracy": 1.0},
            {
                "lf": "lf_b",
                "polarity": [1],
                "coverage": 0.16,
                "overlaps": 0.15,
                "conflicts": 0.07,
                "dev_accuracy": None,
            },
        ],
    )


@step(record_as="weak_label")
def labeling_work(ctx: StepContext, *, seconds: str = "0.3", children: int = 0) -> WeakLabelRecord:
    """Burns CPU (and in `children` child processes) for `seconds`, then returns a labeling record."""
    procs = [
        subprocess.Popen([sys.executable, "-c", f"import {__name__} as m; m.burn({float(seconds)})"], cwd=REPO_ROOT)
        for _ in range(children)
    ]
    burn(float(seconds))
    for p in procs:
        p.wait(timeout=60)
    return weak_label_record()


@step(record_as="weak_label")
def failing_work(ctx: StepContext) -> WeakLabelRecord:
    burn(0.1)
    raise RuntimeError("the LF module raised")


def canary_record(p99: tuple[float, float] = (4.6, 5.1), auc: tuple[float, float] = (0.78, 0.86), passed=True):
    champion_p99, challenger_p99 = p99
    champion_auc, challenger_auc = auc
    return CanaryAnalysisRecord(
        passed=passed,
        reasons=[],
        model_version="model-v2",
        champion="model-v1",
        steps=[
            {
                "weight": 100,
                "passed": passed,
                "metrics": {
                    "champion": {
                        "requests": 188,
                        "error_rate": 0.0,
                        "p50_ms": 4.1,
                        "p99_ms": champion_p99,
                        "p99_low_ms": champion_p99,
                    },
                    "challenger": {
                        "requests": 592,
                        "error_rate": 0.0,
                        "p50_ms": 4.0,
                        "p99_ms": challenger_p99,
                        "p99_low_ms": challenger_p99,
                    },  # the bound, as a steady tail gives it
                    "psi": 0.29,
                    "quality": {"roc_auc": {"champion": champion_auc, "challenger": challenger_auc}},
                },
                "traffic": {"seconds": 4.0, "variants": {"champion": 188, "challenger": 592}},
            }
        ],
    )


@step(record_as="canary_analysis")
def canary_work(ctx: StepContext, *, p99: str = "5.1", auc: str = "0.86") -> CanaryAnalysisRecord:
    return canary_record(p99=(4.6, float(p99)), auc=(0.78, float(auc)))


@step(record_as="quarantine")
def quarantine_work(ctx: StepContext) -> QuarantineRecord:
    return QuarantineRecord(batch_id="batch-0009", gate="validate_raw", path="q", reason="contract failed")
