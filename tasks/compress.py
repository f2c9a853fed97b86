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

Writes runs/<run_id>/compress/ (tasks/compression/pipeline.py says what): model.served.onnx is
what register stores and serving loads. This step reads its inputs (the model, the gold sets,
a sample of the data version's rows, the prod model for the lineage) and returns the record.
"""

from __future__ import annotations

from pathlib import Path

from tasks.core.context import StepContext
from tasks.core.records import CompressRecord, TrainRecord
from tasks.runner import step


@step
def compress(ctx: StepContext, train: TrainRecord) -> CompressRecord:
    import pandas as pd

    from tasks.compression.pipeline import FP32_FILE, GoldSplit, compress_model, tune_sample
    from tasks.evaluation.scoring import load_gold_test
    from tasks.models import input_encoder, load_model, tokenizer_metadata
    from tasks.registry import Registry

    p, ds, registry = ctx.params.compress, ctx.dataset, Registry(ctx.settings)
    model = load_model(train.model)
    inputs = input_encoder(model, ds)  # features, or the model's own tokenizer over texts
    gold = ctx.settings.layout.gold
    dev, test = pd.read_parquet(gold / "dev.parquet"), load_gold_test(gold)
    slices = ds.slices(dev) if callable(getattr(ds, "slices", None)) else {}
    fields = compress_model(
        Path(train.model),
        p,
        tune_sample(registry.read_data_version(train.data_version), p.tune_rows, p.seed, inputs),
        GoldSplit(inputs(dev), dev[ds.GOLD_COLUMN].to_numpy(), slices),
        GoldSplit(inputs(test), test[ds.GOLD_COLUMN].to_numpy(), {}),
        ctx.run_dir / "compress",
        {
            "parent": FP32_FILE,
            "source_model": "model.pt",
            "run_id": ctx.run_id,
            "data_version": train.data_version,
            "parent_model": registry.state()["prod_model"],
            **tokenizer_metadata(model),  # a text model's artifact reads text as it was trained to
        },
    )
    return CompressRecord(**fields)


if __name__ == "__main__":
    raise SystemExit(compress.main())
