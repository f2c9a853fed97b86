"""Export and compress a reproduced model.pt with the RECORDED commit's code: run as a script
(`python <this file> SPEC.json`) with cwd and PYTHONPATH at the worktree, so every `tasks` import
below resolves to that commit's code. Writes model.fp32.onnx and model.served.onnx as the compress
step made them (the fp32 export, then the recorded chain on it) and rebuild.json (where `tasks`
came from). Imports only what the compress step itself uses.
"""

import json
import sys
from pathlib import Path

if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path.pop(0)  # this folder is not a package root: never shadow anything


def main(spec_path: str) -> int:
    import shutil

    import numpy as np

    import tasks
    from tasks.compression.chain import CompressionData, apply_chain, export_baseline
    from tasks.core.settings import Settings
    from tasks.datasets import load_dataset
    from tasks.models import input_encoder, load_model
    from tasks.registry import Registry

    spec = json.loads(Path(spec_path).read_text())
    out = Path(spec["out"])
    work = out / "candidates"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    ds = load_dataset(spec["dataset_module"])
    model = load_model(spec["model"])
    # The compress step's training rows: a seeded sample of the data version's labeled rows.
    df = Registry(Settings.from_env()).read_data_version(spec["data_version"])
    df = df[df["label"] != -1]
    if len(df) > spec["tune_rows"]:
        pick = np.random.default_rng(spec["seed"]).choice(len(df), spec["tune_rows"], replace=False)
        df = df.iloc[np.sort(pick)]
    data = CompressionData(input_encoder(model, ds)(df), df["label"].to_numpy().astype(int))
    base = export_baseline(model, work)
    served = apply_chain(model, spec["chain"], data, work, parent=base) if spec["chain"] else base
    shutil.copyfile(base.onnx_path, out / "model.fp32.onnx")
    shutil.copyfile(served.onnx_path, out / "model.served.onnx")
    (out / "rebuild.json").write_text(
        json.dumps({"tasks_from": str(Path(tasks.__file__).resolve().parent), "served": served.name})
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
