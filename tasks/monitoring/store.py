"""The metrics store: one SQLite file under SLUICE_HOME that outlives runs (docs/monitoring.md).

Keyed by run, task, step and model/data version: the three layers of metrics ("hardware",
"algorithm", "business", plus "data" for labeling), each task's usage (duration and what it
requested), its cost lines, and alerts. Writes for one (run_id, task) replace that task's
earlier rows of the same table, in one transaction, so a retried or re-run task never counts
twice. WAL mode and a busy timeout let the report, the UI and concurrent tasks read while a
task writes. Nothing here touches the disk until a store is opened.
"""

from __future__ import annotations

import sqlite3
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

from tasks.core.settings import Settings, StateLayout

SCHEMA_VERSION = 1
STORE_FILE = "metrics.sqlite"
LAYERS = ("hardware", "algorithm", "business", "data")
COST_KINDS = ("compute", "storage", "labor", "avoided", "waste")
BILLED_KINDS = ("compute", "storage", "labor")  # what a total is; "avoided" and "waste" are shown beside it
SEVERITIES = ("info", "warning", "critical")
PIPELINE, STORAGE = "pipeline", "storage"  # run kinds: a pipeline run, or a day's storage line

SCHEMA = """
CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    kind TEXT NOT NULL DEFAULT 'pipeline',
    dag_id TEXT,
    first_seen TEXT NOT NULL,
    last_seen TEXT NOT NULL,
    day TEXT NOT NULL,
    outcome TEXT,
    data_version TEXT,
    model_version TEXT
);
CREATE TABLE IF NOT EXISTS tasks (
    run_id TEXT NOT NULL,
    task TEXT NOT NULL,
    started TEXT NOT NULL,
    ended TEXT NOT NULL,
    seconds REAL NOT NULL,
    cpus REAL NOT NULL,
    gpus REAL NOT NULL,
    memory_gb REAL NOT NULL,
    backend TEXT NOT NULL,
    state TEXT NOT NULL,
    day TEXT NOT NULL,
    PRIMARY KEY (run_id, task)
);
CREATE TABLE IF NOT EXISTS metrics (
    id INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL,
    task TEXT NOT NULL,
    layer TEXT NOT NULL,
    name TEXT NOT NULL,
    subject TEXT NOT NULL DEFAULT '',
    value REAL,
    step INTEGER,
    model_version TEXT,
    data_version TEXT,
    ts TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS metrics_run_task ON metrics (run_id, task);
CREATE INDEX IF NOT EXISTS metrics_name ON metrics (name, layer);
CREATE TABLE IF NOT EXISTS costs (
    id INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL,
    task TEXT NOT NULL,
    kind TEXT NOT NULL,
    item TEXT NOT NULL,
    quantity REAL NOT NULL,
    unit TEXT NOT NULL,
    unit_price REAL NOT NULL,
    amount REAL NOT NULL,
    day TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS costs_run_task ON costs (run_id, task);
CREATE INDEX IF NOT EXISTS costs_day ON costs (day);
CREATE TABLE IF NOT EXISTS alerts (
    id INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL,
    task TEXT NOT NULL,
    rule TEXT NOT NULL,
    severity TEXT NOT NULL,
    message TEXT NOT NULL,
    value REAL,
    threshold REAL,
    ts TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS alerts_run_task ON alerts (run_id, task);
"""


class StoreError(RuntimeError):
    """The metrics store cannot be used (a newer schema, a bad value)."""


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def iso(t: datetime) -> str:
    return (t if t.tzinfo else t.replace(tzinfo=timezone.utc)).astimezone(timezone.utc).isoformat()


def day_of(t: datetime) -> str:
    """The UTC day a time falls on, YYYY-MM-DD (the ledger's day)."""
    return (t if t.tzinfo else t.replace(tzinfo=timezone.utc)).astimezone(timezone.utc).date().isoformat()


