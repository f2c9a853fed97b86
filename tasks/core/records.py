"""Step records: what each step returns, writes to runs/<run_id>/steps/<step>.json and
pushes to XCom, as typed models. The one contract between steps: a step reads its
upstream steps' records by these types, never by string keys.

Records hold small references (paths, version tags) and small summaries, never data.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from tasks.core.errors import StepError

# classification_metrics: roc_auc, f1, precision, recall, accuracy, ...; K classes add per_class {class: {f1, support}}
Quality = dict[str, float | None | dict[str, dict[str, float]]]


class Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class GateRecord(Record):
    """A record whose step is a gate: `passed`, and the reasons when it did not."""

    passed: bool

    @property
    def why(self) -> str:
        return getattr(self, "summary", None) or "; ".join(getattr(self, "reasons", None) or [])


class IngestRecord(Record):
    status: Literal["staged", "unreadable", "no_batch"]
    batch_id: str | None = None
    source: str | None = None
    bytes: int | None = None
    staged: str | None = None
    rows: int | None = None
    error: str | None = None


class ContractRecord(GateRecord):
    """validate_raw and validate_labeled: a data contract's verdict and where its reports are."""

    suite: str
    suite_hash: str
    evaluated: int
    failed: int
    rows: int | None
    summary: str
    report: str
    report_json: str


class WeakLabelRecord(Record):
    labeled: str
    rows: int
    lf_module: str
    lf_module_hash: str
    labeling_stats: dict[str, Any]
    drift: list[str]
    drift_compared_with: str | None
    n_lfs: int
    coverage: float
    abstained_rows: int
    chosen: str
    quality_dev: dict[str, Quality]
    lf_table: list[dict[str, Any]]
    # What trains the end model (tasks/labeling/mix.py): the mix, the gold budget, the weak rows' weight
    # and how it was chosen (mean ROC AUC on gold dev folds by weight), rows and loss weight per source.
    mix: str | None = None
    gold_budget: float | None = None
    weak_weight: float | None = None
    weak_weight_choice: dict[str, Any] | None = None
    label_counts: dict[str, dict[str, float]] | None = None
    # Gold from /v1/feedback (tasks/labeling/feedback.py): counts of this run's account, and the gold
    # version whose training rows are in the data from this batch on (None: none yet).
    feedback_gold: dict[str, Any] | None = None
    feedback_gold_version: str | None = None
    lf_votes: str | None = None  # runs/<id>/lf_votes.parquet: per row, the LF votes and P(positive)
    # weak_label.embedding_lf: kept or dropped, why (the label model's dev ROC AUC with and without it),
    # its dev coverage and out-of-fold accuracy, the embedding cache's fingerprint (None: not enabled)
    embedding_lf: dict[str, Any] | None = None


class FillQueueRecord(Record):
    """The rows a nightly put into the labeling queue (tasks/fill_queue.py)."""

    path: str
    added: int
    chosen: int
    random: int
    random_inclusion: float | None
    signals: list[str]
    model_version: str | None
    eligible: int
    queued_before: int
    mean_score_chosen: float | None = None
    mean_score_batch: float | None = None


class QuarantineRecord(Record):
    batch_id: str
    gate: str
    path: str
    reason: str | None


class SnapshotRecord(Record):
    data_version: str
    created: bool | None = None
    parent: str | None = None
    total_rows: int | None = None
    partitions: int
    reentered: list[str] = []
    """Held batches (a rejected model's) that re-entered with this version, their stored labels kept."""
    held: list[str] = []
    """Batches still held after it: waiting for a readmit, or quarantined."""


class TrainPlanRecord(Record):
    """The kubernetes backend's plan: strings the pod templates render."""

    name: str
    run_id: str
    data_version: str
    params: str
    out_uri: str
    registry_url: str
    init_from: str
    dataset: str = ""
    """The step's dataset plug-in module, which the pods' engine loads ("": their image's params.yaml's)."""
    requests: dict[str, float] = {}
    """What the pods request in all (cpus, gpus, memory_gb): the cost ledger prices it."""
    server_version: str = ""
    """The API server the preflight asked (its git version)."""
    warnings: list[str] = []
    """What the preflight found weakened on that server (tasks/training/k8s_server.py)."""


