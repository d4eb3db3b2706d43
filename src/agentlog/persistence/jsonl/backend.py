"""JSONL storage backend: one append-only transcript file per session (spec §4).

Layout: ``<root>/--<project_key(cwd)>--/<encode_segment(id)>/session.jsonl[.zstd]`` (``_no-cwd`` instead
of the project directory when the header has no cwd). The file holds one header line, then storage
records (events verbatim, or packed chunk rows, see :mod:`agentlog.chunkrows`), either as plain text
(``compression="none"``) or as a concatenation of independent checksummed Zstandard frames, one per
durable batch (``compression="zstd"``, the default).

Durability model, and why it is safe without a journal:

* The first batch is published atomically together with the header: written and fsynced under a
  temporary name, then ``link``-ed into place (``link`` fails with EEXIST instead of overwriting, so a
  racing writer cannot clobber a published log). A crash leaves either no log or a complete one.
* Every later batch is appended at EOF and fsynced; a failed write or fsync truncates back to the prior
  size, so the caller can retry the same batch without a seq gap. Prior bytes are never rewritten.
* A crash can therefore only leave a torn *tail*: an incomplete final record (or a defective last
  complete line). Reading keeps the committed prefix and reports the tail in a :class:`TornMarker`;
  only :meth:`JsonlBackend.commit_repair` ever truncates. Damage inside the committed region (a
  checksum failure in an earlier frame, a defective record with any complete record after it, a
  record readable only by replacing bytes that are not UTF-8) raises
  :class:`~agentlog.errors.SessionPersistenceCorruptionError` and leaves the file untouched;
  :meth:`JsonlBackend.read_prefix` salvages the prefix before it.
* Before every append (under the writer lock) the file must still be the inode, size and next seq this
  instance last wrote or read, so a second writer that slipped past a removed lock file is refused
  (:class:`~agentlog.errors.SessionTailChangedError`) instead of interleaving batches.
"""

from __future__ import annotations

import bisect
import errno
import fcntl
import functools
import os
import re
import secrets
import stat
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, ParamSpec, TypeVar

from ...errors import (
    AgentlogError,
    AppendRollbackError,
    ChunkRowError,
    InvalidSessionIdError,
    PersistenceError,
    ResourceExhaustedError,
    SessionFormatUnsupportedError,
    SessionPersistenceCorruptionError,
    SessionTailChangedError,
    StorageAccessError,
    StoreNotFoundError,
    describe_error,
)
from ...kernel._gc import gc_paused
from ...kernel.chunkrows import (
    CHUNK_ROW_TAGS,
    compact_runs_requested,
    decode_storage_record,
    expand_items,
    pack_chunk_runs,
)
from ...kernel.jsoncodec import DEFAULT_MAX_DEPTH, dumps, loads
from ..backend import (
    PartialRead,
    RawArtifact,
    SessionListing,
    StoredPrefix,
    WireEvent,
    check_reader_limits,
    event_json,
)
from ..paths import MAX_ENCODED_ID_BYTES, decode_segment, encode_segment, encodes_verbatim, file_kind, project_key
from ..storage_errors import storage_error
from ..store_identity import directory_identity
from ..writer_lock import clear_holder, locked_error, read_holder, record_holder
from ._scanner import (
    DEFAULT_MAX_HEADER_BYTES,
    DEFAULT_MAX_LINE_BYTES,
    ReaderLimitError,
    SessionLogScanner,
    header_line,
    header_too_long,
    parse_header_line,
    scan_log,
    scan_log_compact,
    scan_log_prefix,
)
from ._zstdframes import (
    ZSTD_MAGIC_BYTES,
    FrameScan,
    FrameTooLargeError,
    compress_frame,
    decompress_frame,
    decompress_torn_frame,
    frame_ends_at,
    scan_zstd_frames,
)

__all__ = [
    "DEFAULT_MAX_FRAME_BYTES",
    "DEFAULT_MAX_HEADER_BYTES",
    "DEFAULT_MAX_LINE_BYTES",
    "DEFAULT_MAX_LOG_BYTES",
    "MAX_ENCODED_ID_BYTES",
    "AppendRollbackError",
    "JsonlBackend",
    "TornMarker",
    "detect_compression",
    "encode_segment",
    "project_key",
    "scan_zstd_frames",
]

DEFAULT_MAX_FRAME_BYTES: Final = 256 * 1024 * 1024
DEFAULT_MAX_LOG_BYTES: Final = 2 * 1024 * 1024 * 1024
"""What one load may read: the file's size and, for zstd, its decoded text (a typed refusal beyond)."""
LOGICAL_FILENAME: Final = "session.jsonl"
NO_CWD_DIR: Final = "_no-cwd"
LOCKS_DIR: Final = ".locks"

_SUFFIXES: Final = {"zstd": ".jsonl.zstd", "none": ".jsonl"}
_HEADER_READ_CHUNK: Final = 8192
_O_CLOEXEC: Final = getattr(os, "O_CLOEXEC", 0)
_O_DIRECTORY: Final = getattr(os, "O_DIRECTORY", 0)
_O_NOFOLLOW: Final = getattr(os, "O_NOFOLLOW", 0)
_O_NONBLOCK: Final = getattr(os, "O_NONBLOCK", 0)
_O_SAFE: Final = _O_NOFOLLOW | _O_NONBLOCK | _O_CLOEXEC
"""Every log open: never through a symbolic link, never blocking on a FIFO (fstat then refuses it)."""

_REMEDY: Final = (
    "The file was not modified; restore it from a backup or export the readable prefix with "
    "'agentlog export --partial'."
)
_LIMIT_REMEDY: Final = (
    "The file was not modified; if it is trusted, open it with larger max_line_bytes, max_frame_bytes or "
    "max_depth limits."
)
_IDENTITY_REMEDY: Final = (
    "The file was not modified; move the session directory back to the place its header names, or restore it "
    "from a backup."
)


# --- small file-system helpers ---------------------------------------------------------------------


def _revision(st: os.stat_result) -> str:
    return f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"


