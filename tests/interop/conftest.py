"""Stores of every backend for the import tests: ``store`` opens new backend instances over one store.

A PostgreSQL store works in a schema of its own, dropped afterwards, in the run's database (the suite's
``pg_dsn`` fixture, ``tests/conftest.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from _postgres import drop_schema, fresh_schema
from agentlog.persistence.jsonl.backend import JsonlBackend
from agentlog.persistence.memory import MemoryBackend, MemoryStorage
from agentlog.persistence.postgres import PostgresBackend
from agentlog.persistence.sqlite.backend import SqliteBackend

KINDS = ("jsonl-zstd", "jsonl-raw", "sqlite", "postgres", "memory")


@dataclass
class Store:
    """One store of one backend kind; ``open()`` is a new backend instance over it (closed at teardown)."""

    kind: str
    root: Path
    dsn: str = ""
    schema: str = ""
    memory: MemoryStorage = field(default_factory=MemoryStorage)
    opened: list[Any] = field(default_factory=list)

    def open(self) -> Any:
        backend: Any
        if self.kind.startswith("jsonl"):
            backend = JsonlBackend(str(self.root), compression="zstd" if self.kind == "jsonl-zstd" else "none")
        elif self.kind == "sqlite":
            backend = SqliteBackend(str(self.root / "sessions.db"))
        elif self.kind == "postgres":
            backend = PostgresBackend(self.dsn, schema=self.schema)
        else:
            backend = MemoryBackend(self.memory)
        self.opened.append(backend)
        return backend

    def listed(self) -> list[str]:
        backend = self.open()
        try:
            return [listing.id for listing in backend.list_sessions()]
        finally:
            backend.close()

    def session_files(self) -> list[Path]:
        """Published JSONL logs (``session.jsonl[.zstd]``; a staged ``*.tmp`` file is no log)."""
        if not self.kind.startswith("jsonl") or not self.root.exists():
            return []
        return [p for p in self.root.rglob("session.jsonl*") if p.is_file() and p.suffix != ".tmp"]

    def staged_files(self) -> list[Path]:
        """What a staged import writes before it publishes (JSONL and SQLite: ``*.tmp`` files)."""
        return [p for p in self.root.rglob("*.tmp")] if self.root.exists() else []


def _store_of(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if kind != "postgres":
        made = Store(kind, tmp_path / "store")
    else:
        made = Store(kind, tmp_path / "store", request.getfixturevalue("pg_dsn"), fresh_schema())
    try:
        yield made
    finally:
        for backend in made.opened:
            backend.close()
        if kind == "postgres":
            drop_schema(made.dsn, made.schema)


@pytest.fixture(params=KINDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    yield from _store_of(request.param, request, tmp_path)


@pytest.fixture(params=[kind for kind in KINDS if kind != "memory"])
def durable_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """A store that outlives the process writing it (every kind but memory): for the kill tests."""
    yield from _store_of(request.param, request, tmp_path)
