"""Compression benchmark: the bench-profile model (params.yaml scaling.bench_hidden, ~9.6M
parameters) and the demo-size model (train.hidden), each trained briefly in-process on the
demo data's features, then compressed by the library's search (tasks/compression).

- compress_size_ratio: chosen candidate's bytes / fp32 ONNX bytes (goal <= 0.1)
- compress_quality_kept: its gold-dev ROC AUC / the uncompressed model's (goal >= 0.99);
  the worst slice's ratio in details
- compress_speedup_b1: batch-1 latency of torch eager over the chosen ONNX model, one
  thread each (goal >= 2)
and the same three with a `_demo` suffix for the demo-size model. Details carry one row per
technique alone and per chain: size ratio, batch-1 latency ratio, ROC AUC delta.

Split: the labeled source shuffled with a fixed seed, 70% training rows (fit, fine-tune,
distillation, calibration), 30% gold dev (measure, choose). One run, side by side.
"""

from __future__ import annotations

import logging
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

from bench.record import Record

BENCH_EPOCHS, DEMO_EPOCHS = 1, 40
BENCH_TUNE_ROWS = 768  # rows for the bench model's fine-tunes, distillation, calibration (time)


def _train(X, y, hidden, epochs, seed=0):
    import torch
    import torch.nn.functional as F

    from tasks.plugins.mlp.net import MLP

    torch.manual_seed(seed)
    model = MLP(X.shape[1], hidden)
    model.set_scaling(torch.from_numpy(X.mean(0)), torch.from_numpy(X.std(0)))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3 if max(hidden) > 256 else 3e-3, weight_decay=1e-4)
    x, t = torch.from_numpy(X), torch.from_numpy(y).float()
    gen = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        order = torch.randperm(len(x), generator=gen)
        for i in range(0, len(x), 64):
            idx = order[i : i + 64]
            loss = F.binary_cross_entropy_with_logits(model(x[idx]), t[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    return model.eval()


def _torch_b1_ms(model, X, repeats):
    import torch

    from tasks.compression.finetune import one_thread
    from tasks.compression.search import median_latency_ms

    with one_thread(), torch.no_grad():
        row = torch.from_numpy(X[:1])
        return median_latency_ms(lambda: torch.sigmoid(model(row)), repeats)


def _profile(tag, hidden, epochs, candidates, data, dev_X, dev_y, masks, workdir, tune_rows=None):
    from tasks.compression.chain import CompressionData
    from tasks.compression.search import run_search
    from tasks.core.params import repo_params

    t0 = time.monotonic()
    model = _train(data.X, data.y, hidden, epochs)
    t_train = time.monotonic() - t0
    # params.yaml's compress section with the bench's candidates and one fine-tune epoch; no latency budget
    # (the bench measures every candidate's latency rather than gating on the demo's 10 ms)
    cfg = repo_params().compress.replace(
        candidates=candidates, fine_tune_epochs=1, latency_repeats=20, latency_budget_ms=None
    )
    tune = data if tune_rows is None else CompressionData(data.X[:tune_rows], data.y[:tune_rows])
    out = run_search(model, cfg, tune, dev_X, dev_y, masks, workdir)
    torch_ms = _torch_b1_ms(model, dev_X, 30)
    base, chosen = out["rows"][0], out["chosen"]
    table = []
    for r in out["rows"]:
        table.append(
            {
                "chain": "+".join(r["chain"]) or "fp32",
                "size_ratio": r["size_bytes"] / base["size_bytes"],
                "latency_b1_ratio": r["latency_b1_ms"] / base["latency_b1_ms"],
                "latency_b256_ratio": r["latency_b256_ms"] / base["latency_b256_ms"],
                "roc_auc_delta": r["overall"]["roc_auc"] - base["overall"]["roc_auc"],
                "worst_slice_ratio": min(r["slices"][k]["roc_auc"] / base["slices"][k]["roc_auc"] for k in r["slices"]),
                "max_abs_diff_parent": r["max_abs_diff_parent"],
                "apply_s": r.get("apply_s", 0.0),
            }
        )
    print(
        f"\n[{tag}] hidden {list(hidden)}: trained {epochs} epochs in {t_train:.1f} s; fp32 ONNX "
        f"{base['size_bytes']:,} B, ROC AUC {base['overall']['roc_auc']:.4f}; torch eager b1 {torch_ms:.3f} ms, "
        f"fp32 ONNX b1 {base['latency_b1_ms']:.3f} ms",
        file=sys.stderr,
    )
    print(f"{'chain':<40}{'size':>8}{'b1 lat':>8}{'b256':>8}{'dAUC':>9}{'worst sl':>9}{'apply s':>8}", file=sys.stderr)
    for t in table:
        print(
            f"{t['chain']:<40}{t['size_ratio']:>8.3f}{t['latency_b1_ratio']:>8.3f}{t['latency_b256_ratio']:>8.3f}"
            f"{t['roc_auc_delta']:>+9.4f}{t['worst_slice_ratio']:>9.4f}{t['apply_s']:>8.1f}",
            file=sys.stderr,
        )
    print(f"chosen: {chosen['name'] if chosen else None}; gate: {out['gate'] or 'pass'}", file=sys.stderr)
    if chosen is None:
        chosen = base
    kept = chosen["overall"]["roc_auc"] / base["overall"]["roc_auc"]
    worst = min((chosen["slices"][k]["roc_auc"] / base["slices"][k]["roc_auc"], k) for k in chosen["slices"])
    details = {
        "hidden": list(hidden),
        "chosen": chosen["name"],
        "gate": out["gate"],
        "reasons": out["reasons"],
        "table": table,
        "fp32_bytes": base["size_bytes"],
        "chosen_bytes": chosen["size_bytes"],
        "torch_b1_ms": torch_ms,
        "chosen_b1_ms": chosen["latency_b1_ms"],
        "train_epochs": epochs,
    }
    suffix = "" if tag == "bench" else f"_{tag}"
    return [
        Record(f"compress_size_ratio{suffix}", chosen["size_bytes"] / base["size_bytes"], "ratio", "<= 0.1", details),
        Record(
            f"compress_quality_kept{suffix}",
            kept,
            "ratio",
            ">= 0.99",
            {"chosen": chosen["name"], "worst_slice": worst[1], "worst_slice_kept": worst[0]},
        ),
        Record(
            f"compress_speedup_b1{suffix}",
            torch_ms / chosen["latency_b1_ms"],
            "x",
            ">= 2",
            {"chosen": chosen["name"], "torch_b1_ms": torch_ms, "chosen_b1_ms": chosen["latency_b1_ms"]},
        ),
    ]


def run() -> list[Record]:
    warnings.filterwarnings("ignore")
    logging.getLogger("torch").setLevel(logging.ERROR)
    from tasks.compression.chain import CompressionData
    from tasks.core.params import load_params
    from tasks.datasets import load_dataset
    from tasks.plugins.emails import slices

    params = load_params()
    ds = load_dataset("tasks.plugins.emails")
    src = ds.load_source()
    order = np.random.default_rng(0).permutation(len(src))
    n_train = int(0.7 * len(src))
    train, dev = src.iloc[order[:n_train]], src.iloc[order[n_train:]]
    data = CompressionData(ds.featurize(train), train[ds.GOLD_COLUMN].to_numpy())
    dev_X, dev_y, masks = ds.featurize(dev), dev[ds.GOLD_COLUMN].to_numpy(), slices(dev)
    alone = [("int8_dynamic",), ("int8_static",), ("fp16",), ("prune(0.5)",), ("prune_structured(0.5)",)]
    bench_c = alone + [
        ("lowrank(64)",),
        ("distil(32,16)",),
        ("prune_structured(0.75)", "int8_dynamic"),
        ("lowrank(64)", "int8_dynamic"),
        ("distil(64,32)", "int8_dynamic"),
    ]
    demo_hidden = list(params.train.hidden)
    demo_c = alone + [
        ("lowrank(4)",),
        ("distil(8)",),
        ("prune_structured(0.5)", "int8_dynamic"),
        ("lowrank(4)", "int8_dynamic"),
        ("distil(8)", "int8_dynamic"),
        ("distil(8)", "fp16"),
    ]
    records = []
    with tempfile.TemporaryDirectory(prefix="bench-compress-") as tmp:
        records += _profile(
            "bench",
            params.scaling.bench_hidden,
            BENCH_EPOCHS,
            bench_c,
            data,
            dev_X,
            dev_y,
            masks,
            Path(tmp) / "bench",
            tune_rows=BENCH_TUNE_ROWS,
        )
        records += _profile("demo", demo_hidden, DEMO_EPOCHS, demo_c, data, dev_X, dev_y, masks, Path(tmp) / "demo")
    return records


if __name__ == "__main__":
    for r in run():
        print(r.name, round(r.value, 4), r.goal, "pass" if r.passed else "MISS")
