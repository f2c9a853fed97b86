"""Quarantine: rejected batches moved aside with the report that rejected them; nothing is deleted.

quarantine/<batch_id>/ holds the original file and report.json / report.txt naming every failed
expectation (or, for a batch that crashed a step, the runs and tracebacks). `readmit` puts a fixed
batch back in landing/; `listing_line` is one batch's line in `python -m tasks.quarantine`.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path

from tasks.core.files import atomic_create_with, atomic_write_bytes, atomic_write_json, file_sha256
from tasks.core.log import log
from tasks.core.settings import Settings, StateLayout, safe_run_id
from tasks.landing.batches import MAX_BATCH_ATTEMPTS, forget_batch, load_attempts


def _link_or_copy(src: Path, dest: Path) -> None:
    """Make `dest` hold `src`'s bytes; FileExistsError if `dest` exists (never replaced, no race)."""
    try:
        os.link(src, dest)
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        atomic_create_with(dest, lambda tmp: shutil.copy2(src, tmp))  # another filesystem: copied whole, then linked


def move_without_replacing(src: Path, folder: Path) -> Path:
    """Move `src` into `folder` under its name; nothing there is ever replaced. A file of that name
    with the same bytes is the same file (src is dropped: it is kept already); with other bytes,
    src is kept beside it as <stem>.<sha256[:12]><suffix>. Returns where src's bytes now are."""
    folder.mkdir(parents=True, exist_ok=True)
    digest = file_sha256(src)
    for dest in (folder / src.name, folder / f"{src.stem}.{digest[:12]}{src.suffix}"):
        try:
            _link_or_copy(src, dest)
        except FileExistsError:
            if file_sha256(dest) != digest:
                continue  # another file under that name: try the content-named one
        src.unlink()
        return dest
    raise FileExistsError(
        f"cannot keep {src} in {folder}: {folder / src.name} and its content-named alternative both hold other bytes"
    )


def keep_earlier_report(dest: Path, run_id: str) -> None:
    """A batch quarantined again (after a re-admission) keeps its earlier report beside the new one."""
    if not (dest / "report.json").exists():
        return
    try:
        earlier = json.loads((dest / "report.json").read_text()).get("run_id") or "unknown"
    except ValueError:
        earlier = "unknown"
    if earlier != run_id:
        (dest / "report.json").rename(dest / f"report.{safe_run_id(earlier)}.json")


def quarantine_batch(layout: StateLayout, run_id: str, batch_id: str, source: Path, gate: str, gate_result) -> Path:
    """Move a rejected batch to quarantine/<batch_id>/ beside the report of the contract that failed
    it (every failed expectation, observed vs expected, offending rows). Returns the folder."""
    dest = layout.quarantine / batch_id
    dest.mkdir(parents=True, exist_ok=True)
    # The full contract result (every failed expectation, observed vs expected, offending rows).
    full = json.loads(Path(gate_result.report_json).read_text())
    report = {
        "batch_id": batch_id,
        "run_id": run_id,
        "gate": gate,
        "source": str(source),
        "summary": gate_result.summary,
        **full,
    }
    keep_earlier_report(dest, run_id)
    # Report first, then the move: a kill in between leaves the batch waiting with its report
    # already written, and a re-run repeats both harmlessly.
    atomic_write_json(dest / "report.json", report)
    atomic_write_bytes(dest / "report.txt", (gate_result.summary + "\n").encode())
    # Never onto an existing name: a second quarantined file called the same is kept beside the first.
    kept = move_without_replacing(source, dest) if source.exists() else dest / source.name
    if not kept.exists():
        raise FileNotFoundError(f"quarantine lost track of {source}: not in landing nor in {dest}")
    log(f"quarantined {batch_id} at {dest} (gate {gate}): {gate_result.summary}")
    return dest


def readmit(settings: Settings, batch_id: str) -> Path:
    """Put a (fixed) quarantined batch back in landing/; its report stays in quarantine/.

    `batch_id` must be a batch id (the registry's BATCH_ID), and the file moved must lie inside
    quarantine/<batch_id>/ once links are resolved: nothing outside the quarantine is moved."""
    from tasks.registry import BATCH_ID

    if not isinstance(batch_id, str) or not BATCH_ID.fullmatch(batch_id):
        raise ValueError(
            f"{batch_id!r} is not a batch id (letters, digits, '.', '_', '-', starting with a "
            f"letter or digit; no paths)"
        )
    layout: StateLayout = settings.layout.ensure()
    root = layout.quarantine.resolve()
    folder = layout.quarantine / batch_id
    if folder.exists() and folder.resolve().parent != root:
        raise ValueError(f"quarantine/{batch_id} leads outside {root} (to {folder.resolve()}): refusing to move it")
    files = (
        sorted(
            p
            for p in folder.glob(f"{batch_id}.*")
            if p.suffix in (".csv", ".parquet") and p.name == f"{batch_id}{p.suffix}"
        )
        if folder.is_dir()
        else []
    )
    if not files:
        raise FileNotFoundError(f"no quarantined batch {batch_id!r} in {layout.quarantine}")
    source = files[0]
    if source.is_symlink() or not source.is_file() or source.resolve().parent != root / batch_id:
        raise ValueError(f"{source} is not a plain file inside {root / batch_id}: refusing to move it")
    target = layout.landing / source.name
    if target.exists():
        raise FileExistsError(f"{target} is already waiting: refusing to overwrite it")
    _link_or_copy(source, target)  # FileExistsError if one arrived meanwhile: never replaced
    source.unlink()
    atomic_write_json(folder / "readmitted.json", {"to": str(target)})
    forget_batch(layout, target.name)
    from tasks.registry import Registry

    Registry(settings).release_held(batch_id, who="readmit")  # a twice-rejected batch: listed no more
    return target


