"""validate_labeled: the dataset's labeled-data contract (its plug-in folder's labeled.json) as a gate."""

from __future__ import annotations

import pandas as pd

from tasks.contracts.suite import validate_frame, write_gate_report
from tasks.core.context import StepContext
from tasks.core.log import log
from tasks.core.records import ContractRecord, WeakLabelRecord
from tasks.runner import step


def contract_view(labeled: pd.DataFrame, classes: int) -> pd.DataFrame:
    """The labeled partition plus the derived columns the contract checks: `covered` (1 if any LF
    voted) and, for each of the `classes` classes k, `label_is_<k>` (1/0, missing where every LF
    abstained): its mean is class k's share of the labeled rows."""
    view = labeled.copy()
    labeled_rows = labeled["label"] != -1
    view["covered"] = labeled_rows.astype(int)
    for k in range(classes):
        view[f"label_is_{k}"] = (labeled["label"] == k).astype("float64").where(labeled_rows)
    return view


@step
def validate_labeled(ctx: StepContext, weak_label: WeakLabelRecord) -> ContractRecord:
    from tasks.datasets import class_names
    from tasks.registry import Registry

    ds = ctx.dataset
    classes = len(class_names(ds))
    labeled = pd.read_parquet(weak_label.labeled)
    registry = Registry(ctx.settings)
    previous = registry.state()["current_data"]
    reference = contract_view(registry.read_data_version(previous), classes) if previous else None
    result = validate_frame(contract_view(labeled, classes), ds.LABELED_CONTRACT, reference=reference)
    log(result.summary())
    return ContractRecord(**write_gate_report(ctx.run_dir, result))


if __name__ == "__main__":
    raise SystemExit(validate_labeled.main())
