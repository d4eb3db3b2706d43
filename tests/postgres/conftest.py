"""Fixtures of the PostgreSQL tests: backends over a fresh schema per test, and a private server.

The run's database (``pg_dsn``) and the per-test schema (``pg_schema``, dropped afterwards, so the two CI
passes and parallel tests never collide) are the whole suite's: ``tests/conftest.py`` defines them over
``tests/_postgres.py`` (``AGENTLOG_TEST_DSN``, else a throwaway database of the run). A test that cannot
reach the server fails (it is never skipped). A test that must really stop and start a server uses
``private_server``, a throwaway cluster of its own (the shared server is never restarted).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from _postgres import ThrowawayCluster
from _postgres import server_bindir as find_server_bindir
from agentlog.persistence.postgres import PostgresBackend


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


def server_bindir() -> str:
    """The directory of PostgreSQL's server programs (initdb, pg_ctl) of this machine (see
    ``_postgres.server_bindir``); these tests need them."""
    found = find_server_bindir()
    if found is None:
        raise RuntimeError("PostgreSQL's server programs (initdb, pg_ctl) are not installed")
    return found


class PrivateServer(ThrowawayCluster):
    """A throwaway PostgreSQL cluster of this test run (initdb in a temp dir, its own port), which a test
    may stop and start for real: the shared server is never restarted (other test runs use it).

    The server binaries are PostgreSQL's own (:func:`server_bindir`); as root, the cluster belongs to
    the ``postgres`` system user, as initdb requires.
    """

    def __init__(self) -> None:
        super().__init__(server_bindir(), prefix="agentlog-pg-")
        self.dsn = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"


@pytest.fixture(scope="module")
def private_server() -> Iterator[PrivateServer]:
    """A PostgreSQL cluster of the module's own, which its tests really stop and start."""
    server = PrivateServer()
    try:
        yield server
    finally:
        server.remove()
