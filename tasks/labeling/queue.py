"""The labeling queue: the rows a person labels next, and what each person answered.

SLUICE_HOME/queue/queue.sqlite (kept across runs), or the PostgreSQL database SLUICE_DATABASE_URL names
(the metrics store's; one code path for both, SQLAlchemy Core through tasks/core/database.py), two tables:

    items    one per queued row: the run that queued it, the row id, the raw row (JSON), the LF votes
             (name -> vote), the label model's P(positive), the prod model's score (when there was one),
             the acquisition score, chosen or random and its inclusion probability (the importance
             weight is 1 / that; tasks/labeling/acquisition.py)
    answers  one per click: a label or a skip, who (the Airflow user of the request's token) and when,
             the gold version a label became, and when and by whom it was undone

A label is gold at once: `record_label` writes it through the registry's gold store
(tasks/registry/gold.py) as a gold version with source "queue", who and when, and the registry's
audit line. The queue's answer and the gold version are one unit, in three steps: the answer is
written pending (with a request id never used before), the gold version is made, the answer names it.
What a kill or a failure between them leaves is settled by the next write (`settle`): a pending answer
whose request id is in a gold version gets it, one that no version holds is removed; a refusal removes
it at once. An undo cut off after its retraction was committed finds that retraction the next time. The next
nightly's weak_label takes queue gold exactly like feedback gold (tasks/labeling/feedback.py: a dev
share, the rest trains as gold rows). Two people who label one item differently are both kept: the
second is flagged as a conflict naming the first, and the row trains nowhere until someone settles it
(docs/training.md "Queue gold"). `undo` takes back a person's last answer; a label that a nightly
has trained on already cannot be undone (it is in a data version), and says so.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator

from tasks.core.database import is_postgres, make_engine, sqlite_engine, write_transaction
from tasks.core.errors import RefusedError
from tasks.core.settings import Settings
from tasks.registry.gold import gold_number
from tasks.registry.repo import MirrorError, RegistryError

if TYPE_CHECKING:  # pragma: no cover - types only
    from sqlalchemy.engine import Connection, Engine

QUEUE_FILE = "queue.sqlite"
SOURCE = "queue"
WRITE_LOCK = "sluice.queue"  # PostgreSQL: the advisory lock every write holds (SQLite: BEGIN IMMEDIATE)


def _schema():
    """The two tables, one definition for SQLite and PostgreSQL, with the names and columns the queue
    had when it was plain sqlite3 (a queue.sqlite from then opens as it is). SQLite keeps AUTOINCREMENT:
    an id is never used twice, so an answer `settle` removed can be put back under its own id
    (`record_label`, step 3); PostgreSQL's bigserial never reuses one either."""
    from sqlalchemy import (
        BigInteger,
        CheckConstraint,
        Column,
        Float,
        ForeignKey,
        Index,
        Integer,
        MetaData,
        Table,
        Text,
        UniqueConstraint,
    )

    def rowid() -> Column:
        return Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True)

    def text(name: str, nullable: bool = False) -> Column:
        return Column(name, Text, nullable=nullable)

    md = MetaData()
    Table(
        "items",
        md,
        rowid(),
        text("run_id"),
        text("row_id"),
        text("raw"),
        text("lf_votes"),
        Column("label_prob", Float),
        Column("model_score", Float),
        Column("score", Float, nullable=False),
        text("kind"),
        Column("inclusion", Float, nullable=False),
        Column("rank", Integer, nullable=False),
        text("created_at"),
        UniqueConstraint("run_id", "row_id"),
        CheckConstraint("kind IN ('chosen', 'random')"),
        CheckConstraint("inclusion > 0 AND inclusion <= 1"),
        sqlite_autoincrement=True,
    )
    Table(
        "answers",
        md,
        rowid(),
        Column("item_id", BigInteger().with_variant(Integer, "sqlite"), ForeignKey("items.id"), nullable=False),
        text("action"),
        Column("label", Integer),
        text("who"),
        text("at"),
        text("request_id", nullable=True),
        text("gold_version", nullable=True),
        text("undone_at", nullable=True),
        text("undone_by", nullable=True),
        text("undone_version", nullable=True),
        CheckConstraint("action IN ('label', 'skip')"),
        Index("answers_item", "item_id"),
        sqlite_autoincrement=True,
    )
    return md