class TrainRecord(Record):
    data_version: str
    rows: int
    partitions: int
    epochs: int
    world_size: int
    device: str
    final_loss: float
    seconds: float
    resumed_from_step: int | None
    steps: int
    n_parameters: int
    strategy: str = "ddp"  # train.strategy (records written before it existed were DDP)
    resumed_from: dict[str, Any] | None = None
    """The checkpoint resumed from: its step, world size and strategy, and this run's (a resize)."""
    warm_start: str | None
    pretrained: dict[str, Any] | None = None
    """The pretrained weights started from (train.pretrained): file, sha256, tensors, fresh weights."""
    inputs: dict[str, Any] | None = None
    """A token model's inputs: its tokenizer's sha256, max_len and how many trainable texts were cut
    there, a frozen encoder's embedding cache (None: dense features, or a training before this record)."""
    metrics: dict[str, Any] | None  # None: the run closed no metrics window (fewer steps than train.log_every)
    model: str
    outputs: str
    params_overlay: str | None = None  # the tuned overlay (tuned-vN) applied to train, if any
    overlay_values: dict[str, Any] | None = None  # the train values it set


class EvaluateRecord(GateRecord):
    reasons: list[str]
    challenger: Quality
    champion: Quality | None
    champion_version: str | None
    test_rows: int


class CompressRecord(GateRecord):
    """The compression search's outcome: the chosen candidate (the file serving loads), its figures
    on the gold dev set (what it was chosen on) and test set (reported), the fp32 baseline's, the gate."""

    reasons: list[str]
    chosen: str | None
    """The chosen candidate's name, e.g. prune_structured(0.5)+int8_dynamic ("fp32": uncompressed)."""
    chain: list[dict[str, Any]]
    """Its techniques' configs in order (as in the ONNX file's `sluice.compression` metadata)."""
    path: str | None
    """runs/<run_id>/compress/model.served.onnx: the chosen file, what register stores as served."""
    bytes: int | None
    quality: Quality | None
    """Gold dev set, overall."""
    slices: dict[str, Quality]
    """Gold dev set, per slice of the dataset plug-in (empty: the plug-in has none)."""
    test: Quality | None
    """Gold test set (reported, never used to choose)."""
    latency_b1_ms: float | None
    latency_b256_ms: float | None
    parity_max_abs: float
    """max |P_torch - P_onnx| of the fp32 exports (the baseline and the chosen chain's torch-side model)."""
    fp32_path: str
    fp32_bytes: int
    fp32_quality: Quality
    fp32_slices: dict[str, Quality]
    fp32_test: Quality
    fp32_latency_b1_ms: float
    torch_bytes: int
    table: str
    """compress/candidates.json: every candidate's row (metrics, why not chosen)."""
    plot: str | None
    seconds: float


class RejectRecord(Record):
    gate: str
    reasons: list[str]
    prod_model: str | None
    current_data: str | None
    rolled_back: bool
    held: list[str] = []
    """Batches this rejection left out of the data: they re-enter the next snapshot."""
    quarantined: list[str] = []
    """Held batches rejected too often in a row: moved to quarantine/ with every reason."""


class RegisterRecord(Record):
    model_version: str
    created: bool | None = None
    data_version: str
    code_commit: str
    params_hash: str
    parent_model: str | None


class DeployRecord(Record):
    prod_model: str
    previous: str | None
    changed: bool
    commit: str | None = None


class CanaryRecord(Record):
    """deploy_canary: the challenger beside the champion at the first weight (or promoted directly)."""

    model_version: str
    champion: str | None
    weight: int
    promoted_directly: bool


class CanaryAnalysisRecord(GateRecord):
    reasons: list[str]
    model_version: str
    champion: str | None
    steps: list[dict[str, Any]]
    """Per step: weight, passed, outcome, reasons, the metrics compared, the traffic sent."""
    outcome: str = "pass"
    """pass | challenger_worse | cannot_judge (too few answers, no server, or a failing champion)."""
    champion_failing: bool = False
    """The champion failed significantly more of its own requests than canary.error_rate_margin (critical)."""


class RollbackCanaryRecord(Record):
    model_version: str
    champion: str | None
    reasons: list[str]
    current_data: str | None
    data_rolled_back: bool
    held: list[str] = []
    """Batches this rejection left out of the data: they re-enter the next snapshot."""
    quarantined: list[str] = []
    """Held batches rejected too often in a row: moved to quarantine/ with every reason."""


class RollbackRecord(Record):
    """The operator's rollback (the rollback DAG): data and model pointers before and after."""

    changed: bool
    before: dict[str, str | None]
    after: dict[str, str | None]
    commit: str | None = None
    retired_challenger: str | None = None


class ReportRecord(Record):
    outcome: str
    summary: str
    data_version: str | None
    prod_model: str | None


