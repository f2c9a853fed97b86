"""The metrics store: one database that outlives runs (docs/monitoring.md): a SQLite file under
SLUICE_HOME by default, or PostgreSQL when SLUICE_DATABASE_URL names one (many hosts, docs/deploy.md).

Keyed by run, task, step and model/data version: the three layers of metrics ("hardware",
"algorithm", "business", plus "data" for labeling), each task's usage (duration and what it
requested), its cost lines, and alerts. Writes for one (run_id, task) replace that task's
earlier rows of the same table, in one transaction, so a retried or re-run task never counts
twice. On SQLite, WAL mode and a busy timeout let the report, the UI and concurrent tasks read
while a task writes. One code path for both (SQLAlchemy Core, tasks/core/database.py); nothing
here touches the disk, nor imports SQLAlchemy or the driver, until a store is opened.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from tasks.core.database import describe, is_postgres, make_engine, sqlite_engine, write_transaction
from tasks.core.settings import Settings, StateLayout, redact

if TYPE_CHECKING:  # pragma: no cover - types only
    from sqlalchemy.engine import Connection

SCHEMA_VERSION = 1
STORE_FILE = "metrics.sqlite"
LAYERS = ("hardware", "algorithm", "business", "data")
COST_KINDS = ("compute", "storage", "labor", "avoided", "waste")
BILLED_KINDS = ("compute", "storage", "labor")  # what a total is; "avoided" and "waste" are shown beside it
SEVERITIES = ("info", "warning", "critical")
PIPELINE, STORAGE = "pipeline", "storage"  # run kinds: a pipeline run, or a day's storage line


def _schema():
    """The tables, one definition for SQLite and PostgreSQL (SQLAlchemy writes each dialect's DDL):
    Float is SQLite's REAL and PostgreSQL's double precision; an `id` is SQLite's rowid and a
    PostgreSQL bigserial."""
    from sqlalchemy import BigInteger, Column, Float, Index, Integer, MetaData, Table, Text

    def rowid() -> Column:
        return Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True)

    def text(name: str, **kw: Any) -> Column:
        return Column(name, Text, nullable=kw.pop("nullable", False), **kw)

    def real(name: str, nullable: bool = False) -> Column:
        return Column(name, Float, nullable=nullable)

    md = MetaData()
    Table("schema_version", md, Column("version", Integer, nullable=False))
    Table(
        "runs",
        md,
        Column("run_id", Text, primary_key=True),
        text("kind", server_default=PIPELINE),
        text("dag_id", nullable=True),
        text("first_seen"),
        text("last_seen"),
        text("day"),
        text("outcome", nullable=True),
        text("data_version", nullable=True),
        text("model_version", nullable=True),
    )
    Table(
        "tasks",
        md,
        Column("run_id", Text, primary_key=True),
        Column("task", Text, primary_key=True),
        text("started"),
        text("ended"),
        real("seconds"),
        real("cpus"),
        real("gpus"),
        real("memory_gb"),
        text("backend"),
        text("state"),
        text("day"),
    )
    Table(
        "metrics",
        md,
        rowid(),
        text("run_id"),
        text("task"),
        text("layer"),
        text("name"),
        text("subject", server_default=""),
        real("value", nullable=True),
        Column("step", Integer),
        text("model_version", nullable=True),
        text("data_version", nullable=True),
        text("ts"),
        Index("metrics_run_task", "run_id", "task"),
        Index("metrics_name", "name", "layer"),
    )
    Table(
        "costs",
        md,
        rowid(),
        text("run_id"),
        text("task"),
        text("kind"),
        text("item"),
        real("quantity"),
        text("unit"),
        real("unit_price"),
        real("amount"),
        text("day"),
        Index("costs_run_task", "run_id", "task"),
        Index("costs_day", "day"),
    )
    Table(
        "alerts",
        md,
        rowid(),
        text("run_id"),
        text("task"),
        text("rule"),
        text("severity"),
        text("message"),
        real("value", nullable=True),
        real("threshold", nullable=True),
        text("ts"),
        Index("alerts_run_task", "run_id", "task"),
    )
    return md


class StoreError(RuntimeError):
    """The metrics store cannot be used (a newer schema, a bad value)."""


class StoreUnavailable(StoreError):
    """The store's database cannot be reached or went away (a step's write fails; the step does not)."""


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
    """The SQLite file of these settings/layout (with SLUICE_DATABASE_URL unset), or the path given."""
    if isinstance(where, Settings):
        where = where.layout
    if isinstance(where, StateLayout):
        return where.monitoring / STORE_FILE
    return Path(where)


def store_exists(settings: Settings) -> bool:
    """Whether there is a store to read without creating one: a configured PostgreSQL database always is."""
    return is_postgres(settings.database_url) or store_path(settings).exists()


class MetricsStore:
    """The store at one SQLite path or one PostgreSQL URL. Each call opens its own connection (safe from
    any thread or process); a database that cannot be reached is a StoreUnavailable naming it (redacted)."""

    def __init__(self, path: Path | None = None, *, url: str | None = None):
        if (path is None) == (url is None):
            raise StoreError("a metrics store is a SQLite path or a postgresql:// URL, one of them")
        if url is not None and not is_postgres(url):
            raise StoreError(f"not a postgresql:// URL: {redact(url)}")
        self.path = Path(path) if path is not None else None
        self.url = url
        self._engine = None

    @property
    def where(self) -> str:
        """The store for a message or a record: its file, or its URL with any password redacted."""
        return str(self.path) if self.path is not None else redact(self.url)

    @property
    def is_postgres(self) -> bool:
        return self.url is not None

    @classmethod
    def open(cls, where: Settings | StateLayout | Path | str) -> "MetricsStore":
        """The store of these settings (SLUICE_DATABASE_URL, else the SQLite file under SLUICE_HOME), of a
        layout, at a file path or a postgresql:// URL; created with its schema if new."""
        if isinstance(where, Settings) and where.database_url:
            store = cls(url=where.database_url)
        elif isinstance(where, str) and is_postgres(where):
            store = cls(url=where)
        else:
            store = cls(store_path(where))
            store.path.parent.mkdir(parents=True, exist_ok=True)
        # on PostgreSQL one process creates the tables; the others wait for its lock, then see them
        with store._transaction(lock="sluice.metrics.schema") as db:
            _schema().create_all(db, checkfirst=True)
            row = db.execute(_sql("SELECT version FROM schema_version")).fetchone()
            if row is None:
                db.execute(_sql("INSERT INTO schema_version (version) VALUES (:v)"), {"v": SCHEMA_VERSION})
            elif row[0] > SCHEMA_VERSION:
                raise StoreError(
                    f"{store.where}: schema version {row[0]} is newer than this code's {SCHEMA_VERSION}; "
                    f"update the code (the store is never downgraded)"
                )
        return store

    def _get_engine(self):
        if self._engine is None:
            if self.url is not None:
                self._engine = make_engine(self.url)
            else:
                self._engine = sqlite_engine(self.path)
        return self._engine

    @contextmanager
    def _connect(self) -> Iterator["Connection"]:
        from sqlalchemy.exc import OperationalError

        try:
            with self._get_engine().connect() as db:
                yield db
        except OperationalError as exc:  # refused, gone mid-run, timed out, locked
            raise StoreUnavailable(f"the metrics store {self.where} cannot be used: {describe(exc)}") from None

    @contextmanager
    def _transaction(self, lock: str | None = None) -> Iterator["Connection"]:
        with self._connect() as db, write_transaction(db, lock):
            yield db

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
        key = {"run_id": run_id, "task": task}
        # SQLite's BEGIN IMMEDIATE makes a replace atomic. On PostgreSQL, under READ COMMITTED, two writers of one
        # (run, task) could each delete what they see and both insert: the lock (held until commit) makes them
        # take turns. (The runs-row upsert below would too, but only by its place first.)
        with self._transaction(lock=f"sluice.metrics:{run_id}:{task}") as db:
            _touch_run(db, run_id, now, dag_id, kind)
            if usage is not None:
                db.execute(
                    _sql(
                        f"INSERT INTO tasks ({', '.join(TASK_COLUMNS)}) VALUES ({_binds(TASK_COLUMNS)}) "
                        "ON CONFLICT (run_id, task) DO UPDATE SET "
                        + ", ".join(f"{c}=excluded.{c}" for c in TASK_COLUMNS[2:])
                    ),
                    {
                        **key,
                        "started": iso(usage.started),
                        "ended": iso(usage.ended),
                        "seconds": usage.seconds,
                        "cpus": usage.cpus,
                        "gpus": usage.gpus,
                        "memory_gb": usage.memory_gb,
                        "backend": usage.backend,
                        "state": usage.state,
                        "day": usage.day,
                    },
                )
            if metrics is not None:
                _replace(
                    db,
                    "metrics",
                    key,
                    [
                        {
                            "layer": m.layer,
                            "name": m.name,
                            "subject": m.subject,
                            "value": _finite(m.value),
                            "step": m.step,
                            "model_version": m.model_version,
                            "data_version": m.data_version,
                            "ts": iso(m.ts),
                        }
                        for m in metrics
                    ],
                )
            if costs is not None:
                _replace(
                    db,
                    "costs",
                    key,
                    [
                        {
                            "kind": c.kind,
                            "item": c.item,
                            "quantity": c.quantity,
                            "unit": c.unit,
                            "unit_price": c.unit_price,
                            "amount": c.amount,
                            "day": c.day,
                        }
                        for c in costs
                    ],
                )
            if alerts is not None:
                _replace(
                    db,
                    "alerts",
                    key,
                    [
                        {
                            "rule": a.rule,
                            "severity": a.severity,
                            "message": a.message,
                            "value": _finite(a.value),
                            "threshold": a.threshold,
                            "ts": iso(a.ts),
                        }
                        for a in alerts
                    ],
                )

    def record_metrics(self, run_id: str, task: str, rows: list[Metric]) -> None:
        self.record(run_id, task, metrics=rows)

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
                _sql(
                    "UPDATE runs SET outcome=COALESCE(:outcome, outcome), "
                    "data_version=COALESCE(:data_version, data_version), "
                    "model_version=COALESCE(:model_version, model_version) WHERE run_id=:run_id"
                ),
                {"outcome": outcome, "data_version": data_version, "model_version": model_version, "run_id": run_id},
            )

    # --- reads --------------------------------------------------------------------------------

    def _rows(self, sql: str, args: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        with self._connect() as db:
            return [dict(r) for r in db.execute(_sql(sql), args or {}).mappings().all()]

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
        args: dict[str, Any] = {}
        if kind is not None:
            sql, args = sql + " WHERE r.kind=:kind", {"kind": kind}
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
            f"JOIN (SELECT run_id, MAX(id) AS id FROM metrics{where} GROUP BY run_id) latest ON m.id = latest.id "
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


TASK_COLUMNS = ("run_id", "task", "started", "ended", "seconds", "cpus", "gpus", "memory_gb", "backend", "state", "day")


def _sql(sql: str):
    from sqlalchemy import text

    return text(sql)


def _binds(columns: tuple[str, ...] | list[str]) -> str:
    return ", ".join(f":{c}" for c in columns)


def _touch_run(db: "Connection", run_id: str, now: datetime, dag_id: str | None, kind: str) -> None:
    db.execute(
        _sql(
            "INSERT INTO runs (run_id, kind, dag_id, first_seen, last_seen, day) "
            "VALUES (:run_id, :kind, :dag_id, :now, :now, :day) ON CONFLICT (run_id) DO UPDATE SET "
            "last_seen=excluded.last_seen, dag_id=COALESCE(excluded.dag_id, runs.dag_id)"
        ),
        {"run_id": run_id, "kind": kind, "dag_id": dag_id, "now": iso(now), "day": day_of(now)},
    )


def _replace(db: "Connection", table: str, key: dict[str, str], rows: list[dict[str, Any]]) -> None:
    """The task's rows of `table` replaced by `rows` (in the caller's transaction)."""
    db.execute(_sql(f"DELETE FROM {table} WHERE run_id=:run_id AND task=:task"), key)
    if rows:
        columns = [*key, *rows[0]]
        db.execute(
            _sql(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({_binds(columns)})"),
            [{**key, **r} for r in rows],
        )


def _where(**filters: Any) -> tuple[str, dict[str, Any]]:
    items = {k: v for k, v in filters.items() if v is not None}
    if not items:
        return "", {}
    return " WHERE " + " AND ".join(f"{k}=:{k}" for k in items), items


def _finite(v: float | None) -> float | None:
    """NaN and infinities are stored as NULL (SQLite has no NaN): a missing value, not a number."""
    if v is None:
        return None
    v = float(v)
    return v if v == v and v not in (float("inf"), float("-inf")) else None


def to_jsonable(obj: Metric | TaskUsage | CostLine | Alert) -> dict[str, Any]:
    """A dataclass of this module as JSON-ready values (times as ISO strings)."""
    return {k: iso(v) if isinstance(v, datetime) else v for k, v in asdict(obj).items()}
