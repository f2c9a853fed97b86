"""compress: the compression search on the trained model, the choice, the gate (a gate step).

1. The trained model is exported to fp32 ONNX (the baseline: the reference, and the fallback).
2. Every chain of params.yaml `compress.candidates` is applied to it (tasks/compression:
   pruning, low-rank, distillation on the torch side, then fp16 / dynamic / static int8),
   with recovery fine-tunes and calibration on a sample of the data version's training rows.
3. Each candidate is measured on the gold DEV set (never the test set): ROC AUC overall and on
   each slice of the dataset plug-in (`slices(df)`, optional), file size, batch-1 / batch-256
   latency (onnxruntime, one thread).
4. The choice: among the candidates (fp32 included) that keep `floor_ratio` x fp32's ROC AUC
   overall and on every slice and fit `latency_budget_ms`, the smallest on the size/latency
   Pareto front.
5. The gate: the fp32 exports match torch (max |dp| <= `parity_atol`), the chosen one keeps the
   floor, and it gives no NaN/inf on probe rows with extreme inputs. A failed gate ends on the
   reject branch (prod stays).

Writes runs/<run_id>/compress/: model.served.onnx (the chosen file, what register stores and
serving loads; its `sluice.compression` metadata holds the chain, configs and lineage),
model.fp32.onnx, candidates.json (every candidate's row and why it was not chosen),
pareto.svg, and candidates/ (every candidate's file).
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

from tasks.core.context import StepContext
from tasks.core.files import atomic_write_json, atomic_write_with
from tasks.core.log import log
from tasks.core.records import CompressRecord, TrainRecord
from tasks.evaluation.quality import fmt_quality
from tasks.runner import step

SERVED_FILE, FP32_FILE, TABLE_FILE, PLOT_FILE = "model.served.onnx", "model.fp32.onnx", "candidates.json", "pareto.svg"


def training_rows(ctx: StepContext, data_version: str, rows: int, ds) -> Any:
    """A seeded sample of `rows` labeled rows of the data version (weak labels as y) as CompressionData."""
    from tasks.compression.chain import CompressionData
    from tasks.registry import Registry

    df = Registry(ctx.settings).read_data_version(data_version)
    df = df[df["label"] != -1]
    if len(df) > rows:
        df = df.iloc[np.sort(np.random.default_rng(ctx.params.compress.seed).choice(len(df), rows, replace=False))]
    return CompressionData(ds.featurize(df), df["label"].to_numpy().astype(int))


def _selection_failure(rows: list[dict], reasons: dict[str, str], floor: float, budget: float | None) -> str:
    where = f"floor_ratio {floor:g}" + (f", latency budget {budget:g} ms" if budget else "")
    why = "; ".join(f"{r['name']}: {reasons.get(r['name'], '?')}" for r in rows[:4])
    return f"no candidate passes the selection ({where}), fp32 included: {why}"


def slice_summary(row: dict, reference: dict) -> tuple[str, float] | None:
    """The slice where `row` keeps the least of the reference's ROC AUC: (name, its ROC AUC)."""
    ratios = [
        (row["slices"][k]["roc_auc"] / reference["slices"][k]["roc_auc"], k)
        for k in row.get("slices", {})
        if reference["slices"].get(k, {}).get("roc_auc") and row["slices"][k]["roc_auc"] == row["slices"][k]["roc_auc"]
    ]
    if not ratios:
        return None
    _, name = min(ratios)
    return name, row["slices"][name]["roc_auc"]


