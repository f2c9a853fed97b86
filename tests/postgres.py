"""A real PostgreSQL server for tests, from Debian's `postgresql` package (.ci/run installs it).

`PostgresServer` runs initdb and pg_ctl from /usr/lib/postgresql/<version>/bin (the newest version
there) in a temp dir, listening on 127.0.0.1 on a free port chosen at run time. initdb refuses to
run as root, so as root the server runs as an unprivileged user this creates if missing (PG_USER);
otherwise as the current user. No binaries: the test fails, saying what to install (never a skip).
Connections are trusted on loopback only (a test server, gone at the end).
"""

from __future__ import annotations

import glob
import os
import pwd
import re
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest

PG_USER = "sluice-pg"  # the OS user the server runs as when the tests run as root
DB_USER = "sluice"  # the database superuser initdb creates
START_TIMEOUT_S = 60


def postgres_bin() -> Path:
    """The newest /usr/lib/postgresql/<version>/bin that has initdb and pg_ctl; a failed test if none."""
    found = [Path(p).parent for p in glob.glob("/usr/lib/postgresql/*/bin/initdb")]
    found = [d for d in found if (d / "pg_ctl").exists()]
    if not found:
        pytest.fail(
            "PostgreSQL's server binaries are missing (no /usr/lib/postgresql/*/bin/initdb): install Debian's "
            "`postgresql` package (apt-get install postgresql; .ci/run does), the metrics store's and the "
            "registry lock's PostgreSQL tests need a real server",
            pytrace=False,
        )

    def version(d: Path) -> tuple[int, ...]:
        return tuple(int(x) for x in re.findall(r"\d+", d.parent.name)) or (0,)

    return max(found, key=version)


def _ensure_user(name: str) -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        pass
    # pytest-xdist workers may race to create it on a fresh machine: the loser's useradd exits 9 (the name
    # is taken), which is what it wanted; any other failure is raised with useradd's own words.
    proc = subprocess.run(
        ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
        capture_output=True,
        text=True,
    )
    if proc.returncode not in (0, 9):
        raise RuntimeError(f"useradd {name} failed ({proc.returncode}): {proc.stderr.strip()}")
    return pwd.getpwnam(name)


class PostgresServer:
    """One server: start(), url(db), create_database(), stop(). Safe to stop twice."""

    def __init__(self) -> None:
        from ops.services import free_port

        self.bin = postgres_bin()
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="sluice-pg-"))
        self.data = self.dir / "data"
        self.log = self.dir / "server.log"
        self.user = _ensure_user(PG_USER) if os.geteuid() == 0 else None
        if self.user is not None:
            os.chown(self.dir, self.user.pw_uid, self.user.pw_gid)
        self.running = False

    def _run(self, *args: str, timeout: float = START_TIMEOUT_S) -> subprocess.CompletedProcess:
        kw = {"user": self.user.pw_uid, "group": self.user.pw_gid, "extra_groups": []} if self.user else {}
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C", "HOME": str(self.dir)}
        proc = subprocess.run(
            [str(self.bin / args[0]), *args[1:]],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            cwd=self.dir,
            **kw,
        )
        if proc.returncode != 0:
            log = self.log.read_text()[-2000:] if self.log.exists() else ""
            raise RuntimeError(f"{args[0]} failed ({proc.returncode}): {proc.stderr.strip()}\n{log}")
        return proc

    def start(self) -> "PostgresServer":
        if not self.data.exists():
            self._run("initdb", "-D", str(self.data), "-U", DB_USER, "--auth=trust", "--no-locale", "-E", "UTF8")
        options = (
            f"-c listen_addresses=127.0.0.1 -c port={self.port} -c unix_socket_directories={self.dir} "
            "-c fsync=off -c max_connections=100"
        )
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "-t", "60", "start")
        self.running = True
        return self

    def stop(self) -> None:
        if self.running:
            self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")
            self.running = False

    def close(self) -> None:
        try:
            self.stop()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    def url(self, db: str = "postgres") -> str:
        return f"postgresql://{DB_USER}@127.0.0.1:{self.port}/{db}"

    def create_database(self) -> str:
        """A new empty database; its URL."""
        import psycopg

        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)
