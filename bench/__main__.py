"""Run the benchmarks: `python -m bench [--only NAME]` (make bench [BENCH=NAME]).

Prints a table, merges each new record into the committed results file bench/results.json
(by name: a record replaces the entry of the same name, dated today; the others stay), and
rewrites bench/README.md from it (`python -m bench.readme`). Each benchmark measures its ratio
side by side in one run, because absolute times on shared machines are not stable.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from datetime import datetime, timezone

from bench import readme
from bench.active_labels import names as active_labels_names
from bench.record import RESULTS_FILE, load_results, merge_records, write_results
from bench.weak_vs_gold import names as weak_vs_gold_names

# module -> the record names it produces (a module may produce several)
BENCHMARKS = {
    "bench.dag_parse_ratio": ["dag_parse_ratio"],
    "bench.orchestration_overhead": ["orchestration_overhead"],
    "bench.snapshot_incremental": ["snapshot_incremental_ratio"],
    "bench.rollback_scale": ["rollback_scale_ratio"],
    "bench.dvc_add_vs_md5sum": ["dvc_add_vs_md5sum"],
    # weak_plus_gold_kK, gold_only_kK, weak_vs_gold_kK, label_savings_at_95, weak_gold_margin_min
    "bench.weak_vs_gold": weak_vs_gold_names(),
    "bench.weak_vs_gold_toy": weak_vs_gold_names("_toy"),
    "bench.weak_vs_gold_reviews": weak_vs_gold_names("_reviews"),
    "bench.text_models": [
        "transformer_vs_bow",
        "compress_size_ratio_text",
        "compress_quality_kept_text",
        "compress_speedup_b1_text",
    ],
    "bench.pretrained": [
        "pretrained_vs_scratch_reviews",
        "pretrained_test_roc_auc",
        "compress_speedup_b1_pretrained",
        "compress_size_ratio_pretrained",
        "compress_quality_kept_pretrained",
    ],
    # the label model's dev ROC AUC with an LF on the pretrained encoder's embeddings over without it
    "bench.embedding_lf": ["embedding_lf_gain"],
    "bench.weak_weight_flip": ["weak_weight_flip_rate", "weak_weight_flip_rate_before"],
    "bench.feedback_gold": ["feedback_gold_gain", "feedback_gold_gain_equal"],
    # weak plus gold the labeling queue's acquisition rule chose, vs gold at random (label_savings_at_95's)
    "bench.active_labels": active_labels_names(),
    "bench.active_labels_reviews": active_labels_names("_reviews"),
    "bench.lf_applier": ["lf_applier_speedup"],
    "bench.hier_allreduce": ["hier_internode_bytes_ratio"],
    "bench.multinode": [
        "hier_step_time_ratio",
        "fsdp_step_time_ratio_world4",
        "multinode_recovery_s",
        "multinode_redo_ratio",
    ],
    "bench.training": [
        "ddp_scaling_efficiency",
        "checkpoint_overhead",
        "balance_static_vs_ideal",
        "balance_balanced_vs_ideal",
        "recovery_redo_ratio",
        "recovery_seconds",
        "preempt_redo_steps",
    ],
    "bench.fsdp": [
        "fsdp_memory_ratio",
        "fsdp_step_time_ratio",
        "dcp_checkpoint_overhead",
        "reshard_resume_max_loss_diff",
    ],
    "bench.streaming_memory": ["streaming_memory_ratio"],
    "bench.compression": [
        f"compress_{m}{s}" for s in ("", "_demo") for m in ("size_ratio", "quality_kept", "speedup_b1")
    ],
    "bench.serving": ["serve_cold_start_s", "serve_vs_raw_ort", "serve_p99_ms"],
    "bench.serving_text": ["serve_vs_raw_ort_text"],
    "bench.canary": ["swap_failed_requests", "canary_detect_requests"],
    "bench.replicas": ["replica_join_s", "scale_failed_requests", "replicas_throughput_ratio"],
    "bench.canary_false_rollback": ["canary_false_rollback_rate", "canary_false_rollback_rate_before"],
    "bench.drift": ["drift_detect_hours", "drift_false_alerts_week"],
    "bench.reproduce": ["reproduce_identical"],
    "bench.monitoring_overhead": ["monitoring_overhead"],
    "bench.report_build": ["report_build_s"],
    "bench.tuning": ["tuning_cost_to_target", "tuning_pruned_fraction", "tuning_trials_to_match_random60"],
}


def _machine() -> str:
    """The machine a figure was measured on, for the entry's notes (figures here depend on the load)."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return f"{os.cpu_count()} CPUs, 1-minute load {load:.1f} when the module finished"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    names = sorted(n for ns in BENCHMARKS.values() for n in ns)
    parser.add_argument("--only", choices=names, help="run one benchmark")
    args = parser.parse_args(argv)
    records, failed = [], []
    for module, produced in BENCHMARKS.items():
        if args.only and args.only not in produced:
            continue
        print(f"[bench] {module} ...", file=sys.stderr, flush=True)
        try:
            new = importlib.import_module(module).run()
        except Exception as exc:  # noqa: BLE001 - one broken benchmark must not lose the others' figures
            print(f"[bench] {module} FAILED: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            failed.append(module)
            continue
        records += new
        today = datetime.now(timezone.utc).date().isoformat()
        # Read the file now, not at the start: a benchmark runs for minutes, and another run (or a
        # merge) may have written the file meanwhile; what it wrote stays.
        entries = merge_records(load_results(), new, module=module, measured=today, notes=_machine())
        write_results(entries)  # after each module: nothing lost
        readme.write(entries)
    print(f"\n{'benchmark':<28}{'value':>10}  {'unit':<10}{'goal':<10}result")
    for r in records:
        print(f"{r.name:<28}{r.value:>10.3f}  {r.unit:<10}{r.goal:<10}{'pass' if r.passed else 'MISS'}")
    print(f"\nmerged into {RESULTS_FILE} and {readme.PAGE}" + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
