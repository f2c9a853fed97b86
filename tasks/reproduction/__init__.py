"""Reproduce a model version from its registry record (`python -m tasks.reproduce model-vN`).

    plan.py     the record -> what to rebuild it from (params, code commit, data version, warm start,
                world size, device, compression chain), refusing what cannot be reproduced
    run.py      a `git worktree` at the recorded commit, torchrun of that commit's engine, export and
                the recorded compression chain with that commit's code (rebuild.py), the comparison
                (weights, ONNX outputs on the gold test set, metrics), the verdict and its audit line
    rebuild.py  run as a script inside the worktree: export + the recorded chain

Nothing here changes what is served: the only registry write is one audit line per reproduction.
"""

from tasks.reproduction.plan import Plan, ReproductionError, make_plan
from tasks.reproduction.run import TOLERANCE, ReproduceRecord, reproduce_model

__all__ = ["Plan", "ReproductionError", "make_plan", "ReproduceRecord", "reproduce_model", "TOLERANCE"]
