"""Which search provider a store gets: the index belongs where the store is.

A PostgreSQL store is searched by :class:`~agentlog.query.postgres.PostgresSearch`, whose index lives in
the store's database (one index for every host reading the store); every other store by
:class:`~agentlog.query.sqlite.SqliteSearch` over its derived SQLite file
(:func:`~agentlog.query.sqlite.default_index_path`). The check never imports the PostgreSQL driver: a
backend can only be a ``PostgresBackend`` once its module was imported.
"""

from __future__ import annotations

import sys
from typing import Any

from ..persistence.coordinator import PersistenceCoordinator
from .sqlite import SqliteSearch, default_index_path

__all__ = ["index_location", "is_postgres_store", "open_store_search"]


def is_postgres_store(backend: object) -> bool:
    """Whether ``backend`` is a PostgreSQL store (without importing the driver)."""
    module = sys.modules.get("agentlog.persistence.postgres.backend")
    return module is not None and isinstance(backend, module.PostgresBackend)


def index_location(backend: object) -> str | None:
    """Where the store's search index is: a file path, ``postgresql:<schema>`` (the index schema in
    the store's database), or ``None`` (an in-memory store: an in-memory index)."""
    if is_postgres_store(backend):
        from .postgres import index_schema

        return f"postgresql:{index_schema(backend.schema)}"  # type: ignore[attr-defined]
    return default_index_path(backend)


def open_store_search(coordinator: PersistenceCoordinator, **options: Any) -> SqliteSearch:
    """The store's search over ``coordinator`` (``options``: ``open_at``, limits, ``snippet_chars`` …)."""
    backend = coordinator.backend
    if is_postgres_store(backend):
        from .postgres import PostgresSearch

        return PostgresSearch(coordinator, **options)
    return SqliteSearch(coordinator, path=default_index_path(backend) or ":memory:", **options)
