"""Rebuild a model version from its record and compare: the verdict, recorded in the audit log.

1. `make_plan` reads the record (refusing what cannot be reproduced, naming it).
2. A `git worktree` of the project at the recorded commit, always (also when it is HEAD: the
   check is honest only on the committed code), removed afterwards.
3. Training: the same torchrun command builder as the train step (`torchrun_command`), with cwd
   and PYTHONPATH at the worktree, so `python -m tasks.training.engine` is the recorded commit's
   engine; the recorded params' train section at the recorded world size and device; the warm
   start is the recorded parent read through the registry (`depth` 0) or the parent reproduced
   first (`depth` N: the chain N deep).
4. Export and the recorded compression chain, with the worktree's code (rebuild.py).
5. Comparison with the registered artifacts (read by tag through DVC): weights (bit-identical, or
   the max abs difference), the fp32 and served ONNX outputs on the gold test set, the metrics.
6. The verdict: identical / within tolerance / differs, with the inputs that differed (library
   versions, device, world size, a dirty recorded checkout); one audit line in the registry.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from tasks.core.files import atomic_write_json, json_safe
from tasks.core.log import log
from tasks.core.records import GateRecord
from tasks.core.settings import REPO_ROOT, Settings
from tasks.models import read_blob
from tasks.reproduction.plan import Plan, ReproductionError, make_plan

# "within tolerance": every metric (ROC AUC, F1, precision, recall, accuracy on the gold test set,
# torch, fp32 ONNX and served ONNX) within `metrics` of the recorded one, and the fp32 ONNX outputs
# within `fp32_outputs` of the registered file's (README: 2 processes give 1 process's weights to 1e-5).
TOLERANCE = {"metrics": 0.01, "fp32_outputs": 1e-3}
METRICS = ("roc_auc", "f1", "precision", "recall", "accuracy")
RECORDED_METRICS = {"torch": "torch", "fp32": "onnx_fp32", "served": "onnx_served"}


class ReproduceRecord(GateRecord):
    """A reproduction's verdict (passed: identical or within tolerance)."""

    model_version: str
    verdict: str  # identical | within tolerance | differs
    summary: str
    inputs_differed: list[dict[str, Any]]
    """Each input that was not as recorded: {input, recorded, now}."""
    weights: dict[str, Any]  # identical, max_abs
    outputs: dict[str, Any]  # per artifact (fp32, served): identical, max_abs on the gold test set
    metrics: dict[str, Any]  # per model (torch, fp32, served): recorded, reproduced, max_abs_diff
    tolerance: dict[str, float]
    code_commit: str
    data_version: str
    warm_start: str | None
    init_from: str | None
    world_size: int
    device: str
    depth: int
    parents: list[dict[str, Any]]  # the parents reproduced first (depth > 0): their verdicts
    audit_commit: str | None
    out: str


