"""Measure candidates, keep the Pareto front over size and latency, choose one, gate it.

Pure apart from running onnxruntime sessions (measure, gate's probe and parity). A row
(what `measure` returns) is a plain dict:

    name, chain, configs, size_bytes, latency_b1_ms, latency_b256_ms, max_abs_diff_parent,
    overall {roc_auc, f1, ...}, slices {name: {roc_auc, f1, ...}}, baseline (bool)
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from tasks.compression.chain import Candidate, CompressionData, apply_chain, export_baseline
from tasks.compression.export import model_input, open_session, predict
from tasks.core.compression_config import CompressionSearchConfig
from tasks.core.errors import CompressionError
from tasks.core.log import Progress
from tasks.evaluation.quality import classification_metrics


def median_latency_ms(fn, repeats: int, warmup: int = 3) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def onnx_latency_ms(session, X: np.ndarray, batch: int, repeats: int, warmup: int = 3) -> float:
    """Median seconds x 1e3 of one run on `batch` rows (rows of X repeated as needed)."""
    rows = model_input(np.resize(X, (batch, X.shape[1])))
    name = session.get_inputs()[0].name
    return median_latency_ms(lambda: session.run(None, {name: rows}), repeats, warmup)


def measure(
    candidate: Candidate,
    gold_dev_X: np.ndarray,
    gold_dev_y: np.ndarray,
    slices: dict[str, np.ndarray],
    repeats: int = 50,
    predicted: dict[Path, np.ndarray] | None = None,
) -> dict[str, Any]:
    """Quality overall and per slice, file size, batch-1/256 median latency (one thread), parity to the parent.

    `predicted`: probabilities on these rows by ONNX file, shared by one search's candidates, so the
    parent every candidate is compared with is predicted once (a 23M-parameter transformer's 500 dev
    texts, 32 tokens each, took ~9 s on 2 cores)."""
    X = model_input(gold_dev_X)
    y = np.asarray(gold_dev_y).astype(int)
    predicted = {} if predicted is None else predicted

    def probabilities(path: Path) -> np.ndarray:
        if path not in predicted:
            predicted[path] = predict(open_session(path), X)
        return predicted[path]

    prob = probabilities(candidate.onnx_path)
    parent_prob = probabilities(candidate.parent.onnx_path) if candidate.parent else prob
    session = open_session(candidate.onnx_path, threads=1)
    return {
        "name": candidate.name,
        "chain": [c.label for c in candidate.chain],
        "configs": candidate.configs,
        "baseline": candidate.parent is None,
        "onnx_path": str(candidate.onnx_path),
        "size_bytes": Path(candidate.onnx_path).stat().st_size,
        "latency_b1_ms": onnx_latency_ms(session, X, 1, repeats),
        # one warm-up run: at batch 256 the first run's allocations are one run's worth
        "latency_b256_ms": onnx_latency_ms(session, X, 256, max(3, repeats // 5), warmup=1),
        "max_abs_diff_parent": float(np.max(np.abs(prob - parent_prob))) if len(X) else 0.0,
        "nonfinite": int((~np.isfinite(prob)).sum()),
        "overall": classification_metrics(y, prob),
        "slices": {k: classification_metrics(y[m], prob[m]) for k, m in slices.items()},
    }


def _dominates(a: dict, b: dict, keys: tuple[str, ...]) -> bool:
    return all(a[k] <= b[k] for k in keys) and any(a[k] < b[k] for k in keys)


def pareto_front(rows: list[dict], keys: tuple[str, ...] = ("size_bytes", "latency_b1_ms")) -> list[dict]:
    """The rows no other row beats on every key (lower is better) and strictly on one."""
    return [r for r in rows if not any(_dominates(o, r, keys) for o in rows if o is not r)]


def quality_shortfalls(row: dict, reference: dict, floor_ratio: float) -> list[str]:
    """Where `row` keeps less than floor_ratio x the reference's ROC AUC (overall, each slice, and with K
    classes each class's one-vs-rest ROC AUC overall). Pure. A slice or class whose reference AUC is
    undefined (one class in it) cannot be checked and is skipped."""
    out = []
    pairs = [("overall", row["overall"], reference["overall"])]
    per_class = row["overall"].get("per_class") or {}
    pairs += [(f"class {c}", per_class.get(c), m) for c, m in (reference["overall"].get("per_class") or {}).items()]
    pairs += [(f"slice {k}", row["slices"].get(k), m) for k, m in reference.get("slices", {}).items()]
    for where, got, ref in pairs:
        ref_auc = ref["roc_auc"]
        if ref_auc != ref_auc:
            continue
        auc = got["roc_auc"] if got else float("nan")
        if not auc >= floor_ratio * ref_auc:
            out.append(f"{where}: ROC AUC {auc:.4f} < {floor_ratio:g} x {ref_auc:.4f}")
    return out


def choose(
    rows: list[dict], floor_ratio: float = 0.99, latency_budget_ms: float | None = None, reference: dict | None = None
) -> tuple[dict | None, dict[str, str]]:
    """The smallest (ties: fastest at batch 1) candidate on the Pareto front of those that keep the
    quality floor and the latency budget; and why each other row was not chosen. Pure.

    `reference` (the uncompressed model's row) defaults to the row marked baseline. The
    front is taken over the rows that pass, so a failing candidate cannot hide a good one."""
    if reference is None:
        base = [r for r in rows if r.get("baseline")]
        if not base:
            raise CompressionError("choose: no reference row (mark the uncompressed model's row baseline=True)")
        reference = base[0]
    reasons: dict[str, str] = {}
    ok = []
    for r in rows:
        why = quality_shortfalls(r, reference, floor_ratio)
        if latency_budget_ms is not None and not r["latency_b1_ms"] <= latency_budget_ms:
            why.append(f"batch-1 latency {r['latency_b1_ms']:.3f} ms over the budget {latency_budget_ms:g} ms")
        if r.get("nonfinite"):
            why.append(f"{r['nonfinite']} NaN/inf outputs on the dev set")
        if why:
            reasons[r["name"]] = "; ".join(why)
        else:
            ok.append(r)
    front = pareto_front(ok)
    on_front = {id(r) for r in front}
    for r in ok:
        if id(r) not in on_front:
            by = next(o for o in ok if _dominates(o, r, ("size_bytes", "latency_b1_ms")))
            reasons[r["name"]] = (
                f"off the Pareto front: {by['name']} is no larger ({by['size_bytes']} B vs "
                f"{r['size_bytes']} B) and no slower ({by['latency_b1_ms']:.3f} vs "
                f"{r['latency_b1_ms']:.3f} ms)"
            )
    if not front:
        return None, reasons
    chosen = min(front, key=lambda r: (r["size_bytes"], r["latency_b1_ms"]))
    for r in front:
        if r is not chosen:
            reasons[r["name"]] = (
                f"on the front but larger than {chosen['name']} ({r['size_bytes']} B vs {chosen['size_bytes']} B)"
            )
    return chosen, reasons


def probe_inputs(X: np.ndarray) -> np.ndarray:
    """Rows of X plus extreme ones: zeros, each feature's min and max, x1e3 and +-1e30 and +-float32 max.
    Token ids: all padding, one token then padding, the largest id seen and the unknown id (1) throughout."""
    if np.asarray(X).dtype.kind in "iu":
        X = model_input(X)
        top, length = int(X.max()) if X.size else 2, X.shape[1]
        lone = np.zeros(length, np.int64)
        lone[0] = top
        return np.concatenate(
            [X, np.stack([np.zeros(length, np.int64), lone, np.full(length, top), np.ones(length)])]
        ).astype(np.int64)
    X = np.asarray(X, dtype=np.float32)
    lo, hi = X.min(axis=0), X.max(axis=0)
    big = np.finfo(np.float32).max
    f = X.shape[1]
    extremes = [
        np.zeros(f),
        lo,
        hi,
        hi * 1e3,
        lo * 1e3,
        np.full(f, 1e30),
        np.full(f, -1e30),
        np.full(f, big),
        np.full(f, -big),
    ]
    return np.concatenate([X, np.asarray(extremes, dtype=np.float32)]).astype(np.float32)


def gate_reasons(
    parity_max_abs: float, atol: float, shortfalls: list[str], nonfinite_probe: int, n_probe: int
) -> list[str]:
    """Reasons to reject the chosen candidate (empty: it passes). Pure."""
    reasons = []
    if not parity_max_abs <= atol:
        reasons.append(f"fp32 ONNX differs from torch by {parity_max_abs:.2e} > {atol:.0e}")
    reasons += [f"quality floor: {s}" for s in shortfalls]
    if nonfinite_probe:
        reasons.append(f"{nonfinite_probe} of {n_probe} probe rows (extreme inputs included) give NaN or inf")
    return reasons


def torch_onnx_parity(candidate: Candidate, X: np.ndarray) -> float:
    """max |P_torch - P_onnx| of the candidate's torch-side model against its fp32 export."""
    from tasks.models import predict_proba

    p_torch = predict_proba(candidate.torch_model, model_input(X))
    p_onnx = predict(open_session(candidate.fp32_path), X)
    return float(np.max(np.abs(p_onnx - p_torch))) if len(X) else 0.0


def candidate_parity(chosen: Candidate, X: np.ndarray) -> float:
    """max |P_torch - P_onnx| of the chosen chain's fp32 export and, for a chain with torch-side
    techniques, of the uncompressed one too (an ONNX-side chain's fp32 export and torch model are its
    parent's: checked once)."""
    parity = torch_onnx_parity(chosen, X)
    if chosen.parent is not None and chosen.fp32_path != chosen.parent.fp32_path:
        parity = max(parity, torch_onnx_parity(chosen.parent, X))
    return parity


def gate(
    chosen: Candidate,
    chosen_row: dict,
    reference_row: dict,
    probe_X: np.ndarray,
    *,
    atol: float = 1e-4,
    floor_ratio: float = 0.99,
    parity: float | None = None,
) -> list[str]:
    """fp32 parity with torch (`parity`: candidate_parity on the first 256 probe rows, if already
    computed), the quality floor overall and per slice, no NaN/inf on probe rows with extreme inputs.
    Empty: it passes."""
    parity = candidate_parity(chosen, probe_X[:256]) if parity is None else parity
    probe = probe_inputs(probe_X)
    with np.errstate(all="ignore"):
        out = predict(open_session(chosen.onnx_path), probe)
    return gate_reasons(
        parity,
        atol,
        quality_shortfalls(chosen_row, reference_row, floor_ratio),
        int((~np.isfinite(out)).sum()),
        len(probe),
    )


def run_search(
    model,
    config: CompressionSearchConfig,
    data: CompressionData,
    gold_dev_X: np.ndarray,
    gold_dev_y: np.ndarray,
    slices: dict[str, np.ndarray],
    workdir: Path,
) -> dict[str, Any]:
    """Every candidate chain of `config`, measured; the choice, the reasons, and the gate on the chosen."""
    base = export_baseline(model, Path(workdir))
    cands = {base.name: base}
    predicted: dict[Path, np.ndarray] = {}  # dev-set probabilities by ONNX file (measure)
    rows = [measure(base, gold_dev_X, gold_dev_y, slices, config.latency_repeats, predicted)]
    errors, chains = {}, list(config.chains())
    tracker = Progress("compression search", len(chains), unit="candidate", every_s=0)  # a line per candidate
    for i, chain in enumerate(chains, start=1):
        t0 = time.perf_counter()
        try:
            cand = apply_chain(model, chain, data, workdir, parent=base)
        except CompressionError as exc:
            errors["+".join(c.label for c in chain)] = str(exc)
            tracker.update(i)
            continue
        cands[cand.name] = cand
        rows.append(
            {
                **measure(cand, gold_dev_X, gold_dev_y, slices, config.latency_repeats, predicted),
                "apply_s": time.perf_counter() - t0,
            }
        )
        tracker.update(i)
    chosen_row, reasons = choose(rows, config.floor_ratio, config.latency_budget_ms)
    reasons.update(errors)
    chosen = cands[chosen_row["name"]] if chosen_row else None
    parity = candidate_parity(chosen, data.X[:256]) if chosen else 0.0
    gate_out = (
        gate(
            chosen, chosen_row, rows[0], data.X, atol=config.parity_atol, floor_ratio=config.floor_ratio, parity=parity
        )
        if chosen
        else ["no candidate keeps the quality floor"]
    )
    return {
        "rows": rows,
        "chosen": chosen_row,
        "candidate": chosen,
        "reasons": reasons,
        "gate": gate_out,
        "passed": not gate_out,
        "parity_max_abs": parity,
    }
