"""snapshot: the labeled batch becomes a new partition and a new tagged data version.

Then the landing file moves to landing/archive/. A retry (or a re-run after a kill)
finds the batch already in the current version and creates nothing twice.
"""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from tasks.registry import Registry
from tasks.core.settings import Settings
from tasks.core.files import read_json
from tasks.core.log import log
from tasks.core.steps import record_step, step_cli


def snapshot(run_id: str, settings: Settings, ingest_result: dict[str, Any], weak_label_result: dict[str, Any],
             raw_gate: dict[str, Any], labeled_gate: dict[str, Any]) -> dict[str, Any]:
    layout = settings.layout.ensure()
    batch_id = ingest_result["batch_id"]
    meta = {
        "rows_by_batch": {batch_id: weak_label_result["rows"]}, "source": ingest_result["source"], "run_id": run_id,
        "contracts": {raw_gate["suite"]: raw_gate["suite_hash"], labeled_gate["suite"]: labeled_gate["suite_hash"]},
        "lf_module": weak_label_result["lf_module"], "lf_module_hash": weak_label_result["lf_module_hash"],
        "label_source": weak_label_result["chosen"], "label_quality_dev": weak_label_result["quality_dev"],
        "labeling_stats": weak_label_result["labeling_stats"], "lf_analysis": weak_label_result["lf_table"],
    }
    from tasks.datasets import load_dataset

    result = Registry(settings).snapshot({batch_id: Path(weak_label_result["labeled"])}, meta,
                                         dataset=load_dataset().NAME)
    source = Path(ingest_result["source"])
    if source.exists():
        shutil.move(str(source), layout.archive / source.name)
        log(f"archived {source.name}")
    keep = ("data_version", "created", "parent", "total_rows")
    return record_step(layout.run_dir(run_id), "snapshot",
                       {**{k: result.get(k) for k in keep}, "partitions": len(result["partitions"])})


def main(argv: list[str] | None = None) -> int:
    def run(a, s):
        steps = s.layout.run_dir(a.run_id) / "steps"
        return snapshot(a.run_id, s, read_json(steps / "ingest.json"), read_json(steps / "weak_label.json"),
                        read_json(steps / "validate_raw.json"), read_json(steps / "validate_labeled.json"))
    return step_cli(__doc__.splitlines()[0], lambda p: None, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