class TunePlanRecord(Record):
    """A tuning run's plan (dags/tuning.py): the study, what it may spend, the trial slots to map over."""

    study: str
    data_version: str
    storage: str  # the journal file, or the PostgreSQL URL with its password redacted
    dev: str  # the gold dev set the trials score (a path, or a URI pods read)
    n_trials: int
    parallelism: int
    cost_ceiling: float
    seed: int
    finished: int  # trials already complete or pruned (a resumed study keeps them)
    spent: float
    trial_cost_floor: float
    slots: list[int]  # one mapped trial task each


class TuneTrialRecord(Record):
    """One mapped trial: its study trial number, verdict, dev ROC AUC and ledger cost (or why it was skipped)."""

    index: int
    skipped: str | None = None
    number: int | None = None
    state: str | None = None
    value: float | None = None
    cost: float | None = None
    epochs: int | None = None
    params: dict[str, Any] | None = None
    pruned_by: str | None = None


class TuneReportRecord(Record):
    """The study's result: counts, the Pareto front, the chosen trial and the tuned overlay registered."""

    study: str
    data_version: str
    trials: dict[str, int]  # by state
    spent: float
    best_value: float | None
    chosen: dict[str, Any] | None
    front: list[int]
    overlay_version: str | None
    plot: str
    table: str


class CostReportRecord(Record):
    """The daily cost report (tasks/cost_report.py): one UTC day of the ledger, against the day before."""

    day: str
    currency: str
    total: float
    """Billed: compute + storage + labor."""
    by_kind: dict[str, float]
    previous_day: str
    previous_total: float | None
    """None: the ledger has nothing on the previous day."""
    change: float | None
    biggest: list[dict[str, Any]]
    """The largest costs of the day (task and item, amount, share), largest first."""
    waste: float
    avoided: float
    runs: int
    alerts: list[dict[str, Any]]
    """Alerts the report raised (a cost jump): rule, severity, message, value, threshold."""
    report_txt: str
    report_json: str
    serving: dict[str, dict[str, Any]] = {}
    """The day's serving per variant from the model server's prediction log (tasks/monitoring/serving_window.py)."""


class MonitorServingRecord(Record):
    """The monitor_serving DAG's verdict on a window of served traffic (tasks/monitoring/serving_drift.py)."""

    status: Literal["judged", "no_traffic"]
    window_start: str
    window_end: str
    log: str
    rows: int
    """/v1/predict rows with their input served in the window (every model version)."""
    cut_short: list[str] = []
    """Prediction-log chunks cut short (no trailer): skipped whole, named here."""
    versions: list[dict[str, Any]] = []
    """Per judged model version: data_version, rows, tests, alpha_per_test, drifted tests, skew."""
    not_judged: list[str] = []
    """Model versions with too few rows in the window, or none with inputs (the reason each)."""
    drift: bool = False
    cause: dict[str, Any] | None = None
    """The sluice_serving_drift event's extra when drift (or skew) was found: why, for the nightly run."""
    alerts: list[dict[str, Any]] = []
    message: str = ""
    report: str | None = None


class DriftRetrainRecord(Record):
    """A drift-triggered nightly run with no new batch: it retrains on the current data version."""

    data_version: str
    causes: list[dict[str, Any]]


# The record type of each step's record file (runs/<run_id>/steps/<name>.json).
RECORDS: dict[str, type[Record]] = {
    "ingest": IngestRecord,
    "validate_raw": ContractRecord,
    "weak_label": WeakLabelRecord,
    "fill_queue": FillQueueRecord,
    "validate_labeled": ContractRecord,
    "quarantine": QuarantineRecord,
    "snapshot": SnapshotRecord,
    "plan_train": TrainPlanRecord,
    "train": TrainRecord,
    "evaluate": EvaluateRecord,
    "compress": CompressRecord,
    "reject_model": RejectRecord,
    "register": RegisterRecord,
    "deploy_canary": CanaryRecord,
    "canary_analysis": CanaryAnalysisRecord,
    "promote": DeployRecord,
    "rollback_canary": RollbackCanaryRecord,
    "rollback": RollbackRecord,
    "report": ReportRecord,
    "tune_plan": TunePlanRecord,
    "tune_trial": TuneTrialRecord,
    "tune_report": TuneReportRecord,
    "cost_report": CostReportRecord,
    "monitor_serving": MonitorServingRecord,
    "drift_retrain": DriftRetrainRecord,
}


def failed_gate(**gates: GateRecord | None) -> tuple[str, list[str]]:
    """The last gate (in the order given) that said no, and its reasons. Pure."""
    for name, rec in reversed(gates.items()):
        if rec is not None and not rec.passed:
            return name, list(getattr(rec, "reasons", None) or [rec.why] or ["unknown"])
    raise StepError(f"no failed gate among {[n for n, r in gates.items() if r is not None]}: nothing to reject")
