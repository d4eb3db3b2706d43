"""SQLite session backend, schema 17 (spec §5): one database file holds many sessions.

Design points, each of which a spec test pins:

* **Nothing happens before the first operation.** The constructor only validates the path (it must
  not be reachable through a symlink and must be private to the current user); the file is created,
  opened and initialised lazily. A failed open is *not* remembered: the next operation tries again
  (a disk that was full at the first open may have room now).
* **Read-only opens never write.** ``SqliteBackend(path, read_only=True)`` opens ``file:…?mode=ro``
  (``immutable=1`` on a read-only file system), never creates, initialises, checkpoints or deletes a
  file, and refuses a missing database with :class:`StoreNotFoundError`.
* **The database is owned, never adopted.** ``application_id`` + ``user_version`` + an exact copy of
  the schema objects are checked at open and again inside every mutating transaction, so a foreign or
  altered database is refused before a byte is written.
* **Appends are guarded by the logical tail.** ``BEGIN IMMEDIATE`` takes the write lock first, then the
  stored next seq is derived from the last physical rows; a stale writer on another connection is
  refused instead of overwriting the winner. The first append writes the session row and the first
  batch in one transaction (atomic materialization); a repair is one transaction too.
* **A SQLite row cannot tear.** A transaction commits whole rows or none, so a malformed row or a seq
  gap anywhere is committed corruption (:class:`SessionPersistenceCorruptionError` naming the seq),
  page damage ("database disk image is malformed") is too, and nothing is ever deleted to "repair" it.
  :meth:`SqliteBackend.read_prefix` reads the valid prefix up to the damage.
* **Every OS refusal is typed.** Permission, full disk, read-only file system, a directory where the
  file belongs, a file where a directory belongs: :class:`StorageAccessError` naming the path and the
  remedy; out of memory is :class:`ResourceExhaustedError`, never corruption.
* **Nothing is acknowledged that is not in the store.** Every write transaction checks, before its
  ``COMMIT``, that the path still names the file this connection writes (one ``stat``): a database
  deleted or replaced while open would otherwise swallow the batch into an unlinked inode.

All statements live in ``persistence/sqlite/sql/*.sql`` and are loaded with :mod:`importlib.resources`;
values are always bound as parameters.
"""

from __future__ import annotations

import errno
import fcntl
import glob
import hashlib
import os
import re
import resource
import sqlite3
import stat
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from importlib import resources
from typing import Any, Final

from ...errors import (
    AgentlogError,
    InvalidSessionIdError,
    PersistenceError,
    ResourceExhaustedError,
    SessionFormatUnsupportedError,
    SessionPersistenceCorruptionError,
    StorageAccessError,
    StoreNotFoundError,
)
from ...kernel.jsoncodec import DEFAULT_MAX_DEPTH
from ...kernel.jsonvalue import MAX_SAFE_INTEGER
from ...kernel.packedrun import compact_runs_requested
from ..backend import PartialRead, RawArtifact, SessionListing, StoredPrefix, WireEvent, check_reader_limits
from ..paths import encode_segment, file_kind  # one id → file-name encoding for every backend (spec §4.2)
from ..storage_errors import storage_error
from ..store_identity import sqlite_file_identity
from ..writer_lock import clear_holder, holder_record, locked_error, read_holder, record_holder
from . import _codec as codec

__all__ = [
    "APPLICATION_ID",
    "DEFAULT_BUSY_TIMEOUT_MS",
    "JOURNAL_MODES",
    "SCHEMA_VERSION",
    "SqliteBackend",
    "sqlite_storage_code",
]

SCHEMA_VERSION: Final = 17
APPLICATION_ID: Final = 0x44534850  # "DSHP" = 1146308688, shared with the original's databases
DEFAULT_BUSY_TIMEOUT_MS: Final = 5000
MAX_BUSY_TIMEOUT_MS: Final = 2_147_483_647
JOURNAL_BUSY_RETRY_INTERVAL_MS: Final = 10
JOURNAL_MODES: Final = ("wal", "delete", "truncate", "persist")
MEMORY: Final = ":memory:"
SQLITE_BUSY: Final = 5
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
MAX_FILE_NAME_BYTES: Final = 255
"""NAME_MAX of the file systems agentlog supports; a session's lock file name must fit in it."""
_LOCK_SUFFIX: Final = ".lock"
MAX_ENCODED_ID_LENGTH: Final = MAX_FILE_NAME_BYTES - len(_LOCK_SUFFIX)
_DECODE_FACTOR: Final = 3  # peak bytes per decoded byte of a load (measured ~2: text + parse buffers)
_DECODE_SLACK_BYTES: Final = 16 << 20

_UNKNOWN: Final = object()
_TAIL_COLUMNS: Final = 7  # seq, type, time, data, source_event_seqs, surface_op, ignorable of the tail row
_READ_BATCH_ROWS: Final = 512  # rows per fetch while a load decodes (see SqliteBackend._row_batches)
_SPAN_MEMO_SIZE: Final = 8192
_KNOWN_INCARNATIONS_MAX: Final = 65536

_NAME_MARKER: Final = re.compile(r"^-- name: ([a-z_]+)[ \t]*$", re.MULTILINE)
_WHITESPACE: Final = re.compile(r"\s+")


def _load_statements() -> dict[str, str]:
    """Read the packaged statement resources once (``-- name: <key>`` sections of ``statements.sql``)."""
    folder = resources.files("agentlog").joinpath("persistence", "sqlite", "sql")
    text = folder.joinpath("statements.sql").read_text(encoding="utf-8")
    statements: dict[str, str] = {}
    matches = list(_NAME_MARKER.finditer(text))
    for index, match in enumerate(matches):
        end = matches[index + 1].start() if index + 1 < len(matches) else len(text)
        statements[match.group(1)] = text[match.end() : end].strip()
    statements["schema"] = folder.joinpath("schema.sql").read_text(encoding="utf-8")
    return statements


SQL: Final = _load_statements()

_JOURNAL_STATEMENT: Final = {mode: SQL[f"journal_mode_{mode}"] for mode in JOURNAL_MODES}


def _schema_signature(rows: Iterable[Sequence[Any]]) -> list[tuple[Any, ...]]:
    """Schema objects with every whitespace run in ``sql`` collapsed, so formatting never matters."""
    return [
        (kind, name, table, _WHITESPACE.sub(" ", sql).strip() if isinstance(sql, str) else sql)
        for kind, name, table, sql in rows
    ]


def _expected_schema() -> list[tuple[Any, ...]]:
    """The schema objects a fresh in-memory database gets from the packaged DDL (the reference)."""
    reference = sqlite3.connect(MEMORY, isolation_level=None)
    try:
        reference.executescript(SQL["schema"])
        return _schema_signature(reference.execute(SQL["schema_objects"]).fetchall())
    finally:
        reference.close()


EXPECTED_SCHEMA: Final = _expected_schema()


# --- journal mode ----------------------------------------------------------------------------------


def _is_busy(err: BaseException) -> bool:
    code = getattr(err, "sqlite_errorcode", None)
    return isinstance(err, sqlite3.OperationalError) and isinstance(code, int) and code & 0xFF == SQLITE_BUSY


