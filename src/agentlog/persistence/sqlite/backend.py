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

This module is the backend's core (construction, loads, appends, repair); the other parts are mixins
and helpers in private modules of their own: ``_schema`` (statements, schema checks, opening a database,
a header's columns), ``_errors`` (error mapping), ``_connection`` (the connection, its transactions and
row fetches), ``_locks`` (writer locks and the ids they limit), ``_listing`` (listing) and ``_staging``
(staged sessions); ``_codec`` is the row codec.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Final

from ...errors import (
    PersistenceError,
    SessionPersistenceCorruptionError,
    StoreNotFoundError,
)
from ...kernel.events import SessionHeader
from ...kernel.jsoncodec import DEFAULT_MAX_DEPTH
from ...kernel.packedrun import ChunkRun, compact_runs_requested
from .._headroom import (
    POOL_FACTOR,
    STRING_FACTOR,
    VALUE_BYTES,
    address_space_limited,
    ensure_headroom,
    parse_reserve,
)
from ..backend import (
    DeleteStep,
    PartialRead,
    RawArtifact,
    StoredPrefix,
    StoredStream,
    WireEvent,
    batched_pages,
    check_reader_limits,
)
from ..storage_errors import sqlite_storage_code
from ..store_identity import sqlite_file_identity
from . import _codec as codec
from ._listing import _Listing
from ._locks import _WriterLock
from ._schema import (
    APPLICATION_ID,
    DEFAULT_BUSY_TIMEOUT_MS,
    JOURNAL_MODES,
    MAX_BUSY_TIMEOUT_MS,
    MEMORY,
    SCHEMA_VERSION,
    SQL,
    _header_columns,
    _session_id,
)
from ._schema import select_journal_mode as select_journal_mode
from ._staging import _Staging

__all__ = [
    "APPLICATION_ID",
    "DEFAULT_BUSY_TIMEOUT_MS",
    "JOURNAL_MODES",
    "SCHEMA_VERSION",
    "SqliteBackend",
    "sqlite_storage_code",
]

_BLOB_BYTES_PER_VALUE: Final = 8
"""Bytes of decompressed text per value assumed of a compressed row (a large payload: mostly strings)."""

_UNKNOWN: Final = object()
_READ_BATCH_ROWS: Final = 512  # rows per fetch while a load decodes (see SqliteBackend._row_batches)
_SPAN_MEMO_SIZE: Final = 8192


# --- the backend -----------------------------------------------------------------------------------


