"""Model compression: ONNX export, the compression techniques, their search and gate.

The `compress` step (tasks/compress.py) runs the search over params.yaml `compress.candidates`
and registers the chosen model as the served artifact; this package is its library (the technique
configs, their short forms and chain order are params schemas: tasks/core/compression_config.py):

    chain.py      apply_chain(model, chain, CompressionData, workdir) -> Candidate; export_baseline
    export.py     dynamo ONNX export (dynamic batch), onnxruntime offline optimization,
                  metadata (`sluice.compression`), sessions (unknown ops named)
    quantize.py   dynamic int8 and static QDQ per-channel int8 (calibration checked)
    fp16.py       float16 (onnxconverter-common, keep_io_types)
    pruning.py    unstructured magnitude pruning; structured neuron removal
    lowrank.py    truncated-SVD factorization of Linear layers
    distil.py     knowledge distillation into a smaller model of the same plug-in
    finetune.py   training on soft targets (recovery fine-tune, distillation)
    search.py     measure, pareto_front, choose, gate, run_search
    served.py     the served artifact's stable name and how a model version names it
    plot.py       the Pareto plot of a search (a hand-written SVG: no plotting library needed)

Slices of the gold rows come from the dataset plug-in (`slices(df)`, tasks/datasets).
"""