@step
def compress(ctx: StepContext, train: TrainRecord) -> CompressRecord:
    import pandas as pd

    from tasks.compression.export import open_session, predict, read_metadata, write_metadata
    from tasks.compression.plot import pareto_svg
    from tasks.compression.search import run_search, torch_onnx_parity
    from tasks.datasets import load_dataset
    from tasks.evaluation.quality import classification_metrics
    from tasks.evaluation.scoring import load_gold_test
    from tasks.registry import Registry
    from tasks.training.model import load_model

    t0 = time.monotonic()
    p = ctx.params.compress
    ds = load_dataset(ctx.params.dataset.module)
    out_dir = ctx.run_dir / "compress"
    workdir = out_dir / "candidates"
    shutil.rmtree(workdir, ignore_errors=True)  # a retry starts clean
    workdir.mkdir(parents=True, exist_ok=True)
    model_path = Path(train.model)
    model = load_model(str(model_path))

    gold_dir = ctx.settings.layout.gold
    dev, test = pd.read_parquet(gold_dir / "dev.parquet"), load_gold_test(gold_dir)
    dev_X, dev_y = ds.featurize(dev), dev[ds.GOLD_COLUMN].to_numpy()
    masks = ds.slices(dev) if callable(getattr(ds, "slices", None)) else {}
    data = training_rows(ctx, train.data_version, p.tune_rows, ds)

    out = run_search(model, p, data, dev_X, dev_y, masks, workdir)
    rows, chosen_row, reasons = out["rows"], out["chosen"], out["reasons"]
    base_row, cand = rows[0], out["candidate"]
    base_path = workdir / "fp32.onnx"
    gate_reasons = list(out["gate"])
    if chosen_row is None:
        gate_reasons = [_selection_failure(rows, reasons, p.floor_ratio, p.latency_budget_ms)]

    # Parity of the fp32 exports with torch (also inside the gate; the figure goes into the record).
    probe = data.X[:256]
    parity = 0.0
    if cand is not None:
        parity = torch_onnx_parity(cand, probe)
        if cand.parent is not None:
            parity = max(parity, torch_onnx_parity(cand.parent, probe))

    # The gold test set: reported beside the dev figures, never used to choose.
    test_X, test_y = ds.featurize(test), test[ds.GOLD_COLUMN].to_numpy()
    fp32_test = classification_metrics(test_y, predict(open_session(base_path), test_X))
    shutil.copyfile(base_path, out_dir / FP32_FILE)

    served = served_bytes = chosen_test = None
    if cand is not None:
        prod = Registry(ctx.settings).state()["prod_model"]
        served = out_dir / SERVED_FILE
        lineage = {
            "name": cand.name,
            "labels": [c.label for c in cand.chain],
            "parent": FP32_FILE,
            "source_model": "model.pt",
            "run_id": ctx.run_id,
            "data_version": train.data_version,
            "parent_model": prod,
        }

        def write_served(tmp: Path) -> None:
            shutil.copyfile(cand.onnx_path, tmp)
            write_metadata(tmp, {**read_metadata(tmp), **lineage})

        atomic_write_with(served, write_served)
        served_bytes = served.stat().st_size
        chosen_test = classification_metrics(test_y, predict(open_session(served), test_X))

    table = {
        "chosen": chosen_row["name"] if chosen_row else None,
        "floor_ratio": p.floor_ratio,
        "latency_budget_ms": p.latency_budget_ms,
        "gold_dev_rows": len(dev),
        "slices": sorted(masks),
        "tune_rows": len(data.X),
        "gate": gate_reasons,
        "rows": [{**r, "chosen": r is chosen_row, "why_not": reasons.get(r["name"])} for r in rows],
        "not_applied": {k: v for k, v in reasons.items() if k not in {r["name"] for r in rows}},
    }
    atomic_write_json(out_dir / TABLE_FILE, table)
    plot = pareto_svg(
        rows, table["chosen"], reasons, out_dir / PLOT_FILE, f"{train.data_version}: compression candidates (gold dev)"
    )

    for r in rows:
        mark = "*" if r is chosen_row else " "
        log(
            f"{mark} {r['name']:<40} {r['size_bytes']:>10,} B  b1 {r['latency_b1_ms']:.3f} ms  "
            f"dev ROC AUC {r['overall']['roc_auc']:.4f}  {reasons.get(r['name'], 'chosen' if r is chosen_row else '')}"
        )
    seconds = time.monotonic() - t0
    log(
        f"compress: {len(rows)} candidates in {seconds:.1f} s; chosen {table['chosen']} "
        f"({served_bytes or 0:,} B vs fp32 {base_row['size_bytes']:,} B), test {fmt_quality(chosen_test)}; "
        f"{'PASS' if not gate_reasons else 'FAIL: ' + '; '.join(gate_reasons)}"
    )
    return CompressRecord(
        passed=not gate_reasons,
        reasons=gate_reasons,
        chosen=cand.name if cand else None,
        chain=cand.configs if cand else [],
        path=str(served) if served else None,
        bytes=served_bytes,
        quality=chosen_row["overall"] if chosen_row else None,
        slices=chosen_row["slices"] if chosen_row else {},
        test=chosen_test,
        latency_b1_ms=chosen_row["latency_b1_ms"] if chosen_row else None,
        latency_b256_ms=chosen_row["latency_b256_ms"] if chosen_row else None,
        parity_max_abs=parity,
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


if __name__ == "__main__":
    raise SystemExit(compress.main())
