"""The compress step's work, without a run folder: export, search, choice, gate, the served file.

`compress_model` takes the trained model, the params, the tuning rows and the gold dev and test
sets, and writes into `out_dir`: model.served.onnx (the chosen file, its `sluice.compression`
metadata holding the chain, configs and lineage), model.fp32.onnx, candidates.json (every
candidate's row and why it was not chosen), pareto.svg and candidates/ (every candidate's file).
It returns the fields of the step's record. The gold test set is measured beside the dev figures,
never used to choose.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tasks.core.files import atomic_write_json, atomic_write_with
from tasks.core.log import log
from tasks.evaluation.quality import fmt_quality

SERVED_FILE, FP32_FILE, TABLE_FILE, PLOT_FILE = "model.served.onnx", "model.fp32.onnx", "candidates.json", "pareto.svg"


@dataclass(frozen=True)
class GoldSplit:
    """Featurized gold rows: inputs, labels, and (dev only) the dataset plug-in's slice masks."""

    X: np.ndarray
    y: np.ndarray
    slices: dict[str, np.ndarray]


def tune_sample(df: Any, rows: int, seed: int, featurize) -> Any:
    """A seeded sample of `rows` labeled rows (weak labels as y) as CompressionData."""
    from tasks.compression.chain import CompressionData

    df = df[df["label"] != -1]
    if len(df) > rows:
        df = df.iloc[np.sort(np.random.default_rng(seed).choice(len(df), rows, replace=False))]
    return CompressionData(featurize(df), df["label"].to_numpy().astype(int))


def _selection_failure(rows: list[dict], reasons: dict[str, str], floor: float, budget: float | None) -> str:
    where = f"floor_ratio {floor:g}" + (f", latency budget {budget:g} ms" if budget else "")
    why = "; ".join(f"{r['name']}: {reasons.get(r['name'], '?')}" for r in rows[:4])
    return f"no candidate passes the selection ({where}), fp32 included: {why}"


def _write_served(cand: Any, served: Path, lineage: dict[str, Any]) -> None:
    from tasks.compression.export import read_metadata, write_metadata

    def write(tmp: Path) -> None:
        shutil.copyfile(cand.onnx_path, tmp)
        write_metadata(tmp, {**read_metadata(tmp), **lineage})

    atomic_write_with(served, write)


def _log_rows(rows: list[dict], chosen_row: dict | None, reasons: dict[str, str]) -> None:
    for r in rows:
        mark = "*" if r is chosen_row else " "
        log(
            f"{mark} {r['name']:<40} {r['size_bytes']:>10,} B  b1 {r['latency_b1_ms']:.3f} ms  "
            f"dev ROC AUC {r['overall']['roc_auc']:.4f}  {reasons.get(r['name'], 'chosen' if r is chosen_row else '')}"
        )


def compress_model(
    model_path: Path, p: Any, data: Any, dev: GoldSplit, test: GoldSplit, out_dir: Path, lineage: dict[str, Any]
) -> dict[str, Any]:
    """Search params `p` (the compress section) over the model at `model_path`; the record's fields."""
    from tasks.compression.export import open_session, predict
    from tasks.compression.plot import pareto_svg
    from tasks.compression.search import run_search
    from tasks.evaluation.quality import classification_metrics
    from tasks.models import load_model

    t0 = time.monotonic()
    workdir = out_dir / "candidates"
    shutil.rmtree(workdir, ignore_errors=True)  # a retry starts clean
    workdir.mkdir(parents=True, exist_ok=True)
    out = run_search(load_model(str(model_path)), p, data, dev.X, dev.y, dev.slices, workdir)
    rows, chosen_row, reasons, cand = out["rows"], out["chosen"], out["reasons"], out["candidate"]
    base_row, base_path = rows[0], workdir / "fp32.onnx"
    gate = (
        list(out["gate"])
        if chosen_row is not None
        else [_selection_failure(rows, reasons, p.floor_ratio, p.latency_budget_ms)]
    )
    fp32_test = classification_metrics(test.y, predict(open_session(base_path), test.X))
    shutil.copyfile(base_path, out_dir / FP32_FILE)
    served = served_bytes = chosen_test = None
    if cand is not None:
        served = out_dir / SERVED_FILE
        _write_served(cand, served, {"name": cand.name, "labels": [c.label for c in cand.chain], **lineage})
        served_bytes = served.stat().st_size
        chosen_test = classification_metrics(test.y, predict(open_session(served), test.X))
    table = {
        "chosen": chosen_row["name"] if chosen_row else None,
        "floor_ratio": p.floor_ratio,
        "latency_budget_ms": p.latency_budget_ms,
        "gold_dev_rows": len(dev.y),
        "slices": sorted(dev.slices),
        "tune_rows": len(data.X),
        "gate": gate,
        "rows": [{**r, "chosen": r is chosen_row, "why_not": reasons.get(r["name"])} for r in rows],
        "not_applied": {k: v for k, v in reasons.items() if k not in {r["name"] for r in rows}},
    }
    atomic_write_json(out_dir / TABLE_FILE, table)
    title = f"{lineage.get('data_version')}: compression candidates (gold dev)"
    plot = pareto_svg(rows, table["chosen"], reasons, out_dir / PLOT_FILE, title)
    _log_rows(rows, chosen_row, reasons)
    seconds = time.monotonic() - t0
    log(
        f"compress: {len(rows)} candidates in {seconds:.1f} s; chosen {table['chosen']} "
        f"({served_bytes or 0:,} B vs fp32 {base_row['size_bytes']:,} B), test {fmt_quality(chosen_test)}; "
        f"{'PASS' if not gate else 'FAIL: ' + '; '.join(gate)}"
    )
    chosen = chosen_row or {}
    return dict(
        passed=not gate,
        reasons=gate,
        chosen=cand.name if cand else None,
        chain=cand.configs if cand else [],
        path=str(served) if served else None,
        bytes=served_bytes,
        quality=chosen.get("overall"),
        slices=chosen.get("slices", {}),
        test=chosen_test,
        latency_b1_ms=chosen.get("latency_b1_ms"),
        latency_b256_ms=chosen.get("latency_b256_ms"),
        parity_max_abs=out["parity_max_abs"],
        fp32_path=str(out_dir / FP32_FILE),
        fp32_bytes=(out_dir / FP32_FILE).stat().st_size,
        fp32_quality=base_row["overall"],
        fp32_slices=base_row["slices"],
        fp32_test=fp32_test,
        fp32_latency_b1_ms=base_row["latency_b1_ms"],
        torch_bytes=model_path.stat().st_size,
        table=str(out_dir / TABLE_FILE),
        plot=str(plot),
        seconds=seconds,
    )
