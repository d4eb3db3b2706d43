"""The backend contract (``agentlog.testing.BackendContract``) over the PostgreSQL backend.

Each location is its own schema (dropped at the test's teardown); every ``make_backend``
call opens a new ``PostgresBackend`` over it (a restart, or a second host). A transaction cannot tear,
so the contract's torn-tail cases do not apply (``has_torn_tail`` is false).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from agentlog.persistence.postgres import PostgresBackend
from agentlog.testing import BackendContract

from .conftest import drop_schema


class TestPostgresContract(BackendContract):
    kind = "postgres"
    can_damage_header = True

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
