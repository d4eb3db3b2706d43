"""The backend contract (``agentlog.testing.BackendContract``) over the PostgreSQL backend.

Each location is its own schema (dropped at the test's teardown); every ``make_backend``
call opens a new ``PostgresBackend`` over it (a restart, or a second host). A transaction cannot tear,
so the contract's torn-tail case (#82) is replaced here by its PostgreSQL form: an interrupted
turn has no torn marker, and the cold load commits the closers.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from _postgres import drop_schema
from agentlog.persistence.postgres import PostgresBackend
from agentlog.testing import BackendContract
from agentlog.testing.builders import SID, open_turn_with_chunks, seqs
from agentlog.testing.contract import ContractHarness, fresh, persist, revision_of, stored


class TestPostgresContract(BackendContract):
    kind = "postgres"

    @pytest.fixture(autouse=True)
    def _schemas(self, pg_dsn: str) -> Iterator[None]:
        """Every location a test asks for is a new schema; all are dropped at teardown."""
        self._dsn = pg_dsn
        self._created: list[str] = []
        yield
        for schema in self._created:
            drop_schema(pg_dsn, schema)

    def new_location(self, tmp_path: Path) -> tuple[str, str]:
        schema = f"t_{uuid.uuid4().hex[:16]}"
        self._created.append(schema)
        return (self._dsn, schema)

    def make_backend(self, location: tuple[str, str]) -> PostgresBackend:
        dsn, schema = location
        return PostgresBackend(dsn, schema=schema)

    def damage_header(self, location: tuple[str, str], meta: Mapping[str, Any]) -> None:
        """A foreign writer's damage: header bytes that are not JSON."""
        dsn, schema = location
        with psycopg.connect(dsn, autocommit=True) as conn:
            statement = sql.SQL("UPDATE {}.sessions SET header = %s WHERE id = %s").format(sql.Identifier(schema))
            assert conn.execute(statement, (b"{not json", meta["id"])).rowcount == 1

    def test_82_torn_tail_is_truncated_and_the_open_turn_closed_on_load(self, env: ContractHarness) -> None:
        """PostgreSQL form of #82: a row cannot tear, so only the open turn is closed (and durably)."""
        log = open_turn_with_chunks()
        persist(env, log)
        prefix = env.backend().load_stored(SID)
        assert prefix is not None and prefix.torn_marker is None
        assert seqs(prefix.events) == list(range(len(log)))
        reader = fresh(env)
        before = revision_of(reader)
        loaded = reader.load(SID)
        assert len(loaded.events) > len(log)  # the closers
        assert loaded.events[-1]["data"]["reason"] == {"kind": "interrupted"}
        assert revision_of(reader) != before
        assert seqs(stored(env)) == list(range(len(loaded.events)))
