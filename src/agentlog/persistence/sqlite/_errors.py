"""SQLite store: error mapping (SQLite result codes and OS refusals onto the typed errors).

:func:`sqlite_storage_code` gives a SQLite refusal its ``STORAGE_*`` code (shared with the derived SQLite
files beside a store); :class:`_ErrorMapping` turns any failure of an operation into the typed error it
surfaces as, naming the path and the remedy.
"""

from __future__ import annotations

import os
import sqlite3
from typing import Final

from ...errors import (
    AgentlogError,
    PersistenceError,
    ResourceExhaustedError,
    SessionPersistenceCorruptionError,
    StorageAccessError,
)
from ..storage_errors import storage_error
from . import _codec as codec

# Primary result codes (``sqlite_errorcode & 0xFF``) that are mapped to typed errors.
SQLITE_PERM: Final = 3
SQLITE_NOMEM: Final = 7
SQLITE_READONLY: Final = 8
SQLITE_IOERR: Final = 10
SQLITE_CORRUPT: Final = 11
SQLITE_FULL: Final = 13
SQLITE_CANTOPEN: Final = 14
SQLITE_AUTH: Final = 23
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


def sqlite_storage_code(err: BaseException, path: str) -> str | None:
    """The ``STORAGE_*`` code of a SQLite refusal to use the database at ``path``, or ``None`` when the
    error is not a storage refusal (damage, memory, busy, a logic error: the caller types those).

    SQLite's primary result code decides: FULL is a full disk; READONLY, or CANTOPEN on a read-only
    file system, is read-only storage; PERM / AUTH, or CANTOPEN in a directory this user cannot write
    (SQLite creates ``-wal`` / ``-shm`` / ``-journal`` files beside the database), is a permission
    refusal; any other IOERR / CANTOPEN is an I/O error. Shared by the session backend and the
    derived SQLite files beside a store (the projection cache), so one condition has one code.
    """
    primary = _primary(err)
    if primary == SQLITE_FULL:
        return "STORAGE_FULL"
    if primary == SQLITE_READONLY or (primary == SQLITE_CANTOPEN and _on_read_only_file_system(path)):
        return "STORAGE_READ_ONLY"
    if primary in (SQLITE_PERM, SQLITE_AUTH) or (
        primary == SQLITE_CANTOPEN and not os.access(os.path.dirname(path), os.W_OK | os.X_OK)
    ):
        return "STORAGE_PERMISSION_DENIED"
    if primary in (SQLITE_IOERR, SQLITE_CANTOPEN):
        return "STORAGE_IO"
    return None


def _primary(err: BaseException) -> int | None:
    code = getattr(err, "sqlite_errorcode", None)
    return code & 0xFF if isinstance(code, int) else None


def _on_read_only_file_system(path: str) -> bool:
    try:
        return bool(os.statvfs(os.path.dirname(path) or ".").f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _as_exception(err: BaseException) -> Exception:
    return err if isinstance(err, Exception) else RuntimeError(repr(err))
