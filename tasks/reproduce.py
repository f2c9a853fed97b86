"""reproduce: rebuild a model version from its registry record and say whether it comes out the same.

    python -m tasks.reproduce model-v3 [--depth 1]

Checks out the recorded code commit in a temporary `git worktree`, trains with the recorded
params, data version, warm start, world size and device (that commit's engine under the same
torchrun command), exports and compresses with the recorded chain, and compares weights, ONNX
outputs on the gold test set and metrics. Prints the verdict (identical / within tolerance /
differs, and which input differed) and records it in the registry's audit log; never changes what
is served. `--depth N` reproduces the warm-start parents N deep first (0: the recorded parent's
weights, read through the registry). Exit 1 when it differs; 2 when it cannot be reproduced
(the message names what is missing: an edited record, a missing data version, an unknown commit).
The `reproduce` DAG runs this step. The work lies in tasks/reproduction/.
"""

from __future__ import annotations

import sys

from tasks.core.context import StepContext
from tasks.core.versions import is_model_version
from tasks.reproduction import ReproduceRecord, ReproductionError
from tasks.runner import step


@step(
    help={
        "model_version": "the model version to reproduce, e.g. model-v3 (also the first argument)",
        "depth": "warm-start parents to reproduce first (default 0: read the parent's weights from the registry)",
        "who": "who asked (recorded in the audit log)",
    }
)
def reproduce(
    ctx: StepContext, *, model_version: str | None = None, depth: int = 0, who: str = "cli"
) -> ReproduceRecord:
    from tasks.reproduction import reproduce_model

    if not model_version or not is_model_version(model_version):
        raise ReproductionError(f"reproduce needs a model version like model-v3 (got {model_version!r})")
    return reproduce_model(
        ctx.settings, model_version, depth=int(depth), work_dir=ctx.run_dir / "reproduce" / model_version, who=who
    )


def _argv(argv: list[str]) -> list[str]:
    """`model-vN` as the first argument means `--model-version model-vN`."""
    return ["--model-version", argv[0], *argv[1:]] if argv and is_model_version(argv[0]) else argv


if __name__ == "__main__":
    raise SystemExit(reproduce.main(_argv(sys.argv[1:])))
