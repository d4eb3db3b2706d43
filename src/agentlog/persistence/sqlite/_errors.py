"""SQLite store: error mapping (SQLite result codes and OS refusals onto the typed errors).

:func:`sqlite_storage_code` gives a SQLite refusal its ``STORAGE_*`` code (shared with the derived SQLite
files beside a store); :class:`_ErrorMapping` turns any failure of an operation into the typed error it
surfaces as, naming the path and the remedy.
"""

from __future__ import annotations

import sqlite3
from typing import Final

from ...errors import (
    AgentlogError,
    PersistenceError,
    ResourceExhaustedError,
    SessionPersistenceCorruptionError,
    StorageAccessError,
)
from ..storage_errors import (
    SQLITE_READONLY,
    sqlite_storage_code,
    storage_error,
)
from . import _codec as codec

# Primary result codes (``sqlite_errorcode & 0xFF``) that are mapped to typed errors.
SQLITE_NOMEM: Final = 7
SQLITE_CORRUPT: Final = 11
SQLITE_NOTADB: Final = 26
SQLITE_READONLY_DBMOVED: Final = SQLITE_READONLY | (4 << 8)


class _ErrorMapping:
    """The typed errors of a SQLite store (a mixin of :class:`~agentlog.persistence.sqlite.backend.SqliteBackend`)."""

    name: str
    path: str

    def _os_error(self, err: OSError, action: str, path: str | None = None) -> PersistenceError:
        """A typed :class:`StorageAccessError` for an OS refusal, naming the path and the remedy."""
        return storage_error(err, path or err.filename or self.path, action)

    def _typed(self, err: BaseException, op: str) -> BaseException:
        """The typed error an operation's failure surfaces as; typed errors pass through unchanged.

        SQLite's own codes decide: page damage is corruption, an allocation failure is a resource
        error, FULL / READONLY / CANTOPEN / IOERR / PERM are storage refusals naming the path.
        """
        if isinstance(err, AgentlogError):
            return err
        if isinstance(err, MemoryError):
            return ResourceExhaustedError(
                f'{self.name} {op} ran out of memory on "{self.path}"; nothing was modified (a write was rolled '
                "back and not acknowledged) and the stored data is not known to be damaged — retry with more "
                "memory available"
            )
        if isinstance(err, OSError):
            return self._os_error(err, f"{op} the session database")
        if not isinstance(err, sqlite3.Error):
            return err
        code = getattr(err, "sqlite_errorcode", None)
        primary = code & 0xFF if isinstance(code, int) else None
        if code == SQLITE_READONLY_DBMOVED:
            return self._replaced_error()
        if primary in (SQLITE_CORRUPT, SQLITE_NOTADB):
            return SessionPersistenceCorruptionError(
                f'corrupt session database "{self.path}": {err} (SQLite page damage, found during {op}). '
                f"{codec.REMEDY}",
                location=self.path,
            )
        if primary == SQLITE_NOMEM:
            return ResourceExhaustedError(
                f'{self.name} {op} ran out of memory in SQLite ("{err}") on "{self.path}"; nothing was modified '
                "and the stored data is not known to be damaged — retry with more memory available"
            )
        kind = sqlite_storage_code(err, self.path)
        if kind == "STORAGE_FULL":
            return StorageAccessError(
                f'{self.name} {op} failed: the file system holding "{self.path}" is full ({err}); the transaction '
                "was rolled back and nothing was acknowledged — free space and retry",
                code="STORAGE_FULL",
                path=self.path,
            )
        if kind == "STORAGE_READ_ONLY":
            return StorageAccessError(
                f'{self.name} {op} failed: "{self.path}" cannot be written ({err}) — it is on a read-only file '
                "system or read-only for this user; remount it read-write (or fix its permissions), or use a "
                "read-only command",
                code="STORAGE_READ_ONLY",
                path=self.path,
            )
        if kind == "STORAGE_PERMISSION_DENIED":
            return StorageAccessError(
                f'{self.name} {op} failed: permission denied on "{self.path}" or its directory ({err}); make both '
                "readable and writable by this user (SQLite also creates -wal/-shm files next to the database)",
                code="STORAGE_PERMISSION_DENIED",
                path=self.path,
            )
        if kind == "STORAGE_IO":
            return StorageAccessError(
                f'{self.name} {op} failed: I/O error on "{self.path}" ({err}); nothing was acknowledged — check the '
                "disk and the file system, then retry",
                code="STORAGE_IO",
                path=self.path,
            )
        return PersistenceError(f"{self.name} {op} failed: {err}")

    def _replaced_error(self) -> StorageAccessError:
        return StorageAccessError(
            f'session database "{self.path}" was deleted or replaced while this process had it open; the batch was '
            "NOT stored (it would have gone to the unlinked file and been lost at close). Restore the database "
            "file, then retry: the next operation reopens the path",
            code="STORAGE_IO",
            path=self.path,
        )



def _as_exception(err: BaseException) -> Exception:
    return err if isinstance(err, Exception) else RuntimeError(repr(err))
