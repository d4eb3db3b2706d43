"""SQLite session backend, schema 17 (spec §5): one database file holds many sessions.

Design points, each of which a spec test pins:

* **Nothing happens before the first operation.** The constructor only validates the path (it must
  not be reachable through a symlink and must be private to the current user); the file is created,
  opened and initialised lazily, once, and a failure is remembered.
* **The database is owned, never adopted.** ``application_id`` + ``user_version`` + an exact copy of
  the schema objects are checked at open and again inside every mutating transaction, so a foreign or
  altered database is refused before a byte is written.
* **Appends are guarded by the logical tail.** ``BEGIN IMMEDIATE`` takes the write lock first, then the
  stored next seq is derived from the last physical rows; a stale writer on another connection is
  refused instead of overwriting the winner. The first append writes the session row and the first
  batch in one transaction (atomic materialization); a repair is one transaction too.
* **Damage is classified, not guessed.** A malformed row or seq gap before the last decodable
  ``turn/end`` is committed corruption (:class:`SessionPersistenceCorruptionError`); after it, it is a
  torn tail whose first physical seq is the marker :meth:`SqliteBackend.commit_repair` deletes from.

All statements live in ``persistence/sql/*.sql`` and are loaded with :mod:`importlib.resources`;
values are always bound as parameters.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import sqlite3
import stat
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from importlib import resources
from typing import Any, Final

from ..errors import (
    PersistenceError,
    SessionFormatUnsupportedError,
    SessionLockedError,
    SessionPersistenceCorruptionError,
)
from ..jsoncodec import DEFAULT_MAX_DEPTH
from . import _sqlite_codec as codec
from .backend import RawArtifact, SessionListing, StoredPrefix, WireEvent, check_reader_limits
from .jsonl import encode_segment  # one id → file-name encoding for every backend (spec §4.2)

__all__ = [
    "APPLICATION_ID",
    "DEFAULT_BUSY_TIMEOUT_MS",
    "JOURNAL_MODES",
    "SCHEMA_VERSION",
    "SqliteBackend",
]

SCHEMA_VERSION: Final = 17
APPLICATION_ID: Final = 0x44534850  # "DSHP" = 1146308688, shared with the original's databases
DEFAULT_BUSY_TIMEOUT_MS: Final = 5000
MAX_BUSY_TIMEOUT_MS: Final = 2_147_483_647
JOURNAL_BUSY_RETRY_INTERVAL_MS: Final = 10
JOURNAL_MODES: Final = ("wal", "delete", "truncate", "persist")
MEMORY: Final = ":memory:"
SQLITE_BUSY: Final = 5

_UNKNOWN: Final = object()
_SPAN_MEMO_SIZE: Final = 8192

_NAME_MARKER: Final = re.compile(r"^-- name: ([a-z_]+)[ \t]*$", re.MULTILINE)
_WHITESPACE: Final = re.compile(r"\s+")


def _load_statements() -> dict[str, str]:
    """Read the packaged statement resources once (``-- name: <key>`` sections of ``statements.sql``)."""
    folder = resources.files("agentlog").joinpath("persistence", "sql")
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
                self._owner._memory_locks.discard(session_id)
                self._owner._held_locks.discard(self)


_WriterLock = _FileWriterLock | _MemoryWriterLock


# --- the backend -----------------------------------------------------------------------------------


class SqliteBackend:
    """Schema-17 SQLite storage for many sessions in one database file (or ``:memory:``).

    Thread-safe: one connection, guarded by a lock, serves the coordinator's writer thread and its
    callers' threads; JSON decoding happens outside the lock. Several processes may write *different*
    sessions into one file: ``busy_timeout`` plus ``BEGIN IMMEDIATE`` queue them instead of failing.
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
        self._limits = codec.Limits(max_data_bytes=max_frame_bytes, max_text_bytes=max_line_bytes, max_depth=max_depth)
        self._mutex = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._open_error: BaseException | None = None
        self._closed = False
        self._store_identity = ""
        self._locks_mutex = threading.Lock()
        self._memory_locks: set[str] = set()
        self._held_locks: set[_WriterLock] = set()
        # Last member seq (None = does not decode) per packed row *content*: validation is a pure
        # function of the columns, and every append re-checks the packed rows up to 1023 seqs back.
        self._span_memo: dict[tuple[Any, ...], Any] = {}
        self._schema_seen: list[Any] = []
        self._schema_cookie: Any = None
        if not self._memory:
            parent = os.path.dirname(self.path)
            os.makedirs(parent, mode=0o700, exist_ok=True)
            self._validate_path()

    # --- path validation and opening -------------------------------------------------------------

    def _validate_path(self) -> None:
        """Spec §5.2: a real, private parent directory and (if present) a private regular file.

        The checks close the usual local attacks on a shared machine: a symlink planted in place of the
        database or its directory, or a directory other users can write into (and so swap files in).
        """
        parent = os.path.dirname(self.path)
        info = os.lstat(parent)
        if not stat.S_ISDIR(info.st_mode):
            raise PersistenceError(f'session database parent "{parent}" must be a real directory')
        if os.name == "posix" and (info.st_uid != os.geteuid() or info.st_mode & 0o022):
            raise PersistenceError(
                f'session database parent "{parent}" must be owned by the current user and not group/world-writable'
            )
        try:
            info = os.lstat(self.path)
        except FileNotFoundError:
            return
        if not stat.S_ISREG(info.st_mode):
            raise PersistenceError(f'session database "{self.path}" must be a regular file, not a symbolic link')
        if os.name == "posix" and (info.st_uid != os.geteuid() or info.st_mode & 0o077):
            raise PersistenceError(
                f'session database "{self.path}" must be owned by the current user and accessible only by that user'
            )

    def _connection(self) -> sqlite3.Connection:
        """The open connection (caller holds ``_mutex``); opens lazily once and remembers a failure."""
        conn = self._conn
        if conn is not None:
            return conn
        if self._closed:
            raise PersistenceError(f"{self.name} backend is closed")
        if self._open_error is not None:
            raise self._open_error
        try:
            conn = self._open()
        except Exception as err:
            failure = self._open_failure(err)
            self._open_error = failure
            if failure is err:
                raise
            raise failure from err
        self._conn = conn
        return conn

    def _open_failure(self, err: Exception) -> Exception:
        """The typed error a failed open is reported (and remembered) as."""
        if isinstance(err, PersistenceError):
            return err
        if isinstance(err, OSError):
            code = errno.errorcode.get(err.errno or 0, "EIO")
            return PersistenceError(f'cannot open session database "{self.path}": {code}: {err.strerror}')
        if isinstance(err, sqlite3.Error):
            return PersistenceError(f'cannot open session database "{self.path}": {err}')
        return err

    def _open(self) -> sqlite3.Connection:
        if not self._memory:
            self._validate_path()
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | getattr(os, "O_CLOEXEC", 0), 0o600)
            except FileExistsError:
                pass
            else:
                os.close(fd)
            self._validate_path()
        conn = open_database(self.path, self.journal_mode, self.busy_timeout_ms)
        try:
            try:
                row = conn.execute(SQL["select_store_identity"]).fetchone()
            except sqlite3.OperationalError:
                row = None  # e.g. a store id that is not UTF-8 text
            store_id = row[0] if row is not None else None
            if not codec.is_uuid(store_id):
                raise PersistenceError(f'session database at "{self.path}" has no valid store identity')
            if self._memory:
                self._store_identity = f"memory:store:{store_id}"
            else:
                info = os.stat(self.path)
                birth = getattr(info, "st_birthtime_ns", None)
                if birth is None:
                    birth_s = getattr(info, "st_birthtime", None)
                    birth = int(birth_s * 1_000_000_000) if birth_s is not None else 0
                self._store_identity = f"file:{info.st_dev}:{info.st_ino}:{birth}:store:{store_id}"
        except BaseException:
            conn.close()
            raise
        return conn

    # --- low-level helpers (caller holds _mutex) ---------------------------------------------------

    def _fetchall(self, conn: sqlite3.Connection, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        """``fetchall`` that survives TEXT values which are not UTF-8 (a foreign writer's damage).

        Python's ``sqlite3`` fails the whole query on such a value; re-reading with raw bytes lets the
        row decoders report the one damaged row (torn or committed) like any other malformed row.
        """
        try:
            return conn.execute(sql, params).fetchall()
        except sqlite3.OperationalError as err:
            if "Could not decode to UTF-8" not in str(err):
                raise
        conn.text_factory = _RawText
        try:
            rows = conn.execute(sql, params).fetchall()
        finally:
            conn.text_factory = str
        return [tuple(_clean_text(value) for value in row) for row in rows]

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

    def _revision(self, incarnation: str, revision: int) -> str:
        return f"{self._store_identity}:incarnation:{incarnation}:revision:{revision}"

    def _session_row(self, conn: sqlite3.Connection, session_id: str) -> tuple[Any, ...] | None:
        rows = self._fetchall(conn, SQL["select_session"], (session_id,))
        return rows[0] if rows else None

    def _decode_session(self, row: tuple[Any, ...]) -> tuple[dict[str, Any], str]:
        """Header and revision of a session row; invalid metadata is corruption, never exposed."""
        try:
            header, incarnation, revision = codec.decode_session_row(row)
        except codec.StorageRowError as err:
            sid = row[0] if isinstance(row[0], str) else repr(row[0])
            raise SessionPersistenceCorruptionError(
                f'stored session "{sid}" has invalid metadata: {err} — {self.path}. {codec.REMEDY}',
                location=self.path,
            ) from None
        return header, self._revision(incarnation, revision)

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
        """Run ``body`` in ``BEGIN IMMEDIATE`` after the ownership re-check; roll back on any error."""
        with self._mutex:
            conn = self._connection()
            try:
                conn.execute(SQL["begin_immediate"])
                self._validate_for_mutation(conn)
                body(conn)
                conn.execute(SQL["commit"])
            except BaseException as err:
                self._rollback(conn, op, err)
                if isinstance(err, sqlite3.Error):
                    raise PersistenceError(f"{self.name} {op} failed: {err}") from err
                raise

    def _read(self, body: Callable[[sqlite3.Connection], Any]) -> Any:
        """Run ``body`` in one deferred read transaction, so all its queries see one snapshot."""
        with self._mutex:
            conn = self._connection()
            try:
                conn.execute(SQL["begin_deferred"])
                result = body(conn)
                conn.execute(SQL["commit"])
            except BaseException as err:
                self._rollback(conn, "read", err)
                if isinstance(err, sqlite3.Error):
                    raise PersistenceError(f"{self.name} read failed: {err}") from err
                raise
            return result

    # --- protocol --------------------------------------------------------------------------------

    def load_stored(self, session_id: str) -> StoredPrefix | None:
        """The valid stored prefix and the torn tail's first physical seq (``loadStored``). Never writes."""

        def body(conn: sqlite3.Connection) -> tuple[tuple[Any, ...], list[Any]] | None:
            session = self._session_row(conn, session_id)
            if session is None:
                return None
            return session, self._fetchall(conn, SQL["select_rows"], (session_id,))

        found = self._read(body)
        if found is None:
            return None
        session, rows = found
        meta, revision = self._decode_session(session)
        events, torn_from = codec.scan_rows(rows, 0, location=self.path, limits=self._limits)
        return StoredPrefix(meta=meta, events=events, revision=revision, torn_marker=torn_from)

    def load_stored_from(self, session_id: str, from_seq: int) -> StoredPrefix | None:
        """Seek read (``loadStoredFrom``): the valid prefix's events with ``seq >= from_seq``.

        Only the rows from ``from_seq`` (plus a packed row that straddles it) are decoded, so a suffix
        read of a long log costs the suffix. A torn tail is simply cut (``torn_marker`` stays ``None``);
        committed corruption inside the span still raises. Never writes.
        """
        if type(from_seq) is not int or not 0 <= from_seq <= codec.MAX_SAFE:
            raise PersistenceError(f"fromSeq must be a non-negative safe integer, got {from_seq!r}")

        def body(conn: sqlite3.Connection) -> tuple[tuple[Any, ...], list[Any], int] | None:
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
        events, _ = codec.scan_rows(rows, base, location=self.path, limits=self._limits)
        if base < from_seq:
            events = [event for event in events if event["seq"] >= from_seq]
        return StoredPrefix(meta=meta, events=events, revision=revision, torn_marker=None)

    def read_revision(self, session_id: str) -> str | None:
        """The session row's revision string (no transaction, no event rows read)."""
        with self._mutex:
            conn = self._connection()
            try:
                session = self._session_row(conn, session_id)
            except sqlite3.Error as err:
                raise PersistenceError(f"{self.name} read failed: {err}") from err
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
        header = None if materialized else _header_columns(meta)
        rows = codec.encode_batch(session_id, events)
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
        expected, torn_from = codec.scan_next_seq(
            rows, base, location=self.path, last_seq_of=self._last_seq_of, limits=self._limits
        )
        if torn_from is not None:
            raise PersistenceError(f"session {session_id} has an invalid physical tail at seq {torn_from}")
        return expected

    def commit_repair(self, meta: Mapping[str, Any], torn_marker: Any, closers: Sequence[WireEvent]) -> None:
        """Delete the torn tail (iff marked) and append the closers in ONE transaction (``commitRepair``).

        The whole log is rescanned under the write lock: a marker that no longer names the current tail,
        a tail the caller did not see, or closers that do not continue the preserved prefix mean another
        writer got there first, and the repair is refused as stale.
        """
        if torn_marker is None and not closers:
            return
        session_id = _session_id(meta)
        if torn_marker is not None and (type(torn_marker) is not int or torn_marker < 0):
            raise PersistenceError(f"session {session_id} repair marker must be a physical seq, got {torn_marker!r}")
        rows = [codec.encode_scalar(session_id, closer) for closer in closers]
        for index in range(1, len(rows)):
            if rows[index][1] != rows[index - 1][1] + 1:
                raise PersistenceError(f"session {session_id} repair closers are not contiguous")

        def body(conn: sqlite3.Connection) -> None:
            if self._session_row(conn, session_id) is None:
                raise PersistenceError(f"session {session_id} metadata row is missing")
            stored = self._fetchall(conn, SQL["select_rows"], (session_id,))
            preserved, torn_from = codec.scan_rows(stored, 0, location=self.path, limits=self._limits)
            if torn_marker is not None:
                if torn_from != torn_marker:
                    raise PersistenceError(
                        f"session {session_id} repair is stale: physical tail no longer starts at seq {torn_marker}"
                    )
                conn.execute(SQL["delete_events_from"], (session_id, torn_marker))
            elif torn_from is not None:
                raise PersistenceError(f"session {session_id} repair omitted current torn tail at seq {torn_from}")
            expected = int(preserved[-1]["seq"]) + 1 if preserved else 0
            if rows and rows[0][1] != expected:
                raise PersistenceError(
                    f"session {session_id} repair is stale: closer starts at seq {rows[0][1]}, "
                    f"stored next seq is {expected}"
                )
            if rows:
                conn.executemany(SQL["insert_event"], rows)
            conn.execute(SQL["bump_revision"], (session_id,))

        self._write("repair", body)

    def list_sessions(self) -> list[SessionListing]:
        """Every stored session's header, sorted by id; a damaged row is reported, never fatal."""
        with self._mutex:
            conn = self._connection()
            try:
                rows = self._fetchall(conn, SQL["select_sessions"], ())
            except sqlite3.Error as err:
                raise PersistenceError(f"{self.name} list failed: {err}") from err
        location = self.path
        identity = self._store_identity
        decode = codec.decode_session_row
        listings: list[SessionListing] = []
        for row in rows:
            try:
                header, incarnation, revision = decode(row)
            except codec.StorageRowError as err:
                sid = row[0]
                if isinstance(sid, codec.InvalidText):
                    sid = sid.raw.decode("utf-8", "replace")
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
                revision=f"{identity}:incarnation:{incarnation}:revision:{revision}",
                location=location,
            )
            version = header["version"]
            if version != 0:
                listing.error_code = SessionFormatUnsupportedError.code
                listing.error_message = _version_refusal(header["id"], version)
            listings.append(listing)
        listings.sort(key=_listing_id)
        return listings

    def read_raw(self, session_id: str) -> RawArtifact | None:
        raise PersistenceError("this session persistence backend does not expose raw artifacts")

    def locate(self, meta: Mapping[str, Any]) -> str | None:
        return None

    def lock_writer(self, meta: Mapping[str, Any]) -> _WriterLock:
        """Take the session's advisory writer lock or raise :class:`SessionLockedError` at once.

        ``flock`` belongs to the open file description, so a second backend instance in this process
        conflicts exactly like another process does; the kernel drops it if the holder dies.
        """
        session_id = _session_id(meta)
        if self._closed:
            raise PersistenceError(f"{self.name} backend is closed")
        if self._memory:
            with self._locks_mutex:
                if session_id in self._memory_locks:
                    raise SessionLockedError(f'session "{session_id}" is already open for writing')
                self._memory_locks.add(session_id)
                memory_lock = _MemoryWriterLock(self, session_id)
                self._held_locks.add(memory_lock)
            return memory_lock
        folder = self.path + ".locks"
        try:
            os.makedirs(folder, mode=0o700, exist_ok=True)
            fd = os.open(
                os.path.join(folder, encode_segment(session_id) + ".lock"),
                os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0),
                0o600,
            )
        except OSError as err:
            raise PersistenceError(f'cannot create the writer lock of session "{session_id}": {err}') from err
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise SessionLockedError(
                f'session "{session_id}" is already open for writing (another process or store holds its lock)'
            ) from None
        except BaseException:
            os.close(fd)
            raise
        file_lock = _FileWriterLock(self, fd)
        with self._locks_mutex:
            self._held_locks.add(file_lock)
        return file_lock

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


def _initialise_or_check(conn: sqlite3.Connection, path: str) -> None:
    conn.execute(SQL["begin_immediate"])
    try:
        version = conn.execute(SQL["user_version"]).fetchone()[0]
        application_id = conn.execute(SQL["application_id"]).fetchone()[0]
        objects = conn.execute(SQL["count_user_objects"]).fetchone()[0]
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


_MAX_SAFE: Final = 2**53 - 1


def _optional(meta: Mapping[str, Any], key: str, check: Callable[[Any], bool], what: str) -> Any:
    value = meta.get(key)
    if value is None and key not in meta:
        return None
    if not check(value):
        raise PersistenceError(f"session header {key} must be {what}, got {value!r}")
    return value


def _nonneg_safe(value: Any) -> bool:
    return type(value) is int and 0 <= value <= _MAX_SAFE


def _header_columns(meta: Mapping[str, Any]) -> tuple[Any, ...]:
    """The ``sessions`` metadata columns of a header, refusing values the typed columns would mangle.

    Keys outside the header vocabulary have no column and are not stored (as in the original).
    """
    session_id = _session_id(meta)
    version = meta.get("version")
    if type(version) is not int or abs(version) > _MAX_SAFE:
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
