"""JSONL store: staged sessions, written into a temporary file that is linked into place whole.

``stage_session`` returns a :class:`_StagedLog`; its file (``<log>.<hex>.import.tmp``) is ``flock``-ed
by its writer, so a later staging can tell the files of writers that died and remove them.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from ...errors import PersistenceError
from ..backend import StagedGuard, WireEvent
from ..storage_errors import storage_error
from ._errors import _typed_os_errors
from ._files import _O_SAFE, _write_all
from ._layout import _Layout, _Tail
from ._zstdframes import compress_frame

if TYPE_CHECKING:
    from .backend import JsonlBackend

_STAGED_SUFFIX: Final = ".import.tmp"


def _remove_if_abandoned(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | _O_SAFE)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.unlink(path)
        os.rmdir(os.path.dirname(path))  # fails (and is left) when anything else is in it
    except OSError:
        pass  # a live writer holds it (or it is gone already)
    finally:
        os.close(fd)


class _Staging(_Layout):
    """The sweep of abandoned staged files (a mixin of :class:`~agentlog.persistence.jsonl.backend.JsonlBackend`)."""

    def _sweep_staged(self) -> None:
        """Remove the staged files whose writer is gone (its ``flock`` ended with it); best effort."""
        for project in self._project_dirs():
            project_path = os.path.join(self.root, project)
            try:
                sessions = self._session_dirs(project_path)
            except (OSError, PersistenceError):
                continue
            for session in sessions:
                session_dir = os.path.join(project_path, session)
                try:
                    names = [name for name in os.listdir(session_dir) if name.endswith(_STAGED_SUFFIX)]
                except OSError:
                    continue
                for name in names:
                    _remove_if_abandoned(os.path.join(session_dir, name))


class _StagedLog(StagedGuard):
    """:meth:`JsonlBackend.stage_session`'s log: batches go to the temporary file, ``publish`` links it."""

    def __init__(self, backend: JsonlBackend, meta: dict[str, Any], path: str) -> None:
        self._backend = backend
        self._meta = meta
        self._path = path
        self._temp: str | None = None
        self._fd: int | None = None
        self._next_seq = 0
        self._closed = False

    @_typed_os_errors
    def append(self, events: Sequence[WireEvent]) -> None:
        self._check_open()
        if not events:
            return
        self._check_next(events)
        backend = self._backend
        body = backend._batch_text(events)
        if self._fd is None:
            content = backend._first_content(self._meta, body)
            self._temp, self._fd = self._open_locked()
        else:
            content = compress_frame(body) if backend._zstd else body
        try:
            _write_all(self._fd, content)
        except OSError as err:
            raise storage_error(err, self._path) from err
        self._next_seq += len(events)

    def _open_locked(self) -> tuple[str, int]:
        """The staged file, ``flock``-ed (a sweep that won the race between create and lock removed the
        first name: take another)."""
        while True:
            temp, fd = self._backend._open_temp(self._meta, self._path, _STAGED_SUFFIX)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                if os.stat(temp).st_ino == os.fstat(fd).st_ino:
                    return temp, fd
            except (FileNotFoundError, BlockingIOError):
                pass
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)

    @_typed_os_errors
    def publish(self) -> None:
        self._check_open()
        if self._fd is None or self._temp is None:
            raise PersistenceError(f'the staged log of "{self._meta["id"]}" has no events to publish')
        fd, temp = self._fd, self._temp
        try:
            try:
                os.fsync(fd)
                st = os.fstat(fd)
            except OSError as err:
                raise storage_error(err, self._path) from err
            self._backend._publish_temp(self._meta, temp, self._path)
        except BaseException:
            self.discard()
            raise
        self._closed = True
        self._fd = None
        os.close(fd)
        try:
            os.unlink(temp)
        except OSError:
            pass
        with self._backend._mutex:
            self._backend._tails[self._path] = _Tail(st.st_dev, st.st_ino, st.st_size, self._next_seq)

    def discard(self) -> None:
        """Remove the temporary file (and the session directory, when that leaves it empty)."""
        self._closed = True
        fd, self._fd = self._fd, None
        temp, self._temp = self._temp, None
        if fd is not None:
            os.close(fd)
        if temp is not None:
            try:
                os.unlink(temp)
                os.rmdir(os.path.dirname(temp))  # fails (and is left) when anything else is in it
            except OSError:
                pass