# ---- the worktree -------------------------------------------------------------------------------
@contextlib.contextmanager
def worktree(repo: Path, commit: str) -> Iterator[Path]:
    """A detached `git worktree` of `repo` at `commit` in a temporary folder, removed afterwards."""
    parent = Path(tempfile.mkdtemp(prefix="sluice-reproduce-"))
    tree = parent / "src"
    proc = subprocess.run(
        ["git", "-C", str(repo), "worktree", "add", "--detach", "--quiet", str(tree), commit],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        shutil.rmtree(parent, ignore_errors=True)
        raise ReproductionError(f"cannot check out code commit {commit} in a worktree of {repo}: {proc.stderr.strip()}")
    try:
        yield tree
    finally:
        subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", str(tree)], capture_output=True)
        shutil.rmtree(parent, ignore_errors=True)
        subprocess.run(["git", "-C", str(repo), "worktree", "prune"], capture_output=True)


def worktree_env(settings: Settings, tree: Path, plan: Plan, folder: Path) -> dict[str, str]:
    """The environment of a process running the worktree's code: its `tasks` first on the path, the
    same state (SLUICE_*), the local backend's launcher settings (tasks/training/local.py), and
    SLUICE_PARAMS naming the recorded params, written to `folder`: the train section travels on the
    command line too, but the engine takes its dataset plug-in from the params file (a model trained
    on one dataset under a SLUICE_PARAMS of its own must not be retrained on the checkout's default one).
    Not `--dataset`: the engine of a commit older than that flag would refuse it."""
    from tasks.training.local import worker_env

    env = {k: v for k, v in worker_env().items() if not k.startswith("SLUICE_")}  # no secrets, loopback only
    env.update(settings.child_env())
    env.pop("SLUICE_CODE_COMMIT", None)
    params = folder / "recorded-params.json"
    atomic_write_json(params, plan.params.model_dump(mode="json"))  # reads back equal (tested)
    env["SLUICE_PARAMS"] = str(params)
    env["PYTHONPATH"] = str(tree)
    return env


# ---- rebuilding ---------------------------------------------------------------------------------
def pick_device(plan: Plan) -> str:
    """The recorded device when this machine has it (with train.device "auto", pinned to it)."""
    import torch

    if plan.device == "cuda" and not torch.cuda.is_available():
        return "cpu"
    return plan.device


def train_in_worktree(
    settings: Settings,
    plan: Plan,
    tree: Path,
    out: Path,
    world_size: int,
    device: str,
    init_from: str | None,
    timeout_s: float = 3600,
    tokenizer: str | None = None,
) -> None:
    """`tokenizer`: the recorded model's (a text model), laid where the engine reuses a training's own
    tokenizer.json, so the reproduction reads with it and never trains another."""
    from tasks.training.inputs import TOKENIZER
    from tasks.training.local import torchrun_command

    p = plan.params.train
    p = p.replace(
        nproc=world_size, device=device if p.device == "auto" else p.device, batch_size=max(p.batch_size, world_size)
    )
    shutil.rmtree(out, ignore_errors=True)  # never resume from anything: a clean training
    store = out / "dist-store"
    store.mkdir(parents=True)
    if tokenizer is not None:
        (out / TOKENIZER).write_text(tokenizer)
    cmd = torchrun_command(plan.data_version, str(out), p, store, max_restarts=0, init_from=init_from)
    log(f"reproduce {plan.model_version}: training at {plan.commit[:10]} ({world_size} process(es), {device})")
    env = worktree_env(settings, tree, plan, out)
    proc = subprocess.run(cmd, cwd=tree, env=env, timeout=timeout_s, start_new_session=True)
    if proc.returncode != 0:
        raise RuntimeError(
            f"reproducing {plan.model_version}: torchrun exited with {proc.returncode} "
            f"(the engine of commit {plan.commit[:10]}; see its lines above)"
        )


def rebuild_in_worktree(
    settings: Settings, plan: Plan, tree: Path, model: Path, out: Path, timeout_s: float = 1800
) -> dict[str, Any]:
    spec = {
        "model": str(model),
        "out": str(out),
        "data_version": plan.data_version,
        "dataset_module": plan.params.dataset.module,
        "chain": plan.chain,
        "tune_rows": plan.params.compress.tune_rows,
        "seed": plan.params.compress.seed,
    }
    out.mkdir(parents=True, exist_ok=True)
    spec_path = out / "rebuild-spec.json"
    atomic_write_json(spec_path, spec)
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("rebuild.py")), str(spec_path)],
        cwd=tree,
        env=worktree_env(settings, tree, plan, out),
        timeout=timeout_s,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"reproducing {plan.model_version}: export and compression ({plan.chosen}) with the code "
            f"of {plan.commit[:10]} failed: {proc.stderr.strip()[-2000:]}"
        )
    done = json.loads((out / "rebuild.json").read_text())
    if Path(done["tasks_from"]).resolve() != (tree / "tasks").resolve():
        raise RuntimeError(f"the rebuild imported tasks from {done['tasks_from']}, not the worktree {tree}")
    return done


# ---- comparing ----------------------------------------------------------------------------------
def compare_weights(recorded: Path, reproduced: Path) -> dict[str, Any]:
    import torch

    a = torch.load(recorded, map_location="cpu", weights_only=True)
    b = torch.load(reproduced, map_location="cpu", weights_only=True)
    if a["arch"] != b["arch"] or set(a["state_dict"]) != set(b["state_dict"]):
        return {"identical": False, "max_abs": float("inf"), "why": f"architecture {a['arch']} vs {b['arch']}"}
    identical, worst = True, 0.0
    for k, t in a["state_dict"].items():
        u = b["state_dict"][k]
        identical &= bool(t.dtype == u.dtype and t.shape == u.shape and torch.equal(t, u))
        if t.shape == u.shape:
            worst = max(worst, float((t.double() - u.double()).abs().max()) if t.numel() else 0.0)
    return {"identical": identical, "max_abs": worst}


