"""One errno -> ``STORAGE_*`` table and one message builder for an operating system's refusal.

Every file-backed part of persistence (the JSONL and SQLite backends, the projection cache beside a
store, the CLI removing a cache) turns an :class:`OSError` into a :class:`~agentlog.errors.StorageAccessError`
here, so one condition has one stable code and one remedy whichever file hit it: a full disk is
``STORAGE_FULL`` whether the log, the database or its cache filled it. (SQLite's own result codes, which
carry no errno, are mapped onto the same codes by :func:`sqlite_storage_code`, here too: the projection cache
uses it without importing the SQLite backend.)
"""

from __future__ import annotations

import errno
import os
from typing import Final

from ..errors import StorageAccessError

__all__ = ["OS_ERROR_KINDS", "on_read_only_file_system", "sqlite_primary", "sqlite_storage_code", "storage_error"]

# SQLite primary result codes (``sqlite_errorcode & 0xFF``) that are storage refusals.
SQLITE_PERM: Final = 3
SQLITE_READONLY: Final = 8
SQLITE_IOERR: Final = 10
SQLITE_FULL: Final = 13
SQLITE_CANTOPEN: Final = 14
SQLITE_AUTH: Final = 23


_NOT_A_FILE_REMEDY: Final = (
    "a regular file belongs there; move the directory or special file away, or point the store elsewhere"
)
_NOT_A_DIRECTORY_REMEDY: Final = (
    "a file stands where a directory of the store belongs; move it away or point the store elsewhere"
)
_FULL_REMEDY: Final = (
    "the file system is full; free space (or raise the quota) and retry — nothing acknowledged was lost"
)

OS_ERROR_KINDS: Final[dict[int, tuple[str, str]]] = {
    errno.EACCES: (
        "STORAGE_PERMISSION_DENIED",
        "permission denied; make it readable and writable by this user (and its directories searchable), or use "
        "a store it owns",
    ),
    errno.EPERM: (
        "STORAGE_PERMISSION_DENIED",
        "operation not permitted; give the user running agentlog access to it, or use a store it owns",
    ),
    errno.ENOSPC: ("STORAGE_FULL", _FULL_REMEDY),
    errno.EDQUOT: ("STORAGE_FULL", _FULL_REMEDY),
    errno.EROFS: (
        "STORAGE_READ_ONLY",
        "the file system is read-only; remount it read-write or copy the store to a writable place (read-only "
        "commands such as ls, show, export and verify still work)",
    ),
    errno.EISDIR: ("STORAGE_NOT_A_FILE", _NOT_A_FILE_REMEDY),
    errno.ELOOP: ("STORAGE_NOT_A_FILE", "it is a symbolic link; " + _NOT_A_FILE_REMEDY),
    errno.ENXIO: ("STORAGE_NOT_A_FILE", _NOT_A_FILE_REMEDY),
    errno.ENAMETOOLONG: (
        "STORAGE_IO",
        "the path is too long for the file system; use a store root with a shorter path",
    ),
    errno.ENOTDIR: ("STORAGE_NOT_A_DIRECTORY", _NOT_A_DIRECTORY_REMEDY),
    errno.EEXIST: ("STORAGE_NOT_A_DIRECTORY", _NOT_A_DIRECTORY_REMEDY),  # makedirs over an existing non-directory
}
"""``errno -> (code, remedy)``; any other errno is ``STORAGE_IO`` with :data:`_IO_REMEDY`."""

_IO_REMEDY: Final = "the storage operation failed; check the device and the file system, then retry"


def storage_error(err: OSError, path: str | None = None, action: str | None = None) -> StorageAccessError:
    """The typed form of an OS refusal: the stable code, what was being done, the path, the OS reason, the remedy.

    ``path`` defaults to the error's own file name; ``action`` (``"open the session database"``) heads the
    message as ``cannot <action>``, else it reads ``storage error at``.
    """
    where = path or (os.fsdecode(err.filename) if err.filename is not None else "the session store")
    number = err.errno or 0
    code, remedy = OS_ERROR_KINDS.get(number, ("STORAGE_IO", _IO_REMEDY))
    name = errno.errorcode.get(number, "EIO")
    head = f"cannot {action}:" if action else "storage error at"
    return StorageAccessError(f'{head} "{where}": {name}: {err.strerror or err} — {remedy}', code=code, path=where)


def sqlite_storage_code(err: BaseException, path: str) -> str | None:
    """The ``STORAGE_*`` code of a SQLite refusal to use the database at ``path``, or ``None`` when the
    error is not a storage refusal (damage, memory, busy, a logic error: the caller types those).

    SQLite's primary result code decides: FULL is a full disk; READONLY, or CANTOPEN on a read-only
    file system, is read-only storage; PERM / AUTH, or CANTOPEN in a directory this user cannot write
    (SQLite creates ``-wal`` / ``-shm`` / ``-journal`` files beside the database), is a permission
    refusal; any other IOERR / CANTOPEN is an I/O error. Shared by the session backend and the
    derived SQLite files beside a store (the projection cache), so one condition has one code.
    """
    primary = sqlite_primary(err)
    if primary == SQLITE_FULL:
        return "STORAGE_FULL"
    if primary == SQLITE_READONLY or (primary == SQLITE_CANTOPEN and on_read_only_file_system(path)):
        return "STORAGE_READ_ONLY"
    if primary in (SQLITE_PERM, SQLITE_AUTH) or (
        primary == SQLITE_CANTOPEN and not os.access(os.path.dirname(path), os.W_OK | os.X_OK)
    ):
        return "STORAGE_PERMISSION_DENIED"
    if primary in (SQLITE_IOERR, SQLITE_CANTOPEN):
        return "STORAGE_IO"
    return None


def sqlite_primary(err: BaseException) -> int | None:
    code = getattr(err, "sqlite_errorcode", None)
    return code & 0xFF if isinstance(code, int) else None


def on_read_only_file_system(path: str) -> bool:
    try:
        return bool(os.statvfs(os.path.dirname(path) or ".").f_flag & os.ST_RDONLY)
    except OSError:
        return False