class QueueError(RefusedError):
    """A queue request that cannot be done (an unknown item, a label outside the classes, an undo of a
    label that trained already): its message says why; nothing was written."""


def queue_path(layout: Any) -> Path:
    return Path(layout.home) / "queue" / QUEUE_FILE


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()


def _sql(sql: str):
    from sqlalchemy import text

    return text(sql)


@dataclass
class QueueStore:
    """The queue in one SQLite file (`path`) or one PostgreSQL database (`url`). Each call opens its own
    connection; nothing is created until the first write (a reader of a queue that is not there sees an
    empty one)."""

    path: Path | None = None
    url: str | None = None
    _engine: Any = field(default=None, init=False, repr=False, compare=False)
    _ready: bool = field(default=False, init=False, repr=False, compare=False)

    @classmethod
    def open(cls, where: Any) -> "QueueStore":
        """The queue of these settings (SLUICE_DATABASE_URL, else SLUICE_HOME/queue/queue.sqlite), of a
        layout (its SQLite file), at a file path, or in a postgresql:// database."""
        if isinstance(where, Settings):
            return cls(url=where.database_url) if where.database_url else cls(queue_path(where.layout))
        if isinstance(where, str) and is_postgres(where):
            return cls(url=where)
        if isinstance(where, (str, Path)):
            return cls(Path(where))
        return cls(queue_path(where))

    def _get_engine(self) -> "Engine":
        if self._engine is None:
            self._engine = make_engine(self.url) if self.url is not None else sqlite_engine(self.path)
        return self._engine

    @contextlib.contextmanager
    def _db(self, write: bool = False) -> Iterator["Connection"]:
        """A connection; `write`: in one write transaction, writers taking turns (SQLite: BEGIN IMMEDIATE;
        PostgreSQL: the advisory lock WRITE_LOCK until commit), so two clicks on one item are ordered and
        a read-then-write inside (is this person's label there already?) is never raced."""
        if self.url is None and not write and not self.path.exists():  # a reader creates no store
            with make_engine("sqlite://").connect() as db:
                _schema().create_all(db)
                yield db
            return
        if self.url is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._get_engine().connect() as db:
            if not self._ready:  # the tables, made once (a queue from the sqlite3 days has them already)
                if not _has_tables(db):  # (checked first: the common case takes no write lock to read)
                    with write_transaction(db, lock=WRITE_LOCK):
                        _schema().create_all(db, checkfirst=True)
                self._ready = True
            if write:
                with write_transaction(db, lock=WRITE_LOCK):
                    yield db
            else:
                yield db

    # ---- filling ----------------------------------------------------------------------------------
    def add_items(self, run_id: str, items: Iterable[dict[str, Any]]) -> int:
        """Queue a run's rows (one transaction). A row a run queued already is not queued twice (a
        retried task adds nothing). Returns the number added."""
        added, at = 0, _now()
        with self._db(write=True) as db:
            for it in items:
                cur = _q(
                    db,
                    "INSERT INTO items (run_id, row_id, raw, lf_votes, label_prob, model_score, score, kind, "
                    "inclusion, rank, created_at) VALUES (:run_id, :row_id, :raw, :lf_votes, :label_prob, "
                    ":model_score, :score, :kind, :inclusion, :rank, :at) ON CONFLICT (run_id, row_id) DO NOTHING",
                    run_id=run_id,
                    row_id=str(it["row_id"]),
                    raw=json.dumps(it["raw"], sort_keys=True, default=str),
                    lf_votes=json.dumps(it["lf_votes"], sort_keys=True),
                    label_prob=_num(it.get("label_prob")),
                    model_score=_num(it.get("model_score")),
                    score=float(it["score"]),
                    kind=it["kind"],
                    inclusion=float(it["inclusion"]),
                    rank=int(it["rank"]),
                    at=at,
                )
                added += cur.rowcount
        return added

    # ---- reading ----------------------------------------------------------------------------------
    def item(self, item_id: int) -> dict[str, Any]:
        with self._db() as db:
            row = _q(db, "SELECT * FROM items WHERE id = :id", id=int(item_id)).mappings().first()
            if row is None:
                raise QueueError(f"queue item {item_id} does not exist")
            return self._full(db, row)

    def next_item(self, who: str) -> dict[str, Any] | None:
        """The next item for `who`: the newest run's first in rank order that nobody has labeled (an
        undone label does not count) and that `who` has not skipped. None: the queue is done for them."""
        with self._db() as db:
            row = (
                _q(
                    db,
                    "SELECT i.* FROM items i WHERE NOT EXISTS (SELECT 1 FROM answers a WHERE a.item_id = i.id "
                    "AND a.undone_at IS NULL AND (a.action = 'label' OR a.who = :who)) "
                    "ORDER BY i.created_at DESC, i.run_id DESC, i.rank, i.id LIMIT 1",
                    who=who,
                )
                .mappings()
                .first()
            )
            return self._full(db, row) if row is not None else None

    def counts(self, who: str | None = None) -> dict[str, int]:
        with self._db() as db:
            total = _q(db, "SELECT COUNT(*) FROM items").scalar_one()
            labeled = _q(
                db, "SELECT COUNT(DISTINCT item_id) FROM answers WHERE action = 'label' AND undone_at IS NULL"
            ).scalar_one()
            conflicted = _q(
                db,
                "SELECT COUNT(*) FROM (SELECT item_id FROM answers WHERE action = 'label' AND undone_at IS NULL "
                "GROUP BY item_id HAVING COUNT(DISTINCT label) > 1) AS conflicts",
            ).scalar_one()
            mine = (
                _q(
                    db,
                    "SELECT COUNT(*) FROM answers WHERE who = :who AND undone_at IS NULL AND action = 'label'",
                    who=who,
                ).scalar_one()
                if who
                else 0
            )
        return {"items": total, "labeled": labeled, "conflicted": conflicted, "yours": mine}

    def row_ids(self, but_run: str | None = None) -> set[str]:
        """Every row id ever queued (a row is queued once, whichever batch brings it again), but those
        `but_run` queued (a retried run's own)."""
        with self._db() as db:
            if but_run is None:
                return set(_q(db, "SELECT DISTINCT row_id FROM items").scalars())
            return set(_q(db, "SELECT DISTINCT row_id FROM items WHERE run_id <> :run", run=but_run).scalars())

    def answers(self, item_id: int | None = None) -> list[dict[str, Any]]:
        with self._db() as db:
            sql, args = "SELECT * FROM answers", {}
            if item_id is not None:
                sql, args = sql + " WHERE item_id = :item", {"item": int(item_id)}
            return [dict(r) for r in _q(db, sql + " ORDER BY id", **args).mappings()]

    @staticmethod
    def _full(db: "Connection", row: Any) -> dict[str, Any]:
        out = dict(row)
        out["raw"], out["lf_votes"] = json.loads(out["raw"]), json.loads(out["lf_votes"])
        out["weight"] = 1.0 / out["inclusion"]
        out["labels"] = [
            {k: a[k] for k in ("label", "who", "at", "gold_version")}
            for a in _q(
                db,
                "SELECT * FROM answers WHERE item_id = :item AND action = 'label' AND undone_at IS NULL ORDER BY id",
                item=out["id"],
            ).mappings()
        ]
        out["conflict"] = len({lab["label"] for lab in out["labels"]}) > 1
        return out

    # ---- answering --------------------------------------------------------------------------------
    def record_label(
        self,
        registry: Any,
        item_id: int,
        label: Any,
        *,
        who: str,
        classes: Iterable[int],
        test_ids: Iterable[Any] = (),
    ) -> dict[str, Any]:
        """`who` labels a queue item: a gold version with source "queue" (see the module doc). Returns
        {"item", "gold_version", "conflict", "conflicts_with", "message"}."""
        classes = sorted(int(c) for c in classes)
        if not who:
            raise QueueError("a label needs who gave it (the Airflow user of the request)")
        if isinstance(label, bool) or not isinstance(label, int) or label not in classes:
            raise QueueError(f"label {label!r} is outside the classes {classes}: nothing recorded")
        self.settle(registry)
        # 1. the answer, pending (no gold version yet), in a transaction of its own: what a kill during the
        # registry's write leaves is found and settled by `settle` (step 3 below, or the other way)
        with self._db(write=True) as db:
            row = _q(db, "SELECT * FROM items WHERE id = :id", id=int(item_id)).mappings().first()
            if row is None:
                raise QueueError(f"queue item {item_id} does not exist: nothing recorded")
            mine = (
                _q(
                    db,
                    "SELECT label, gold_version FROM answers WHERE item_id = :item AND who = :who AND action = 'label' "
                    "AND undone_at IS NULL",
                    item=int(item_id),
                    who=who,
                )
                .mappings()
                .first()
            )
            if mine is not None:
                if mine["label"] == label:
                    item = self._full(db, row)
                    msg = f"already recorded: you labeled item {item_id} {label} ({mine['gold_version']})"
                    return {"item": item, "gold_version": mine["gold_version"], "conflict": item["conflict"],
                            "conflicts_with": [], "message": msg, "recorded": False}  # fmt: skip
                raise QueueError(
                    f"you labeled item {item_id} {mine['label']} already ({mine['gold_version']}): undo that "
                    "label to change it; nothing recorded"
                )
            at, ts = _now(), time.time()
            request_id = f"queue-{int(item_id)}-{uuid.uuid4().hex[:16]}"  # never reused, whatever is rolled back
            answer = _q(
                db,
                "INSERT INTO answers (item_id, action, label, who, at, request_id) "
                "VALUES (:item, 'label', :label, :who, :at, :request) RETURNING id",
                item=int(item_id),
                label=label,
                who=who,
                at=at,
                request=request_id,
            ).scalar_one()
        candidate = {
            "row_id": row["row_id"],
            "label": label,
            "who": who,
            "at": at,
            "ts": ts,
            "request_id": request_id,
            "row": 0,
            "source": SOURCE,
            "raw": json.loads(row["raw"]),
            "queue": {
                "item": int(item_id),
                "run_id": row["run_id"],
                "kind": row["kind"],
                "inclusion": row["inclusion"],
                "score": row["score"],
            },
        }
        # 2. the gold version
        try:
            result = registry.add_gold([candidate], classes=classes, test_ids=test_ids, who=who)
        except MirrorError:  # committed; only the mirror push failed (the next transaction pushes again)
            result = {"accepted": [lab for lab in registry.gold_labels() if lab.get("request_id") == request_id]}
            result["refused"], mirror = [], "; the registry's git mirror was not reached (the next write retries)"
        except BaseException:
            self.settle(registry)  # nothing committed: the pending answer goes (a kill leaves it to the next call)
            raise
        else:
            mirror = ""
        if not result["accepted"]:  # refused (e.g. a gold test row): recorded with its version, not queued
            self._drop(answer)
            why = result["refused"][0]["reason"] if result["refused"] else "not accepted"
            raise QueueError(f"the gold store refused item {item_id}'s label: {why}")
        gold = result["accepted"][0]
        # 3. the answer names its gold version (back in place if a `settle` meanwhile took it for a dead one)
        with self._db(write=True) as db:
            version = gold["gold_version"]
            if not _q(db, "UPDATE answers SET gold_version = :v WHERE id = :id", v=version, id=answer).rowcount:
                _q(
                    db,
                    "INSERT INTO answers (id, item_id, action, label, who, at, request_id, gold_version) "
                    "VALUES (:id, :item, 'label', :label, :who, :at, :request, :v)",
                    id=answer,
                    item=int(item_id),
                    label=label,
                    who=who,
                    at=at,
                    request=request_id,
                    v=version,
                )
            item = self._full(db, row)
        gold.setdefault("conflict", item["conflict"])
        if gold.get("conflict"):
            others = "; ".join(
                f"{c.get('who') or c.get('source')} labeled it {c['label']}"
                + (f" ({c['gold_version']})" if c.get("gold_version") else "")
                for c in gold.get("conflicts_with", [])
            )
            msg = (
                f"conflict: {others}; your label {label} is kept beside it ({gold['gold_version']}). Both stay in "
                "the gold store; the row trains nowhere until the conflict is settled"
            )
        else:
            msg = f"item {item_id} labeled {label}: {gold['gold_version']}"
        msg += mirror
        return {
            "item": item,
            "gold_version": gold["gold_version"],
            "conflict": bool(gold.get("conflict")),
            "conflicts_with": gold.get("conflicts_with", []),
            "message": msg,
            "recorded": True,
        }

    def settle(self, registry: Any) -> int:
        """Settle the labels a kill left pending between the queue and the gold store (an answer without
        its gold version): one whose request id is in a gold version gets that version; one that no
        gold version holds is removed (its label never reached the store). Returns how many. A click in
        flight that this removes puts its answer back when its gold version is made (`record_label`)."""
        with self._db() as db:
            pending = (
                _q(db, "SELECT id, request_id FROM answers WHERE action = 'label' AND gold_version IS NULL")
                .mappings()
                .all()
            )
        if not pending:
            return 0
        live = {str(lab.get("request_id")): lab["gold_version"] for lab in registry.gold_labels()} if (
            registry.gold_versions()
        ) else {}  # fmt: skip
        with self._db(write=True) as db:
            for answer in pending:
                version = live.get(str(answer["request_id"]))
                if version:
                    _q(db, "UPDATE answers SET gold_version = :v WHERE id = :id", v=version, id=answer["id"])
                else:
                    _q(db, "DELETE FROM answers WHERE id = :id AND gold_version IS NULL", id=answer["id"])
        return len(pending)

    def _drop(self, answer: int) -> None:
        with self._db(write=True) as db:
            _q(db, "DELETE FROM answers WHERE id = :id", id=answer)

    def skip(self, item_id: int, *, who: str) -> dict[str, Any]:
        if not who:
            raise QueueError("a skip needs who gave it")
        with self._db(write=True) as db:
            if _q(db, "SELECT 1 FROM items WHERE id = :id", id=int(item_id)).mappings().first() is None:
                raise QueueError(f"queue item {item_id} does not exist: nothing recorded")
            _q(
                db,
                "INSERT INTO answers (item_id, action, who, at) VALUES (:item, 'skip', :who, :at)",
                item=int(item_id),
                who=who,
                at=_now(),
            )
        return {"item_id": int(item_id), "message": f"item {item_id} skipped"}

    def undo(self, registry: Any, *, who: str, trained_through: str | None) -> dict[str, Any]:
        """Take back `who`'s last live answer: a skip is forgotten, a label is retracted from the gold
        store (a gold version that says who undid it). `trained_through`: the latest gold version a
        data version has trained on (tasks/labeling/feedback.py `trained_through`): a label in it or
        before it is in the data already and is not undone."""
        self.settle(registry)
        with self._db() as db:
            last = (
                _q(db, "SELECT * FROM answers WHERE who = :who AND undone_at IS NULL ORDER BY id DESC LIMIT 1", who=who)
                .mappings()
                .first()
            )
        if last is None:
            raise QueueError(f"{who} has nothing to undo")
        version = None
        if last["action"] == "label":
            if last["gold_version"] is None:
                raise QueueError(f"item {last['item_id']}'s label is still being recorded: undo again in a moment")
            done = gold_number(trained_through) if trained_through else 0
            if gold_number(last["gold_version"]) <= done:
                raise QueueError(
                    f"item {last['item_id']}'s label ({last['gold_version']}) has trained already (the data "
                    f"trained through {trained_through}): it cannot be undone; label the row again to correct "
                    "it (the two labels are kept as a conflict)"
                )
            # the registry's write outside the queue's lock (a long registry transaction must not block
            # every other click); a second undo of the same answer meanwhile finds the same retraction
            try:
                version = registry.retract_gold([last["request_id"]], who=who, reason="undo in the labeling queue")[
                    "gold_version"
                ]
            except (MirrorError, RegistryError):
                # committed with only the mirror push failed, or an earlier undo of it committed and was
                # cut off before this answer said so: the gold store names the version that retracted it
                version = registry.retraction_of(last["request_id"])
                if version is None:
                    raise
        with self._db(write=True) as db:
            _q(
                db,
                "UPDATE answers SET undone_at = :at, undone_by = :who, undone_version = :v "
                "WHERE id = :id AND undone_at IS NULL",
                at=_now(),
                who=who,
                v=version,
                id=last["id"],
            )
        what = f"label {last['label']} retracted ({version})" if version else "skip undone"
        return {"item_id": last["item_id"], "gold_version": version, "message": f"item {last['item_id']}: {what}"}


