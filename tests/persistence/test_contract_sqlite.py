"""The backend contract (``agentlog.testing.BackendContract``) over the SQLite backend.

A SQLite row is written by a transaction and cannot tear, so the torn-tail tests are skipped here (an
unparsable row is damage: issue 7, defect 13).
"""

from __future__ import annotations

from pathlib import Path

from agentlog.persistence.sqlite.backend import SqliteBackend
from agentlog.testing import BackendContract


class TestSqliteContract(BackendContract):
    kind = "sqlite"

    def new_location(self, tmp_path: Path) -> Path:
        return tmp_path / "db" / "sessions.sqlite"

    def make_backend(self, location: Path) -> SqliteBackend:
        return SqliteBackend(str(location))
