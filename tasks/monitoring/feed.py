"""From step records to the store: one function per record type (docs/monitoring.md lists what each maps).

Each function is pure apart from reading the files its record points at (the training engine's
metrics lines, the compression search's candidate table) and returns a `Fed`: the task's metrics,
extra cost lines (labels that spared manual labeling, incidents that need an engineer) and extra
usage rows (the training pods on the Kubernetes backend, which the Airflow worker's sampler cannot
see). `feed(record, info)` picks the function; a record type without one feeds nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable

from tasks.core.params import CostParams
from tasks.core.records import (
    CanaryAnalysisRecord,
    CompressRecord,
    ContractRecord,
    CostReportRecord,
    EvaluateRecord,
    MonitorServingRecord,
    QuarantineRecord,
    Record,
    RejectRecord,
    RollbackCanaryRecord,
    RollbackRecord,
    SnapshotRecord,
    TrainRecord,
    WeakLabelRecord,
)
from tasks.labeling.drift import class_shares
from tasks.monitoring import cost
from tasks.monitoring.store import Alert, CostLine, Metric, TaskUsage

# The engine's metrics line fields that are algorithm-layer metrics (runs/<id>/train/metrics.jsonl).
TRAIN_ALGORITHM_FIELDS = (
    "loss",
    "loss_std",
    "grad_norm",
    "grad_var_across_ranks",
    "grad_var_relative",
    "update_to_weight",
    "samples_per_s",
)
# Its hardware fields, measured by rank 0 inside the engine (the only hardware view of a pod).
TRAIN_HARDWARE_FIELDS = {
    "cpu_percent": "rank0_cpu_percent",
    "rss_mb": "rank0_rss_mb",
    "gpu_mem_mb": "rank0_gpu_mem_mb",
    "gpu_util_percent": "rank0_gpu_util",
}
QUALITY_FIELDS = ("roc_auc", "f1", "precision", "recall", "accuracy")


@dataclass(frozen=True)
class RunInfo:
    """What the feed functions know besides the record: the run's folder, versions, prices, when it ended."""

    run_dir: Path
    ended: datetime
    prices: CostParams
    data_version: str | None = None
    model_version: str | None = None
    backend: str = "local"
    pod_requests: dict[str, float] | None = None  # kubernetes: cpus, gpus, memory_gb of the whole training

    @property
    def day(self) -> str:
        from tasks.monitoring.store import day_of

        return day_of(self.ended)


@dataclass
class Fed:
    metrics: list[Metric] = field(default_factory=list)
    costs: list[CostLine] = field(default_factory=list)
    usages: dict[str, TaskUsage] = field(default_factory=dict)  # extra task rows: name -> usage
    alerts: list[Alert] = field(default_factory=list)  # raised by the step itself (the daily cost jump)


def _m(layer: str, info: RunInfo, name: str, value: Any, **kw: Any) -> Metric | None:
    if value is None:
        return None
    kw.setdefault("data_version", info.data_version)
    kw.setdefault("model_version", info.model_version)
    return Metric(layer, name, float(value), **kw)


def _quality(layer: str, info: RunInfo, prefix: str, q: dict[str, Any] | None, **kw: Any) -> list[Metric]:
    if not q:
        return []
    return [m for k in QUALITY_FIELDS if (m := _m(layer, info, f"{prefix}{k}", q.get(k), **kw)) is not None]


def _keep(*ms: Metric | None) -> list[Metric]:
    return [m for m in ms if m is not None]


def weak_label(rec: WeakLabelRecord, info: RunInfo) -> Fed:
    """Data layer: coverage, conflict rate, label balance, each LF's coverage/overlap/conflict/dev accuracy,
    the label model's and majority vote's dev quality; labor avoided for every row labeled."""
    stats = rec.labeling_stats
    ms = _keep(
        _m("data", info, "coverage", rec.coverage),
        _m("data", info, "conflict_rate", stats.get("conflict_rate")),
        _m("data", info, "rows", rec.rows),
        _m("data", info, "abstained_rows", rec.abstained_rows),
        _m("data", info, "labels_produced", rec.rows - rec.abstained_rows),
        _m("data", info, "n_lfs", rec.n_lfs),
        # each class's share of the labeled rows, the class number as the subject
        *(_m("data", info, "class_share", v, subject=str(c)) for c, v in enumerate(class_shares(stats) or [])),
    )
    for row in rec.lf_table:
        for key, name in (
            ("coverage", "lf_coverage"),
            ("overlaps", "lf_overlaps"),
            ("conflicts", "lf_conflicts"),
            ("dev_accuracy", "lf_dev_accuracy"),
        ):
            ms += _keep(_m("data", info, name, row.get(key), subject=str(row.get("lf"))))
    for method, q in rec.quality_dev.items():
        ms += _quality("data", info, "dev_", q, subject=method)
    ms += _keep(_m("data", info, "label_model_chosen", 1.0, subject=rec.chosen))
    return Fed(ms, cost.labor_avoided(rec.rows - rec.abstained_rows, info.prices, info.day))


