"""JSONL store: the layout (paths, discovery, identity checks, directories) and the writer lock.

``<root>/--<project_key(cwd)>--/<encode_segment(id)>/session.jsonl[.zstd]``: where a header's log lives,
how a session's log is found in any project directory, the one-encoding-per-root check, the check that
a log's header names the very file it was read from, durable directory creation, and the ``flock``
writer lock under ``<root>/.locks``.
"""

from __future__ import annotations

import fcntl
import os
import stat
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...errors import InvalidSessionIdError, PersistenceError, SessionPersistenceCorruptionError, StorageAccessError
from ..paths import MAX_ENCODED_ID_BYTES, encode_segment, encodes_verbatim, project_key
from ..writer_lock import clear_holder, lock_or_refuse
from ._errors import _IDENTITY_REMEDY, _ErrorMapping, _typed_os_errors
from ._files import (
    _O_SAFE,
    LOCKS_DIR,
    NO_CWD_DIR,
    _exists,
    _fsync_dir,
    _kind,
    _lexists,
    _not_a_directory,
    _same_file,
)


@dataclass
class _Tail:
    """Where this backend instance last saw a log end: checked (one fstat) before every append."""

    dev: int
    ino: int
    size: int
    next_seq: int | None
    cut: tuple[int, int] | None = None  # (truncate_to, next seq there) of a torn tail seen at load