def _stat_key(st: os.stat_result) -> tuple[int, int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _exists(path: str) -> bool:
    """ENOENT means absent (and a name too long to exist); any other failure (ENOTDIR, EACCES) is a real
    storage fault and propagates."""
    try:
        os.stat(path)
    except FileNotFoundError:
        return False
    except OSError as err:
        if err.errno == errno.ENAMETOOLONG:
            return False
        raise
    return True


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    done = 0
    while done < len(view):
        written = os.write(fd, view[done:])
        if written <= 0:
            raise OSError(5, "short write")
        done += written


def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as err:
        raise storage_error(err, path) from err


def _same_file(path: str, other: str) -> bool:
    """Whether two paths resolve to the same file (symlinked project directories, case aliases)."""
    try:
        return os.path.realpath(path, strict=True) == os.path.realpath(other, strict=True)
    except OSError:
        return False


def _lexists(path: str) -> bool:
    """Like :func:`_exists`, without following a final symbolic link (a dangling link exists)."""
    try:
        os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def _kind(mode: int) -> str:
    kind = file_kind(mode)
    return "not a regular file" if kind in ("regular file", "special file") else f"a {kind}"


_NOT_A_FILE_REMEDY: Final = (
    "a session log must be a regular file inside the store (not a directory, FIFO, device or symbolic link); "
    "move what is there out of the store. Nothing was read or written"
)


def _not_a_file(path: str, mode: int) -> StorageAccessError:
    return StorageAccessError(
        f'storage path "{path}" is {_kind(mode)}: {_NOT_A_FILE_REMEDY}', code="STORAGE_NOT_A_FILE", path=path
    )


def _not_a_directory(path: str, what: str, found: str) -> StorageAccessError:
    return StorageAccessError(
        f'{what} "{path}" is {found}, not a directory: agentlog reads and writes only real directories inside '
        "the store; move it away (or point the store elsewhere). Nothing was read or written",
        code="STORAGE_NOT_A_DIRECTORY",
        path=path,
    )


def _open_regular(path: str, flags: int) -> tuple[int, os.stat_result]:
    """Open ``path`` without following a symlink or blocking on a FIFO; refuse anything not a regular file."""
    fd = os.open(path, flags | _O_SAFE)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _not_a_file(path, st.st_mode)
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def _read_fd(fd: int, size: int) -> bytes:
    """The whole content of a regular file opened at offset 0 (``size`` from its fstat, a hint)."""
    parts: list[bytes] = []
    want = max(size, 0) + 1
    while True:
        chunk = os.read(fd, want)
        if not chunk:
            return b"".join(parts) if len(parts) != 1 else parts[0]
        parts.append(chunk)
        want = 1 << 20


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _typed_os_errors(method: Callable[_P, _R]) -> Callable[_P, _R]:
    """Public backend methods never leak bare ``OSError``/``MemoryError``: both become typed errors."""

    @functools.wraps(method)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return method(*args, **kwargs)
        except OSError as err:
            raise storage_error(err) from err
        except ResourceExhaustedError:
            raise
        except MemoryError as err:
            raise ResourceExhaustedError(
                "out of memory while reading the session store; nothing was truncated, repaired or written (this "
                "is not damage). Retry with more memory available, or set a smaller max_log_bytes budget so an "
                "oversized log is refused before memory runs out"
            ) from err

    return wrapper


# --- public types ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class TornMarker:
    """What :meth:`JsonlBackend.commit_repair` removes: the file is cut at ``truncate_to``, then the
    complete records recovered from a torn zstd frame are re-appended as a fresh checksummed frame."""

    truncate_to: int
    recovered_events: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class _Tail:
    """Where this backend instance last saw a log end: checked (one fstat) before every append."""

    dev: int
    ino: int
    size: int
    next_seq: int | None
    cut: tuple[int, int] | None = None  # (truncate_to, next seq there) of a torn tail seen at load


def detect_compression(root: str | os.PathLike[str]) -> Literal["zstd", "none"] | None:
    """The encoding of the logs in a store (from the first session file found), ``None`` if it holds none.

    Read-only: lists directories, opens nothing. A store mixing both encodings is reported by the
    backend itself (whichever encoding is detected, the other one's files are refused).
    """
    base = os.path.abspath(os.fspath(root))
    try:
        with os.scandir(base) as entries:
            projects = sorted(e.name for e in entries if e.name != LOCKS_DIR and e.is_dir(follow_symlinks=False))
    except (FileNotFoundError, NotADirectoryError):
        return None
    for project in projects:
        try:
            with os.scandir(os.path.join(base, project)) as entries:
                sessions = sorted(e.name for e in entries if e.is_dir(follow_symlinks=False))
        except OSError:
            continue
        for session in sessions:
            session_dir = os.path.join(base, project, session)
            if _lexists(os.path.join(session_dir, "session" + _SUFFIXES["zstd"])):
                return "zstd"
            if _lexists(os.path.join(session_dir, "session" + _SUFFIXES["none"])):
                return "none"
    return None


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


# --- seek reads ------------------------------------------------------------------------------------

_SEEK_BLOCK: Final = 64 * 1024
"""First backward read of a seek (doubling after): a few steps of a typical session's tail."""
_RECORD_HEAD: Final = re.compile(rb'\{"type":"[^"\\]*","seq0?":(0|[1-9][0-9]{0,15})[,}]')
"""How a record this writer wrote opens (events ``{"type":..,"seq":..``, packed rows ``"seq0"``)."""
_WHOLE: Final = object()
"""Internal answer of a seek: read the whole log instead."""


class _FileChanged(Exception):
    """Internal: the file changed while a seek read it (a short read); the read starts over."""


class _TailWindow:
    """The bytes of an open file from some offset to its end, grown backwards (doubling) on demand.

    A seek read only ever looks at the header and at a suffix of the file, so it reads those with
    ``pread`` instead of the whole file; the window is contiguous, so searches may span block edges.
    """

    __slots__ = ("_block", "_data", "_fd", "_start", "size")

    def __init__(self, fd: int, size: int) -> None:
        self._fd = fd
        self.size = size
        self._start = size
        self._data = b""
        self._block = _SEEK_BLOCK

    def _pread(self, offset: int, length: int) -> bytes:
        parts: list[bytes] = []
        while length > 0:
            chunk = os.pread(self._fd, length, offset)
            if not chunk:
                raise _FileChanged  # it shrank under the read: read it again
            parts.append(chunk)
            offset += len(chunk)
            length -= len(chunk)
        return b"".join(parts)

    def head(self, length: int) -> bytes:
        return self._pread(0, min(length, self.size))

    def _reach(self, offset: int) -> None:
        """Make the window start at or before ``offset``."""
        if offset >= self._start:
            return
        start = max(0, min(offset, self._start - self._block))
        self._block = max(self._block, self.size - start)
        self._data = self._pread(start, self._start - start) + self._data
        self._start = start

    def rfind(self, needle: bytes, lo: int, hi: int) -> int:
        """The last offset in ``[lo, hi)`` where ``needle`` starts and ends before ``hi``, else -1."""
        while True:
            found = self._data.rfind(needle, max(lo, self._start) - self._start, max(hi - self._start, 0))
            if found >= 0:
                return self._start + found
            if self._start <= lo:
                return -1
            self._reach(self._start - 1)

    def slice(self, start: int, end: int) -> bytes:
        self._reach(start)
        return self._data[start - self._start : end - self._start]

    def frame_ends_at(self, start: int, end: int) -> bool:
        self._reach(start)
        return frame_ends_at(self._data, start - self._start, end - self._start)


# --- the backend -----------------------------------------------------------------------------------


class JsonlBackend:
    """File-per-session backend (spec §4). Thread-safe; every method may block on I/O.

    ``max_frame_bytes`` caps one frame's decompressed size, ``max_line_bytes`` one line, ``max_depth``
    one line's nesting (as in :func:`agentlog.jsoncodec.loads`, which always accepts what orjson parses
    natively, i.e. up to 1024 levels), ``max_header_bytes`` the header line. A stored file beyond a limit
    is refused with a typed :class:`~agentlog.errors.SessionPersistenceCorruptionError` instead of
    exhausting memory; the limits protect readers only, writers never check them.

    ``max_log_bytes`` is the load budget: a log whose file (or, for zstd, decoded text) is larger is
    refused with :class:`~agentlog.errors.ResourceExhaustedError` before it is read. Loading needs
    roughly 5-10 times the log's size in memory; running out of memory anyway is the same typed error,
    and nothing is ever truncated or repaired because of it.

    ``compression="auto"`` uses the encoding of the logs already in the store (zstd for an empty store).
    ``read_only=True`` never creates a directory or a file (and refuses writes and writer locks with
    ``STORAGE_READ_ONLY``); a missing root is then :class:`~agentlog.errors.StoreNotFoundError`.

    Operating-system refusals are :class:`~agentlog.errors.StorageAccessError` (code names the cause,
    message the path and the remedy). Logs are opened only as regular files inside the store: never
    through a symbolic link (a symlinked session directory is refused), never blocking on a FIFO.
    Before every append the file's identity, size and next seq must be the ones this instance last
    wrote or read (:class:`~agentlog.errors.SessionTailChangedError` otherwise: another writer).
    """

    name = "session-persistence-jsonl"
    supports_raw_artifacts = True

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        compression: Literal["zstd", "none", "auto"] = "zstd",
        pack_chunks: bool = True,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        max_depth: int = DEFAULT_MAX_DEPTH,
        max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES,
        max_log_bytes: int = DEFAULT_MAX_LOG_BYTES,
        read_only: bool = False,
    ) -> None:
        if compression not in _SUFFIXES and compression != "auto":
            raise ValueError(f'compression must be "zstd", "none" or "auto", got {compression!r}')
        check_reader_limits(
            max_frame_bytes=max_frame_bytes,
            max_line_bytes=max_line_bytes,
            max_depth=max_depth,
            max_header_bytes=max_header_bytes,
            max_log_bytes=max_log_bytes,
        )
        # Resolved once, so a later chdir cannot move the store (and locate() stays pure).
        self.root = os.path.abspath(os.fspath(root))
        self.read_only = read_only
        self.max_header_bytes = max_header_bytes
        self.max_log_bytes = max_log_bytes
        self._tails: dict[str, _Tail] = {}
        self._check_root()
        if compression == "auto":
            compression = detect_compression(self.root) or "zstd"
        self.compression: Literal["zstd", "none"] = compression
        self.pack_chunks = pack_chunks
        self.max_frame_bytes = max_frame_bytes
        self.max_line_bytes = max_line_bytes
        self.max_depth = max_depth
        self._zstd = compression == "zstd"
        self._suffix = _SUFFIXES[compression]
        self._opposite = _SUFFIXES["none" if self._zstd else "zstd"]
        # Directory name -> session id (or None): a pure function of the name, memoized because the
        # revision listing decodes every session's name on every search.
        self._directory_ids: dict[str, str | None] = {}
        self._mutex = threading.Lock()
        self._preflight_error: str | None = None
        self._preflight_done = False

    def _check_root(self) -> None:
        """A root that exists but cannot be listed (a regular file, EACCES) is a configuration error
        worth reporting at construction; a missing root is created by the first materialization (or,
        read-only, is :class:`StoreNotFoundError`)."""
        try:
            with os.scandir(self.root):
                pass
        except FileNotFoundError:
            if self.read_only:
                raise StoreNotFoundError(
                    f'session store "{self.root}" does not exist (nothing was created); check the --store path'
                ) from None
        except NotADirectoryError:
            raise _not_a_directory(self.root, "session store root", "a file") from None
        except OSError as err:
            raise storage_error(err, self.root) from err

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

    # --- errors --------------------------------------------------------------------------------

    def _corrupt(self, text: str, path: str, offset: int, *, limit: bool = False) -> SessionPersistenceCorruptionError:
        remedy = _LIMIT_REMEDY if limit else _REMEDY
        return SessionPersistenceCorruptionError(
            f"{text} — {path}, byte {offset}. {remedy}", location=path, offset=offset
        )

    def _located(
        self, err: SessionPersistenceCorruptionError, path: str, offset: int | None = None
    ) -> SessionPersistenceCorruptionError:
        """Re-issue a bare scanner/frame error with the file, physical offset and a remedy."""
        at = err.offset if offset is None else offset
        limit = isinstance(err, (ReaderLimitError, FrameTooLargeError))
        return self._corrupt(err.message, path, at or 0, limit=limit)

    def _mismatch(self, path: str) -> PersistenceError:
        return PersistenceError(
            f"session artifact {dumps(path).decode()} uses {self._opposite}, but this backend is configured for "
            f"compression {dumps(self.compression).decode()}; use a separate root or select the matching "
            "compression mode"
        )

    @staticmethod
    def _legacy(path: str) -> PersistenceError:
        return PersistenceError(
            f"session artifact {dumps(path).decode()} uses the unsupported flat-file layout; use a separate root "
            "or move it into a project/session directory before loading"
        )

    @staticmethod
    def _duplicate(session_id: str) -> PersistenceError:
        return PersistenceError(f'duplicate JSONL session id "{session_id}" appears in multiple project directories')

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

    # --- reading -------------------------------------------------------------------------------

    def _stable(self, path: str, read: Callable[[int, os.stat_result], _R]) -> tuple[_R, os.stat_result] | None:
        """``read(fd, opened)`` of the file bracketed by two stats, retried until they agree (spec §4.7 step 3).

        The revision taken from the returned stat then names exactly the bytes ``read`` saw, which is what
        lets the coordinator compare it later to decide whether a cached view is still current. ``None``:
        no file. ``read`` may raise ``_FileChanged`` to start over.
        """
        while True:
            try:
                before = os.stat(path, follow_symlinks=False)
            except FileNotFoundError:
                return None
            if not stat.S_ISREG(before.st_mode):
                raise _not_a_file(path, before.st_mode)
            self._check_budget(path, before.st_size)
            try:
                fd, opened = _open_regular(path, os.O_RDONLY)
            except FileNotFoundError:
                continue
            try:
                result = read(fd, opened)
            except _FileChanged:
                continue
            finally:
                os.close(fd)
            after = os.stat(path, follow_symlinks=False)
            if _stat_key(before) == _stat_key(after) == _stat_key(opened):
                return result, before

    def _read_stable(self, path: str) -> tuple[bytes, str] | None:
        """The whole file, with the revision naming exactly these bytes."""

        def read(fd: int, opened: os.stat_result) -> bytes:
            data = _read_fd(fd, opened.st_size)
            self._check_budget(path, len(data))
            return data

        found = self._stable(path, read)
        return None if found is None else (found[0], _revision(found[1]))

    def _check_budget(self, path: str, size: int, decoded: bool = False) -> None:
        if size > self.max_log_bytes:
            what = "decodes to" if decoded else "is"
            raise ResourceExhaustedError(
                f'session log "{path}" {what} {size} bytes, more than the {self.max_log_bytes}-byte load budget '
                "(max_log_bytes); nothing was read or modified. Open the store with a larger max_log_bytes if "
                "this machine has the memory (a load needs several times the log's size)"
            )

    def _scan_frames(
        self, data: bytes | bytearray, path: str, max_frames: int | None = None, *, stop_at_damage: bool = False
    ) -> FrameScan:
        try:
            return scan_zstd_frames(data, max_frames, stop_at_damage=stop_at_damage)
        except SessionPersistenceCorruptionError as err:
            raise self._located(err, path) from err

    def _limits(self) -> dict[str, int]:
        return {
            "max_line_bytes": self.max_line_bytes,
            "max_depth": self.max_depth,
            "max_header_bytes": self.max_header_bytes,
        }

    def _decode_raw(
        self, data: bytes, path: str, compact: bool = False
    ) -> tuple[dict[str, Any], list[Any], TornMarker | None, int]:
        """``(meta, events, torn marker, event count)``; ``compact`` keeps packed rows as ChunkRun items."""
        try:
            result = (scan_log_compact if compact else scan_log)(data, **self._limits())
        except SessionPersistenceCorruptionError as err:
            raise self._located(err, path) from err
        marker = TornMarker(result.committed_bytes) if result.committed_bytes < len(data) else None
        return result.meta, result.events, marker, result.count

    def _header_scanner(self, view: memoryview, frame: tuple[int, int], path: str) -> SessionLogScanner:
        start, end = frame
        try:
            text = decompress_frame(view[start:end], start, min(self.max_frame_bytes, self.max_header_bytes + 1))
        except FrameTooLargeError:
            raise self._located(header_too_long(self.max_header_bytes + 1, self.max_header_bytes), path) from None
        except SessionPersistenceCorruptionError as err:
            raise self._located(err, path) from err
        if not text.endswith(b"\n") or text.count(b"\n") != 1:
            raise self._corrupt(
                "corrupt Zstandard session log: first frame is not exactly one header line", path, start
            )
        try:
            return SessionLogScanner(text, **self._limits())
        except SessionPersistenceCorruptionError as err:
            raise self._located(err, path, start) from err

    def _decode_zstd(
        self,
        data: bytes,
        path: str,
        damages: list[SessionPersistenceCorruptionError] | None = None,
        compact: bool = False,
    ) -> tuple[dict[str, Any], list[Any], TornMarker | None, int]:
        """``readZstdPrefix`` (spec §4.7.2): complete frames must be flawless; only the last may be torn.

        With ``damages`` (a partial read), damage after the header ends the read instead of failing it:
        the events decoded so far are returned and the (located) damage is appended to ``damages``.
        Returns ``(meta, events, torn marker, event count)``; ``compact`` keeps packed rows as ChunkRun
        items (the count is then larger than the list).
        """
        scan = self._scan_frames(data, path, stop_at_damage=damages is not None)
        if not scan.frames:
            if scan.damage is not None:
                raise self._located(scan.damage, path)
            raise self._corrupt("empty or header-less Zstandard session log", path, 0)
        view = memoryview(data)
        scanner = self._header_scanner(view, scan.frames[0], path)
        if compact:
            scanner.keep_runs_packed()
        # Logical (decoded-text) start of each event frame, to report damage at its physical frame.
        logical_starts: list[int] = []
        physical_starts: list[int] = []

        def physical(logical: int | None) -> int:
            index = bisect.bisect_right(logical_starts, logical or 0) - 1
            return physical_starts[index] if index >= 0 else 0

        try:
            decoded = 0
            for start, end in scan.frames[1:]:
                try:
                    text = decompress_frame(view[start:end], start, self.max_frame_bytes)
                except SessionPersistenceCorruptionError as err:
                    raise self._located(err, path) from err
                decoded += len(text)
                self._check_budget(path, decoded, decoded=True)
                logical_starts.append(scanner.checkpoint().input_bytes)
                physical_starts.append(start)
                try:
                    scanner.write(text)
                except SessionPersistenceCorruptionError as err:
                    raise self._located(err, path, physical(err.offset)) from err
            if scan.damage is not None:
                raise self._located(scan.damage, path)
            checkpoint = scanner.checkpoint()
            if checkpoint.committed_bytes != checkpoint.input_bytes:
                raise self._corrupt(
                    "corrupt Zstandard session log: complete frame contains a torn JSONL record",
                    path,
                    physical(checkpoint.committed_bytes),
                )
            if scan.torn_start is None:
                result = scanner.finish()
                return result.meta, result.events, None, result.count
            torn = scan.torn_start
            later = self._frame_after(view, torn)
            if later is not None:
                raise self._corrupt(
                    f"corrupt Zstandard session log: frame at byte {torn} is incomplete, yet a complete frame "
                    f"follows at byte {later}",
                    path,
                    torn,
                )
            try:
                text = decompress_torn_frame(view[torn:], torn, self.max_frame_bytes)
                scanner.write(text)
            except SessionPersistenceCorruptionError as err:
                raise self._located(err, path, torn) from err
        except SessionPersistenceCorruptionError as err:
            if damages is None:
                raise
            damages.append(err)
            result = scanner.finish()
            return result.meta, result.events, None, result.count
        result = scanner.finish()
        # Detached copies: the coordinator may normalise the returned events in place, and the marker's
        # events are re-written verbatim by the repair (a compact read's runs expanded for it).
        recovered = [loads(dumps(event)) for event in expand_items(result.events[checkpoint.event_count :])]
        return result.meta, result.events, TornMarker(torn, recovered), result.count

    def _frame_after(self, view: memoryview, torn: int) -> int | None:
        """Where a complete, valid frame starts inside a supposedly torn final region, if anywhere.

        A crash can only tear the *last* write, so its region is a prefix of one frame. If a complete
        frame that decodes with a valid checksum follows, the "torn" frame is really a damaged earlier
        frame (e.g. a flipped block-size bit made it look longer) and truncating it would destroy
        committed batches. Raw blocks cannot hide the magic (0xFD never occurs in UTF-8), so a false
        positive needs a checksummed frame to appear by chance inside compressed bytes.
        """
        data = view.obj if isinstance(view.obj, bytes) else bytes(view)
        position = data.find(ZSTD_MAGIC_BYTES, torn + 1)
        while position >= 0:
            try:
                scan = scan_zstd_frames(view[position:], 1)
                if scan.frames:
                    end = position + scan.frames[0][1]
                    decompress_frame(view[position:end], position, self.max_frame_bytes)
                    return position
            except SessionPersistenceCorruptionError:
                pass
            position = data.find(ZSTD_MAGIC_BYTES, position + 1)
        return None

    def _read_log(self, session_id: str) -> tuple[str, bytes, str] | None:
        """``(path, bytes, revision)`` of the session's transcript read at one stable revision, or None."""
        self._preflight()
        path = self._find_log(session_id)
        if path is None:
            return None
        read = self._read_stable(path)
        if read is None:
            return None
        return path, read[0], read[1]

    @_typed_os_errors
    def load_stored(self, session_id: str) -> StoredPrefix | None:
        """The valid stored prefix (spec §4.7). Never writes; damage raises, a torn tail is reported."""
        found = self._read_log(session_id)
        if found is None:
            return None
        path, data, revision = found
        # The coordinator's cold load asks for packed runs to stay packed (kernel.chunkrows.ChunkRun
        # items, each validated like its expansion); every other caller gets one event per item.
        compact = compact_runs_requested()
        try:
            with gc_paused():
                if self._zstd:
                    meta, events, marker, count = self._decode_zstd(data, path, compact=compact)
                else:
                    meta, events, marker, count = self._decode_raw(data, path, compact)
        except SessionFormatUnsupportedError as err:
            raise SessionFormatUnsupportedError(f"{err.message} (raw log: {path})", location=path) from None
        self._check_identity(path, meta, session_id)
        self._remember_tail(path, revision, count, marker)
        return StoredPrefix(meta=meta, events=events, revision=revision, torn_marker=marker)

    @_typed_os_errors
    def load_stored_from(self, session_id: str, from_seq: int) -> StoredPrefix | None:
        """Seek read: the stored events with ``seq >= from_seq``, reading the file backwards from its end.

        Only the header and the records from the last one that starts below ``from_seq`` are read and
        parsed (raw: lines found block by block from the end; zstd: the trailing frames, located by
        their magic numbers and accepted only when their structure ends exactly where the next frame
        starts and their checksum holds), so a tail read of a long log costs the tail. A torn tail is
        left out as :meth:`load_stored` leaves it out. Whenever the span holds anything unusual (a
        defect, a torn zstd frame, no record below ``from_seq``) the whole log is read and sliced, so
        damage inside the span raises exactly what :meth:`load_stored` raises. Records before the span
        are not read: damage there is not seen (as SQLite's seek read does not see it). Never writes.
        """
        if type(from_seq) is not int or from_seq < 0:
            raise PersistenceError(f"fromSeq must be a non-negative safe integer, got {from_seq!r}")
        self._preflight()
        path = self._find_log(session_id)
        found = None if path is None else self._seek_stable(path, from_seq)
        if found is None:
            return None
        if found is _WHOLE:
            stored = self.load_stored(session_id)
            if stored is not None:
                stored = StoredPrefix(meta=stored.meta, events=stored.events[from_seq:], revision=stored.revision)
            return stored
        assert path is not None and isinstance(found, StoredPrefix)
        self._check_identity(path, found.meta, session_id)
        return found

    def _seek_stable(self, path: str, from_seq: int) -> StoredPrefix | object | None:
        """The seek read, bracketed by two stats like :meth:`_read_stable`: a prefix, ``_WHOLE``, or None."""
        seek = self._seek_zstd if self._zstd else self._seek_raw

        def read(fd: int, opened: os.stat_result) -> Any:
            with gc_paused():
                try:
                    return seek(_TailWindow(fd, opened.st_size), from_seq, path)
                except (SessionPersistenceCorruptionError, SessionFormatUnsupportedError, ChunkRowError):
                    return None  # the whole read reports it exactly

        stable = self._stable(path, read)
        if stable is None:
            return None
        found, before = stable
        if found is None:
            return _WHOLE
        meta, events = found
        return StoredPrefix(meta=meta, events=events, revision=_revision(before))

    def _record_seq(self, line: bytes, from_seq: int) -> int | None:
        """The first seq a complete record holds, when that is enough to place it; ``None`` if unknown.

        A record this writer wrote opens with its type and seq, so most records of the span are placed
        by a match on their first bytes; only a candidate anchor (a seq below ``from_seq``) is parsed.
        """
        match = _RECORD_HEAD.match(line)
        if match is not None and int(match.group(1)) >= from_seq:
            return int(match.group(1))
        if len(line) > self.max_line_bytes:
            return None  # never parsed: the forward scan (or the whole read) refuses it
        try:
            value = loads(line, max_depth=self.max_depth)
        except (ValueError, RecursionError):
            return None
        if type(value) is not dict:
            return None
        tag = value.get("type")
        if tag.__class__ is str and tag in CHUNK_ROW_TAGS:  # (an unhashable type is no tag either)
            try:
                value = decode_storage_record(value)[0]
            except ChunkRowError:
                return None
        seq = value.get("seq")
        return seq if type(seq) is int else None

    def _last_line_below(self, text: bytes, from_seq: int, first_seq: int) -> tuple[int, int]:
        """Offset and seq of the last complete line of a frame's text that starts below ``from_seq``.

        The frame's first line does (``first_seq``), so a large batch frame is parsed only from the
        last record the suffix needs, not from its start.
        """
        end = text.rfind(b"\n")
        while end > 0:
            previous = text.rfind(b"\n", 0, end)
            if previous < 0:
                break  # the first line, known to start below from_seq
            seq = self._record_seq(text[previous + 1 : end], from_seq)
            if seq is not None and seq < from_seq:
                return previous + 1, seq
            end = previous
        return 0, first_seq

    def _seek_raw(self, tail: _TailWindow, from_seq: int, path: str) -> tuple[dict[str, Any], list[Any]] | None:
        head = tail.head(_SEEK_BLOCK)
        newline = head.find(b"\n")
        if newline < 0 or from_seq == 0:
            return None
        scanner = SessionLogScanner(head[: newline + 1], **self._limits())
        body = newline + 1
        # ``end``: where the next complete line (searching backwards) ends — at the last newline.
        end = tail.rfind(b"\n", body, tail.size)
        while end >= body:
            previous = tail.rfind(b"\n", body, end)
            start = body if previous < 0 else previous + 1
            seq = self._record_seq(tail.slice(start, end), from_seq)
            if seq is not None and seq < from_seq:
                scanner.resume_at(seq)
                scanner.write(tail.slice(start, tail.size))
                result = scanner.finish()
                return result.meta, result.events[from_seq - seq :]
            end = start - 1
        return None

    def _seek_zstd(self, tail: _TailWindow, from_seq: int, path: str) -> tuple[dict[str, Any], list[Any]] | None:
        head = tail.head(_SEEK_BLOCK)
        header = scan_zstd_frames(head, 1)
        if not header.frames or from_seq == 0:
            return None
        scanner = self._header_scanner(memoryview(head), header.frames[0], path)
        body = header.frames[0][1]
        texts: list[bytes] = []
        end = tail.size  # the start of the earliest frame found so far
        while end > body:
            candidate = end
            while True:
                candidate = tail.rfind(ZSTD_MAGIC_BYTES, body, candidate)
                if candidate < 0:
                    return None  # a torn or damaged final frame: the whole read decides
                if tail.frame_ends_at(candidate, end):
                    break
            text = decompress_frame(tail.slice(candidate, end), candidate, self.max_frame_bytes)
            texts.append(text)
            end = candidate
            newline = text.find(b"\n")
            seq = self._record_seq(text[:newline] if newline >= 0 else text, from_seq)
            if seq is not None and seq < from_seq:
                start, seq = self._last_line_below(text, from_seq, seq)
                scanner.resume_at(seq)
                texts[-1] = text[start:]
                for chunk in reversed(texts):
                    scanner.write(chunk)
                checkpoint = scanner.checkpoint()
                if checkpoint.committed_bytes != checkpoint.input_bytes:
                    return None  # a complete frame ends inside a record: corruption, reported by the whole read
                result = scanner.finish()
                return result.meta, result.events[from_seq - seq :]
        return None

    @_typed_os_errors
    def read_prefix(self, session_id: str) -> PartialRead | None:
        """The valid stored prefix up to the first damage, and where that damage is (``None`` if absent).

        For salvage (``agentlog export --partial``): unlike :meth:`load_stored`, damage after the header
        does not raise; ``damage`` is the typed error a load would raise (``offset`` = byte offset in the
        file, for zstd of the damaged frame). A torn tail is left out of ``events`` and reported as
        ``torn_offset``. A damaged header, a foreign or a future-format log still raise. Never writes.
        """
        found = self._read_log(session_id)
        if found is None:
            return None
        path, data, revision = found
        damages: list[SessionPersistenceCorruptionError] = []
        try:
            with gc_paused():
                if self._zstd:
                    meta, events, marker, _ = self._decode_zstd(data, path, damages)
                    torn = None if marker is None else marker.truncate_to
                else:
                    try:
                        result, damage = scan_log_prefix(data, **self._limits())
                    except SessionPersistenceCorruptionError as err:
                        raise self._located(err, path) from err
                    if damage is not None:
                        damages.append(self._located(damage, path))
                    meta, events = result.meta, result.events
                    torn = result.committed_bytes if damage is None and result.committed_bytes < len(data) else None
        except SessionFormatUnsupportedError as err:
            raise SessionFormatUnsupportedError(f"{err.message} (raw log: {path})", location=path) from None
        self._check_identity(path, meta, session_id)
        return PartialRead(
            meta=meta, events=events, revision=revision, damage=damages[0] if damages else None, torn_offset=torn
        )

    @_typed_os_errors
    def read_revision(self, session_id: str) -> str | None:
        self._preflight()
        path = self._find_log(session_id)
        if path is None:
            return None
        try:
            return _revision(os.stat(path, follow_symlinks=False))
        except FileNotFoundError:
            return None

    @_typed_os_errors
    def read_raw(self, session_id: str) -> RawArtifact | None:
        """The decoded logical text, exactly as stored (packed rows, key order); a torn frame is omitted."""
        found = self._read_log(session_id)
        if found is None:
            return None
        path, data, _ = found
        if self._zstd:
            scan = self._scan_frames(data, path)
            if not scan.frames:
                raise self._corrupt("empty or header-less Zstandard session log", path, 0)
            view = memoryview(data)
            try:
                text = b"".join(decompress_frame(view[s:e], s, self.max_frame_bytes) for s, e in scan.frames)
            except SessionPersistenceCorruptionError as err:
                raise self._located(err, path) from err
        else:
            text = data
        newline = text.find(b"\n")
        first = text if newline < 0 else text[:newline]
        try:
            meta = parse_header_line(first, max_depth=self.max_depth)
        except SessionFormatUnsupportedError as err:
            raise SessionFormatUnsupportedError(f"{err.message} (raw log: {path})", location=path) from None
        except SessionPersistenceCorruptionError:
            meta = None
        if meta is None or meta["id"] != session_id:
            raise self._corrupt(f'corrupt session log: invalid header line in "{path}"', path, 0)
        try:
            content = text.decode("utf-8")
        except UnicodeDecodeError as err:
            where = "decoded " if self._zstd else ""
            raise self._corrupt(
                f"corrupt session log: bytes that are not UTF-8 at {where}byte {err.start}", path, err.start
            ) from None
        return RawArtifact(meta=meta, filename=LOGICAL_FILENAME, content=content)

    # --- listing -------------------------------------------------------------------------------

    def _read_header_line(self, fd: int, path: str) -> bytes:
        """The first line only (no full-log parse), in linear time and bounded by ``max_header_bytes``.

        Reads grow geometrically from 8 KiB and each read is searched once (raw) or the frame walk is
        repeated only per doubling (zstd), so a long header costs O(its size), never quadratic time.
        """
        cap = self.max_header_bytes
        # A zstd header frame may be slightly larger than its text (incompressible data, framing).
        limit = cap + 1 if not self._zstd else cap + cap // 64 + 1024
        buffer = bytearray()
        want = _HEADER_READ_CHUNK
        scanned = 0
        while True:
            chunk = os.read(fd, min(want, limit + 1 - len(buffer)))
            buffer += chunk
            want *= 2
            if self._zstd:
                scan = self._scan_frames(buffer, path, 1)
                if scan.frames:
                    start, end = scan.frames[0]
                    try:
                        text = decompress_frame(bytes(buffer[start:end]), start, min(self.max_frame_bytes, cap + 1))
                    except FrameTooLargeError:
                        raise self._located(header_too_long(cap + 1, cap), path) from None
                    except SessionPersistenceCorruptionError as err:
                        raise SessionPersistenceCorruptionError(
                            f"corrupt Zstandard session log: header frame failed validation — {path}, byte 0. "
                            f"{_REMEDY}",
                            location=path,
                            offset=0,
                        ) from err.__cause__
                    if not text.endswith(b"\n") or text.count(b"\n") != 1:
                        raise self._corrupt(
                            "corrupt Zstandard session log: first frame is not exactly one header line", path, 0
                        )
                    if len(text) - 1 > cap:
                        raise self._located(header_too_long(len(text) - 1, cap), path)
                    return text[:-1]
                if not chunk:
                    raise self._corrupt("empty or header-less Zstandard session log", path, 0)
            else:
                newline = buffer.find(b"\n", scanned)
                if newline >= 0:
                    if newline > cap:
                        raise self._located(header_too_long(newline, cap), path)
                    return bytes(buffer[:newline])
                scanned = len(buffer)
                if not chunk:
                    raise self._corrupt("empty or header-less session log", path, 0)
            if len(buffer) > limit - (1 if not self._zstd else 0):
                raise self._located(header_too_long(len(buffer), cap), path)

    def _list_one(self, path: str, dir_name: str) -> SessionListing | None:
        try:
            fd, st = _open_regular(path, os.O_RDONLY)
        except FileNotFoundError:
            return None  # no transcript (yet): a session directory holds nothing else we list
        except (OSError, StorageAccessError) as err:
            typed = err if isinstance(err, StorageAccessError) else storage_error(err, path)
            return SessionListing(
                id=decode_segment(dir_name),
                header=None,
                location=path,
                error_code=typed.code,
                error_message=typed.message,
            )
        line = b""
        meta: dict[str, Any] | None = None
        try:
            revision = _revision(st)
            try:
                line = self._read_header_line(fd, path)
                meta = parse_header_line(line, max_depth=self.max_depth)
                self._check_identity(path, meta, None)
            except SessionFormatUnsupportedError as err:
                raw = _loads_or_none(line, self.max_depth)
                header = raw if isinstance(raw, dict) else None
                raw_id = header.get("id") if header is not None else None
                return SessionListing(
                    id=raw_id if isinstance(raw_id, str) else decode_segment(dir_name),
                    header=header,
                    revision=revision,
                    location=path,
                    error_code=err.code,
                    error_message=f"{err.message} (raw log: {path})",
                )
            except SessionPersistenceCorruptionError as err:
                located = err if err.location is not None else self._located(err, path)
                return SessionListing(
                    id=meta["id"] if meta is not None else decode_segment(dir_name),
                    header=meta,
                    revision=revision,
                    location=path,
                    error_code=located.code,
                    error_message=located.message,
                )
            return SessionListing(id=meta["id"], header=meta, revision=revision, location=path)
        finally:
            os.close(fd)

    @_typed_os_errors
    def list_sessions(self) -> list[SessionListing]:
        """Every stored session from its header alone, sorted by id; never writes.

        A session whose header is damaged or foreign is reported with an ``error_code`` rather than
        hidden or allowed to fail the whole listing. Root-level misconfiguration (opposite encoding,
        flat legacy files, one id in two project directories) still raises: it is not one session's
        problem, and guessing would hide data.
        """
        listings: list[SessionListing] = []
        # Plain string joins: the root is absolute and every name is a single path component, and this
        # loop touches every stored session (os.path.join's generality shows up in the listing time).
        opposite_name = "/session" + self._opposite
        own_name = "/session" + self._suffix
        for project in self._project_dirs():
            project_path = f"{self.root}/{project}"
            links: list[str] = []
            names = self._session_dirs(project_path, links)
            for name in links:
                refusal = _not_a_directory(f"{project_path}/{name}", "session directory", "a symbolic link")
                listings.append(
                    SessionListing(
                        id=decode_segment(name),
                        header=None,
                        location=refusal.path,
                        error_code=refusal.code,
                        error_message=refusal.message,
                    )
                )
            for name in names:
                session_dir = f"{project_path}/{name}"
                opposite = session_dir + opposite_name
                if _exists(opposite):
                    raise self._mismatch(opposite)
                listing = self._list_one(session_dir + own_name, name)
                if listing is not None:
                    listings.append(listing)
        seen: set[str] = set()
        for listing in listings:
            if listing.header is not None:
                if listing.id in seen:
                    raise self._duplicate(listing.id)
                seen.add(listing.id)
        listings.sort(key=lambda item: (item.id, item.location or ""))
        return listings

    def _directory_id(self, name: str) -> str | None:
        """The session id whose directory is ``name``, or ``None`` when no id maps to it.

        Only a canonical name counts: ``load(id)`` reaches the directory ``encode_segment(id)`` and no
        other, so a hand-made name that merely decodes to an id (``a~0041`` for ``aA``) or an id this
        store refuses (a lone surrogate, too long) names nothing a reader could open by id.
        """
        if encodes_verbatim(name):
            return name if len(name) <= MAX_ENCODED_ID_BYTES else None
        session_id = decode_segment(name)
        try:
            self.validate_session_id(session_id)
        except InvalidSessionIdError:
            return None
        return session_id if encode_segment(session_id) == name else None

    @_typed_os_errors
    def list_revisions(self) -> dict[str, str]:
        """Every stored session's revision, by id, from a directory scan and a stat per log; never reads a byte.

        The search index reconciles against this on every search, where :meth:`list_sessions` (it opens
        and parses every header) costs too much. The revision is the one :meth:`read_revision` and
        :meth:`list_sessions` report (the same ``_revision`` of the same file's stat), and a session whose
        header is damaged is included: telling it apart needs the header, and the reader it is handed to
        reports the damage. Left out, as listing reports them without a revision and no load can open
        them: symbolic links in place of a session directory or a log, and logs that are not regular
        files. Directory names that no id encodes to are left out too (see :meth:`_directory_id`).

        The root-level refusals of :meth:`list_sessions` cost a stat at most, so they stay: a flat legacy
        file or an opposite-encoding log raises, and so does one id in two project directories — here
        whatever its header holds (listing raises only when both headers parse, but ``read_revision``
        and ``load`` of that id refuse it either way).
        """
        found: list[tuple[str, str]] = []
        seen: set[str] = set()
        opposite_name = "/session" + self._opposite
        own_name = "/session" + self._suffix
        lstat = os.lstat
        access = os.access
        is_regular = stat.S_ISREG
        ids = self._directory_ids
        for project in self._project_dirs():
            project_path = f"{self.root}/{project}"
            for name in self._session_dirs(project_path):
                session_dir = f"{project_path}/{name}"
                # access() answers "absent" without raising (this runs per session on every search); a
                # present opposite log is then confirmed with the listing's own check.
                if access(session_dir + opposite_name, os.F_OK, follow_symlinks=False) and _exists(
                    session_dir + opposite_name
                ):
                    raise self._mismatch(session_dir + opposite_name)
                try:
                    st = lstat(session_dir + own_name)
                except FileNotFoundError:
                    continue  # no transcript (yet)
                if name in ids:
                    session_id = ids[name]
                else:
                    session_id = ids[name] = self._directory_id(name)
                if session_id is None or not is_regular(st.st_mode):
                    continue
                if session_id in seen:
                    raise self._duplicate(session_id)
                seen.add(session_id)
                found.append((session_id, _revision(st)))
        found.sort()
        return dict(found)

    # --- writing -------------------------------------------------------------------------------

    def _batch_text(self, events: Sequence[WireEvent]) -> bytes:
        """One batch's logical text, newline-terminated: one bytes object built by a single join.

        Verbatim events reuse their cached JSON bytes; only packed rows are serialized here. Packing
        returns verbatim events as the very same objects, in order, so identity tells them apart.
        """
        if self.pack_chunks:
            records = pack_chunk_runs(events)
            if len(records) == len(events):
                lines = [event_json(event) for event in events]
            else:
                lines = []
                index = 0
                count = len(events)
                for record in records:
                    if index < count and record is events[index]:
                        lines.append(event_json(record))
                        index += 1
                    else:
                        lines.append(dumps(record))
                        data: Any = record["data"]
                        index += len(data["texts"] if "texts" in data else data["args"])
        else:
            lines = [event_json(event) for event in events]
        lines.append(b"")
        return b"\n".join(lines)

    @_typed_os_errors
    def append_batch(self, meta: Mapping[str, Any], events: Sequence[WireEvent], materialized: bool) -> None:
        """Durably append one batch; the first one publishes header and batch atomically (spec §4.5–4.6)."""
        if not events:
            return
        self._refuse_write("append")
        path = self._log_path(meta)
        self._preflight()
        body = self._batch_text(events)
        first = events[0]["seq"]
        if materialized:
            self._append_lines(path, body, meta["id"], first, len(events))
        else:
            self._materialize(meta, path, body, first + len(events))

    # --- the stored tail (one fstat per append) ---------------------------------------------------

    def _remember_tail(self, path: str, revision: str, next_seq: int, marker: TornMarker | None) -> None:
        dev, ino, size = (int(part) for part in revision.split(":")[:3])
        if marker is None:
            tail = _Tail(dev, ino, size, next_seq)
        else:
            tail = _Tail(dev, ino, size, None, (marker.truncate_to, next_seq - len(marker.recovered_events)))
        with self._mutex:
            self._tails[path] = tail

    def _expected_tail(self, path: str) -> _Tail:
        """The tail this instance last wrote or read; learned from the file on a first write."""
        with self._mutex:
            tail = self._tails.get(path)
        if tail is None:
            found = self._read_stable(path)
            if found is None:
                raise FileNotFoundError(errno.ENOENT, "no stored log", path)
            data, revision = found
            with gc_paused():
                _, _, marker, count = self._decode_zstd(data, path) if self._zstd else self._decode_raw(data, path)
            self._remember_tail(path, revision, count, marker)
            with self._mutex:
                tail = self._tails[path]
        return tail

    def _check_tail(self, path: str, st: os.stat_result, first_seq: int | None, tail: _Tail) -> None:
        if (st.st_dev, st.st_ino, st.st_size) != (tail.dev, tail.ino, tail.size):
            raise SessionTailChangedError(
                f'session log "{path}" changed since this writer last wrote or read it (expected {tail.size} bytes '
                f"in inode {tail.ino}, found {st.st_size} bytes in inode {st.st_ino}): another writer appended to "
                "it (was its lock file removed?). Nothing was written; close this writer and resume the session "
                "to continue from what is stored",
                location=path,
            )
        if tail.next_seq is None:
            raise SessionTailChangedError(
                f'session log "{path}" has an unrepaired torn tail; resume the session (which repairs it) before '
                "appending. Nothing was written",
                location=path,
            )
        if first_seq is not None and first_seq != tail.next_seq:
            raise PersistenceError(
                f'session log "{path}" append starts at seq {first_seq}, stored next seq is {tail.next_seq}; '
                "nothing was written"
            )

    # --- writing -------------------------------------------------------------------------------

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

    def _first_content(self, meta: Mapping[str, Any], body: bytes) -> bytes:
        """The header and the first batch, as the start of a new log file."""
        header = dumps(header_line(meta)) + b"\n"
        return compress_frame(header) + compress_frame(body) if self._zstd else header + body

    def _open_temp(self, meta: Mapping[str, Any], path: str, suffix: str = ".tmp") -> tuple[str, int]:
        """Create the directories of a new log and its temporary file (``<log>.<hex><suffix>``, which no
        reader lists); refuse when a log (of either encoding) already exists."""
        session_dir = os.path.dirname(path)
        opposite = os.path.join(session_dir, "session" + self._opposite)
        self._mkdir_durable(self.root, "session store root")
        self._mkdir_durable(os.path.dirname(session_dir), "project directory")
        self._mkdir_durable(session_dir, "session directory")
        if _lexists(opposite):
            raise self._mismatch(opposite)
        if _lexists(path):
            raise PersistenceError(_refusal(meta))
        temp = f"{path}.{secrets.token_hex(6)}{suffix}"
        return temp, os.open(temp, os.O_CREAT | os.O_EXCL | os.O_WRONLY | _O_CLOEXEC | _O_NOFOLLOW, 0o600)

    def _publish_temp(self, meta: Mapping[str, Any], temp: str, path: str) -> None:
        """``link`` the fsynced temporary file into place (unlike rename, never replaces a log another
        writer published), then make the directory entry durable."""
        try:
            os.link(temp, path)
        except FileExistsError as err:
            raise PersistenceError(_refusal(meta)) from err
        _fsync_dir(os.path.dirname(path))

    def _materialize(self, meta: Mapping[str, Any], path: str, body: bytes, next_seq: int) -> None:
        content = self._first_content(meta, body)
        temp, fd = self._open_temp(meta, path)
        try:
            try:
                _write_all(fd, content)
                os.fsync(fd)
                st = os.fstat(fd)
            except OSError as err:
                raise storage_error(err, path) from err
            finally:
                os.close(fd)
            self._publish_temp(meta, temp, path)
        finally:
            try:
                os.unlink(temp)
            except OSError:
                pass
        with self._mutex:
            self._tails[path] = _Tail(st.st_dev, st.st_ino, st.st_size, next_seq)

    def _append_lines(self, path: str, body: bytes, session_id: str, first_seq: int | None, count: int) -> None:
        """``appendLines``: write + fsync at EOF, or roll back to the prior size so a retry is clean.

        Under the writer lock, the file must still end where this instance last saw it end.
        """
        payload = compress_frame(body) if self._zstd else body
        try:
            tail = self._expected_tail(path)
            fd, st = _open_regular(path, os.O_WRONLY | os.O_APPEND)
        except FileNotFoundError as err:
            # Unlike the reference (which would create a header-less file), a vanished log is an error.
            raise PersistenceError(f'session "{session_id}" has no stored log to append to ({path})') from err
        size = st.st_size
        try:
            self._check_tail(path, st, first_seq, tail)
        except BaseException:
            os.close(fd)
            raise
        try:
            _write_all(fd, payload)
            os.fsync(fd)
        except BaseException as err:
            os.close(fd)
            self._roll_back(path, size, err)
            if isinstance(err, OSError):
                raise storage_error(err, path) from err
            raise
        os.close(fd)
        with self._mutex:
            self._tails[path] = _Tail(
                tail.dev, tail.ino, size + len(payload), None if tail.next_seq is None else tail.next_seq + count
            )

    @staticmethod
    def _roll_back(path: str, size: int, err: BaseException) -> None:
        """Truncate a failed append's partial bytes; if even that fails, report both errors."""
        try:
            fd = os.open(path, os.O_RDWR | _O_SAFE)
            try:
                os.ftruncate(fd, size)
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as rollback_err:
            raise AppendRollbackError(
                f'failed to roll back append to "{path}": {describe_error(err)}; '
                f"rollback: {describe_error(rollback_err)}",
                (err, rollback_err),
            ) from err

    @_typed_os_errors
    def commit_repair(self, meta: Mapping[str, Any], torn_marker: object, closers: Sequence[WireEvent]) -> None:
        """Cut the torn tail, then append recovered events + closers as ONE batch (spec §4.8).

        Two fsynced steps, not atomic: a crash between them leaves a shorter but valid log, and the next
        load simply recomputes the closers. The file must still be the one this instance read.
        """
        self._refuse_write("repair the session log")
        path = self._log_path(meta)
        batch: list[WireEvent] = []
        if torn_marker is not None:
            if not isinstance(torn_marker, TornMarker):
                raise PersistenceError(f"not a JSONL torn marker: {torn_marker!r}")
            tail = self._expected_tail(path)
            fd, st = _open_regular(path, os.O_RDWR)
            try:
                if tail.cut is None or tail.cut[0] != torn_marker.truncate_to:
                    raise SessionTailChangedError(
                        f'session log "{path}" changed since its torn tail was read; nothing was truncated. Load '
                        "the session again",
                        location=path,
                    )
                self._check_tail(path, st, None, _Tail(tail.dev, tail.ino, tail.size, tail.cut[1]))
                os.ftruncate(fd, torn_marker.truncate_to)
                os.fsync(fd)
            finally:
                os.close(fd)
            with self._mutex:
                self._tails[path] = _Tail(tail.dev, tail.ino, torn_marker.truncate_to, tail.cut[1])
            batch.extend(torn_marker.recovered_events)
        batch.extend(closers)
        if batch:
            self._append_lines(path, self._batch_text(batch), meta["id"], batch[0]["seq"], len(batch))

    # --- misc ----------------------------------------------------------------------------------

    def locate(self, meta: Mapping[str, Any]) -> str | None:
        """The absolute transcript path (pure: no I/O; the file may not exist yet)."""
        return self._log_path(meta)

    def derived_directory(self) -> str | None:
        """Derived files live in the root under their own names (:meth:`derived_path`), not a directory."""
        return None

    def derived_path(self, name: str, suffix: str) -> str | None:
        """``<root>/<name>``: the listing ignores files in the root, and a dot-name is never a project."""
        return os.path.join(self.root, name)

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
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = read_holder(fd)
            os.close(fd)
            raise locked_error(session_id, holder) from None
        except BaseException:
            os.close(fd)
            raise
        record_holder(fd)
        return _FileLock(fd)

    @_typed_os_errors
    def stage_session(self, meta: Mapping[str, Any]) -> _StagedLog:
        """A new session written into a temporary file that is linked into place whole at ``publish``.

        The file is written like a log (a zstd frame per batch) but fsynced once, before the link: until
        then no reader lists it, and a crash leaves only an unlisted ``*.import.tmp`` file in the session
        directory. Its writer holds an ``flock`` on it; each new staging first removes the files of such
        writers that died (:meth:`_sweep_staged`).
        """
        self._refuse_write("stage a session")
        path = self._log_path(meta)
        self._preflight()
        if _lexists(path):
            raise PersistenceError(_refusal(meta))
        self._sweep_staged()
        return _StagedLog(self, dict(meta), path)

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

    def close(self) -> None:
        """Nothing to release: every file handle is closed by the operation that opened it."""

    def store_identity(self) -> str | None:
        """``jsonl:<real root>:<inode>`` (:class:`~..backend.IdentifiesStore`); ``None`` before the root exists."""
        return directory_identity(self.root)


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


def _refusal(meta: Mapping[str, Any]) -> str:
    return f'refusing to materialize "{meta["id"]}": a log already exists on disk (load/resume it instead)'


class _StagedLog:
    """:meth:`JsonlBackend.stage_session`'s log: batches go to the temporary file, ``publish`` links it."""

    def __init__(self, backend: JsonlBackend, meta: dict[str, Any], path: str) -> None:
        self._backend = backend
        self._meta = meta
        self._path = path
        self._temp: str | None = None
        self._fd: int | None = None
        self._next_seq = 0
        self._closed = False

    def _check_open(self) -> None:
        if self._closed:
            raise PersistenceError(f'the staged log of "{self._meta["id"]}" was already published or discarded')

    @_typed_os_errors
    def append(self, events: Sequence[WireEvent]) -> None:
        self._check_open()
        if not events:
            return
        if events[0]["seq"] != self._next_seq:
            raise PersistenceError(
                f'staged append of "{self._meta["id"]}" starts at seq {events[0]["seq"]}, expected {self._next_seq}'
            )
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


def _loads_or_none(line: bytes, max_depth: int) -> Any:
    try:
        return loads(line, max_depth=max_depth)
    except AgentlogError:
        return None