@dataclass(frozen=True)
class Metric:
    """One value of one layer. `subject` says what it is about when not the whole task: a slice, an LF,
    a compression candidate, a serving variant ('' for the task itself)."""

    layer: str
    name: str
    value: float | None
    step: int | None = None
    model_version: str | None = None
    data_version: str | None = None
    subject: str = ""
    ts: datetime = field(default_factory=utc_now)

    def __post_init__(self) -> None:
        if self.layer not in LAYERS:
            raise StoreError(f"metric {self.name!r}: layer {self.layer!r} is not one of {LAYERS}")


@dataclass(frozen=True)
class TaskUsage:
    """What one task used: measured duration, requested resources (the pod's requests on Kubernetes;
    processes x threads and peak RSS on the local backend), where it ran, how it ended."""

    started: datetime
    ended: datetime
    seconds: float
    cpus: float
    gpus: float = 0.0
    memory_gb: float = 0.0
    backend: str = "local"
    state: str = "success"

    def __post_init__(self) -> None:
        for name in ("seconds", "cpus", "gpus", "memory_gb"):
            v = getattr(self, name)
            if not (v >= 0):  # also catches NaN
                raise StoreError(f"task usage: {name} must be >= 0, got {v!r}")

    @property
    def day(self) -> str:
        return day_of(self.ended)


@dataclass(frozen=True)
class CostLine:
    """One priced line of the ledger: quantity (in `unit`) x unit_price = amount, on a UTC day.
    kind: compute | storage | labor (billed); avoided (labor a weak label saved); waste (idle
    accelerator time, a part of compute already billed)."""

    kind: str
    item: str
    quantity: float
    unit: str
    unit_price: float
    amount: float
    day: str

    def __post_init__(self) -> None:
        if self.kind not in COST_KINDS:
            raise StoreError(f"cost line {self.item!r}: kind {self.kind!r} is not one of {COST_KINDS}")


@dataclass(frozen=True)
class Alert:
    rule: str
    severity: str
    message: str
    value: float | None = None
    threshold: float | None = None
    ts: datetime = field(default_factory=utc_now)

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise StoreError(f"alert {self.rule!r}: severity {self.severity!r} is not one of {SEVERITIES}")


def store_path(where: Settings | StateLayout | Path) -> Path:
    if isinstance(where, Settings):
        where = where.layout
    if isinstance(where, StateLayout):
        return where.monitoring / STORE_FILE
    return Path(where)