def predict_file(path: Path, X: np.ndarray) -> np.ndarray:
    from tasks.compression.export import open_session, predict

    return np.asarray(predict(open_session(path), X), dtype=np.float64)  # [n], or [n, K]


def predict_pt(path: Path, X: np.ndarray) -> np.ndarray:
    from tasks.models import load_model, predict_proba

    return predict_proba(load_model(path), X)


def compare_outputs(
    settings: Settings, plan: Plan, recorded: dict[str, Path], reproduced: dict[str, Path]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """ONNX outputs on the gold test set (recorded file vs reproduced file) and the metrics of the
    reproduced models against the recorded ones."""
    import pandas as pd

    from tasks.datasets import load_dataset
    from tasks.evaluation.quality import classification_metrics
    from tasks.models import input_encoder, load_model

    ds = load_dataset(plan.params.dataset.module)
    gold = pd.read_parquet(settings.layout.gold / "test.parquet")
    X, y = input_encoder(load_model(recorded["torch"]), ds)(gold), gold[ds.GOLD_COLUMN].to_numpy()
    outputs, metrics = {}, {}
    recorded_metrics = plan.info.get("metrics") or {}
    for name in ("torch", "fp32", "served"):
        predict = predict_pt if name == "torch" else predict_file
        now = predict(reproduced[name], X)
        if name != "torch":
            before = predict(recorded[name], X)
            outputs[name] = {
                "identical": bool(np.array_equal(before, now)),
                "max_abs": float(np.abs(before - now).max()) if len(now) else 0.0,
                "rows": len(now),
            }
        q = classification_metrics(y, now)
        was = recorded_metrics.get(RECORDED_METRICS[name]) or {}
        diffs = [abs(q[k] - was[k]) for k in METRICS if was.get(k) is not None and q.get(k) is not None]
        metrics[name] = {
            "recorded": {k: was.get(k) for k in METRICS},
            "reproduced": {k: q[k] for k in METRICS},
            "max_abs_diff": max(diffs) if diffs else None,
        }
    return outputs, metrics


def inputs_differed(plan: Plan, world_size: int, device: str) -> list[dict[str, Any]]:
    from tasks.core.versions import library_versions

    out = []
    if world_size != plan.world_size:
        out.append({"input": "world size", "recorded": plan.world_size, "now": world_size})
    if device != plan.device:
        out.append({"input": "device", "recorded": plan.device, "now": device})
    now = library_versions()
    for name, was in sorted(plan.versions.items()):
        if name in now and now[name] != was:
            out.append({"input": f"library version {name}", "recorded": was, "now": now[name]})
    if plan.dirty:
        out.append(
            {
                "input": "code",
                "recorded": f"{plan.commit}-dirty",
                "now": f"{plan.commit} (the recorded checkout's local changes are not in any commit)",
            }
        )
    return out


def judge(weights: dict, outputs: dict, metrics: dict) -> tuple[str, list[str]]:
    """(verdict, what differed beyond the identical)."""
    diffs = []
    if not weights["identical"]:
        diffs.append(f"weights (max |dw| {weights['max_abs']:.3g})")
    for name, o in outputs.items():
        if not o["identical"]:
            diffs.append(f"{name} ONNX outputs (max |dp| {o['max_abs']:.3g} on {o['rows']} gold test rows)")
    for name, m in metrics.items():
        if m["max_abs_diff"]:
            diffs.append(f"{name} metrics (max |d| {m['max_abs_diff']:.3g})")
    if not diffs:
        return "identical", diffs
    within = outputs["fp32"]["max_abs"] <= TOLERANCE["fp32_outputs"] and all(
        m["max_abs_diff"] is not None and m["max_abs_diff"] <= TOLERANCE["metrics"] for m in metrics.values()
    )
    return ("within tolerance" if within else "differs"), diffs


# ---- the whole ----------------------------------------------------------------------------------
def _recorded_artifacts(registry: Any, version: str, plan: Any, folder: Path) -> dict[str, Path]:
    """The registered torch, fp32 and served files of `version`, copied into `folder`."""
    folder.mkdir()
    recorded = {}
    for name, artifact in (("torch", "model.pt"), ("fp32", "model.fp32.onnx"), ("served", plan.served_artifact)):
        recorded[name] = folder / artifact
        recorded[name].write_bytes(registry.read_model_artifact(version, artifact))
    return recorded


def verdict_summary(version: str, verdict: str, diffs: list[str], changed: list[dict[str, Any]]) -> str:
    """One line: the verdict, what differs, and which recorded inputs differed (or that none did)."""
    summary = f"{version}: {verdict}"
    if diffs:
        summary += "; differs in " + ", ".join(diffs)
    if changed:
        summary += "; inputs that differed: " + ", ".join(
            f"{c['input']} {c['recorded']} -> {c['now']}" for c in changed
        )
    elif verdict != "identical":
        summary += "; no recorded input differed"
    if verdict == "within tolerance":
        summary += f" (tolerance: metrics {TOLERANCE['metrics']:g}, fp32 outputs {TOLERANCE['fp32_outputs']:g})"
    return summary


def _reproduce_parents(
    settings: Settings, plan: Any, depth: int, work: Path, repo: Path, who: str | None
) -> tuple[list[dict[str, Any]], str | None]:
    """With depth > 0, reproduce the warm-start parent first and start from its rebuilt weights:
    (the parents' verdicts, nearest first; what training starts from). Else the recorded parent."""
    if not (plan.warm_start and depth > 0):
        return [], plan.warm_start
    parent = reproduce_model(settings, plan.warm_start, depth=depth - 1, work_dir=work, repo=repo, audit=False, who=who)
    parents = [
        {"model_version": parent.model_version, "verdict": parent.verdict, "summary": parent.summary},
        *parent.parents,
    ]
    return parents, str(Path(parent.out) / "train" / "model.pt")


def reproduce_model(
    settings: Settings,
    version: str,
    *,
    depth: int = 0,
    work_dir: Path | None = None,
    world_size: int | None = None,
    repo: Path = REPO_ROOT,
    audit: bool = True,
    who: str | None = None,
) -> ReproduceRecord:
    """Rebuild `version` from its record and compare it with the registered artifacts.

    `depth`: how many warm-start parents to reproduce first (0: read the recorded parent's weights
    through the registry). `world_size`: train with another number of processes than recorded (the
    verdict then names it). Records the verdict in the registry's audit log (`audit`); changes
    nothing else: what is served stays."""
    from tasks.registry import Registry

    if depth < 0:
        raise ReproductionError(f"depth must be 0 or more, got {depth}")
    registry = Registry(settings)
    plan = make_plan(registry, version, Path(repo))
    work = Path(work_dir or settings.layout.runs / "reproduce" / version)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    parents, init_from = _reproduce_parents(settings, plan, depth, work / "parent", repo, who)
    world = world_size or plan.world_size
    device = pick_device(plan)
    recorded = _recorded_artifacts(registry, version, plan, work / "recorded")
    tokenizer = read_blob(recorded["torch"]).get("tokenizer")  # a text model: reuse, never retrain
    with worktree(Path(repo), plan.commit) as tree:
        train_in_worktree(settings, plan, tree, work / "train", world, device, init_from, tokenizer=tokenizer)
        rebuild_in_worktree(settings, plan, tree, work / "train" / "model.pt", work / "compress")
    reproduced = {
        "torch": work / "train" / "model.pt",
        "fp32": work / "compress" / "model.fp32.onnx",
        "served": work / "compress" / "model.served.onnx",
    }

    weights = compare_weights(recorded["torch"], reproduced["torch"])
    outputs, metrics = compare_outputs(settings, plan, recorded, reproduced)
    verdict, diffs = judge(weights, outputs, metrics)
    changed = inputs_differed(plan, world, device)
    summary = verdict_summary(version, verdict, diffs, changed)
    log(f"reproduce {summary}")
    audit_commit = None
    if audit:
        audit_commit = registry.record_audit(
            "reproduce",
            who=who,
            model_version=version,
            verdict=verdict,
            code_commit=plan.commit,
            depth=depth,
            inputs_differed=[c["input"] for c in changed],
            weights_identical=weights["identical"],
            weights_max_abs=weights["max_abs"],
            world_size=world,
            device=device,
            summary=summary,
        )
    rec = ReproduceRecord(
        passed=verdict != "differs",
        model_version=version,
        verdict=verdict,
        summary=summary,
        inputs_differed=changed,
        weights=weights,
        outputs=outputs,
        metrics=metrics,
        tolerance=TOLERANCE,
        code_commit=plan.commit,
        data_version=plan.data_version,
        warm_start=plan.warm_start,
        init_from=init_from,
        world_size=world,
        device=device,
        depth=depth,
        parents=parents,
        audit_commit=audit_commit,
        out=str(work),
    )
    atomic_write_json(work / "reproduce.json", json_safe(rec.model_dump(mode="json")))
    return rec
