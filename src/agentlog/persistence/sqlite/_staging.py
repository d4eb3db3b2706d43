"""SQLite store: staged sessions, written into a private database file and copied in whole at ``publish``.

The staging file (``<database>.import-<hex>.tmp``) is ``flock``-ed by its writer, so a later staging can
tell the files of writers that died and remove them; a ``:memory:`` database buffers the rows instead.
"""

from __future__ import annotations

import fcntl
import glob
import os
import sqlite3
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from ...errors import PersistenceError
from ..backend import StagedGuard, WireEvent
from . import _codec as codec
from ._locks import _WriterLocks
from ._schema import SQL, _header_columns, _session_id

if TYPE_CHECKING:
    from .backend import SqliteBackend


class _Staging(_WriterLocks):
    """Staging (a mixin of :class:`~agentlog.persistence.sqlite.backend.SqliteBackend`)."""

    def stage_session(self, meta: Mapping[str, Any]) -> _StagedSession:
        """A new session written into a private database file next to this one, copied in at ``publish``.

        The batches go to ``<database>.import-<hex>.tmp`` (an agentlog database of its own, in short
        transactions that never take this database's write lock); ``publish`` copies its rows in ONE
        transaction here and removes the file. Nothing is visible before that commit; a crash before it
        leaves only the unlisted ``*.tmp`` file, which its writer holds an ``flock`` on: each new staging
        first removes those whose writer died. A ``:memory:`` database (which only this instance reaches)
        keeps the batches and writes them at ``publish``, in one transaction too.
        """
        if self.read_only:
            raise PersistenceError(
                f'{self.name} was opened read-only on "{self.path}"; staging a session needs a writable backend'
            )
        self.validate_session_id(_session_id(meta))
        if not self._memory:
            for path in glob.glob(glob.escape(self.path) + ".import-*.tmp"):
                _remove_if_abandoned(path)
        return _StagedSession(self, meta)

    def _insert_rows(self, conn: sqlite3.Connection, meta: Mapping[str, Any], rows: Sequence[Any]) -> None:
        session_id = _session_id(meta)
        self._refuse_existing(conn, session_id)
        conn.execute(SQL["upsert_session"], (*_header_columns(meta), str(uuid.uuid4())))
        conn.executemany(SQL["insert_event"], rows)

    def _refuse_existing(self, conn: sqlite3.Connection, session_id: str) -> None:
        if self._session_row(conn, session_id) is not None:
            raise PersistenceError(
                f'refusing to materialize "{session_id}": a log already exists in the database (load/resume it instead)'
            )

    def _publish_staged(self, session_id: str, staged_path: str) -> None:
        """Copy a staged database's session in one transaction (``ATTACH`` cannot run inside one)."""
        with self._mutex:
            conn = self._connection()
            try:
                conn.execute(SQL["attach_staged"], (staged_path,))
            except BaseException as err:
                failure = self._typed(err, "publish")
                if failure is err:
                    raise
                raise failure from err

        def body(conn: sqlite3.Connection) -> None:
            self._refuse_existing(conn, session_id)
            conn.execute(SQL["copy_staged_session"], (session_id,))
            conn.execute(SQL["copy_staged_events"], (session_id,))

        try:
            self._write("publish", body)
        finally:
            with self._mutex:
                try:
                    conn.execute(SQL["detach_staged"])
                except sqlite3.Error:
                    pass  # a dropped connection has nothing attached any more


class _StagedSession(StagedGuard):
    """:meth:`SqliteBackend.stage_session`'s log: a private staging database (or, for ``:memory:``, a buffer)."""

    def __init__(self, backend: _Staging, meta: Mapping[str, Any]) -> None:
        self._backend = backend
        self._meta = dict(meta)
        self._buffered: list[Any] | None = [] if backend._memory else None
        self._stage: SqliteBackend | None = None
        self._stage_path = f"{backend.path}.import-{uuid.uuid4().hex[:12]}.tmp"
        self._lock_fd: int | None = None
        self._next_seq = 0
        self._closed = False

    def append(self, events: Sequence[WireEvent]) -> None:
        self._check_open()
        if not events:
            return
        self._check_next(events)
        if self._buffered is not None:
            try:
                self._buffered.extend(codec.encode_batch(_session_id(self._meta), events))
            except MemoryError as err:
                raise self._backend._typed(err, "staged append") from None
        else:
            if self._stage is None:
                # The staging database is a store of its own (imported here: the backend imports this module).
                from .backend import SqliteBackend

                self._lock_fd = _create_locked(self._stage_path)
                self._stage = SqliteBackend(
                    self._stage_path, journal_mode="delete", busy_timeout_ms=self._backend.busy_timeout_ms
                )
            self._stage.append_batch(self._meta, events, self._next_seq > 0)
        self._next_seq += len(events)

    def publish(self) -> None:
        self._check_open()
        if self._next_seq == 0:
            raise PersistenceError(f'the staged log of "{self._meta["id"]}" has no events to publish')
        backend = self._backend
        self._closed = True
        try:
            if self._buffered is not None:
                rows, self._buffered = self._buffered, None
                backend._write("publish", lambda conn: backend._insert_rows(conn, self._meta, rows))
            else:
                assert self._stage is not None
                self._stage.close()
                backend._publish_staged(_session_id(self._meta), self._stage_path)
        finally:
            self.discard()

    def discard(self) -> None:
        """Forget the buffer, or close and remove the staging database (nothing of it was ever visible)."""
        self._closed = True
        self._buffered = None
        stage, self._stage = self._stage, None
        if stage is not None:
            stage.close()
        if not self._backend._memory:
            _remove_staged(self._stage_path)
        fd, self._lock_fd = self._lock_fd, None
        if fd is not None:
            os.close(fd)


_O_SAFE: Final = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def _create_locked(path: str) -> int:
    """Create a staging file and ``flock`` it (held until closed: how a sweep tells a live writer)."""
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR | _O_SAFE, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if os.stat(path).st_ino != os.fstat(fd).st_ino:
            raise PersistenceError(f'staging file "{path}" was removed while it was being created; retry')
    except BaseException:
        os.close(fd)
        raise
    return fd


def _remove_staged(path: str) -> None:
    for suffix in ("", "-journal", "-wal", "-shm"):
        try:
            os.unlink(path + suffix)
        except OSError:
            pass


def _remove_if_abandoned(path: str) -> None:
    """Remove a staging database whose writer is gone (its ``flock`` ended with it); best effort."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | _O_SAFE)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        _remove_staged(path)
    except OSError:
        pass  # a live writer holds it
    finally:
        os.close(fd)
