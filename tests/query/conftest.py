"""The search providers the query suite runs against: every search test that asks for ``provider``
runs once with :class:`SqliteSearch` (an in-memory index) and once with :class:`PostgresSearch` (an
index schema of its own on the test server), unless it is marked ``sqlite_only`` — it tests what only
the SQLite provider has (its index file, its schema, its FTS5 internals).

``provider.make(coordinator=None, store=None, **config)`` builds a search of the test's provider; the
PostgreSQL index schemas it made are dropped at teardown.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from agentlog.query.sqlite import SqliteSearch

PROVIDERS = ("sqlite", "postgres")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "provider" in metafunc.fixturenames:
        only_sqlite = metafunc.definition.get_closest_marker("sqlite_only") is not None
        metafunc.parametrize("provider", ["sqlite"] if only_sqlite else list(PROVIDERS), indirect=True)


@dataclass
class Provider:
    name: str
    dsn: str | None = None
    schemas: list[str] = field(default_factory=list)
    made: list[SqliteSearch] = field(default_factory=list)

    def make(self, coordinator: Any = None, *, store: Any = None, **config: Any) -> SqliteSearch:
        if self.name == "sqlite":
            config.setdefault("path", ":memory:")
            search = SqliteSearch(coordinator, store=store, **config)
        else:
            from _postgres import fresh_schema
            from agentlog.query.postgres import PostgresSearch

            config.pop("path", None)
            config.pop("journal_mode", None)
            schema = config.pop("schema", None) or fresh_schema()
            self.schemas.append(schema)
            search = PostgresSearch(coordinator, store=store, dsn=self.dsn, schema=schema, **config)
        self.made.append(search)
        return search


@pytest.fixture
def provider(request: pytest.FixtureRequest) -> Iterator[Provider]:
    name = request.param
    dsn = request.getfixturevalue("pg_dsn") if name == "postgres" else None
    made = Provider(name, dsn)
    yield made
    for search in made.made:
        search.close()
    if made.dsn is not None:
        from _postgres import drop_schema
        from agentlog.query.postgres import index_schema

        for schema in dict.fromkeys(made.schemas):
            drop_schema(made.dsn, index_schema(schema))


@pytest.fixture
def pg_backends(pg_dsn: str, pg_schema: str) -> Iterator[Any]:
    """``pg_backends(**options)`` → a new PostgreSQL backend over the test's schema (closed at teardown),
    as in tests/postgres/conftest.py."""
    from agentlog.persistence.postgres import PostgresBackend

    created: list[PostgresBackend] = []

    def make(**options: Any) -> PostgresBackend:
        backend = PostgresBackend(pg_dsn, schema=pg_schema, **options)
        created.append(backend)
        return backend

    yield make
    for backend in created:
        backend.close()
