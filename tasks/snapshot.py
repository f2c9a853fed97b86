"""snapshot: the labeled batch becomes a new partition and a new tagged data version.

Then the landing file moves to landing/archive/. A retry (or a re-run after a kill)
finds the batch already in the current version and creates nothing twice.
"""

from __future__ import annotations

from pathlib import Path

from tasks.core.context import StepContext
from tasks.core.files import file_sha256
from tasks.core.log import log
from tasks.core.records import ContractRecord, IngestRecord, SnapshotRecord, WeakLabelRecord
from tasks.landing.quarantine import move_without_replacing
from tasks.registry import Registry
from tasks.runner import step


@step
def snapshot(
    ctx: StepContext,
    ingest: IngestRecord,
    weak_label: WeakLabelRecord,
    validate_raw: ContractRecord,
    validate_labeled: ContractRecord,
) -> SnapshotRecord:
    layout = ctx.settings.layout.ensure()
    batch_id = ingest.batch_id
    meta = {
        "rows_by_batch": {batch_id: weak_label.rows},
        "source": ingest.source,
        "run_id": ctx.run_id,
        "contracts": {validate_raw.suite: validate_raw.suite_hash, validate_labeled.suite: validate_labeled.suite_hash},
        "lf_module": weak_label.lf_module,
        "lf_module_hash": weak_label.lf_module_hash,
        "label_source": weak_label.chosen,
        "label_quality_dev": weak_label.quality_dev,
        "labeling_stats": weak_label.labeling_stats,
        "lf_analysis": weak_label.lf_table,
        "feedback_gold_version": weak_label.feedback_gold_version,
    }
    source = Path(ingest.source)
    # The delivered file's hash is the batch's identity: a corrected re-delivery under a known batch id
    # is refused by the registry (not taken as "nothing to add"). Gone already (archived by an earlier
    # try of this run): the registry compares the partition instead.
    sources = {batch_id: file_sha256(source)} if source.exists() else None
    result = Registry(ctx.settings).snapshot(
        {batch_id: Path(weak_label.labeled)},
        meta,
        dataset=ctx.dataset.NAME,
        sources=sources,
    )
    if source.exists():
        kept = move_without_replacing(source, layout.archive)  # never onto an archived file
        log(
            f"archived {source.name}"
            + (f" as {kept.name} (another {source.name} is archived)" if kept.name != source.name else "")
        )
    if result.get("reentered"):
        log(f"held batch(es) re-entered {result['data_version']} with their stored labels: {result['reentered']}")
    keep = ("data_version", "created", "parent", "total_rows")
    return SnapshotRecord(
        **{k: result.get(k) for k in keep},
        partitions=len(result["partitions"]),
        reentered=result.get("reentered") or [],
        held=result.get("held") or [],
    )


if __name__ == "__main__":
    raise SystemExit(snapshot.main())
