"""SQLite store: the connection (path checks, lazy opens, read and write transactions, row fetches).

One connection per backend, guarded by a lock and opened on first use (a failed open is retried by the
next operation); read-only opens that read a WAL file as an immutable snapshot and redo a read that
raced a writer; ``BEGIN IMMEDIATE`` writes that re-check ownership and that the path still names the
file; row fetches that survive TEXT that is not UTF-8; the session row and its revision string.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import stat
import threading
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Final, cast

from ...errors import PersistenceError, SessionPersistenceCorruptionError, StorageAccessError, StoreNotFoundError
from ...kernel.events import SessionHeader
from ..paths import file_kind
from ..storage_errors import SQLITE_CANTOPEN, SQLITE_IOERR, on_read_only_file_system, sqlite_primary
from . import _codec as codec
from ._errors import (
    SQLITE_CORRUPT,
    SQLITE_NOMEM,
    SQLITE_NOTADB,
    _as_exception,
    _ErrorMapping,
)
from ._schema import (
    APPLICATION_ID,
    EXPECTED_SCHEMA,
    SCHEMA_VERSION,
    SQL,
    _schema_signature,
    open_database,
    open_read_only_database,
)

_TAIL_COLUMNS: Final = 7  # seq, type, time, data, source_event_seqs, surface_op, ignorable of the tail row


class _Connection(_ErrorMapping):
    """The connection and its transactions (a mixin of :class:`~agentlog.persistence.sqlite.backend.SqliteBackend`,
    whose constructor sets the state below)."""

    journal_mode: str
    busy_timeout_ms: int
    read_only: bool
    _memory: bool
    _limits: codec.Limits
    _mutex: threading.Lock
    _conn: sqlite3.Connection | None
    _closed: bool
    _file_id: tuple[int, int] | None
    _pristine: bool
    _snapshot: tuple[int, int, int] | None
    _shared: bool
    _store_identity: str
    _schema_seen: list[Any]
    _schema_cookie: Any

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
                if sqlite_primary(err) not in (SQLITE_NOMEM, SQLITE_IOERR, SQLITE_CORRUPT, SQLITE_NOTADB):
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
            if sqlite_primary(err) != SQLITE_CANTOPEN or not on_read_only_file_system(self.path):
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

    def _decode_session(self, row: tuple[Any, ...]) -> tuple[SessionHeader, str]:
        """Header and revision of a session row; invalid metadata is corruption, never exposed."""
        try:
            header, incarnation, revision = codec.decode_session_row(row[:-_TAIL_COLUMNS])
        except codec.StorageRowError as err:
            sid = row[0] if isinstance(row[0], str) else repr(row[0])
            raise SessionPersistenceCorruptionError(
                f'stored session "{sid}" has invalid metadata: {err} — {self.path}. {codec.REMEDY}',
                location=self.path,
            ) from None
        return cast("SessionHeader", header), self._revision(incarnation, revision, row[-_TAIL_COLUMNS:])

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


def _tail_digest(tail: Sequence[Any]) -> str:
    """A digest of the tail row's columns (``none`` for a session without rows), for the revision.

    The hash is fed :func:`_tail_encoding`'s parts one by one, so the row's large values (a chunk's data is
    often hundreds of KB) are hashed in place: a revision read needs no copy of them, which matters under
    an address-space limit (``ulimit -v``) and in a listing of thousands of sessions.
    """
    if all(value is None for value in tail):
        return "none"
    digest = hashlib.blake2b(digest_size=12)
    for part in _tail_encoding(tail):
        digest.update(part)
    return digest.hexdigest()


def _tail_encoding(tail: Sequence[Any]) -> Iterator[bytes]:
    """An injective encoding of a row's columns: a type tag per value, and a length before every byte
    string, so no two different rows (``sqlite3`` returns ``None``, ``int``, ``float``, ``str``, ``bytes``,
    and the codec's :class:`codec.InvalidText` marker) share one. ``float.hex`` keeps ``-0.0`` apart."""
    for value in tail:
        kind = type(value)
        if value is None:
            yield b"n"
        elif kind is bytes:
            yield b"b%d:" % len(value)
            yield value
        elif kind is str:
            raw = value.encode("utf-8", "surrogatepass")
            yield b"s%d:" % len(raw)
            yield raw
        elif kind is int:
            yield b"i%d;" % value
        elif kind is float:
            yield b"f" + value.hex().encode() + b";"
        elif kind is codec.InvalidText:
            yield b"x%d:" % len(value.raw)
            yield value.raw
        else:  # not a value sqlite3 returns; still tagged and delimited
            text = repr(value).encode("utf-8", "surrogatepass")
            yield b"r%d:" % len(text)
            yield text


def _file_state(path: str) -> tuple[int, int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return (info.st_ino, info.st_size, info.st_mtime_ns)


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
