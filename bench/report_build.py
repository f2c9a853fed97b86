"""report_build_s: seconds to build one run's HTML report (goal <= 2 s), the way the report step does
(`write_report`: the model cards refreshed, the inputs read from the registry, the metrics store and
the run folder, the page rendered and written).

The run is a long one, larger than the demo's: 12 data versions with their labeling statistics, a
prod model and a challenger with full lineage, 2,000 training metrics lines, 2,000 hardware samples and
120 cost lines in the metrics store, 11 LFs, 12 compression candidates with the compress step's own
plot, and a 3-step canary. Median of 5 builds; beside it, the split between reading (gather) and
rendering (render_report). An absolute goal, not a ratio: the claim is "a report in 2 s".
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from bench.record import Record
from bench.registry_data import make_partitions, settings_at

RUN = "manual__2026-12-01T02:00:00+00:00"
QUALITY = {"roc_auc": 0.86, "f1": 0.45, "precision": 0.31, "recall": 0.89, "accuracy": 0.80, "n": 785.0}
LFS = [
    {"lf": f"lf_{i}", "polarity": [i % 2], "coverage": 0.05 * i, "overlaps": 0.04 * i, "conflicts": 0.01 * i,
     "dev_accuracy": 0.5 + 0.04 * i}
    for i in range(11)
]  # fmt: skip


def _home(tmp: Path, versions: int = 12):
    from tasks.registry import Registry

    settings = settings_at(tmp / "home")
    reg = Registry(settings)
    parts = make_partitions(tmp / "src", versions, 4096, seed=5)
    art = tmp / "model.served.onnx"
    art.write_bytes(b"\0" * 8192)
    for i, (batch, path) in enumerate(sorted(parts.items()), start=1):
        stats = {"coverage": 0.85, "conflict_rate": 0.09, "class_shares": [0.9 - 0.01 * i, 0.1 + 0.01 * i]}
        reg.snapshot(
            {batch: path},
            {"rows_by_batch": {batch: 500}, "labeling_stats": stats, "lf_analysis": LFS, "run_id": f"run-{i}",
             "label_source": "majority_vote", "contracts": {"raw_batch": "4783b2c9", "labeled": "2bc21ba9"}},
        )  # fmt: skip
    for k, data in ((1, f"data-v{versions - 1}"), (2, f"data-v{versions}")):
        lineage = {
            "data_version": data,
            "code_commit": "0" * 40,
            "params_hash": "f" * 16,
            "parent_model": "model-v1" if k == 2 else None,
            "metrics": {"torch": QUALITY, "onnx_fp32": QUALITY, "onnx_served": QUALITY},
            "compression": {"artifact": art.name, "chosen": "fp16", "chain": [{"kind": "fp16"}], "dev": QUALITY,
                            "dev_slices": {f"slice={j}": QUALITY for j in range(6)}},
        }  # fmt: skip
        reg.register_model(f"run-m{k}", {art.name: art}, lineage)
    reg.promote("model-v1", "bench", artifact=art.name)
    reg.start_canary("model-v2", 50, reason="bench", artifact=art.name)
    return settings


def _run_folder(settings, tmp: Path) -> dict:
    from tasks.compression.plot import pareto_svg
    from tasks.monitoring.store import Alert, CostLine, Metric, MetricsStore, TaskUsage

    run_dir = settings.layout.run_dir(RUN)
    (run_dir / "train").mkdir(parents=True)
    with open(run_dir / "train" / "metrics.jsonl", "w") as f:
        for s in range(1, 2001):
            f.write(json.dumps({"step": s, "loss": 1 / s, "loss_std": 0.01, "samples_per_s": 9000 + s % 50}) + "\n")
    rows = [
        {"name": f"cand{i}", "size_bytes": 2000 + 500 * i, "latency_b1_ms": 0.01 + 0.001 * i,
         "overall": {"roc_auc": 0.85}, "why_not": None if i == 3 else "off the Pareto front", "chosen": i == 3}
        for i in range(12)
    ]  # fmt: skip
    (run_dir / "compress").mkdir()
    (run_dir / "compress" / "candidates.json").write_text(json.dumps({"rows": rows}))
    plot = pareto_svg(rows, "cand3", {r["name"]: r["why_not"] for r in rows if r["why_not"]}, tmp / "pareto.svg")
    store = MetricsStore.open(settings)
    t0 = datetime(2026, 12, 1, 2, tzinfo=timezone.utc)
    for task in ("train", "compress", "canary_analysis"):
        store.record(
            RUN,
            task,
            usage=TaskUsage(started=t0, ended=t0 + timedelta(minutes=1), seconds=60, cpus=2),
            metrics=[Metric("hardware", "cpu_percent", float(i % 100), step=i) for i in range(667)],
            costs=[CostLine("compute", f"item{i}", 1.0, "cpu-hour", 0.05, 0.05, "2026-12-01") for i in range(40)],
            alerts=[Alert("loss_spike", "warning", "loss jumped")],
        )
    step = {
        "weight": 50, "passed": True, "reasons": [],
        "metrics": {"champion": {"requests": 200, "p99_ms": 4.6}, "challenger": {"requests": 200, "p99_ms": 4.9},
                    "psi": 0.2, "quality": {"roc_auc": {"champion": 0.8, "challenger": 0.82, "ci_low": -0.1,
                                                        "ci_high": 0.2}}},
    }  # fmt: skip
    return {
        "run_id": RUN, "outcome": "deployed model-v2", "failed_steps": [], "data_version": "data-v12",
        "data_version_rows": 6000, "registered": "model-v2", "prod_model": "model-v1", "quarantine": None,
        "batch": {"id": "batch-00011", "rows_in": 500, "rows_labeled": 450, "rows_unlabeled": 50},
        "labeling": {"coverage": 0.9, "chosen": "majority_vote", "n_lfs": 11, "lf_table": LFS, "drift": [],
                     "drift_compared_with": "data-v11", "stats": {},
                     "quality_dev": {"label_model": QUALITY, "majority_vote": QUALITY}},
        "gates": {"evaluate": {"passed": True, "summary": "ok"}},
        "train": {"rows": 6000, "epochs": 40, "world_size": 2, "device": "cpu", "final_loss": 0.05, "seconds": 60,
                  "warm_start": "model-v1", "metrics": {}},
        "test": None,
        "compression": {"chosen": "cand3", "chain": ["fp16"], "bytes": 3500, "fp32_bytes": 7782,
                        "table": str(run_dir / "compress" / "candidates.json"), "plot": str(plot)},
        "canary": {"passed": True, "reasons": [], "champion": "model-v1", "model_version": "model-v2",
                   "steps": [step, {**step, "weight": 75}, {**step, "weight": 100}]},
    }  # fmt: skip


def run(repeats: int = 5) -> list[Record]:
    from tasks.reports.html_report import gather, render_report, write_report

    with tempfile.TemporaryDirectory(dir=Path.home()) as tmp:
        tmp = Path(tmp)
        settings = _home(tmp)
        summary = _run_folder(settings, tmp)
        times, gathers, renders = [], [], []
        for _ in range(repeats):
            t0 = time.perf_counter()
            path = write_report(settings, RUN, summary)
            times.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            inp = gather(settings, RUN, summary)
            gathers.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            render_report(inp)
            renders.append(time.perf_counter() - t0)
        html = path.read_text()
        missing = html.count('class="missing"')
    med = statistics.median(times)
    print(
        f"report_build_s: {med:.3f} s median of {repeats} (reading {statistics.median(gathers):.3f} s, rendering "
        f"{statistics.median(renders):.3f} s); {len(html):,} bytes, {missing} sections missing"
    )
    return [
        Record(
            "report_build_s",
            med,
            "s",
            "<= 2",
            {
                "seconds": times,
                "gather_median_s": statistics.median(gathers),
                "render_median_s": statistics.median(renders),
                "html_bytes": len(html),
                "sections_missing": missing,
            },
        )
    ]
