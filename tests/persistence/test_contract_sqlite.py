"""The backend contract (``agentlog.testing.BackendContract``) over the SQLite backend.

A SQLite row is written by a transaction and cannot tear, so the torn-tail tests are skipped here (an
unparsable row is damage: issue 7, defect 13).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agentlog.persistence.sqlite.backend import SqliteBackend
from agentlog.testing import BackendContract


class TestSqliteContract(BackendContract):
    kind = "sqlite"

    def new_location(self, tmp_path: Path) -> Path:
        return tmp_path / "db" / "sessions.sqlite"

    def make_backend(self, location: Path, cls: type[SqliteBackend] = SqliteBackend) -> SqliteBackend:
        return cls(str(location))

    def damage_header(self, location: Path, meta: Mapping[str, Any]) -> None:
        """A foreign writer's damage: a relative cwd (the STRICT table takes it; the row decoder refuses it)."""
        con = sqlite3.connect(location, timeout=10, isolation_level=None)
        try:
            assert con.execute("UPDATE sessions SET cwd = 'relative' WHERE id = ?", (meta["id"],)).rowcount == 1
        finally:
            con.close()