def contract(rec: ContractRecord, info: RunInfo) -> Fed:
    return Fed(
        _keep(
            _m("data", info, "contract_passed", 1.0 if rec.passed else 0.0, subject=rec.suite),
            _m("data", info, "expectations_failed", rec.failed, subject=rec.suite),
            _m("data", info, "expectations_evaluated", rec.evaluated, subject=rec.suite),
            _m("data", info, "contract_rows", rec.rows, subject=rec.suite),
        )
    )


def snapshot(rec: SnapshotRecord, info: RunInfo) -> Fed:
    return Fed(
        _keep(
            _m("data", info, "total_rows", rec.total_rows, data_version=rec.data_version),
            _m("data", info, "partitions", rec.partitions, data_version=rec.data_version),
        )
    )


def train_lines(path: Path) -> list[dict[str, Any]]:
    """The engine's metrics lines (one JSON object per log window); a torn last line is skipped."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def train(rec: TrainRecord, info: RunInfo) -> Fed:
    """Algorithm layer from the engine's lines (per step: loss, its fluctuation, gradient norm and
    variance across ranks, update-to-weight ratio, samples/s), rank 0's hardware view, a summary;
    on the Kubernetes backend also the pods' usage (engine seconds x the pods' requests)."""
    folder = Path(rec.outputs) if "://" not in rec.outputs else info.run_dir / "train"
    if not (folder / "metrics.jsonl").exists():
        folder = info.run_dir / "train"
    dv = rec.data_version
    ms: list[Metric] = []
    for line in train_lines(folder / "metrics.jsonl"):
        step = int(line["step"]) if "step" in line else None
        ts = datetime.fromtimestamp(line["time"], timezone.utc) if "time" in line else None
        extra = {"ts": ts} if ts else {}
        for key in TRAIN_ALGORITHM_FIELDS:
            ms += _keep(_m("algorithm", info, key, line.get(key), step=step, data_version=dv, **extra))
        for key, name in TRAIN_HARDWARE_FIELDS.items():
            ms += _keep(_m("hardware", info, name, line.get(key), step=step, data_version=dv, **extra))
    ms += _keep(
        _m("algorithm", info, "final_loss", rec.final_loss, data_version=dv),
        _m("algorithm", info, "train_seconds", rec.seconds, data_version=dv),
        _m("algorithm", info, "steps", rec.steps, data_version=dv),
        _m("algorithm", info, "world_size", rec.world_size, data_version=dv),
        _m("algorithm", info, "rows", rec.rows, data_version=dv),
    )
    fed = Fed(ms)
    if info.backend == "kubernetes" and info.pod_requests:
        r = info.pod_requests
        started = info.ended - timedelta(seconds=rec.seconds)
        fed.usages["train_pods"] = TaskUsage(
            started, info.ended, rec.seconds, r["cpus"], r["gpus"], r["memory_gb"], "kubernetes", "success"
        )
    return fed


def evaluate(rec: EvaluateRecord, info: RunInfo) -> Fed:
    """Business layer: gold test quality of the challenger and the champion."""
    ms = _quality("business", info, "test_", rec.challenger, subject="challenger")
    ms += _quality("business", info, "test_", rec.champion, subject="champion", model_version=rec.champion_version)
    ms += _keep(_m("business", info, "evaluate_passed", 1.0 if rec.passed else 0.0))
    return Fed(ms)


def compress(rec: CompressRecord, info: RunInfo) -> Fed:
    """Each candidate's size, latency and dev ROC AUC (subject: the candidate); the chosen model's and
    fp32's dev ROC AUC overall and per slice (subject "slice:<name>"), its test quality."""
    ms: list[Metric] = []
    table = Path(rec.table)
    rows = json.loads(table.read_text()).get("rows", []) if table.exists() else []
    for row in rows:
        sub = str(row.get("name"))
        ms += _keep(
            _m("business", info, "candidate_bytes", row.get("size_bytes"), subject=sub),
            _m("business", info, "candidate_latency_b1_ms", row.get("latency_b1_ms"), subject=sub),
            _m("business", info, "candidate_latency_b256_ms", row.get("latency_b256_ms"), subject=sub),
            _m("business", info, "candidate_dev_roc_auc", (row.get("overall") or {}).get("roc_auc"), subject=sub),
            _m("business", info, "candidate_chosen", 1.0 if row.get("chosen") else 0.0, subject=sub),
        )
    ms += _quality("business", info, "dev_", rec.quality, subject="chosen")
    ms += _quality("business", info, "dev_", rec.fp32_quality, subject="fp32")
    for name, q in rec.slices.items():
        ms += _keep(_m("business", info, "dev_roc_auc", q.get("roc_auc"), subject=f"slice:{name}"))
    for name, q in rec.fp32_slices.items():
        ms += _keep(_m("business", info, "fp32_dev_roc_auc", q.get("roc_auc"), subject=f"slice:{name}"))
    ms += _quality("business", info, "test_", rec.test, subject="chosen")
    ms += _keep(
        _m("business", info, "served_bytes", rec.bytes),
        _m("business", info, "fp32_bytes", rec.fp32_bytes),
        _m("business", info, "latency_b1_ms", rec.latency_b1_ms),
        _m("business", info, "fp32_latency_b1_ms", rec.fp32_latency_b1_ms),
    )
    return Fed(ms)


