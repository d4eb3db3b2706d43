"""Fixtures of the PostgreSQL tests: a database for the run, and a fresh schema per test.

``.ci/run`` exports ``AGENTLOG_TEST_DSN`` (a fresh database per CI run, shared by its two pytest passes);
without it the session creates its own database through the server's ``postgres`` database and drops it
at the end. A test that cannot reach the server fails (it is never skipped). Every test works in its
own schema (``pg_schema``), dropped afterwards, so the two CI passes and parallel tests never collide.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator

import psycopg
import pytest
from psycopg import conninfo, sql

from agentlog.persistence.postgres import PostgresBackend

ADMIN_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"


@pytest.fixture(scope="session")
def pg_dsn() -> Iterator[str]:
    """The DSN of the test database (``AGENTLOG_TEST_DSN``, or a database created for this session)."""
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


def drop_schema(dsn: str, schema: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@pytest.fixture
def pg_schema(pg_dsn: str) -> Iterator[str]:
    """A unique schema name for one test (not created: the backend creates it); dropped afterwards."""
    schema = f"t_{uuid.uuid4().hex[:16]}"
    yield schema
    drop_schema(pg_dsn, schema)


@pytest.fixture
def pg_backends(pg_dsn: str, pg_schema: str) -> Iterator[Callable[..., PostgresBackend]]:
    """``pg_backends(**options)`` → a new backend over the test's schema; all are closed at teardown."""
    created: list[PostgresBackend] = []

    def make(**options: object) -> PostgresBackend:
        backend = PostgresBackend(pg_dsn, schema=pg_schema, **options)  # type: ignore[arg-type]
        created.append(backend)
        return backend

    yield make
    for backend in created:
        backend.close()
