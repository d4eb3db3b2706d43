"""A refused login, from Python: ``DatabaseAuthError`` (``DATABASE_AUTH``), which no reconnect loop retries.

Against ``password_cluster`` (``scram-sha-256`` over TCP, as a fresh Debian cluster). The follow loop
(:func:`agentlog.persistence.tail.tail_events`) retries ``DatabaseUnavailableError``; a refused login is
deliberately not one, so it ends the tail at once instead of being retried forever.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest

from _postgres import PasswordCluster
from agentlog.errors import DatabaseAuthError, DatabaseUnavailableError, PersistenceError
from agentlog.kernel.store import SessionStore
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.postgres import PostgresBackend
from agentlog.persistence.tail import tail_events
from agentlog.query.postgres import PostgresSearch
from agentlog.testing.builders import closed_turn, header


def test_a_refused_login_is_database_auth_and_not_an_unavailable_server(password_cluster: PasswordCluster) -> None:
    assert not issubclass(DatabaseAuthError, DatabaseUnavailableError)
    assert issubclass(DatabaseAuthError, PersistenceError)
    for dsn, words in (
        (password_cluster.dsn(password="wrong"), "is not the role's"),
        (password_cluster.dsn(), "no password was given"),
        (password_cluster.dsn(user="nobody", password="x"), "is not the role's"),  # scram hides unknown roles
    ):
        backend = PostgresBackend(dsn, schema=f"t_{uuid.uuid4().hex[:16]}")
        try:
            with pytest.raises(DatabaseAuthError) as caught:
                backend.list_sessions()
        finally:
            backend.close()
        assert caught.value.code == "DATABASE_AUTH"
        assert words in str(caught.value) and f":{password_cluster.port}/" in str(caught.value)


def test_a_missing_database_stays_database_unavailable(password_cluster: PasswordCluster) -> None:
    dsn = password_cluster.dsn(password=password_cluster.password).rsplit("/", 1)[0] + "/no_such_database"
    backend = PostgresBackend(dsn)
    try:
        with pytest.raises(DatabaseUnavailableError):
            backend.list_sessions()
    finally:
        backend.close()


def test_a_reconnecting_tail_ends_on_a_refused_login_without_a_retry(password_cluster: PasswordCluster) -> None:
    schema = f"t_{uuid.uuid4().hex[:16]}"
    writer = PostgresBackend(password_cluster.dsn(password=password_cluster.password), schema=schema)
    try:
        writer.append_batch(header("s"), closed_turn(0, 1), False)
    finally:
        writer.close()
    coordinator = PersistenceCoordinator(SessionStore(), PostgresBackend(password_cluster.dsn(), schema=schema))
    retries: list[object] = []

    async def main() -> None:
        async for _ in tail_events(
            coordinator, "s", follow=True, reconnect=True, on_retry=lambda *args: retries.append(args)
        ):
            raise AssertionError("nothing can be read without logging in")

    try:
        with pytest.raises(DatabaseAuthError):
            asyncio.run(main())
    finally:
        coordinator.close()
    assert retries == []


def test_the_search_index_reports_a_refused_login_as_database_auth(password_cluster: PasswordCluster) -> None:
    coordinator = PersistenceCoordinator(SessionStore(), PostgresBackend(password_cluster.dsn(password="wrong")))
    try:
        with pytest.raises(DatabaseAuthError):  # opened at once (open_at="startup"), or at the first search
            PostgresSearch(coordinator).search_sessions(query="anything")
    finally:
        coordinator.close()