def canary_analysis(rec: CanaryAnalysisRecord, info: RunInfo) -> Fed:
    """Business layer per canary step (subject "<weight>%:<variant>"): requests, error rate, p50/p99
    latency, throughput, online ROC AUC from feedback; the served model's online ROC AUC after the
    run ("prod_online_roc_auc": the challenger's if it passed, else the champion's)."""
    ms: list[Metric] = []
    versions = {"challenger": rec.model_version, "champion": rec.champion}
    last_auc: dict[str, float] = {}
    for i, st in enumerate(rec.steps):
        weight = st.get("weight")
        metrics = st.get("metrics") or {}
        traffic = st.get("traffic") or {}
        seconds = traffic.get("seconds") or 0
        sent = traffic.get("variants") or {}
        auc = ((metrics.get("quality") or {}).get("roc_auc")) or {}
        for variant in ("champion", "challenger"):
            v = metrics.get(variant)
            if not v:
                continue
            sub, mv = f"{weight}%:{variant}", versions[variant]
            ms += _keep(
                _m("business", info, "requests", v.get("requests"), step=i, subject=sub, model_version=mv),
                _m("business", info, "error_rate", v.get("error_rate"), step=i, subject=sub, model_version=mv),
                _m("business", info, "latency_p50_ms", v.get("p50_ms"), step=i, subject=sub, model_version=mv),
                _m("business", info, "latency_p99_ms", v.get("p99_ms"), step=i, subject=sub, model_version=mv),
                _m("business", info, "latency_p99_low_ms", v.get("p99_low_ms"), step=i, subject=sub, model_version=mv),
                _m(
                    "business",
                    info,
                    "throughput_rps",
                    (sent.get(variant, 0) / seconds) if seconds else None,
                    step=i,
                    subject=sub,
                    model_version=mv,
                ),
                _m("business", info, "online_roc_auc", auc.get(variant), step=i, subject=sub, model_version=mv),
            )
            if auc.get(variant) is not None:
                last_auc[variant] = auc[variant]
        ms += _keep(_m("business", info, "score_psi", metrics.get("psi"), step=i, subject=f"{weight}%"))
    served = "challenger" if rec.passed else "champion"
    if served in last_auc:
        ms += _keep(
            _m(
                "business",
                info,
                "prod_online_roc_auc",
                last_auc[served],
                subject=served,
                model_version=versions[served],
            )
        )
    ms += _keep(_m("business", info, "canary_passed", 1.0 if rec.passed else 0.0))
    return Fed(ms, alerts=champion_failing(rec))


