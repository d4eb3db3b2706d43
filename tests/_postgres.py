"""The PostgreSQL database of a test run: the one helper every PostgreSQL fixture of the suite builds on.

``.ci/run`` exports ``AGENTLOG_TEST_DSN`` (a fresh database per CI run; its pytest-xdist workers each use a
database of their own beside it, :func:`worker_database`); without it :func:`run_database` creates a database
of its own through the server's ``postgres`` database and drops it at the end. ``tests/conftest.py`` makes it
the session's ``pg_dsn`` fixture, which the PostgreSQL tests (``tests/postgres/``), the PostgreSQL
command-line tests and the import tests' PostgreSQL stores share; each works in a schema of its own, dropped
afterwards (:func:`drop_schema`).

The shared server trusts every login; :class:`PasswordCluster` is a throwaway one that asks for a
password over TCP, as a fresh Debian cluster does (the ``password_cluster`` fixture, and the walkthrough
of docs/postgres.md "Setting up a server").
"""

from __future__ import annotations

import glob
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import psycopg
from psycopg import conninfo, sql

ADMIN_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"


@contextmanager
def _throwaway_database(admin_dsn: str, name: str) -> Iterator[str]:
    """Database ``name`` created afresh through ``admin_dsn`` (a leftover of a killed run is dropped
    first), its DSN for the ``with`` block; dropped at the block's end."""
    drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        admin.execute(drop)
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield conninfo.make_conninfo(admin_dsn, dbname=name)
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as admin:
            admin.execute(drop)


def worker_database(given: str, worker: str) -> AbstractContextManager[str]:
    """A database of its own for one pytest-xdist worker (``gw0``, ...) beside ``given``'s, dropped at the end.

    Tests that look at the whole database (its idle ``agentlog`` connections, its advisory locks, a
    terminate of every idle backend) must not see another worker's; schemas alone do not separate those.
    """
    name = f"{conninfo.conninfo_to_dict(given).get('dbname') or 'agentlog_test'}_{worker}"[:63]
    return _throwaway_database(given, name)


@contextmanager
def run_database() -> Iterator[str]:
    """The DSN of the run's database: ``AGENTLOG_TEST_DSN``'s, else a throwaway one dropped on exit."""
    given = os.environ.get("AGENTLOG_TEST_DSN")
    if given:
        yield given
        return
    with _throwaway_database(ADMIN_DSN, f"agentlog_test_{os.getpid()}_{uuid.uuid4().hex[:8]}") as dsn:
        yield dsn


def fresh_schema() -> str:
    """A unique schema name (not created: a backend creates its schema)."""
    return f"t_{uuid.uuid4().hex[:16]}"


