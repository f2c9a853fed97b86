"""validate_labeled: the dataset's labeled-data contract (its plug-in folder's labeled.json) as a gate."""

from __future__ import annotations

import pandas as pd

from tasks.contracts.suite import validate_frame, write_gate_report
from tasks.core.context import StepContext
from tasks.core.log import log
from tasks.core.records import ContractRecord, WeakLabelRecord
from tasks.runner import step


def contract_view(labeled: pd.DataFrame) -> pd.DataFrame:
    """The labeled partition plus the derived columns the contract checks:
    `covered` (1 if any LF voted) and `spam_label` (1/0, missing where every LF abstained)."""
    view = labeled.copy()
    view["covered"] = (labeled["label"] != -1).astype(int)
    view["spam_label"] = labeled["label"].where(labeled["label"] != -1).astype("float64")
    return view


@step
def validate_labeled(ctx: StepContext, weak_label: WeakLabelRecord) -> ContractRecord:
    from tasks.datasets import load_dataset
    from tasks.registry import Registry

    labeled = pd.read_parquet(weak_label.labeled)
    registry = Registry(ctx.settings)
    previous = registry.state()["current_data"]
    reference = contract_view(registry.read_data_version(previous)) if previous else None
    result = validate_frame(
        contract_view(labeled), load_dataset(ctx.params.dataset.module).LABELED_CONTRACT, reference=reference
    )
    log(result.summary())
    return ContractRecord(**write_gate_report(ctx.run_dir, result))


if __name__ == "__main__":
    raise SystemExit(validate_labeled.main())
