"""Lazy chunk runs on PostgreSQL: the coordinator's cold load keeps packed rows compact, as on files.

The random sessions and the comparison are ``tests/kernel/test_lazy_chunks.py``'s; only the store differs
(one fresh schema per example). A lazy restore equals the eager one in every observable, and a damaged
packed row fails the compact load exactly as it fails the eager read.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings

import agentlog as al
from _postgres import drop_schema
from agentlog.errors import SessionPersistenceCorruptionError
from agentlog.kernel.chunkrows import ChunkRun, compact_chunk_runs, expand_items
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.postgres import PostgresBackend
from kernel import test_lazy_chunks as lazy_suite

_names = itertools.count()


@pytest.fixture
def on_postgres(pg_dsn: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """``tests/kernel/test_lazy_chunks.py``'s helpers, writing to a fresh schema of the test database."""
    created: list[str] = []

    def make_backend(kind: str, root: str) -> PostgresBackend:
        return PostgresBackend(pg_dsn, schema=root)

    @contextmanager
    def store_root() -> Iterator[str]:
        schema = f"lazy_{uuid.uuid4().hex[:12]}_{next(_names)}"
        created.append(schema)
        try:
            yield schema
        finally:
            drop_schema(pg_dsn, schema)

    monkeypatch.setattr(lazy_suite, "make_backend", make_backend)
    monkeypatch.setattr(lazy_suite, "store_root", store_root)
    yield lazy_suite
    for schema in created:
        drop_schema(pg_dsn, schema)


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(script=lazy_suite.sessions())
def test_a_lazy_postgres_restore_equals_the_eager_one(on_postgres: Any, script: dict[str, Any]) -> None:
    suite = on_postgres
    with suite.store_root() as root:
        live = suite.write("postgres", root, script)
        coordinator = PersistenceCoordinator(al.SessionStore(), suite.make_backend("postgres", root))
        preparation = coordinator.prepare(suite.SID)  # commits the repair of an open turn first
        try:
            with compact_chunk_runs():
                stored = suite.make_backend("postgres", root).load_stored(suite.SID)
            assert stored is not None
            assert suite.holds_runs(preparation.session) == any(isinstance(item, ChunkRun) for item in stored.events)
            eager = suite.eager_session("postgres", root)
            suite.assert_same_session(preparation.session, eager, live)
            expanded = expand_items(stored.events)
            assert expanded == list(eager.events)[: len(expanded)]
        finally:
            preparation.dispose()
            coordinator.close()


def test_the_benchmark_shape_restores_compact_and_a_damaged_row_fails_the_compact_load(
    on_postgres: Any, pg_dsn: str
) -> None:
    suite = on_postgres
    deltas = [lazy_suite.text_delta(0, f"t{k}") for k in range(12)]
    step = {"stretches": [deltas], "message": True, "tool": False, "flush": []}
    script = {"turns": [{"turn": 1, "steps": [step], "header": False}], "open": None, "gaps": [1]}
    with suite.store_root() as root:
        suite.write("postgres", root, script)
        coordinator = PersistenceCoordinator(al.SessionStore(), suite.make_backend("postgres", root))
        try:
            preparation = coordinator.prepare(suite.SID)
            assert suite.holds_runs(preparation.session)  # the twelve deltas stayed one packed item
            preparation.dispose()
        finally:
            coordinator.close()
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(
                f"UPDATE {root}.events SET body = convert_to(replace(convert_from(body, 'UTF8'), '\"dt\":[', "
                "'\"dt\":[\"x\",'), 'UTF8') WHERE convert_from(body, 'UTF8') LIKE '{\"type\":\"text-chunks\"%'"
            )
        for compact in (False, True):
            coordinator = PersistenceCoordinator(al.SessionStore(), suite.make_backend("postgres", root))
            try:
                with pytest.raises(SessionPersistenceCorruptionError) as caught:
                    if compact:
                        coordinator.prepare(suite.SID)
                    else:
                        suite.make_backend("postgres", root).load_stored(suite.SID)
                assert "malformed text-chunks storage row" in str(caught.value)
            finally:
                coordinator.close()
