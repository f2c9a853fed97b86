"""Database URLs and the one way to connect (SQLAlchemy): the metrics store's and the labeling queue's
backend, the registry's lock.

SLUICE_DATABASE_URL empty: each store is a SQLite file under SLUICE_HOME (one host);
`postgresql://user@host:port/db`: PostgreSQL (many hosts), through psycopg 3. SQLAlchemy and the
driver are imported when a connection is first made, never at import time (the model server's
cold start pays for neither). Every engine here uses no pool: each use opens its own connection,
so an engine is safe to build in one process and use in a forked one.
"""

from __future__ import annotations

import contextlib
import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from tasks.core.settings import redact

if TYPE_CHECKING:  # pragma: no cover - types only
    from sqlalchemy.engine import Connection, Engine

POSTGRES_SCHEMES = ("postgresql://", "postgres://", "postgresql+psycopg://")
CONNECT_TIMEOUT_S = 10  # a database that is not there fails a connection in seconds, not minutes
# libpq's TCP keepalives: a server that vanished without closing (a lost node) is noticed in about a minute
POSTGRES_CONNECT_ARGS = {
    "connect_timeout": CONNECT_TIMEOUT_S,
    "keepalives": 1,
    "keepalives_idle": 30,
    "keepalives_interval": 10,
    "keepalives_count": 3,
}


class DatabaseError(RuntimeError):
    """The configured database cannot be used (down, refused, unreachable); the message names it, redacted."""


def is_postgres(url: str | None) -> bool:
    return bool(url) and str(url).startswith(POSTGRES_SCHEMES)


def sqlalchemy_url(url: str) -> str:
    """`url` as SQLAlchemy names it with the psycopg 3 driver (plain postgresql:// would mean psycopg2)."""
    for scheme in ("postgresql://", "postgres://"):
        if url.startswith(scheme):
            return "postgresql+psycopg://" + url[len(scheme) :]
    return url


def sqlite_url(path: Path) -> str:
    return f"sqlite:///{Path(path)}"


def make_engine(url: str) -> "Engine":
    """An engine for a postgresql:// URL or a sqlite:/// one, with no connection pool."""
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    connect_args = POSTGRES_CONNECT_ARGS if is_postgres(url) else {}
    return create_engine(sqlalchemy_url(url), poolclass=NullPool, connect_args=connect_args)


def sqlite_engine(path: Path) -> "Engine":
    """A SQLite file as the stores use it: the driver in autocommit mode (`write_transaction` says BEGIN
    IMMEDIATE itself), WAL, a 30 s busy timeout, synchronous=NORMAL (WAL: consistent after a crash, one
    fsync per checkpoint)."""
    from sqlalchemy import event

    engine = make_engine(sqlite_url(path))

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record) -> None:  # noqa: ANN001 - SQLAlchemy's event signature
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        for pragma in ("journal_mode=WAL", "busy_timeout=30000", "synchronous=NORMAL"):
            cur.execute(f"PRAGMA {pragma}")
        cur.close()

    return engine


@contextlib.contextmanager
def write_transaction(db: "Connection", lock: str | None = None) -> Iterator["Connection"]:
    """One write transaction on `db` (committed at the end of the block, rolled back by an exception).
    SQLite (an engine from `sqlite_engine`): BEGIN IMMEDIATE, the file's write lock taken up front, so
    writers take turns and a read-then-write inside is never raced. PostgreSQL: a transaction; `lock`
    names a transaction-level advisory lock taken first (held until commit), for writers that must take
    turns the way SQLite's do (READ COMMITTED alone would let two of them read the same state)."""
    if db.dialect.name == "sqlite":
        db.exec_driver_sql("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            db.exec_driver_sql("ROLLBACK")
            raise
        db.exec_driver_sql("COMMIT")
        return
    from sqlalchemy import text

    with db.begin():
        if lock is not None:
            db.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": lock_key(lock)})
        yield db


def lock_key(name: str) -> int:
    """A stable signed 64-bit key for pg_advisory_lock, from a name ("sluice.registry")."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


@contextlib.contextmanager
def advisory_lock(url: str, name: str) -> Iterator["Connection"]:
    """Hold PostgreSQL's session-level advisory lock `name` (waiting for it) until the block ends.
    The connection is in autocommit mode: no transaction stays open while the lock is held. If this
    process dies, its connection closes and the server releases the lock."""
    from sqlalchemy import text
    from sqlalchemy.exc import DBAPIError

    key = lock_key(name)
    conn = None
    try:
        conn = make_engine(url).connect().execution_options(isolation_level="AUTOCOMMIT")
        conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": key})
    except DBAPIError as exc:
        if conn is not None:  # connected, but the lock was not taken: do not leave the session open
            conn.close()
        raise DatabaseError(f"cannot take the advisory lock {name!r} in {redact(url)}: {describe(exc)}") from None
    try:
        yield conn
    finally:
        try:
            conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": key})
        except DBAPIError:
            pass  # the connection is gone: the server released the lock with it
        finally:
            conn.close()


def describe(exc: BaseException) -> str:
    """A driver error in one redacted line: its type and first line (SQLAlchemy's wrapper adds the SQL)."""
    orig = getattr(exc, "orig", None) or exc
    first = (str(orig).strip().splitlines() or [""])[0]
    return redact(f"{type(orig).__name__}: {first}")
