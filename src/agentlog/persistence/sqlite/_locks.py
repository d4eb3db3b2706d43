"""SQLite store: writer locks and the session ids they limit.

A file database keeps one ``flock``-ed lock file per session, ``<database>.locks/<encodeSegment(id)>.lock``
(so an id must encode to a file name that fits); a ``:memory:`` database, which only its own instance
reaches, keeps its locks in process.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Mapping
from typing import Any, Final

from ...errors import InvalidSessionIdError, PersistenceError
from ..paths import encode_segment  # one id → file-name encoding for every backend (spec §4.2)
from ..writer_lock import clear_holder, holder_record, lock_or_refuse, locked_error
from ._connection import _Connection
from ._schema import _session_id

MAX_FILE_NAME_BYTES: Final = 255
"""NAME_MAX of the file systems agentlog supports; a session's lock file name must fit in it."""
_LOCK_SUFFIX: Final = ".lock"
MAX_ENCODED_ID_LENGTH: Final = MAX_FILE_NAME_BYTES - len(_LOCK_SUFFIX)


class _FileWriterLock:
    """An ``flock`` held on an open descriptor; closing the descriptor is the release."""

    def __init__(self, owner: _WriterLocks, fd: int) -> None:
        self._owner = owner
        self._fd: int | None = fd
        self._mutex = threading.Lock()

    def release(self) -> None:
        with self._mutex:
            fd, self._fd = self._fd, None
        if fd is not None:
            self._owner._forget_lock(self)
            clear_holder(fd)
            os.close(fd)


class _MemoryWriterLock:
    """The in-process lock of a ``:memory:`` database (only this instance can reach the database)."""

    def __init__(self, owner: _WriterLocks, session_id: str) -> None:
        self._owner = owner
        self._id: str | None = session_id

    def release(self) -> None:
        with self._owner._locks_mutex:
            session_id, self._id = self._id, None
            if session_id is not None:
                self._owner._memory_locks.pop(session_id, None)
                self._owner._held_locks.discard(self)


_WriterLock = _FileWriterLock | _MemoryWriterLock


class _WriterLocks(_Connection):
    """Writer locks (a mixin of :class:`~agentlog.persistence.sqlite.backend.SqliteBackend`)."""

    _locks_mutex: threading.Lock
    _memory_locks: dict[str, dict[str, Any]]
    _held_locks: set[_WriterLock]

    def validate_session_id(self, session_id: str) -> None:
        """Refuse an id this store cannot hold with :class:`InvalidSessionIdError` (naming the limit).

        SQLite TEXT holds any valid Unicode (NUL included) but not a lone surrogate, and a file database
        keeps one writer lock file per session, ``<encodeSegment(id)>.lock``, which must fit one
        255-byte file name: the escaped id may be at most 250 characters (``[A-Za-z0-9._-]`` count one,
        every other UTF-16 code unit five).
        """
        if type(session_id) is not str or not session_id:
            raise InvalidSessionIdError(f"session id must be a non-empty string, got {session_id!r}")
        try:
            session_id.encode("utf-8")
        except UnicodeEncodeError as err:
            raise InvalidSessionIdError(
                f"session id {session_id[:40]!r} contains a lone surrogate (U+{ord(session_id[err.start]):04X} at "
                f"index {err.start}); SQLite stores only valid Unicode text — choose an id of valid characters"
            ) from None
        if not self._memory:
            encoded = len(encode_segment(session_id))
            if encoded > MAX_ENCODED_ID_LENGTH:
                raise InvalidSessionIdError(
                    f"session id {session_id[:40]!r}… is too long for this store: its writer lock file name "
                    f"would be {encoded + len(_LOCK_SUFFIX)} bytes, the file system allows {MAX_FILE_NAME_BYTES}; "
                    f"an id may encode to at most {MAX_ENCODED_ID_LENGTH} characters ([A-Za-z0-9._-] count one, "
                    "every other character five)"
                )

    def lock_writer(self, meta: Mapping[str, Any]) -> _WriterLock:
        """Take the session's advisory writer lock or raise :class:`SessionLockedError` at once.

        ``flock`` belongs to the open file description, so a second backend instance in this process
        conflicts exactly like another process does; the kernel drops it if the holder dies.
        """
        session_id = _session_id(meta)
        if self._closed:
            raise PersistenceError(f"{self.name} backend is closed")
        if self.read_only:
            raise PersistenceError(f'{self.name} was opened read-only on "{self.path}"; it takes no writer locks')
        self.validate_session_id(session_id)
        if self._memory:
            with self._locks_mutex:
                if session_id in self._memory_locks:
                    raise locked_error(session_id, self._memory_locks[session_id])
                self._memory_locks[session_id] = holder_record()
                memory_lock = _MemoryWriterLock(self, session_id)
                self._held_locks.add(memory_lock)
            return memory_lock
        folder = self.path + ".locks"
        lock_path = os.path.join(folder, encode_segment(session_id) + _LOCK_SUFFIX)
        try:
            os.makedirs(folder, mode=0o700, exist_ok=True)
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
        except OSError as err:
            if isinstance(err, FileExistsError) or err.errno == errno.ENOTDIR:
                err.filename = folder  # makedirs over a file: the .locks path is what to move away
            raise self._os_error(err, f'create the writer lock of session "{session_id}"') from err
        lock_or_refuse(fd, session_id)
        file_lock = _FileWriterLock(self, fd)
        with self._locks_mutex:
            self._held_locks.add(file_lock)
        return file_lock

    def _forget_lock(self, lock: _WriterLock) -> None:
        with self._locks_mutex:
            self._held_locks.discard(lock)
