"""quarantine: move a rejected landing batch, with the report that rejected it, aside.

Nothing is deleted: quarantine/<batch_id>/ holds the original file and
report.json / report.txt naming every failed expectation. The current data
version is untouched. Re-admit with `python -m tasks.quarantine --readmit BATCH`.
"""
from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Any

from tasks.core.settings import Settings, StateLayout, safe_run_id
from tasks.core.files import atomic_write_bytes, atomic_write_json
from tasks.core.log import log
from tasks.core.steps import record_step


def quarantine_batch(run_id: str, settings: Settings, ingest_result: dict[str, Any],
                     gate: str, gate_result: dict[str, Any]) -> dict[str, Any]:
    layout = settings.layout.ensure()
    batch_id = ingest_result["batch_id"]
    source = Path(ingest_result["source"])
    dest = layout.quarantine / batch_id
    dest.mkdir(parents=True, exist_ok=True)
    # The full contract result (every failed expectation, observed vs expected, offending rows).
    full = json.loads(Path(gate_result["report_json"]).read_text())
    report = {"batch_id": batch_id, "run_id": run_id, "gate": gate, "source": str(source),
              "summary": gate_result["summary"], **full}
    # A batch quarantined again (after a re-admission) keeps its earlier report beside the new one.
    if (dest / "report.json").exists():
        earlier = json.loads((dest / "report.json").read_text())
        if earlier.get("run_id") != run_id:
            (dest / "report.json").rename(dest / f"report.{safe_run_id(earlier.get('run_id') or 'unknown')}.json")
    # Report first, then the move: a kill in between leaves the batch waiting with its report
    # already written, and a re-run repeats both harmlessly.
    atomic_write_json(dest / "report.json", report)
    atomic_write_bytes(dest / "report.txt", (gate_result.get("summary", "") + "\n").encode())
    if source.exists():
        shutil.move(str(source), dest / source.name)
    kept = dest / source.name
    if not kept.exists():
        raise FileNotFoundError(f"quarantine lost track of {source}: not in landing nor in {dest}")
    log(f"quarantined {batch_id} at {dest} (gate {gate}): {gate_result.get('summary', '')}")
    return record_step(layout.run_dir(run_id), "quarantine",
                       {"batch_id": batch_id, "gate": gate, "path": str(dest), "reason": gate_result.get("summary")})


def readmit(settings: Settings, batch_id: str) -> Path:
    """Put a (fixed) quarantined batch back in landing/; its report stays in quarantine/."""
    layout: StateLayout = settings.layout.ensure()
    folder = layout.quarantine / batch_id
    files = [p for p in folder.glob(f"{batch_id}.*") if p.suffix in (".csv", ".parquet")] if folder.is_dir() else []
    if not files:
        raise FileNotFoundError(f"no quarantined batch {batch_id!r} in {layout.quarantine}")
    target = layout.landing / files[0].name
    shutil.move(str(files[0]), target)
    atomic_write_json(folder / "readmitted.json", {"to": str(target)})
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="List quarantined batches, or re-admit one after a fix.")
    parser.add_argument("--readmit", metavar="BATCH_ID", help="move the batch back to landing/ for the next run")
    args = parser.parse_args(argv)
    settings = Settings.from_env()
    if args.readmit:
        print(f"re-admitted to {readmit(settings, args.readmit)}")
        return 0
    for report in sorted(settings.layout.quarantine.glob("*/report.json")):
        r = json.loads(report.read_text())
        print(f"{r['batch_id']}\t{r['gate']}\t{r.get('summary', '').splitlines()[0] if r.get('summary') else ''}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
