"""The PostgreSQL database of a test run: the one helper every PostgreSQL fixture of the suite builds on.

``.ci/run`` exports ``AGENTLOG_TEST_DSN`` (a fresh database per CI run, shared by its two pytest passes);
without it :func:`run_database` creates a database of its own through the server's ``postgres`` database
and drops it at the end. ``tests/conftest.py`` makes it the session's ``pg_dsn`` fixture, which the
PostgreSQL tests (``tests/postgres/``), the PostgreSQL command-line tests and the import tests' PostgreSQL
stores share; each works in a schema of its own, dropped afterwards (:func:`drop_schema`).
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import conninfo, sql

ADMIN_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"


@contextmanager
def run_database() -> Iterator[str]:
    """The DSN of the run's database: ``AGENTLOG_TEST_DSN``'s, else a throwaway one dropped on exit."""
    given = os.environ.get("AGENTLOG_TEST_DSN")
    if given:
        yield given
        return
    name = f"agentlog_test_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(ADMIN_DSN, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield conninfo.make_conninfo(ADMIN_DSN, dbname=name)
    finally:
        with psycopg.connect(ADMIN_DSN, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def fresh_schema() -> str:
    """A unique schema name (not created: a backend creates its schema)."""
    return f"t_{uuid.uuid4().hex[:16]}"


def drop_schema(dsn: str, schema: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


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