class MetricsStore:
    """The store at one path. Each call opens its own connection (safe from any thread or process)."""

    def __init__(self, path: Path):
        self.path = Path(path)

    @classmethod
    def open(cls, where: Settings | StateLayout | Path) -> "MetricsStore":
        """The store of these settings/layout (or at a file path), created with its schema if new."""
        store = cls(store_path(where))
        store.path.parent.mkdir(parents=True, exist_ok=True)
        with store._connect() as db:
            db.executescript(SCHEMA)
            row = db.execute("SELECT version FROM schema_version").fetchone()
            if row is None:
                db.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION,))
            elif row[0] > SCHEMA_VERSION:
                raise StoreError(
                    f"{store.path}: schema version {row[0]} is newer than this code's {SCHEMA_VERSION}; "
                    f"update the code (the store is never downgraded)"
                )
        return store

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        try:
            db.row_factory = sqlite3.Row
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA busy_timeout=30000")
            db.execute("PRAGMA synchronous=NORMAL")  # WAL: consistent after a crash, one fsync per checkpoint
            yield db
        finally:
            db.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._connect() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    # --- writes -------------------------------------------------------------------------------

    def record(
        self,
        run_id: str,
        task: str,
        *,
        usage: TaskUsage | None = None,
        metrics: list[Metric] | None = None,
        costs: list[CostLine] | None = None,
        alerts: list[Alert] | None = None,
        dag_id: str | None = None,
        kind: str = PIPELINE,
    ) -> None:
        """Write what one task produced in one transaction; each given kind replaces the task's earlier rows."""
        if not run_id or not task:
            raise StoreError(f"run id and task must not be empty (got {run_id!r}, {task!r})")
        now = utc_now()
        with self._transaction() as db:
            _touch_run(db, run_id, now, dag_id, kind)
            if usage is not None:
                db.execute(
                    "INSERT OR REPLACE INTO tasks VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                    (
                        run_id,
                        task,
                        iso(usage.started),
                        iso(usage.ended),
                        usage.seconds,
                        usage.cpus,
                        usage.gpus,
                        usage.memory_gb,
                        usage.backend,
                        usage.state,
                        usage.day,
                    ),
                )
            if metrics is not None:
                db.execute("DELETE FROM metrics WHERE run_id=? AND task=?", (run_id, task))
                db.executemany(
                    "INSERT INTO metrics (run_id, task, layer, name, subject, value, step, model_version, "
                    "data_version, ts) VALUES (?,?,?,?,?,?,?,?,?,?)",
                    [
                        (
                            run_id,
                            task,
                            m.layer,
                            m.name,
                            m.subject,
                            _finite(m.value),
                            m.step,
                            m.model_version,
                            m.data_version,
                            iso(m.ts),
                        )
                        for m in metrics
                    ],
                )
            if costs is not None:
                db.execute("DELETE FROM costs WHERE run_id=? AND task=?", (run_id, task))
                db.executemany(
                    "INSERT INTO costs (run_id, task, kind, item, quantity, unit, unit_price, amount, day) "
                    "VALUES (?,?,?,?,?,?,?,?,?)",
                    [(run_id, task, c.kind, c.item, c.quantity, c.unit, c.unit_price, c.amount, c.day) for c in costs],
                )
            if alerts is not None:
                db.execute("DELETE FROM alerts WHERE run_id=? AND task=?", (run_id, task))
                db.executemany(
                    "INSERT INTO alerts (run_id, task, rule, severity, message, value, threshold, ts) "
                    "VALUES (?,?,?,?,?,?,?,?)",
                    [
                        (run_id, task, a.rule, a.severity, a.message, _finite(a.value), a.threshold, iso(a.ts))
                        for a in alerts
                    ],
                )

    def record_metrics(self, run_id: str, task: str, rows: list[Metric]) -> None:
        self.record(run_id, task, metrics=rows)

    def record_task(self, run_id: str, task: str, usage: TaskUsage) -> None:
        self.record(run_id, task, usage=usage)

    def record_costs(self, run_id: str, task: str, lines: list[CostLine], kind: str = PIPELINE) -> None:
        self.record(run_id, task, costs=lines, kind=kind)

    def record_alerts(self, run_id: str, task: str, alerts: list[Alert]) -> None:
        self.record(run_id, task, alerts=alerts)

    def record_run(
        self,
        run_id: str,
        *,
        outcome: str | None = None,
        data_version: str | None = None,
        model_version: str | None = None,
        dag_id: str | None = None,
    ) -> None:
        """A run's outcome and versions (the report step), kept beside its tasks."""
        with self._transaction() as db:
            _touch_run(db, run_id, utc_now(), dag_id, PIPELINE)
            db.execute(
                "UPDATE runs SET outcome=COALESCE(?, outcome), data_version=COALESCE(?, data_version), "
                "model_version=COALESCE(?, model_version) WHERE run_id=?",
                (outcome, data_version, model_version, run_id),
            )

    # --- reads --------------------------------------------------------------------------------

    def _rows(self, sql: str, args: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        with self._connect() as db:
            return [dict(r) for r in db.execute(sql, args).fetchall()]

    def schema_version(self) -> int:
        return self._rows("SELECT version FROM schema_version")[0]["version"]

    def runs(self, kind: str | None = PIPELINE) -> list[dict[str, Any]]:
        """Runs, oldest first, each with its billed cost total and alert count (kind None: every kind)."""
        billed = ",".join(f"'{k}'" for k in BILLED_KINDS)
        sql = (
            "SELECT r.*, "
            f"(SELECT COALESCE(SUM(amount), 0) FROM costs c WHERE c.run_id=r.run_id AND c.kind IN ({billed})) "
            "AS cost, (SELECT COUNT(*) FROM alerts a WHERE a.run_id=r.run_id) AS alerts FROM runs r"
        )
        args: tuple[Any, ...] = ()
        if kind is not None:
            sql, args = sql + " WHERE r.kind=?", (kind,)
        return self._rows(sql + " ORDER BY r.first_seen, r.run_id", args)

    def run(self, run_id: str) -> dict[str, Any] | None:
        rows = [r for r in self.runs(kind=None) if r["run_id"] == run_id]
        return rows[0] if rows else None

    def metrics(
        self, run_id: str | None = None, layer: str | None = None, name: str | None = None, task: str | None = None
    ) -> list[dict[str, Any]]:
        where, args = _where(run_id=run_id, layer=layer, name=name, task=task)
        return self._rows(f"SELECT * FROM metrics{where} ORDER BY ts, id", args)

    def metric_history(self, name: str, layer: str | None = None, subject: str | None = "") -> list[dict[str, Any]]:
        """One metric across runs (the last value each run recorded), oldest run first (subject None: any)."""
        where, args = _where(name=name, layer=layer, subject=subject)
        return self._rows(
            "SELECT m.run_id, m.task, m.subject, m.value, m.model_version, m.data_version, m.ts FROM metrics m "
            f"JOIN (SELECT run_id, MAX(id) AS id FROM metrics{where} GROUP BY run_id) last ON m.id = last.id "
            "JOIN runs r ON r.run_id = m.run_id ORDER BY r.first_seen, m.id",
            args,
        )

    def tasks(self, run_id: str | None = None, day: str | None = None) -> list[dict[str, Any]]:
        where, args = _where(run_id=run_id, day=day)
        return self._rows(f"SELECT * FROM tasks{where} ORDER BY started, task", args)

    def costs(self, run_id: str | None = None, day: str | None = None, kind: str | None = None) -> list[dict[str, Any]]:
        where, args = _where(run_id=run_id, day=day, kind=kind)
        return self._rows(f"SELECT * FROM costs{where} ORDER BY day, run_id, task, id", args)

    def alerts(self, run_id: str | None = None, task: str | None = None) -> list[dict[str, Any]]:
        where, args = _where(run_id=run_id, task=task)
        return self._rows(f"SELECT * FROM alerts{where} ORDER BY ts, id", args)

    def days(self) -> list[str]:
        """Days that have cost lines, oldest first."""
        return [r["day"] for r in self._rows("SELECT DISTINCT day FROM costs ORDER BY day")]

    def as_dict(self) -> dict[str, Any]:
        """Everything, for an export or a test."""
        return {
            "schema_version": self.schema_version(),
            "runs": self.runs(kind=None),
            "tasks": self.tasks(),
            "metrics": self.metrics(),
            "costs": self.costs(),
            "alerts": self.alerts(),
        }


def _touch_run(db: sqlite3.Connection, run_id: str, now: datetime, dag_id: str | None, kind: str) -> None:
    db.execute(
        "INSERT INTO runs (run_id, kind, dag_id, first_seen, last_seen, day) VALUES (?,?,?,?,?,?) "
        "ON CONFLICT(run_id) DO UPDATE SET last_seen=excluded.last_seen, dag_id=COALESCE(excluded.dag_id, dag_id)",
        (run_id, kind, dag_id, iso(now), iso(now), day_of(now)),
    )


def _where(**filters: Any) -> tuple[str, tuple[Any, ...]]:
    items = [(k, v) for k, v in filters.items() if v is not None]
    if not items:
        return "", ()
    return " WHERE " + " AND ".join(f"{k}=?" for k, _ in items), tuple(v for _, v in items)


def _finite(v: float | None) -> float | None:
    """NaN and infinities are stored as NULL (SQLite has no NaN): a missing value, not a number."""
    if v is None:
        return None
    v = float(v)
    return v if v == v and v not in (float("inf"), float("-inf")) else None


def to_jsonable(obj: Metric | TaskUsage | CostLine | Alert) -> dict[str, Any]:
    """A dataclass of this module as JSON-ready values (times as ISO strings)."""
    return {k: iso(v) if isinstance(v, datetime) else v for k, v in asdict(obj).items()}