def readmit_any(settings: Settings, batch_id: str) -> str:
    """`--readmit BATCH`: a batch an operator's rollback left out re-enters the next snapshot (the
    registry marks it); a quarantined one goes back to landing/. Returns what was done, one line."""
    from tasks.registry import BATCH_ID, Registry

    if isinstance(batch_id, str) and BATCH_ID.fullmatch(batch_id):
        entry = Registry(settings).readmit_held(batch_id, who="readmit")
        if entry is not None:
            return f"{batch_id} re-enters the next snapshot with its stored labels (from {entry.get('from_version')})"
    return f"re-admitted to {readmit(settings, batch_id)}"


def quarantine_rejected(layout: StateLayout, entry: dict) -> Path:
    """A held batch rejected `limit` times in a row (tasks/registry/held.py): its delivered file moves
    from landing/archive/ to quarantine/<batch_id>/ beside a report with every rejection. Idempotent
    (a re-run finds it there). Without the delivered file the report says so: the labeled partition
    stays in the registry, in the version the report names."""
    batch = entry["batch_id"]
    dest = layout.quarantine / batch
    dest.mkdir(parents=True, exist_ok=True)
    reasons = [r["reason"] for r in entry.get("rejections", [])]
    sha = (entry.get("partition") or {}).get("source_sha256", "")
    stems = [batch, *([f"{batch}.{sha[:12]}"] if sha else [])]  # archived as is, or content-named beside another
    found = [layout.archive / f"{stem}{suffix}" for stem in stems for suffix in (".csv", ".parquet")]
    archived = next((p for p in found if p.is_file()), None)
    summary = f"batch {batch}: its model was rejected {len(reasons)} times in a row: " + " | ".join(reasons)
    if (dest / "report.json").exists() and json.loads((dest / "report.json").read_text()).get("gate") == "model":
        return dest  # done by an earlier try
    keep_earlier_report(dest, str(entry.get("from_version")))
    report = {"batch_id": batch, "gate": "model", "summary": summary, "rejections": entry.get("rejections", [])}
    report["from_version"] = entry.get("from_version")
    if archived is None:
        report["note"] = f"no delivered file in {layout.archive}: the partition stays in {report['from_version']}"
    atomic_write_json(dest / "report.json", report)
    atomic_write_bytes(dest / "report.txt", (summary + "\n").encode())
    if archived is not None:
        kept = move_without_replacing(archived, dest)
        plain = dest / f"{batch}{kept.suffix}"  # the name readmit looks for; never onto another file
        if kept != plain and not plain.exists():
            kept.rename(plain)
    log(f"quarantined {batch} at {dest} (gate model): {summary}")
    return dest


def first_cause(report: dict) -> str:
    """A quarantine report's first cause, one line: the contract's first failure (the file, then the schema,
    then the columns), or the summary of a report without failures (ingest's, for a batch that crashed a step)."""
    from tasks.contracts.suite import ContractResult

    if report.get("failures") and "suite" in report:
        result = ContractResult.from_dict(report)
        more = len(result.failures) - 1
        return result.first_cause() + (f" (+{more} more in report.txt)" if more else "")
    return " ".join((report.get("summary") or "no cause recorded").split())


def listing_line(report: dict) -> str:
    """`python -m tasks.quarantine`'s line for one batch: its id, the gate that stopped it, its first cause."""
    return f"{report.get('batch_id')}\t{report.get('gate')}\t{first_cause(report)}"


def quarantine_crashing_batch(layout: StateLayout, source: Path, run_id: str) -> Path:
    """Move a batch that MAX_BATCH_ATTEMPTS runs took without consuming to quarantine/<batch_id>/,
    with a report naming those runs and the tracebacks ingest saw. Report first, then the move."""
    entry = load_attempts(layout).get(source.name, {})
    runs = [r for r in entry.get("runs", []) if r != run_id]
    failures = entry.get("failures", [])
    batch_id = source.stem
    dest = layout.quarantine / batch_id
    dest.mkdir(parents=True, exist_ok=True)
    summary = (
        f"batch {source.name} was taken by {len(runs)} runs ({', '.join(runs)}) that did not consume it "
        f"(limit {MAX_BATCH_ATTEMPTS}): a step crashed on it, not a gate. "
        + (
            f"Last ingest error: {failures[-1]['error']}"
            if failures
            else "See those runs' task logs for the traceback."
        )
    )
    report = {
        "batch_id": batch_id,
        "run_id": run_id,
        "gate": "ingest",
        "source": str(source),
        "summary": summary,
        "runs": runs,
        "failures": failures,
    }
    keep_earlier_report(dest, run_id)
    atomic_write_json(dest / "report.json", report)
    atomic_write_bytes(
        dest / "report.txt",
        (summary + "\n" + "".join(f"\n--- run {f['run_id']} ---\n{f['traceback']}" for f in failures)).encode(),
    )
    shutil.move(str(source), dest / source.name)
    forget_batch(layout, source.name)
    log(f"quarantined {batch_id} at {dest} (gate ingest): {summary}")
    return dest


def quarantine_rejected_batches(layout: StateLayout, held: dict[str, dict]) -> list[str]:
    """Every held batch the registry marked quarantined (rejected too often in a row) gets its
    quarantine folder (`quarantine_rejected`; idempotent, so a re-run after a kill completes it)."""
    done = []
    for batch, entry in sorted(held.items()):
        if entry.get("status") == "quarantined":
            quarantine_rejected(layout, entry)
            done.append(batch)
    return done