def drop_schema(dsn: str, schema: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def server_bindir() -> str | None:
    """PostgreSQL's own server binaries (the newest ``/usr/lib/postgresql/*/bin``, else ``pg_config
    --bindir``), or ``None`` when this machine has no ``initdb``."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[-3]))
    if found:
        return os.path.dirname(found[-1])
    if shutil.which("pg_config") is None:
        return None
    bindir = subprocess.run(["pg_config", "--bindir"], check=True, capture_output=True, text=True).stdout.strip()
    return bindir if os.path.exists(os.path.join(bindir, "initdb")) else None


class ClusterToolError(RuntimeError):
    """A server program (initdb, pg_ctl, psql) of a throwaway cluster failed; the message has its stderr."""


class ThrowawayCluster:
    """A PostgreSQL cluster of this test run: initdb in a temp dir of its own (owned by the ``postgres`` OS
    user when we are root, as initdb requires), its own port, ``fsync=off``; ``remove()`` stops it and
    deletes everything, and a failed start leaves nothing behind.

    ``command``: what runs each server program (e.g. ``ip netns exec NS`` before the user switch);
    ``hba``: lines appended to ``pg_hba.conf`` before the start; ``initdb``: its auth options.
    """

    def __init__(
        self,
        bindir: str,
        *,
        prefix: str,
        initdb: Sequence[str] = ("-A", "trust"),
        listen: str = "127.0.0.1",
        port: int | None = None,
        command: Sequence[str] = (),
        hba: Sequence[str] = (),
    ) -> None:
        self.bindir = bindir
        self.root = tempfile.mkdtemp(prefix=prefix)
        self.socket_dir = self.root
        self.data = os.path.join(self.root, "data")
        self.listen = listen
        self._user: list[str] = list(command)
        if os.geteuid() == 0:
            owner = pwd.getpwnam("postgres")
            os.chown(self.root, owner.pw_uid, owner.pw_gid)
            self._user += ["runuser", "-u", "postgres", "--"]
        if port is None:
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                port = probe.getsockname()[1]
        self.port = port
        try:
            self._run("initdb", "-D", self.data, *initdb, "-U", "postgres", "-E", "UTF8", "--no-sync")
            if hba:
                with open(os.path.join(self.data, "pg_hba.conf"), "a") as rules:
                    rules.writelines(f"{line}\n" for line in hba)
            self.start()
        except BaseException:
            shutil.rmtree(self.root, ignore_errors=True)
            raise

    def _run(self, tool: str, *args: str, stdin: str | None = None) -> str:
        done = subprocess.run(
            [*self._user, os.path.join(self.bindir, tool), *args],
            capture_output=True, text=True, input=stdin, timeout=300,
        )  # fmt: skip
        if done.returncode != 0:
            raise ClusterToolError(f"{tool} failed ({done.returncode}): {done.stderr.strip() or done.stdout.strip()}")
        return done.stdout

    def start(self) -> None:
        options = f"-p {self.port} -k {self.socket_dir} -c listen_addresses={self.listen} -c fsync=off"
        self._run("pg_ctl", "-D", self.data, "-o", options, "-l", os.path.join(self.root, "log"), "-w", "start")

    def stop(self) -> None:
        """A fast shutdown, as a server restart does: every connection is ended; returns once it is down."""
        self._run("pg_ctl", "-D", self.data, "-m", "fast", "-w", "stop")

    def log(self) -> str:
        try:
            with open(os.path.join(self.root, "log"), errors="replace") as log:
                return log.read()
        except OSError:
            return ""

    def remove(self) -> None:
        try:
            self._run("pg_ctl", "-D", self.data, "-m", "immediate", "-w", "stop")
        except ClusterToolError:
            pass  # never started, or already stopped
        shutil.rmtree(self.root, ignore_errors=True)


class PasswordCluster(ThrowawayCluster):
    """A throwaway cluster that asks for a password over TCP (``scram-sha-256`` for 127.0.0.1, as
    ``pg_createcluster`` sets up) and trusts its Unix socket, which only the ``postgres`` OS user reaches
    here as the cluster's superuser (the stand-in for Debian's ``peer`` rule).

    ``role``: a login role (with ``password``) owning a database of the same name, created at start;
    ``None`` leaves the cluster bare (the docs' walkthrough creates them). The socket lives in
    ``socket_dir``, a directory of its own.
    """

    def __init__(self, bindir: str, *, role: str | None = "agentlog") -> None:
        self.role = role
        self.password = secrets.token_urlsafe(18)
        super().__init__(bindir, prefix="agentlog-pgpw-", initdb=("--auth-host=scram-sha-256", "--auth-local=trust"))
        if role is not None:
            try:
                script = 'CREATE ROLE :"role" LOGIN PASSWORD :\'password\';\nCREATE DATABASE :"role" OWNER :"role";\n'
                self.psql("-v", f"password={self.password}", "-v", f"role={role}", stdin=script)
            except BaseException:
                self.remove()
                raise

    def psql(self, *args: str, stdin: str | None = None) -> str:
        """``psql`` as the superuser over the socket (no password: the local rule trusts it)."""
        return self._run("psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", self.socket_dir, "-p", str(self.port),
                         "-U", "postgres", "-d", "postgres", *args, stdin=stdin)  # fmt: skip

    def dsn(self, *, password: str | None = None, user: str | None = None) -> str:
        """The role's TCP DSN, with ``password`` in it when given (``None``: no password in the DSN)."""
        user = user or self.role or "postgres"
        secret = f":{password}" if password is not None else ""
        return f"postgresql://{user}{secret}@127.0.0.1:{self.port}/{self.role or 'postgres'}"


def keepalive_of(conn: psycopg.Connection[Any]) -> dict[str, int]:
    """A TCP connection's keepalive as both ends apply it: the server's, read from its socket (the show
    hooks of ``pg_settings``), and the client's, read from the client socket."""
    rows = conn.execute(
        "SELECT name, setting FROM pg_settings WHERE name IN ('tcp_keepalives_idle', 'tcp_keepalives_interval', "
        "'tcp_keepalives_count', 'tcp_user_timeout')"
    ).fetchall()
    seen = {f"server_{name.removeprefix('tcp_')}": int(value) for name, value in rows}
    with socket.socket(fileno=os.dup(conn.fileno())) as client:
        seen["client_keepalives"] = client.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE)
        seen["client_keepalives_idle"] = client.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE)
        seen["client_keepalives_interval"] = client.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL)
        seen["client_keepalives_count"] = client.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT)
    return seen


def keepalive_for(idle: int, interval: int, count: int, user_timeout_ms: int) -> dict[str, int]:
    """What :func:`keepalive_of` shows when both ends probe after ``idle`` s every ``interval`` s."""
    return {
        "server_keepalives_idle": idle,
        "server_keepalives_interval": interval,
        "server_keepalives_count": count,
        "server_user_timeout": user_timeout_ms,
        "client_keepalives": 1,
        "client_keepalives_idle": idle,
        "client_keepalives_interval": interval,
        "client_keepalives_count": count,
    }