class _FileLock:
    """An ``flock`` held on an open descriptor; releasing closes it (idempotent, thread-safe)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._mutex = threading.Lock()

    def release(self) -> None:
        with self._mutex:
            fd, self._fd = self._fd, -1
        if fd >= 0:
            try:
                clear_holder(fd)
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)


class _Layout(_ErrorMapping):
    """Paths, discovery and directories of a JSONL store (a mixin of
    :class:`~agentlog.persistence.jsonl.backend.JsonlBackend`, whose constructor sets the state below)."""

    root: str
    read_only: bool
    max_header_bytes: int
    max_log_bytes: int
    max_frame_bytes: int
    max_line_bytes: int
    max_depth: int
    pack_chunks: bool
    _tails: dict[str, _Tail]
    _zstd: bool
    _suffix: str
    _directory_ids: dict[str, str | None]
    _mutex: threading.Lock
    _preflight_error: str | None
    _preflight_done: bool

    def _refuse_write(self, what: str) -> None:
        if self.read_only:
            raise StorageAccessError(
                f'cannot {what}: the JSONL store "{self.root}" was opened read-only (read_only=True); open it '
                "without read_only to write",
                code="STORAGE_READ_ONLY",
                path=self.root,
            )

    # --- paths ---------------------------------------------------------------------------------

    def _project_dir(self, cwd: object) -> str:
        if cwd is None:
            return NO_CWD_DIR
        if not isinstance(cwd, str):
            raise ValueError("cwd is not a string")
        return project_key(cwd)

    def _path_for(self, session_id: object, cwd: object, suffix: str | None = None) -> str:
        if not isinstance(session_id, str):
            raise ValueError("session id is not a string")
        return os.path.join(
            self.root, self._project_dir(cwd), encode_segment(session_id), "session" + (suffix or self._suffix)
        )

    def _log_path(self, meta: Mapping[str, Any]) -> str:
        """The transcript path a header names; refuses (before any I/O) what cannot name one."""
        session_id = meta.get("id")
        cwd = meta.get("cwd")
        if not isinstance(session_id, str) or not session_id:
            raise PersistenceError(f"session id must be a non-empty string, got {session_id!r}")
        if cwd is not None and (not isinstance(cwd, str) or not cwd.startswith("/")):
            raise PersistenceError(f'session header cwd must be an absolute path, got "{cwd}"')
        self.validate_session_id(session_id)
        return self._path_for(session_id, cwd)

    def _encoded_id(self, session_id: str) -> str:
        self.validate_session_id(session_id)
        return encode_segment(session_id)

    def validate_session_id(self, session_id: object) -> None:
        """Refuse (before any I/O) an id this store cannot hold, naming the limit.

        Ids must be non-empty text of valid Unicode (no lone surrogates: the header is UTF-8 JSON) whose
        escaped directory name (:func:`encode_segment`: ASCII letters, digits, ``.``, ``_`` and ``-`` as
        themselves, every other UTF-16 unit as 5 bytes) fits a 255-byte file name with the lock file's
        ``.lock`` suffix, i.e. at most :data:`MAX_ENCODED_ID_BYTES` bytes.
        """
        if not isinstance(session_id, str) or not session_id:
            raise InvalidSessionIdError(f"session id must be a non-empty string, got {session_id!r}")
        if encodes_verbatim(session_id) and len(session_id) <= MAX_ENCODED_ID_BYTES:
            return
        try:
            session_id.encode("utf-8")
        except UnicodeEncodeError as err:
            raise InvalidSessionIdError(
                f"session id holds a character the JSONL store cannot hold (a lone surrogate at index {err.start}); "
                "use an id of valid Unicode text"
            ) from None
        size = len(encode_segment(session_id))
        if size > MAX_ENCODED_ID_BYTES:
            raise InvalidSessionIdError(
                f"session id is too long for the file system: it encodes to a {size}-byte directory name, more "
                f"than the {MAX_ENCODED_ID_BYTES}-byte limit (255-byte file names, less the lock file's '.lock'); "
                "use a shorter id (ASCII letters, digits, '.', '_' and '-' take 1 byte each, other characters 5 "
                "or 10)"
            )

    # --- discovery -----------------------------------------------------------------------------

    def _project_dirs(self) -> list[str]:
        """Real directories under the root (symlinks are not traversed), sorted; the lock dir is skipped."""
        try:
            with os.scandir(self.root) as entries:
                names = [e.name for e in entries if e.name != LOCKS_DIR and e.is_dir(follow_symlinks=False)]
        except FileNotFoundError:
            return []
        names.sort()
        return names

    def _session_dirs(self, project: str, links: list[str] | None = None) -> list[str]:
        """Session directories of a project; a flat ``<id>.jsonl*`` file means the obsolete layout.

        Symbolic links are never session directories; their names go to ``links`` (listing reports them).
        """
        names: list[str] = []
        legacy: list[str] = []
        with os.scandir(project) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    names.append(entry.name)
                elif entry.is_symlink():
                    if links is not None:
                        links.append(entry.name)
                elif entry.name.endswith((".jsonl", ".jsonl.zstd")) and entry.is_file(follow_symlinks=False):
                    legacy.append(entry.name)
        if legacy:
            raise self._legacy(os.path.join(project, min(legacy)))
        names.sort()
        return names

    def _real_dir(self, path: str, what: str) -> bool:
        """Whether ``path`` is a real directory (``False`` if absent); a symlink or a file is refused."""
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return False
        if stat.S_ISDIR(st.st_mode):
            return True
        raise _not_a_directory(path, what, _kind(st.st_mode))

    def _preflight(self) -> None:
        """Root-encoding check, once per instance (result cached, rejection included — spec §4.9).

        A root holds one encoding; silently reading half of it would hide sessions. Later operations
        re-check the opposite suffix per directory they touch, so artifacts appearing later are caught.
        """
        with self._mutex:
            if not self._preflight_done:
                try:
                    for project in self._project_dirs():
                        project_path = os.path.join(self.root, project)
                        for session in self._session_dirs(project_path):
                            opposite = os.path.join(project_path, session, "session" + self._opposite)
                            if _exists(opposite):
                                raise self._mismatch(opposite)
                except PersistenceError as err:
                    self._preflight_error = err.message
                self._preflight_done = True
            if self._preflight_error is not None:
                raise PersistenceError(self._preflight_error)

    def _find_log(self, session_id: str) -> str | None:
        """The transcript of ``session_id`` in any project directory (ids are unique per root)."""
        encoded = self._encoded_id(session_id)
        found: list[str] = []
        for project in self._project_dirs():
            project_path = os.path.join(self.root, project)
            for suffix in (".jsonl.zstd", ".jsonl"):
                flat = os.path.join(project_path, encoded + suffix)
                if _exists(flat):
                    raise self._legacy(flat)
            session_dir = os.path.join(project_path, encoded)
            if not self._real_dir(session_dir, "session directory"):
                continue
            opposite = os.path.join(session_dir, "session" + self._opposite)
            if _lexists(opposite):
                raise self._mismatch(opposite)
            path = os.path.join(session_dir, "session" + self._suffix)
            if _lexists(path):
                found.append(path)
        if len(found) > 1:
            raise self._duplicate(session_id)
        return found[0] if found else None

    def _check_identity(self, path: str, meta: Mapping[str, Any], expected_id: str | None) -> None:
        """The header must name this very file (spec §4.9): catches moved or hand-copied logs before repair."""
        header_id = meta.get("id")
        if expected_id is not None and header_id != expected_id:
            raise SessionPersistenceCorruptionError(
                f'corrupt session log "{path}": requested id "{expected_id}" does not match header id '
                f'"{header_id}". {_IDENTITY_REMEDY}',
                location=path,
            )
        cwd = meta.get("cwd")
        if isinstance(header_id, str) and header_id and (cwd is None or (isinstance(cwd, str) and cwd)):
            # Fast path: the path this header names is exactly the one being read.
            try:
                project = NO_CWD_DIR if cwd is None else project_key(cwd)
                if path == f"{self.root}/{project}/{encode_segment(header_id)}/session{self._suffix}":
                    return
            except ValueError:
                pass
        try:
            expected = self._path_for(header_id, meta.get("cwd"))
        except ValueError:
            raise SessionPersistenceCorruptionError(
                f'corrupt session log "{path}": header id cannot name a storage path. {_IDENTITY_REMEDY}',
                location=path,
            ) from None
        if path != expected and not _same_file(path, expected):
            raise SessionPersistenceCorruptionError(
                f'corrupt session log "{path}": header id "{header_id}" and cwd identify "{expected}". '
                f"{_IDENTITY_REMEDY}",
                location=path,
            )

    def _mkdir_durable(self, path: str, what: str = "store directory") -> None:
        """``mkdir -p`` with mode 0700 that fsyncs the parent of every directory it creates.

        Every directory it meets below the root must be a real directory (never a symbolic link).
        """
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            if self._existing_dir(path, what):
                return
        except FileNotFoundError:
            parent = os.path.dirname(path)
            if parent == path:
                raise
            self._mkdir_durable(parent, "store directory")
            try:
                os.mkdir(path, 0o700)
            except FileExistsError:
                if self._existing_dir(path, what):
                    return
        _fsync_dir(os.path.dirname(path))

    def _existing_dir(self, path: str, what: str) -> bool:
        """An existing path where a directory belongs: the root may be a symlink; nothing below it may,
        except a project-directory alias that resolves inside the store."""
        st = os.lstat(path)
        if stat.S_ISDIR(st.st_mode):
            return True
        if stat.S_ISLNK(st.st_mode) and os.path.isdir(path):
            if not path.startswith(self.root + "/"):
                return True  # the root itself (or above it): the user's choice of store location
            real_root = os.path.realpath(self.root)
            if what == "project directory" and os.path.realpath(path).startswith(real_root + "/"):
                return True
            raise _not_a_directory(path, what, "a symbolic link")
        found = "a symbolic link that does not lead to a directory" if stat.S_ISLNK(st.st_mode) else _kind(st.st_mode)
        raise _not_a_directory(path, what, found)

    @_typed_os_errors
    def lock_writer(self, meta: Mapping[str, Any]) -> _FileLock:
        """Advisory single-writer lock: ``flock`` on ``<root>/.locks/<encoded id>.lock``.

        ``flock`` locks belong to the open file description, so a second backend instance in the same
        process conflicts just like another process; the kernel drops the lock if the holder dies. The
        holder writes who it is into the file (:mod:`agentlog.persistence.writer_lock`), so the refusal
        (``SESSION_LOCKED``, at once) names the holder's pid, host and since when.
        """
        session_id = meta.get("id")
        if not isinstance(session_id, str):
            raise PersistenceError(f"session id must be a non-empty string, got {session_id!r}")
        self._refuse_write("take the writer lock")
        lock_dir = os.path.join(self.root, LOCKS_DIR)
        lock_path = os.path.join(lock_dir, self._encoded_id(session_id) + ".lock")
        try:
            os.makedirs(lock_dir, mode=0o700, exist_ok=True)
        except FileExistsError:
            pass  # something that is not a directory: named below
        self._real_dir(lock_dir, "lock directory")
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | _O_SAFE, 0o600)
        lock_or_refuse(fd, session_id)
        return _FileLock(fd)
