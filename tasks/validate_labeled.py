"""validate_labeled: the labeled-data contract (data_contracts/labeled.json) as a gate."""
from __future__ import annotations

from typing import Any

import pandas as pd

from tasks.contracts.suite import validate_frame, write_gate_report
from tasks.core.settings import Settings
from tasks.core.files import read_json
from tasks.core.log import log
from tasks.core.steps import record_step, step_cli


def contract_view(labeled: pd.DataFrame) -> pd.DataFrame:
    """The labeled partition plus the derived columns the contract checks:
    `covered` (1 if any LF voted) and `spam_label` (1/0, missing where every LF abstained)."""
    view = labeled.copy()
    view["covered"] = (labeled["label"] != -1).astype(int)
    view["spam_label"] = labeled["label"].where(labeled["label"] != -1).astype("float64")
    return view


def validate_labeled(run_id: str, settings: Settings, weak_label_result: dict[str, Any]) -> dict[str, Any]:
    from tasks.datasets import load_dataset
    from tasks.registry import Registry

    run_dir = settings.layout.run_dir(run_id)
    labeled = pd.read_parquet(weak_label_result["labeled"])
    registry = Registry(settings)
    previous = registry.state()["current_data"]
    reference = contract_view(registry.read_data_version(previous)) if previous else None
    result = validate_frame(contract_view(labeled), load_dataset().LABELED_CONTRACT, reference=reference)
    log(result.summary())
    return record_step(run_dir, "validate_labeled", write_gate_report(run_dir, result))


def main(argv: list[str] | None = None) -> int:
    return step_cli(__doc__, lambda p: None,
                    lambda a, s: validate_labeled(a.run_id, s,
                                                  read_json(s.layout.run_dir(a.run_id) / "steps/weak_label.json")),
                    argv)


if __name__ == "__main__":
    raise SystemExit(main())