def champion_failing(rec: CanaryAnalysisRecord) -> list[Alert]:
    """The champion failing its own canary requests: production is broken, whatever the challenger did."""
    failing = [st for st in rec.steps if st.get("champion_failing")]
    if not failing:
        return []
    st = failing[-1]
    champ = (st.get("metrics") or {}).get("champion") or {}
    errors, requests = champ.get("errors") or 0, champ.get("requests") or 0
    causes = "; ".join(f"{c['error']} ({c['requests']})" for c in champ.get("causes") or [])
    return [
        Alert(
            "champion_failing",
            "critical",
            f"prod model {rec.champion} failed {errors} of {requests} canary requests at {st.get('weight')}%"
            + (f": {causes}" if causes else ""),
            errors / requests if requests else None,
        )
    ]


def _incident(name: str) -> Callable[[Record, RunInfo], Fed]:
    def fed(rec: Record, info: RunInfo) -> Fed:
        if isinstance(rec, RollbackRecord) and not rec.changed:
            return Fed()
        what = f"{name}:{rec.gate}" if isinstance(rec, (QuarantineRecord, RejectRecord)) else name
        return Fed(costs=cost.incident_lines([what], info.prices, info.day))

    fed.__doc__ = f"An incident ({name}): engineer time in the ledger."
    return fed


def cost_report(rec: CostReportRecord, info: RunInfo) -> Fed:
    """The day's ledger totals, its serving per variant (subject "day:<variant>"), the alerts it raised."""
    keep = ("rule", "severity", "message", "value", "threshold")
    day = {"subject": f"day:{rec.day}"}
    ms = _keep(
        _m("business", info, "cost_day_total", rec.total, **day),
        _m("business", info, "cost_day_waste", rec.waste, **day),
        _m("business", info, "cost_day_avoided", rec.avoided, **day),
    )
    for variant, s in rec.serving.items():
        mv = "/".join(s.get("model_versions") or []) or None
        kw = {"subject": f"day:{variant}", "model_version": mv}
        ms += _keep(
            _m("business", info, "requests", s.get("requests"), **kw),
            _m("business", info, "error_rate", s.get("error_rate"), **kw),
            _m("business", info, "latency_p50_ms", s.get("p50_ms"), **kw),
            _m("business", info, "latency_p99_ms", s.get("p99_ms"), **kw),
            _m("business", info, "latency_p99_low_ms", s.get("p99_low_ms"), **kw),
            _m("business", info, "throughput_rps", s.get("requests_per_s"), **kw),
            _m("business", info, "online_roc_auc", s.get("online_roc_auc"), **kw),
        )
    return Fed(ms, alerts=[Alert(**{k: a.get(k) for k in keep}) for a in rec.alerts])


def monitor_serving(rec: MonitorServingRecord, info: RunInfo) -> Fed:
    """The served window's drift per model version (the worst PSI, the drifted tests, skewed rows) and the
    serving_drift alerts it raised."""
    keep = ("rule", "severity", "message", "value", "threshold")
    ms: list[Metric] = []
    for v in rec.versions:
        kw = {"subject": f"window:{rec.window_end}", "model_version": v["model_version"],
              "data_version": v["data_version"]}  # fmt: skip
        ms += _keep(
            _m("business", info, "drift_rows", v["rows"], **kw),
            _m("business", info, "drift_worst_psi", v["worst_psi"], **kw),
            _m("business", info, "drift_tests_drifted", len(v["drifted"]), **kw),
            _m("business", info, "skewed_rows", v["skewed_rows"], **kw),
        )
    return Fed(ms, alerts=[Alert(**{k: a.get(k) for k in keep}) for a in rec.alerts])


FEEDS: dict[type[Record], Callable[[Any, RunInfo], Fed]] = {
    MonitorServingRecord: monitor_serving,
    CostReportRecord: cost_report,
    WeakLabelRecord: weak_label,
    ContractRecord: contract,
    SnapshotRecord: snapshot,
    TrainRecord: train,
    EvaluateRecord: evaluate,
    CompressRecord: compress,
    CanaryAnalysisRecord: canary_analysis,
    QuarantineRecord: _incident("quarantine"),
    RejectRecord: _incident("rejected_model"),
    RollbackCanaryRecord: _incident("canary_rollback"),
    RollbackRecord: _incident("manual_rollback"),
}


def feed(rec: Record | None, info: RunInfo) -> Fed:
    fn = FEEDS.get(type(rec)) if rec is not None else None
    return fn(rec, info) if fn else Fed()