class SqliteBackend(_Listing, _Staging):
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

    # --- protocol --------------------------------------------------------------------------------

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

        Under an address-space limit (``ulimit -v``) what parsing the rows can take
        (:func:`~agentlog.persistence._headroom.parse_reserve`) is checked against the room left *before*
        parsing: orjson does not survive every allocation failure (it can crash the process instead of
        raising), so a load that cannot fit is refused up front with :class:`ResourceExhaustedError`.
        Without a limit this costs two ``getrlimit`` calls per load.
        """
        if address_space_limited():
            ensure_headroom(*self._parse_reserve(rows), f'session "{session_id}" in "{self.path}"')
        try:
            return decode()
        except MemoryError as err:
            failure = self._typed(err, "read")
            raise failure from None

    @staticmethod
    def _parse_reserve(rows: Sequence[Any]) -> tuple[int, int]:
        """What decoding ``rows`` can take (:func:`~agentlog.persistence._headroom.parse_reserve`), and
        their stored data's size."""
        texts: list[str] = []
        blobs = longest = 0
        for row in rows:
            value = row[3] if len(row) > 3 else None
            if type(value) is str:
                texts.append(value)
            elif type(value) is bytes:  # compressed: its structure is unknown until it is decompressed
                size = codec.decoded_size(value)
                blobs += size
                longest = max(longest, size)
        reserve = (
            parse_reserve(texts, one_call=False)
            + (STRING_FACTOR + VALUE_BYTES // _BLOB_BYTES_PER_VALUE) * blobs
            + POOL_FACTOR * longest
        )
        return reserve, sum(map(len, texts)) + blobs

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

    def load_stored(self, session_id: str) -> StoredPrefix[None] | None:
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
    ) -> tuple[SessionHeader, str, list[Any], SessionPersistenceCorruptionError | None] | None:
        """Header, revision, the decodable prefix of all rows and the damage ending it; ``None`` if absent.

        The rows are decoded batch by batch inside the read (:meth:`_row_batches`), so the connection
        lock is held while they decode. What a failure surfaces as is unchanged from fetching every row
        first: page damage anywhere in the rows wins (after a damaged row or damaged session metadata
        the rest of the rows are still read, only not decoded), then the session metadata, then the
        first damaged row. Under an address-space limit the rows are fetched whole first instead, since
        the up-front headroom check (:meth:`_decoded`) needs every row's size before anything is parsed.
        """
        if address_space_limited():
            loaded = self._load(session_id)
            if loaded is None:
                return None
            session, rows = loaded
            try:
                meta, revision = self._decode_session(session)
            except MemoryError as err:
                raise self._typed(err, "read") from None
            events, damage = self._decoded(
                session_id,
                rows,
                lambda: codec.scan_prefix(rows, 0, location=self.path, limits=self._limits, compact=compact),
            )
            return meta, revision, events, damage
        self._check_bindable(session_id)

        def body(
            conn: sqlite3.Connection,
        ) -> tuple[SessionHeader, str, list[Any], SessionPersistenceCorruptionError | None] | Exception | None:
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

    def stream_stored(self, session_id: str, batch_bytes: int = 1 << 21) -> StoredStream | None:
        """The log's events a batch at a time (:class:`~agentlog.persistence.backend.StreamsStored`), packed
        rows kept packed as the coordinator's cold load keeps them. Never writes.

        Each page of rows is fetched in a short read transaction of its own (keyed by seq, so a page costs
        its rows whatever the log's length) and decoded before the next one is fetched: the lock is never
        held while the caller works on a batch, and the decoded log never exists whole. Rows are never
        rewritten once committed, so pages read at different moments join into the log of one revision —
        unless the session changed meanwhile (an append, a deletion): the revision is read again once the
        rows are exhausted, and a different one raises :class:`~agentlog.errors.SessionTailChangedError`
        (read it again). Damage raises the row's typed error; a caller that reports it reads the log whole.
        """
        self._check_bindable(session_id)

        def head(conn: sqlite3.Connection) -> tuple[Any, ...] | None:
            return None if self._pristine else self._session_row(conn, session_id)

        session = self._locked_read(head)
        if session is None:
            return None
        meta, revision = self._decode_session(session)
        batches = batched_pages(
            self._stream_pages(session_id),
            batch_bytes,
            lambda: self.read_revision(session_id) == revision,
            f'session "{session_id}" in "{self.path}" changed while it was read a batch at a time; read it again',
            self.path,
        )
        return StoredStream(meta=meta, revision=revision, batches=batches)

    def _stream_pages(self, session_id: str) -> Iterator[tuple[list[Any], int]]:
        expected = 0
        while True:
            events, size = self._stream_page(session_id, expected)
            if not events:
                return
            last = events[-1]
            expected = last.seq0 + last.n if last.__class__ is ChunkRun else int(last["seq"]) + 1
            yield events, size

    def _stream_page(self, session_id: str, start: int) -> tuple[list[Any], int]:
        """The events of one page of rows from seq ``start`` (packed rows packed), and the rows' text size."""

        def page(conn: sqlite3.Connection) -> list[Any]:
            return self._fetchall(conn, SQL["select_rows_page"], (session_id, start, self._read_batch_rows))

        rows = self._read(page)
        if not rows:
            return [], 0
        events = self._decoded(
            session_id,
            rows,
            lambda: codec.scan_rows(rows, start, location=self.path, limits=self._limits, compact=True),
        )
        return events, sum(len(row[3]) for row in rows if row[3] is not None)

    def load_stored_from(self, session_id: str, from_seq: int) -> StoredPrefix[None] | None:
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

    def commit_repair(self, meta: Mapping[str, Any], torn_marker: None, closers: Sequence[WireEvent]) -> None:
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

    def delete_session(self, session_id: str, step: DeleteStep | None = None) -> bool:
        """Remove the session's row and its event rows in one ``BEGIN IMMEDIATE`` transaction.

        A reader sees the session whole until ``COMMIT`` and not at all after it; a crash before the
        commit rolls everything back (the journal), so no half-deleted session exists at any moment.
        """
        self.validate_session_id(session_id)
        found: list[bool] = []

        def body(conn: sqlite3.Connection) -> None:
            if step is not None:
                step("events")
            conn.execute(SQL["delete_session_events"], (session_id,))
            if step is not None:
                step("session")
            found.append(conn.execute(SQL["delete_session"], (session_id,)).rowcount == 1)
            if step is not None:
                step("commit")

        if step is not None:
            step("begin")
        self._write("delete", body)
        return found[0]

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