def select_journal_mode(
    run: Callable[[], Any],
    deadline: float,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Any:
    """Run the journal-mode pragma, retrying SQLITE_BUSY every 10 ms until the open deadline.

    Switching into or out of WAL needs an exclusive lock and SQLite reports BUSY without consulting
    the busy handler, so the retry lives here. It stops at once for any other error, when no time is
    left, or when the deadline passed during the sleep (spec §5.3 step 5).
    """
    while True:
        try:
            return run()
        except sqlite3.OperationalError as err:
            if not _is_busy(err):
                raise
            remaining = deadline - clock()
            if remaining <= 0:
                raise
            sleep(min(JOURNAL_BUSY_RETRY_INTERVAL_MS / 1000, remaining))
            if clock() >= deadline:
                raise


# --- writer locks ----------------------------------------------------------------------------------


class _FileWriterLock:
    """An ``flock`` held on an open descriptor; closing the descriptor is the release."""

    def __init__(self, owner: SqliteBackend, fd: int) -> None:
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

    def __init__(self, owner: SqliteBackend, session_id: str) -> None:
        self._owner = owner
        self._id: str | None = session_id

    def release(self) -> None:
        with self._owner._locks_mutex:
            session_id, self._id = self._id, None
            if session_id is not None:
                self._owner._memory_locks.pop(session_id, None)
                self._owner._held_locks.discard(self)


_WriterLock = _FileWriterLock | _MemoryWriterLock


# --- the backend -----------------------------------------------------------------------------------


class SqliteBackend:
    """Schema-17 SQLite storage for many sessions in one database file (or ``:memory:``).

    Thread-safe: one connection, guarded by a lock, serves the coordinator's writer thread and its
    callers' threads. A full load (``load_stored``, ``read_prefix``) decodes its rows batch by batch
    under the lock, so they are never all held at once (a writer thread waits for that decode); other
    reads decode outside it. Several processes may write *different* sessions into one file:
    ``busy_timeout`` plus ``BEGIN IMMEDIATE`` queue them instead of failing.

    ``read_only=True`` is the mode of read commands (``ls``, ``show``, ``export``, ``verify``): the
    database is opened ``mode=ro`` and never created, initialised, checkpointed or repaired; a missing
    file raises :class:`StoreNotFoundError`; every mutation raises :class:`PersistenceError`.
    """

    name = "session-persistence-sqlite"
    supports_raw_artifacts = False

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        journal_mode: str = "wal",
        busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
        max_frame_bytes: int = 256 * 1024 * 1024,
        max_line_bytes: int = 256 * 1024 * 1024,
        max_depth: int = DEFAULT_MAX_DEPTH,
        read_only: bool = False,
    ) -> None:
        if journal_mode not in JOURNAL_MODES:
            raise ValueError(f"journal_mode must be one of {', '.join(JOURNAL_MODES)}, got {journal_mode!r}")
        if type(busy_timeout_ms) is not int or not 0 <= busy_timeout_ms <= MAX_BUSY_TIMEOUT_MS:
            raise ValueError(f"busy_timeout_ms must be an integer in 0..{MAX_BUSY_TIMEOUT_MS}, got {busy_timeout_ms!r}")
        check_reader_limits(max_frame_bytes=max_frame_bytes, max_line_bytes=max_line_bytes, max_depth=max_depth)
        raw = os.fspath(path)
        self._memory = raw == MEMORY
        self.path = raw if self._memory else os.path.abspath(raw)
        self.journal_mode = journal_mode
        self.busy_timeout_ms = busy_timeout_ms
        self.read_only = bool(read_only)
        self._limits = codec.Limits(max_data_bytes=max_frame_bytes, max_text_bytes=max_line_bytes, max_depth=max_depth)
        self._mutex = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._closed = False
        self._file_id: tuple[int, int] | None = None  # (st_dev, st_ino) of the file the connection writes
        self._pristine = False  # read-only open of an existing, never-initialised database: an empty store
        self._snapshot: tuple[int, int, int] | None = None  # file state an immutable read-only open relies on
        self._shared = False  # a writer was seen: read-only opens stop using immutable snapshots
        self._store_identity = ""
        self._locks_mutex = threading.Lock()
        self._memory_locks: dict[str, dict[str, Any]] = {}  # id -> holder record
        self._held_locks: set[_WriterLock] = set()
        # Last member seq (None = does not decode) per packed row *content*: validation is a pure
        # function of the columns, and every append re-checks the packed rows up to 1023 seqs back.
        self._span_memo: dict[tuple[Any, ...], Any] = {}
        self._read_batch_rows = _READ_BATCH_ROWS
        self._schema_seen: list[Any] = []
        self._known_incarnations: set[str] = set()  # proven by list_revisions (see there)
        self._schema_cookie: Any = None
        if not self._memory:
            if not self.read_only:
                parent = os.path.dirname(self.path)
                try:
                    os.makedirs(parent, mode=0o700, exist_ok=True)
                except OSError as err:
                    raise self._os_error(err, "create the session database directory", parent) from err
            self._validate_path()

    # --- path validation and opening -------------------------------------------------------------

    def _validate_path(self) -> None:
        """Spec §5.2: a real, private parent directory and (if present) a private regular file.

        The checks close the usual local attacks on a shared machine: a symlink planted in place of the
        database or its directory, or a directory other users can write into (and so swap files in).
        """
        parent = os.path.dirname(self.path)
        try:
            info = os.lstat(parent)
        except FileNotFoundError as err:
            if self.read_only:
                return  # reported as a missing store by the first operation
            raise self._os_error(err, "inspect the session database directory", parent) from err
        except OSError as err:
            raise self._os_error(err, "inspect the session database directory", parent) from err
        if not stat.S_ISDIR(info.st_mode):
            raise StorageAccessError(
                f'session database parent "{parent}" must be a real directory (it is a '
                f"{file_kind(info.st_mode)}); move it away or choose another store path",
                code="STORAGE_NOT_A_DIRECTORY",
                path=parent,
            )
        if os.name == "posix" and (info.st_uid != os.geteuid() or info.st_mode & 0o022):
            raise PersistenceError(
                f'session database parent "{parent}" must be owned by the current user and not group/world-writable '
                f'(fix it with: chmod go-w "{parent}", as its owner)'
            )
        try:
            info = os.lstat(self.path)
        except FileNotFoundError:
            return
        except OSError as err:
            raise self._os_error(err, "inspect the session database", self.path) from err
        if not stat.S_ISREG(info.st_mode):
            raise StorageAccessError(
                f'session database "{self.path}" must be a regular file, not a symbolic link (it is a '
                f"{file_kind(info.st_mode)}); move it away or choose another store path",
                code="STORAGE_NOT_A_FILE",
                path=self.path,
            )
        if os.name == "posix" and (info.st_uid != os.geteuid() or info.st_mode & 0o077):
            raise PersistenceError(
                f'session database "{self.path}" must be owned by the current user and accessible only by that user '
                f'(fix it with: chmod 600 "{self.path}", as its owner)'
            )

    def _connection(self) -> sqlite3.Connection:
        """The open connection (caller holds ``_mutex``); opens lazily, retrying after a failed open."""
        conn = self._conn
        if conn is not None:
            if not self._pristine:
                return conn
            self._drop_connection()  # an empty store may have been initialised since: look again
        if self._closed:
            raise PersistenceError(f"{self.name} backend is closed")
        try:
            conn = self._open()
        except BaseException as err:
            failure = self._typed(err, "open")
            if failure is err:
                raise
            raise failure from err
        self._conn = conn
        return conn

    def _drop_connection(self) -> None:
        """Forget the connection (caller holds ``_mutex``): the next operation opens the path afresh."""
        conn, self._conn = self._conn, None
        self._file_id = None
        if conn is not None:
            try:
                conn.close()
            except sqlite3.Error:
                pass  # the connection is unusable anyway; the caller reports the actionable error

    def _open(self) -> sqlite3.Connection:
        if self._memory:
            conn = open_database(self.path, self.journal_mode, self.busy_timeout_ms)
        elif self.read_only:
            conn = self._open_read_only()
        else:
            self._validate_path()
            # Create (mode 0600) or open the file ourselves first: the OS reports *why* it cannot be
            # opened (EACCES, EROFS, EISDIR, ENOSPC …), where SQLite would only say "unable to open".
            flags = os.O_RDWR | os.O_CREAT | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
            fd = os.open(self.path, flags, 0o600)
            os.close(fd)
            self._validate_path()
            conn = open_database(self.path, self.journal_mode, self.busy_timeout_ms)
        try:
            if self._pristine:
                self._store_identity = ""
                return conn
            try:
                row = conn.execute(SQL["select_store_identity"]).fetchone()
            except sqlite3.OperationalError as err:
                if _primary(err) not in (SQLITE_NOMEM, SQLITE_IOERR, SQLITE_CORRUPT, SQLITE_NOTADB):
                    row = None  # e.g. a store id that is not UTF-8 text
                else:
                    raise
            store_id = row[0] if row is not None else None
            if not codec.is_uuid(store_id):
                raise PersistenceError(f'session database at "{self.path}" has no valid store identity')
            if self._memory:
                self._store_identity = f"memory:store:{store_id}"
            else:
                info = os.stat(self.path)
                self._file_id = (info.st_dev, info.st_ino)
                birth = getattr(info, "st_birthtime_ns", None)
                if birth is None:
                    birth_s = getattr(info, "st_birthtime", None)
                    birth = int(birth_s * 1_000_000_000) if birth_s is not None else 0
                self._store_identity = f"file:{info.st_dev}:{info.st_ino}:{birth}:store:{store_id}"
        except BaseException:
            conn.close()
            raise
        return conn

    def _open_read_only(self) -> sqlite3.Connection:
        """Open ``mode=ro`` (``immutable=1`` on a read-only file system); never create or change a file."""
        self._validate_path()
        flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(self.path, flags)
        except FileNotFoundError:
            raise StoreNotFoundError(
                f'session store "{self.path}" does not exist (nothing was created); check the --store path, '
                "or write a session first to create it"
            ) from None
        try:
            head = os.read(fd, 100)
        finally:
            os.close(fd)
        self._validate_path()
        uri = "file:" + urllib.parse.quote(self.path) + "?mode=ro"
        self._snapshot = None
        if not self._shared and len(head) == 100 and head[18] == 2 and not os.path.exists(self.path + "-wal"):
            # A WAL database no connection has open (a clean close removes -wal and -shm): a plain mode=ro
            # connection would create both files. Read it as immutable, and after every read check that
            # nothing started writing meanwhile (:meth:`_locked_read` redoes the read if it did).
            self._snapshot = _file_state(self.path)
            conn = open_read_only_database(uri + "&immutable=1", self.path, self.busy_timeout_ms)
            self._pristine = conn.execute(SQL["user_version"]).fetchone()[0] == 0
            return conn
        try:
            conn = open_read_only_database(uri, self.path, self.busy_timeout_ms)
        except sqlite3.OperationalError as err:
            if _primary(err) != SQLITE_CANTOPEN or not _on_read_only_file_system(self.path):
                raise
            # A WAL database on a read-only file system: SQLite cannot create its -shm file. Nobody can
            # write there either, so reading the file as immutable is safe — unless a -wal file still
            # holds committed transactions that were never checkpointed (immutable would ignore them).
            try:
                wal_bytes = os.stat(self.path + "-wal").st_size
            except FileNotFoundError:
                wal_bytes = 0
            if wal_bytes:
                raise StorageAccessError(
                    f'session database "{self.path}" is on a read-only file system and its write-ahead log '
                    f'"{self.path}-wal" holds transactions not yet copied into the database; mount it '
                    "read-write once (any agentlog command then checkpoints it), or copy all three files elsewhere",
                    code="STORAGE_READ_ONLY",
                    path=self.path,
                ) from err
            conn = open_read_only_database(uri + "&immutable=1", self.path, self.busy_timeout_ms)
        self._pristine = conn.execute(SQL["user_version"]).fetchone()[0] == 0
        return conn

    # --- typed errors ------------------------------------------------------------------------------

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

    def _check_still_linked(self) -> None:
        """Refuse to commit into a database file the path no longer names (deleted or replaced)."""
        expected = self._file_id
        if expected is None:
            return
        try:
            info = os.stat(self.path)
        except FileNotFoundError:
            raise self._replaced_error() from None
        if (info.st_dev, info.st_ino) != expected:
            raise self._replaced_error()

    # --- low-level helpers (caller holds _mutex) ---------------------------------------------------

    def _fetchall(self, conn: sqlite3.Connection, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        """``fetchall`` that survives TEXT values which are not UTF-8 (a foreign writer's damage).

        Python's ``sqlite3`` fails the whole query on such a value; re-reading with raw bytes lets the
        row decoders report the one damaged row as corruption, naming its seq and the invalid byte.
        """
        return [row for batch in self._row_batches(conn, sql, params, None) for row in batch]

    def _row_batches(
        self, conn: sqlite3.Connection, sql: str, params: Sequence[Any], size: int | None
    ) -> Iterator[list[Any]]:
        """The rows of ``sql``, ``size`` at a time (``None``: all at once), surviving non-UTF-8 TEXT.

        A load decodes each batch before the next is fetched, so the fetched row tuples are never all
        alive beside the decoded events (on a long log they were a fifth of the reader's peak). A TEXT
        value that is not UTF-8 fails the fetch of its batch; the query is then re-run (same read
        transaction, same ``ORDER BY``) with raw text, the rows already handed out are skipped, and the
        rest come with their text cleaned (:func:`_clean_text`) for the row decoders to judge. The text
        factory is switched only around each fetch, never while the caller holds a batch.
        """

        def fetch(cursor: sqlite3.Cursor) -> list[Any]:
            return cursor.fetchall() if size is None else cursor.fetchmany(size)

        cursor = conn.execute(sql, params)
        handed = 0
        try:
            while True:
                try:
                    batch = fetch(cursor)
                except sqlite3.OperationalError as err:
                    if "Could not decode to UTF-8" not in str(err):
                        raise
                    break
                if not batch:
                    return
                yield batch
                handed += len(batch)
        finally:
            cursor.close()
        cursor = conn.execute(sql, params)
        try:
            while True:
                conn.text_factory = _RawText
                try:
                    batch = fetch(cursor)
                finally:
                    conn.text_factory = str
                if not batch:
                    return
                if handed:
                    skip = min(handed, len(batch))
                    handed -= skip
                    batch = batch[skip:]
                    if not batch:
                        continue
                yield [tuple(_clean_text(value) for value in row) for row in batch]
        finally:
            cursor.close()

    def _rollback(self, conn: sqlite3.Connection, op: str, err: BaseException) -> None:
        """Roll back after ``err``; if that fails too, surface both (the original's AggregateError)."""
        if not conn.in_transaction:
            return
        try:
            conn.execute(SQL["rollback"])
        except BaseException as rollback_error:
            raise PersistenceError(f"{self.name} {op} failed and rollback also failed") from ExceptionGroup(
                f"{self.name} {op} failed and rollback also failed",
                [_as_exception(err), _as_exception(rollback_error)],
            )

    def _validate_for_mutation(self, conn: sqlite3.Connection) -> None:
        """``validateSchemaForMutation``: ownership may have changed since open (another process)."""
        application_id = conn.execute(SQL["application_id"]).fetchone()[0]
        if application_id != APPLICATION_ID:
            raise PersistenceError(
                f"session database application id changed before mutation (expected {APPLICATION_ID}, "
                f"got {application_id})"
            )
        # SQLite bumps the schema cookie on every schema change, so an unchanged cookie proves the
        # objects are the ones already validated on this connection: the full comparison (a read of
        # sqlite_schema) runs only when something changed.
        cookie = conn.execute(SQL["schema_version"]).fetchone()[0]
        if cookie != self._schema_cookie:
            raw = conn.execute(SQL["schema_objects"]).fetchall()
            if raw != self._schema_seen:
                if _schema_signature(raw) != EXPECTED_SCHEMA:
                    raise PersistenceError(
                        f'session database at "{self.path}" does not contain the required schema objects'
                    )
                self._schema_seen = raw  # exact text already proven equivalent: skip re-normalising it
            self._schema_cookie = cookie
        version = conn.execute(SQL["user_version"]).fetchone()[0]
        if version != SCHEMA_VERSION:
            raise PersistenceError(
                f"session database schema changed before mutation (expected {SCHEMA_VERSION}, got {version})"
            )

    def _revision(self, incarnation: str, revision: int, tail: Sequence[Any]) -> str:
        """``<storeIdentity>:incarnation:<uuid>:revision:<n>:tail:<digest>`` (spec §5.7 plus the tail).

        The spec's parts change on every append or repair, on re-creation of a session row and across
        databases, but a database restored from a backup (copied back over the file, or renamed into
        place) repeats all of them, and its next batch brings the counter back to a value already
        handed out — for another log. The digest of the tail row (:func:`_tail_digest`: the newest
        event row, every column) tells those logs apart: the rows written after the backup are gone
        from the restored file, and the restored log's next batch writes a different newest row.
        """
        return f"{self._store_identity}:incarnation:{incarnation}:revision:{revision}:tail:{_tail_digest(tail)}"

    def _session_row(self, conn: sqlite3.Connection, session_id: str) -> tuple[Any, ...] | None:
        """The session row's columns followed by its tail row's (:data:`_TAIL_COLUMNS`, NULLs when none)."""
        rows = self._fetchall(conn, SQL["select_session_with_tail"], (session_id,))
        return rows[0] if rows else None

    def _decode_session(self, row: tuple[Any, ...]) -> tuple[dict[str, Any], str]:
        """Header and revision of a session row; invalid metadata is corruption, never exposed."""
        try:
            header, incarnation, revision = codec.decode_session_row(row[:-_TAIL_COLUMNS])
        except codec.StorageRowError as err:
            sid = row[0] if isinstance(row[0], str) else repr(row[0])
            raise SessionPersistenceCorruptionError(
                f'stored session "{sid}" has invalid metadata: {err} — {self.path}. {codec.REMEDY}',
                location=self.path,
            ) from None
        return header, self._revision(incarnation, revision, row[-_TAIL_COLUMNS:])

    def _last_seq_of(self, row: tuple[Any, ...]) -> int:
        """Memoized :func:`codec.last_member_seq` (raises ``StorageRowError`` for a damaged row).

        Only packed rows are memoized, keyed by the row's full content, so a row another writer changed
        is validated afresh.
        """
        if row[6] != 0:  # scalar rows decode about as fast as their content would hash
            return codec.last_member_seq(row, self._limits)
        memo = self._span_memo
        last = memo.get(row, _UNKNOWN)
        if last is _UNKNOWN:
            try:
                last = codec.last_member_seq(row, self._limits)
            except codec.StorageRowError as err:
                last = err
            if len(memo) >= _SPAN_MEMO_SIZE:
                memo.clear()
            memo[row] = last
        if isinstance(last, codec.StorageRowError):
            raise last
        return int(last)

    def _physical_span_from(
        self,
        conn: sqlite3.Connection,
        session_id: str,
        from_seq: int,
        known_rows: list[tuple[Any, ...]] | None = None,
    ) -> tuple[list[Any], int]:
        """Rows needed to read from ``from_seq`` (``physicalSpanFrom``), and the seq they start at.

        A packed row before ``from_seq`` may still hold it (up to 1023 members back); such a row — or
        one that does not decode, so the read fails closed — lowers the start to its own seq.
        """
        base = from_seq
        low = max(0, from_seq - (codec.MAX_PACKED_ROW_MEMBERS - 1))
        for row in self._fetchall(conn, SQL["select_packed_predecessors"], (session_id, low, from_seq)):
            try:
                last = self._last_seq_of(row)
            except codec.StorageRowError:
                last = -1
            if (last < 0 or last >= from_seq) and row[0] < base:
                base = row[0]
        if known_rows is not None and base == from_seq:
            return known_rows, base  # the caller already holds every row with seq >= from_seq
        return self._fetchall(conn, SQL["select_rows_from"], (session_id, base)), base

    def _write(self, op: str, body: Callable[[sqlite3.Connection], None]) -> None:
        """Run ``body`` in ``BEGIN IMMEDIATE`` after the ownership re-check; roll back on any error.

        Right before ``COMMIT`` the path must still name the file this connection writes (one ``stat``
        per transaction); if it does not, the transaction is rolled back, the connection dropped (the
        next operation reopens the path) and nothing is acknowledged.
        """
        if self.read_only:
            raise PersistenceError(f'{self.name} was opened read-only on "{self.path}"; {op} needs a writable backend')
        with self._mutex:
            conn = self._connection()
            try:
                conn.execute(SQL["begin_immediate"])
                self._validate_for_mutation(conn)
                body(conn)
                self._check_still_linked()
                conn.execute(SQL["commit"])
            except BaseException as err:
                failure = self._typed(err, op)
                self._rollback(conn, op, err)
                if self._file_id is not None and not self._still_linked():
                    self._drop_connection()  # the path names another file (or none): reopen next time
                if failure is err:
                    raise
                raise failure from err

    def _still_linked(self) -> bool:
        try:
            self._check_still_linked()
        except StorageAccessError:
            return False
        return True

    def _read(self, body: Callable[[sqlite3.Connection], Any]) -> Any:
        """Run ``body`` in one deferred read transaction, so all its queries see one snapshot."""

        def run(conn: sqlite3.Connection) -> Any:
            try:
                conn.execute(SQL["begin_deferred"])
                result = body(conn)
                conn.execute(SQL["commit"])
            except BaseException as err:
                failure = self._typed(err, "read")
                self._rollback(conn, "read", err)
                if failure is err:
                    raise
                raise failure from err
            return result

        return self._locked_read(run)

    def _locked_read(self, run: Callable[[sqlite3.Connection], Any]) -> Any:
        """``run(connection)`` under the mutex. A read of an immutable snapshot (see
        :meth:`_open_read_only`) that raced a writer — the file changed, or a -wal appeared — is
        redone on a regular ``mode=ro`` connection, and so is its error (it may be a torn page)."""
        with self._mutex:
            conn = self._connection()
            if self._snapshot is None:
                return run(conn)
            try:
                result = run(conn)
            except BaseException:
                if self._unchanged():
                    raise
            else:
                if self._unchanged():
                    return result
            self._drop_connection()
            self._shared = True  # a writer is about: share the file the regular way from now on
            return run(self._connection())

    def _unchanged(self) -> bool:
        return self._snapshot == _file_state(self.path) and not os.path.exists(self.path + "-wal")

    # --- protocol --------------------------------------------------------------------------------

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

    def _check_bindable(self, session_id: str) -> None:
        """Reads look any id up (an id that was never storable is simply absent) but one that SQLite
        cannot even bind — a lone surrogate — is refused as :class:`InvalidSessionIdError`, not a crash."""
        if type(session_id) is str and not session_id.isascii():
            try:
                session_id.encode("utf-8")
            except UnicodeEncodeError:
                self.validate_session_id(session_id)

    def _decoded(self, session_id: str, rows: Sequence[Any], decode: Callable[[], Any]) -> Any:
        """Run a decode step outside the lock with an allocation failure typed as such (never as damage).

        Under an address-space limit (``ulimit -v``) the rows' decoded size is checked against the room
        left *before* parsing: orjson does not survive every allocation failure (it can crash the
        process instead of raising), so a load that cannot fit is refused up front with
        :class:`ResourceExhaustedError`. Without a limit this costs one ``getrlimit`` per load.
        """
        limit = resource.getrlimit(resource.RLIMIT_AS)[0]
        if limit != resource.RLIM_INFINITY:
            self._check_headroom(session_id, rows, limit)
        try:
            return decode()
        except MemoryError as err:
            failure = self._typed(err, "read")
            raise failure from None

    def _check_headroom(self, session_id: str, rows: Sequence[Any], limit: int) -> None:
        size = codec.decoded_size
        need = _DECODE_SLACK_BYTES + _DECODE_FACTOR * sum(size(row[3]) for row in rows if len(row) > 3)
        try:
            with open("/proc/self/statm", "rb") as fh:
                used = int(fh.read().split()[0]) * resource.getpagesize()
        except (OSError, ValueError, IndexError):
            return  # no way to measure: the decoders' own MemoryError handling still applies
        if used + need > limit:
            raise ResourceExhaustedError(
                f'loading session "{session_id}" from "{self.path}" needs about {need >> 20} MiB, but the '
                f"address-space limit (ulimit -v) leaves {max(0, limit - used) >> 20} MiB; nothing was decoded or "
                "modified and the stored data is not known to be damaged — raise the limit and retry"
            )

    def _load(self, session_id: str) -> tuple[tuple[Any, ...], list[Any]] | None:
        """The session row and all its physical rows, in one read snapshot."""
        self._check_bindable(session_id)

        def body(conn: sqlite3.Connection) -> tuple[tuple[Any, ...], list[Any]] | None:
            if self._pristine:
                return None
            session = self._session_row(conn, session_id)
            if session is None:
                return None
            return session, self._fetchall(conn, SQL["select_rows"], (session_id,))

        found: tuple[tuple[Any, ...], list[Any]] | None = self._read(body)
        return found

    def load_stored(self, session_id: str) -> StoredPrefix | None:
        """Every stored event (``loadStored``); any damaged row is typed corruption. Never writes.

        ``torn_marker`` is always ``None``: a SQLite row cannot tear, so there is nothing a repair may
        delete (a crash loses at most an uncommitted transaction, which leaves no row at all).
        """
        # The coordinator's cold load asks for packed rows to stay packed (kernel.packedrun.ChunkRun
        # items, each validated like its expansion); every other caller gets one event per item.
        found = self._scan_stored(session_id, compact_runs_requested())
        if found is None:
            return None
        meta, revision, events, damage = found
        if damage is not None:
            raise damage
        return StoredPrefix(meta=meta, events=events, revision=revision, torn_marker=None)

    def read_prefix(self, session_id: str) -> PartialRead | None:
        """The readable prefix up to the first damaged row, and that damage (``None`` when intact).

        The partial read behind ``agentlog export --partial``: a damaged *event row* or seq gap ends
        the prefix and is returned as ``damage`` (the error :meth:`load_stored` would raise, with the
        row's seq in ``offset``) instead of raised; damaged session metadata or page damage still
        raise. ``torn_offset`` is always ``None`` (a SQLite row cannot tear). Never writes; ``None``
        when the session does not exist.
        """
        found = self._scan_stored(session_id, False)
        if found is None:
            return None
        meta, revision, events, damage = found
        return PartialRead(meta=meta, events=events, revision=revision, damage=damage)

    def _scan_stored(
        self, session_id: str, compact: bool
    ) -> tuple[dict[str, Any], str, list[Any], SessionPersistenceCorruptionError | None] | None:
        """Header, revision, the decodable prefix of all rows and the damage ending it; ``None`` if absent.

        The rows are decoded batch by batch inside the read (:meth:`_row_batches`), so the connection
        lock is held while they decode. What a failure surfaces as is unchanged from fetching every row
        first: page damage anywhere in the rows wins (after a damaged row or damaged session metadata
        the rest of the rows are still read, only not decoded), then the session metadata, then the
        first damaged row. Under an address-space limit the rows are fetched whole first instead, since
        the up-front headroom check (:meth:`_decoded`) needs every row's size before anything is parsed.
        """
        if resource.getrlimit(resource.RLIMIT_AS)[0] != resource.RLIM_INFINITY:
            loaded = self._load(session_id)
            if loaded is None:
                return None
            session, rows = loaded
            meta, revision = self._decode_session(session)
            events, damage = self._decoded(
                session_id,
                rows,
                lambda: codec.scan_prefix(rows, 0, location=self.path, limits=self._limits, compact=compact),
            )
            return meta, revision, events, damage
        self._check_bindable(session_id)

        def body(
            conn: sqlite3.Connection,
        ) -> tuple[dict[str, Any], str, list[Any], SessionPersistenceCorruptionError | None] | Exception | None:
            if self._pristine:
                return None
            session = self._session_row(conn, session_id)
            if session is None:
                return None
            batches = self._row_batches(conn, SQL["select_rows"], (session_id,), self._read_batch_rows)
            try:
                meta, revision = self._decode_session(session)
            except SessionPersistenceCorruptionError as err:
                for _ in batches:
                    pass
                return err  # raised once the read is over, like before
            events, damage = codec.scan_batches(batches, 0, location=self.path, limits=self._limits, compact=compact)
            if damage is not None:
                for _ in batches:
                    pass
            return meta, revision, events, damage

        found = self._read(body)
        if isinstance(found, Exception):
            raise found
        return found  # type: ignore[no-any-return]

    def load_stored_from(self, session_id: str, from_seq: int) -> StoredPrefix | None:
        """Seek read (``loadStoredFrom``): the stored events with ``seq >= from_seq``.

        Only the rows from ``from_seq`` (plus a packed row that straddles it) are decoded, so a suffix
        read of a long log costs the suffix; damage inside the span raises. Never writes.
        """
        if type(from_seq) is not int or not 0 <= from_seq <= codec.MAX_SAFE:
            raise PersistenceError(f"fromSeq must be a non-negative safe integer, got {from_seq!r}")
        self._check_bindable(session_id)

        def body(conn: sqlite3.Connection) -> tuple[tuple[Any, ...], list[Any], int] | None:
            if self._pristine:
                return None
            session = self._session_row(conn, session_id)
            if session is None:
                return None
            rows, base = self._physical_span_from(conn, session_id, from_seq)
            return session, rows, base

        found = self._read(body)
        if found is None:
            return None
        session, rows, base = found
        meta, revision = self._decode_session(session)
        events = self._decoded(
            session_id, rows, lambda: codec.scan_rows(rows, base, location=self.path, limits=self._limits)
        )
        if base < from_seq:
            events = [event for event in events if event["seq"] >= from_seq]
        return StoredPrefix(meta=meta, events=events, revision=revision, torn_marker=None)

    def read_revision(self, session_id: str) -> str | None:
        """The session's revision string: its row and its tail row in one statement (no transaction)."""
        self._check_bindable(session_id)

        def run(conn: sqlite3.Connection) -> tuple[Any, ...] | None:
            if self._pristine:
                return None
            try:
                return self._session_row(conn, session_id)
            except BaseException as err:
                failure = self._typed(err, "read")
                if failure is err:
                    raise
                raise failure from err

        session = self._locked_read(run)
        if session is None:
            return None
        return self._decode_session(session)[1]

    def append_batch(self, meta: Mapping[str, Any], events: Sequence[WireEvent], materialized: bool) -> None:
        """Append one contiguous batch in one ``BEGIN IMMEDIATE`` transaction (``appendBatch``).

        Encoding (packing, JSON, compression) happens before the write lock is taken. Inside it the
        stored next seq is re-derived from the physical tail, so a stale writer on another connection
        is refused (``stored next seq is <n>``) before anything changes.
        """
        if not events:
            return
        session_id = _session_id(meta)
        self.validate_session_id(session_id)
        header = None if materialized else _header_columns(meta)
        try:
            rows = codec.encode_batch(session_id, events)
        except MemoryError as err:
            raise self._typed(err, "append") from None
        first = rows[0][1]

        def body(conn: sqlite3.Connection) -> None:
            expected = self._next_seq_from_tail(conn, session_id)
            if first != expected:
                raise PersistenceError(
                    f"session {session_id} append starts at seq {first}, stored next seq is {expected}"
                )
            if header is not None:
                conn.execute(SQL["upsert_session"], (*header, str(uuid.uuid4())))
            if conn.execute(SQL["bump_revision"], (session_id,)).rowcount != 1:
                raise PersistenceError(f"session {session_id} metadata row is missing")
            conn.executemany(SQL["insert_event"], rows)

        self._write("append", body)

    def _next_seq_from_tail(self, conn: sqlite3.Connection, session_id: str) -> int:
        """The logical next seq from the bounded tail (last two rows plus a straddling packed row)."""
        tail = self._fetchall(conn, SQL["select_tail_rows"], (session_id,))
        if not tail:
            return 0
        from_seq = tail[-1][0]
        rows, base = self._physical_span_from(conn, session_id, from_seq, tail[::-1])
        try:
            return codec.scan_next_seq(rows, base, location=self.path, last_seq_of=self._last_seq_of)
        except SessionPersistenceCorruptionError as err:
            raise SessionPersistenceCorruptionError(
                f"session {session_id} has an invalid physical tail at seq {err.offset}; nothing was appended. {err}",
                location=err.location,
                offset=err.offset,
            ) from None

    def commit_repair(self, meta: Mapping[str, Any], torn_marker: object, closers: Sequence[WireEvent]) -> None:
        """Append the closers of an interrupted turn in ONE transaction (``commitRepair``); never deletes.

        A SQLite row cannot tear, so :meth:`load_stored` never hands out a torn marker and a marker is
        refused here: a damaged row is corruption, not a tail to cut. The whole log
        is rescanned under the write lock: damage raises :class:`SessionPersistenceCorruptionError`,
        and closers that do not continue the stored log mean another writer got there first (stale).
        """
        if torn_marker is None and not closers:
            return
        session_id = _session_id(meta)
        if torn_marker is not None:
            raise PersistenceError(
                f"session {session_id} repair marker {torn_marker!r} refused: SQLite rows cannot tear, so a repair "
                "never deletes rows (a damaged row is corruption; export the readable prefix with "
                "'agentlog export --partial')"
            )
        self.validate_session_id(session_id)
        try:
            rows = [codec.encode_scalar(session_id, closer) for closer in closers]
        except MemoryError as err:
            raise self._typed(err, "repair") from None
        for index in range(1, len(rows)):
            if rows[index][1] != rows[index - 1][1] + 1:
                raise PersistenceError(f"session {session_id} repair closers are not contiguous")

        def body(conn: sqlite3.Connection) -> None:
            if self._session_row(conn, session_id) is None:
                raise PersistenceError(f"session {session_id} metadata row is missing")
            stored = self._fetchall(conn, SQL["select_rows"], (session_id,))
            preserved = codec.scan_rows(stored, 0, location=self.path, limits=self._limits)
            expected = int(preserved[-1]["seq"]) + 1 if preserved else 0
            if rows[0][1] != expected:
                raise PersistenceError(
                    f"session {session_id} repair is stale: closer starts at seq {rows[0][1]}, "
                    f"stored next seq is {expected}"
                )
            conn.executemany(SQL["insert_event"], rows)
            conn.execute(SQL["bump_revision"], (session_id,))

        self._write("repair", body)

    def _listing_rows(self, statement: str) -> list[tuple[Any, ...]]:
        """All rows of a whole-store listing statement (none before the database exists), typed errors."""

        def run(conn: sqlite3.Connection) -> list[tuple[Any, ...]]:
            if self._pristine:
                return []
            try:
                return self._fetchall(conn, SQL[statement], ())
            except BaseException as err:
                failure = self._typed(err, "list")
                if failure is err:
                    raise
                raise failure from err

        rows: list[tuple[Any, ...]] = self._locked_read(run)
        return rows

    def list_sessions(self) -> list[SessionListing]:
        """Every stored session's header, sorted by id; a damaged row is reported, never fatal."""

        rows = self._listing_rows("select_sessions_with_tail")
        location = self.path
        decode = codec.decode_session_row
        listings: list[SessionListing] = []
        for row in rows:
            try:
                header, incarnation, revision = decode(row[:-_TAIL_COLUMNS])
            except codec.StorageRowError as err:
                sid = row[0]
                if isinstance(sid, codec.InvalidText):
                    sid = sid.raw.decode("utf-8", "backslashreplace")  # named, never silently replaced
                listings.append(
                    SessionListing(
                        id=sid if isinstance(sid, str) else repr(sid),
                        header=None,
                        location=location,
                        error_code=SessionPersistenceCorruptionError.code,
                        error_message=f'stored session "{sid}" has invalid metadata: {err}',
                    )
                )
                continue
            listing = SessionListing(
                id=header["id"],
                header=header,
                revision=self._revision(incarnation, revision, row[-_TAIL_COLUMNS:]),
                location=location,
            )
            version = header["version"]
            if version != 0:
                listing.error_code = SessionFormatUnsupportedError.code
                listing.error_message = _version_refusal(header["id"], version)
            listings.append(listing)
        listings.sort(key=_listing_id)
        return listings

    def list_revisions(self) -> dict[str, str]:
        """Every stored session's revision string, by id, from one SELECT of the id and revision columns
        (and each session's tail row, which the revision's digest covers).

        The search index reconciles against this on every search, so it neither rebuilds nor validates
        headers as :meth:`list_sessions` does; the strings are the ones listing and :meth:`read_revision`
        report. A row whose header columns are damaged is included (the reader it is handed to reports
        the damage); one whose id or revision columns are themselves invalid — listing reports it without
        a revision, and no read can name it — is left out.
        """

        rows = self._listing_rows("select_session_revisions_with_tail")
        known = self._known_incarnations  # an incarnation is fixed for a session's life: check it once
        is_uuid = codec.is_uuid
        found: list[tuple[str, str]] = []
        for sid, incarnation, revision, *tail in rows:
            if type(sid) is not str or not sid or type(revision) is not int or not 0 <= revision <= MAX_SAFE_INTEGER:
                continue
            if incarnation not in known:
                if not is_uuid(incarnation):
                    continue
                if len(known) < _KNOWN_INCARNATIONS_MAX:
                    known.add(incarnation)
            found.append((sid, self._revision(incarnation, revision, tail)))
        found.sort()
        return dict(found)

    def store_id(self) -> str | None:
        """The store's random id (``persistence_state.store_id``) through this backend's own connection,
        or ``None`` while the database holds nothing yet (a read-only open of a missing or empty file).

        What derived files beside the store (the projection cache) are bound to. Asking the open
        backend rather than opening the file again matters on a full disk: a second read-only open of
        a WAL database would have to create its ``-shm`` file, which a full or read-only disk refuses.
        """

        def run(conn: sqlite3.Connection) -> str | None:
            if self._pristine:
                return None
            try:
                row = conn.execute(SQL["select_store_identity"]).fetchone()
            except BaseException as err:
                failure = self._typed(err, "read")
                if failure is err:
                    raise
                raise failure from err
            return row[0] if row is not None and codec.is_uuid(row[0]) else None

        try:
            found: str | None = self._locked_read(run)
        except StoreNotFoundError:
            return None
        return found

    def read_raw(self, session_id: str) -> RawArtifact | None:
        raise PersistenceError("this session persistence backend does not expose raw artifacts")

    def locate(self, meta: Mapping[str, Any]) -> str | None:
        return None

    def derived_directory(self) -> str | None:
        """Derived files are siblings of the database file (:meth:`derived_path`), not in a directory."""
        return None

    def derived_path(self, name: str, suffix: str) -> str | None:
        """``<database><suffix>`` (never inside the database itself); ``None`` for ``:memory:``."""
        return None if self._memory else self.path + suffix

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
        file_lock = _FileWriterLock(self, fd)
        with self._locks_mutex:
            self._held_locks.add(file_lock)
        return file_lock

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

    def _forget_lock(self, lock: _WriterLock) -> None:
        with self._locks_mutex:
            self._held_locks.discard(lock)

    def close(self) -> None:
        """Close the connection (if one was ever opened) and release the locks this instance holds."""
        with self._mutex:
            self._closed = True
            conn, self._conn = self._conn, None
            if conn is not None:
                conn.close()
        with self._locks_mutex:
            held = list(self._held_locks)
        for lock in held:
            lock.release()

    def store_identity(self) -> str | None:
        """``sqlite-store:<store id>`` (:class:`~..backend.IdentifiesStore`); ``None`` before the database exists."""
        return sqlite_file_identity(self.path, self.store_id)


class _StagedSession:
    """:meth:`SqliteBackend.stage_session`'s log: a private staging database (or, for ``:memory:``, a buffer)."""

    def __init__(self, backend: SqliteBackend, meta: Mapping[str, Any]) -> None:
        self._backend = backend
        self._meta = dict(meta)
        self._buffered: list[Any] | None = [] if backend._memory else None
        self._stage: SqliteBackend | None = None
        self._stage_path = f"{backend.path}.import-{uuid.uuid4().hex[:12]}.tmp"
        self._lock_fd: int | None = None
        self._next_seq = 0
        self._closed = False

    def _check_open(self) -> None:
        if self._closed:
            raise PersistenceError(f'the staged log of "{self._meta["id"]}" was already published or discarded')

    def append(self, events: Sequence[WireEvent]) -> None:
        self._check_open()
        if not events:
            return
        if events[0]["seq"] != self._next_seq:
            raise PersistenceError(
                f'staged append of "{self._meta["id"]}" starts at seq {events[0]["seq"]}, expected {self._next_seq}'
            )
        if self._buffered is not None:
            try:
                self._buffered.extend(codec.encode_batch(_session_id(self._meta), events))
            except MemoryError as err:
                raise self._backend._typed(err, "staged append") from None
        else:
            if self._stage is None:
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


# --- helpers ---------------------------------------------------------------------------------------


def open_database(path: str, journal_mode: str, busy_timeout_ms: int) -> sqlite3.Connection:
    """``openDatabase`` (spec §5.3): pragmas, ownership checks / initialisation, journal mode.

    Ownership is decided under ``BEGIN IMMEDIATE`` so no other connection can initialise or alter
    the schema between the inspection and the decision.
    """
    deadline = time.monotonic() + busy_timeout_ms / 1000
    conn = sqlite3.connect(path, isolation_level=None, timeout=busy_timeout_ms / 1000, check_same_thread=False)
    try:
        conn.execute(SQL["trusted_schema_off"])
        if conn.execute(SQL["trusted_schema"]).fetchone()[0] != 0:
            raise PersistenceError(f'session database at "{path}" could not disable trusted_schema')
        conn.execute(SQL["mmap_size_off"])
        if path != MEMORY:
            mmap = conn.execute(SQL["mmap_size"]).fetchone()
            if mmap is not None and mmap[0] != 0:
                raise PersistenceError(f'session database at "{path}" could not disable mmap')
        conn.execute(SQL["foreign_keys_on"])
        _initialise_or_check(conn, path)
        want = "memory" if path == MEMORY else journal_mode
        row = select_journal_mode(lambda: conn.execute(_JOURNAL_STATEMENT[journal_mode]).fetchone(), deadline)
        got = str(row[0]).lower() if row is not None else "<none>"
        if got != want:
            raise PersistenceError(f'session database at "{path}" selected journal mode {got}, expected {want}')
        conn.execute(SQL["synchronous_full"])
        if conn.execute(SQL["synchronous"]).fetchone()[0] != 2:
            raise PersistenceError(f'session database at "{path}" could not switch to synchronous = FULL')
    except BaseException:
        conn.close()
        raise
    return conn


def open_read_only_database(uri: str, path: str, busy_timeout_ms: int) -> sqlite3.Connection:
    """A ``mode=ro`` connection that checks ownership without initialising or changing anything.

    A never-initialised database (``user_version`` 0, no objects, no application id) is accepted as
    an empty store; a read-only connection never checkpoints, so ``-wal``/``-shm`` stay as they are.
    """
    conn = sqlite3.connect(uri, uri=True, isolation_level=None, timeout=busy_timeout_ms / 1000, check_same_thread=False)
    try:
        conn.execute(SQL["trusted_schema_off"])
        if conn.execute(SQL["trusted_schema"]).fetchone()[0] != 0:
            raise PersistenceError(f'session database at "{path}" could not disable trusted_schema')
        conn.execute(SQL["mmap_size_off"])
        conn.execute(SQL["begin_deferred"])
        try:
            version = conn.execute(SQL["user_version"]).fetchone()[0]
            application_id = conn.execute(SQL["application_id"]).fetchone()[0]
            objects = conn.execute(SQL["count_user_objects"]).fetchone()[0]
            _check_identity(version, application_id, objects, path)
            if version == SCHEMA_VERSION and (
                _schema_signature(conn.execute(SQL["schema_objects"]).fetchall()) != EXPECTED_SCHEMA
            ):
                raise PersistenceError(f'session database at "{path}" does not contain the required schema objects')
        finally:
            conn.execute(SQL["rollback"])
    except BaseException:
        conn.close()
        raise
    return conn


def _check_identity(version: Any, application_id: Any, objects: Any, path: str) -> None:
    """The ownership decisions of spec §5.3 step 4 shared by writable and read-only opens."""
    if version == 0 and (application_id != 0 or objects > 0):
        raise PersistenceError(f'session database at "{path}" has an unversioned schema or application identity')
    if version not in (0, SCHEMA_VERSION):
        raise SessionFormatUnsupportedError(
            f'session database at "{path}" has schema version {version}, incompatible with this build '
            f"({SCHEMA_VERSION})",
            location=path,
        )
    if version == SCHEMA_VERSION and application_id != APPLICATION_ID:
        raise PersistenceError(
            f'session database at "{path}" has application id {application_id}, expected {APPLICATION_ID}'
        )


def _initialise_or_check(conn: sqlite3.Connection, path: str) -> None:
    conn.execute(SQL["begin_immediate"])
    try:
        version = conn.execute(SQL["user_version"]).fetchone()[0]
        application_id = conn.execute(SQL["application_id"]).fetchone()[0]
        objects = conn.execute(SQL["count_user_objects"]).fetchone()[0]
        _check_identity(version, application_id, objects, path)
        if version == 0:
            for statement in _split_script(SQL["schema"]):
                conn.execute(statement)
            conn.execute(SQL["insert_store_identity"], (str(uuid.uuid4()),))
            conn.execute(SQL["set_application_id"])
            conn.execute(SQL["set_user_version"])
        if _schema_signature(conn.execute(SQL["schema_objects"]).fetchall()) != EXPECTED_SCHEMA:
            raise PersistenceError(f'session database at "{path}" does not contain the required schema objects')
        conn.execute(SQL["commit"])
    except BaseException:
        if conn.in_transaction:
            try:
                conn.execute(SQL["rollback"])
            except sqlite3.Error:
                pass  # the original failure is the actionable one
        raise


def _split_script(script: str) -> list[str]:
    """The DDL resource's statements (``executescript`` would COMMIT the open transaction first)."""
    return [part.strip() + ";" for part in script.split(";") if part.strip()]


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


def _tail_digest(tail: Sequence[Any]) -> str:
    """A digest of the tail row's columns (``none`` for a session without rows), for the revision.

    The digest is over the ``repr`` of the column tuple: ``sqlite3`` returns only ``None``, ``int``,
    ``float``, ``str`` and ``bytes`` (and the backend's :class:`codec.InvalidText` marker for TEXT that
    is not UTF-8), and the ``repr`` of each is exact and tells the types apart (quotes, ``b''``,
    ``.0``/exponent, the marker's own name), so no two different rows share an encoding. One C-level
    ``repr`` and one hash per session: a listing of thousands of sessions pays microseconds for it.
    """
    if all(value is None for value in tail):
        return "none"
    return hashlib.blake2b(repr(tuple(tail)).encode(), digest_size=12).hexdigest()


def _file_state(path: str) -> tuple[int, int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return (info.st_ino, info.st_size, info.st_mtime_ns)


def _primary(err: BaseException) -> int | None:
    code = getattr(err, "sqlite_errorcode", None)
    return code & 0xFF if isinstance(code, int) else None


def _on_read_only_file_system(path: str) -> bool:
    try:
        return bool(os.statvfs(os.path.dirname(path) or ".").f_flag & os.ST_RDONLY)
    except OSError:
        return False


class _RawText(bytes):
    """``text_factory`` of the re-read: marks TEXT values so they are not mistaken for BLOBs."""


def _clean_text(value: Any) -> Any:
    if type(value) is _RawText:
        raw = bytes(value)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return codec.InvalidText(raw)
    return value


def _as_exception(err: BaseException) -> Exception:
    return err if isinstance(err, Exception) else RuntimeError(repr(err))


def _listing_id(listing: SessionListing) -> str:
    return listing.id


def _session_id(meta: Mapping[str, Any]) -> str:
    session_id = meta.get("id") if isinstance(meta, Mapping) else None
    if type(session_id) is not str or not session_id:
        raise PersistenceError(f"session header id must be a non-empty string, got {session_id!r}")
    return session_id


def _optional(meta: Mapping[str, Any], key: str, check: Callable[[Any], bool], what: str) -> Any:
    value = meta.get(key)
    if value is None and key not in meta:
        return None
    if not check(value):
        raise PersistenceError(f"session header {key} must be {what}, got {value!r}")
    return value


def _nonneg_safe(value: Any) -> bool:
    return type(value) is int and 0 <= value <= MAX_SAFE_INTEGER


def _header_columns(meta: Mapping[str, Any]) -> tuple[Any, ...]:
    """The ``sessions`` metadata columns of a header, refusing values the typed columns would mangle.

    Keys outside the header vocabulary have no column and are not stored (as in the original).
    """
    session_id = _session_id(meta)
    version = meta.get("version")
    if type(version) is not int or abs(version) > MAX_SAFE_INTEGER:
        raise PersistenceError(f"session header version must be a safe integer, got {version!r}")
    created_at = meta.get("createdAt")
    if not _nonneg_safe(created_at):
        raise PersistenceError(f"session header createdAt must be a non-negative safe integer, got {created_at!r}")
    cwd = _optional(meta, "cwd", lambda v: type(v) is str and v.startswith("/"), "an absolute path")
    parent = _optional(meta, "parentSession", lambda v: type(v) is str, "a string")
    seed_length = _optional(meta, "seedLength", _nonneg_safe, "a non-negative safe integer")
    origin = _optional(meta, "origin", lambda v: v == "subagent" and type(v) is str, '"subagent"')
    depth = _optional(meta, "delegationDepth", _nonneg_safe, "a non-negative safe integer")
    preset = _optional(meta, "agentPreset", lambda v: type(v) is str, "a string")
    return (session_id, version, created_at, cwd, parent, seed_length, origin, depth, preset)


def _version_refusal(session_id: str, version: int) -> str:
    """``sessionFormatVersionRefusal`` (spec §3.8), for listings of foreign-version sessions."""
    if version > 0:
        return (
            f'session "{session_id}" uses log format v{version}, but this harness reads only v0: the log was '
            "written by a newer harness — upgrade the harness to open it"
        )
    return (
        f'session "{session_id}" uses log format v{version}, older than the supported v0, and this build ships '
        "no upgrade path for it"
    )