def build_items(
    batch: Any,
    L: Any,
    lf_names: list[str],
    prob: Any,
    model_score: Any,
    features: Any,
    *,
    id_column: str,
    raw_columns: list[str],
    params: Any,
    seed: int,
    eligible: Any,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The queue items of one batch by the acquisition rule (tasks/labeling/acquisition.py), in the
    order a person sees them (the random rows spread evenly among the chosen), and an account."""
    import numpy as np

    from tasks.labeling.acquisition import acquisition_score, select, summary_probability

    weights = params.weights.model_dump() if hasattr(params.weights, "model_dump") else dict(params.weights)
    score, parts = acquisition_score(L, prob, model_score, weights)
    shown_prob = summary_probability(prob)
    shown_score = None if model_score is None else summary_probability(model_score)
    sel = select(
        score, features, k=params.k, random_share=params.random_share, diversity=params.diversity, seed=seed,
        eligible=eligible,
    )  # fmt: skip
    chosen = [j for j in range(len(sel.index)) if sel.kind[j] == "chosen"]
    randoms = [j for j in range(len(sel.index)) if sel.kind[j] == "random"]
    place = {j: (n + 0.5) / len(chosen) for n, j in enumerate(chosen)}
    place |= {j: (n + 0.5) / len(randoms) for n, j in enumerate(randoms)}
    order = sorted(place, key=lambda j: (place[j], j))
    items = []
    for rank, j in enumerate(order):
        i = int(sel.index[j])
        raw = batch.iloc[i][raw_columns].to_dict()
        items.append(
            {
                "row_id": str(batch[id_column].iloc[i]),
                "raw": {k: (v.item() if hasattr(v, "item") else v) for k, v in raw.items()},
                "lf_votes": {name: int(L[i, n]) for n, name in enumerate(lf_names)},
                "label_prob": float(shown_prob[i]),  # K classes: the top class's probability
                "model_score": None if model_score is None else float(shown_score[i]),
                "score": float(sel.score[j]),
                "kind": str(sel.kind[j]),
                "inclusion": float(sel.inclusion[j]),
                "rank": rank,
            }
        )
    account = {
        "rows": int(len(score)),
        "eligible": int(np.asarray(eligible, bool).sum()),
        "chosen": len(chosen),
        "random": len(randoms),
        "random_inclusion": float(sel.inclusion[randoms[0]]) if randoms else None,
        "signals": sorted(parts),
        "mean_score_chosen": float(np.mean(sel.score[chosen])) if chosen else None,
        "mean_score_batch": float(np.mean(score)) if len(score) else None,
    }
    return items, account


def _has_tables(db: "Connection") -> bool:
    from sqlalchemy import inspect

    present = all(inspect(db).has_table(name) for name in ("items", "answers"))
    db.rollback()  # end the read the inspection began, so a write transaction can start on this connection
    return present


def _q(db: "Connection", sql: str, **args: Any):
    """One statement with named arguments (its rows as mappings: `.mappings()`)."""
    return db.execute(_sql(sql), args)


def _num(x: Any) -> float | None:
    if x is None:
        return None
    x = float(x)
    return None if x != x else x  # nan -> NULL
