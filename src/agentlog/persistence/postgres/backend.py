"""PostgreSQL session backend: many hosts, one store.

Design points, each pinned by a test under ``tests/postgres/``:

* **Nothing happens before the first operation.** The constructor only parses the DSN; the first
  operation connects, then creates the versioned schema (under a transaction-scoped advisory lock, so
  two hosts starting at once create it once) or checks an existing one. A schema that holds tables
  agentlog did not create, or a newer schema version, is refused untouched (``DATABASE_SCHEMA``).
* **Optimistic concurrency.** ``append_batch`` commits only if the batch starts at the stored next
  seq; otherwise ``SESSION_CONFLICT`` names the expected and found seq and nothing of the batch is
  stored. The usual batch is one autocommit statement (advance-if-next-seq, insert, notify: one round
  trip); when it does not apply, a transaction that locks the session row says why. A batch whose
  commit acknowledgement was lost (the connection died during ``COMMIT``) is recognised on retry: when
  the stored rows at the batch's seqs are byte-identical to it, the retry succeeds without writing.
* **Bytes are the kernel's; chunk runs are packed.** An event row holds the JSON bytes ``event_json``
  produced once; a run of streamed deltas is one row in the JSONL codec's packed form
  (``kernel.chunkrows``), keyed by its first seq, so a typical step writes and reads a fifth of the
  rows. The header is stored as its JSON bytes too, with the lineage fields copied into columns.
* **The writer lease is a session-level advisory lock on a dedicated connection, which also does the
  session's writes.** A second holder gets ``SESSION_LOCKED`` at once; the lease ends with
  ``release()`` or when the connection dies (a crashed host holds nothing). Because the writes share
  the lock's connection, the server frees the lock only after that backend processed everything the
  dead writer sent: a new holder never sees an old ``COMMIT`` land under it. Readers never take it.
* **Every commit notifies.** ``pg_notify('agentlog_events', session_id)`` runs inside the append
  transaction, so a listener is woken only by committed events; :meth:`PostgresBackend.wait_for_change`
  waits on it (a hint: a lost notification only delays a poller).
* **A lost connection is typed.** Connection failures, a terminated backend and a statement timeout
  become ``DATABASE_UNAVAILABLE`` (the connection is discarded; nothing unacknowledged is committed
  twice), with what to check.
* **A host that vanishes loses its lease.** A partitioned host closes nothing; every connection asks
  the server to probe its client and give up on it after about twice ``call_timeout_s`` of silence
  (TCP keepalives and user timeout, :mod:`.keepalive`), which ends its backend and frees its lease for
  another host. When the partitioned host comes back, its next write re-takes the lease if it is still
  free, else is ``SESSION_LOCKED``.
* **No call waits for ever.** Every wait on the server (connect, each statement, ``COMMIT``, the lease,
  ``LISTEN``) has a client-side deadline (``call_timeout_s``): a server that accepts the connection but
  stops answering (a stopped or swapped-out backend, a dead network path the kernel has not noticed) is
  ``DATABASE_UNAVAILABLE`` once it passes, however the DSN's keepalives are set, and the connection is
  discarded. A write whose outcome that leaves unknown (its statement or ``COMMIT`` was sent) is found
  out by the retry: the batch is appended only at the stored next seq, and a batch already stored byte
  for byte is acknowledged without being written again. A lease whose connection was abandoned so is
  re-taken only once the server has ended the old backend (it is asked to): until then the old backend
  could still commit, so the retry is ``DATABASE_UNAVAILABLE``, not ``SESSION_LOCKED``.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import re
import select
import struct
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Final

import psycopg
from psycopg import conninfo, pq
from psycopg.abc import PQGen
from psycopg.adapt import Dumper

from ...errors import (
    ChunkRowError,
    DatabaseAuthError,
    DatabaseSchemaError,
    DatabaseUnavailableError,
    InvalidSessionIdError,
    PersistenceError,
    SessionConflictError,
    SessionFormatUnsupportedError,
    SessionLockedError,
    SessionPersistenceCorruptionError,
    StorageAccessError,
    StoreNotFoundError,
)
from ...kernel._gc import gc_paused
from ...kernel.chunkrows import CHUNK_ROW_TAGS, decode_storage_record, decode_storage_run, pack_chunk_runs
from ...kernel.events import SessionHeader
from ...kernel.jsoncodec import dumps, loads
from ...kernel.jsonvalue import MAX_SAFE_INTEGER
from ...kernel.packedrun import compact_runs_requested
from .. import host_cache
from .._headroom import address_space_limited, ensure_headroom, parse_reserve
from ..backend import (
    DeleteStep,
    PartialRead,
    RawArtifact,
    SessionListing,
    StoredPrefix,
    StoredStream,
    WireEvent,
    batched_pages,
    event_json,
)
from ..writer_lock import locked_error
from . import _sql
from ._sql import (
    APPLICATION,
    EXPECTED_COLUMNS,
    NOTIFY_CHANNEL,
    READABLE_SCHEMA_VERSIONS,
    SCHEMA_VERSION,
    STATE_TABLE,
    Statements,
)
from .keepalive import keepalive_kwargs

__all__ = [
    "DEFAULT_SCHEMA",
    "MAX_SESSION_ID_BYTES",
    "SCHEMA_VERSION",
    "PostgresBackend",
    "describe_dsn",
    "refused_login",
]

DEFAULT_SCHEMA: Final = "agentlog"
DEFAULT_POOL_SIZE: Final = 4
_STREAM_PAGE_ROWS: Final = 512
"""Rows per statement of a streamed read (:meth:`PostgresBackend.stream_stored`)."""
DEFAULT_CONNECT_TIMEOUT_S: Final = 5
DEFAULT_CALL_TIMEOUT_S: Final = 60.0
"""The client-side deadline of one wait on the server when no statement timeout is set (seconds)."""
CALL_TIMEOUT_GRACE_S: Final = 5.0
"""With a statement timeout, the deadline is that timeout plus this: the server's own cancel comes first."""
MAX_SESSION_ID_BYTES: Final = 1000
"""Longest session id (UTF-8 bytes): it is a btree key and the ``pg_notify`` payload (< 8000 bytes)."""
_SCHEMA_NAME: Final = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_INIT_LOCK_KEY: Final = 0x6167_656E_746C_6F67 - (1 << 63)  # "agentlog" as a signed bigint
_CONNECTION_ERRORS: Final = (psycopg.OperationalError, psycopg.InterfaceError)


def _lock_key(schema: str, session_id: str) -> int:
    """The advisory-lock key of a session: 64 bits of a hash of (schema, id), as a signed bigint."""
    digest = hashlib.blake2b(f"{schema}\0{session_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def _lease_holder(conn: psycopg.Connection[Any], key: int) -> dict[str, Any] | None:
    """Who holds the advisory lock ``key``, as the server sees it (``pg_locks``, ``pg_stat_activity``).

    The server knows the lease connection's backend pid, client host and application name, and when
    the connection started (``acquiredAt``: the lease is taken right after connecting); not the
    client's own process id (``pid`` is ``None``). Best-effort: ``None`` when it cannot be read.
    """
    try:
        row = conn.execute(_sql.LEASE_HOLDER, ((key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF)).fetchone()
    except psycopg.Error:
        return None
    if row is None:
        return None
    backend_pid, application, client_address, client_hostname, started_ms = row
    return {
        "pid": None,
        "hostname": client_hostname or client_address or "localhost (a Unix-domain socket)",
        "acquiredAt": started_ms,
        "backendPid": backend_pid,
        "application": application,
    }


def _describe(params: Mapping[str, Any]) -> str:
    """The DSN without its password: what an error message may show."""
    host = params.get("host") or params.get("hostaddr") or "localhost"
    port = params.get("port") or "5432"
    dbname = params.get("dbname") or params.get("user") or "(default)"
    return f"postgresql://{host}:{port}/{dbname}"


_AUTH_SQLSTATES: Final = frozenset({"28P01", "28000"})  # invalid_password, invalid_authorization_specification
_AUTH_WORDING: Final = re.compile(
    r"password authentication failed|no password supplied|authentication failed for user"
    r'|no pg_hba\.conf entry|pg_hba\.conf rejects|role "[^"]*" does not exist',
    re.IGNORECASE,
)
"""libpq's and the server's English wording of a refused login: the fallback when neither the SQLSTATE
(libpq keeps none for a failed connection attempt) nor libpq's needs-password flag tells."""
_PASSWORD_FILE: Final = re.compile(r'password retrieved from file ("[^"]*")')
SETUP_HINT: Final = 'see docs/postgres.md, "Setting up a server"'


def refused_login(err: BaseException, location: str) -> DatabaseAuthError | None:
    """``DATABASE_AUTH`` when ``err`` is the server refusing the login, else ``None``.

    Told apart from an unreachable server because retrying a refused login only repeats it: the
    follow loop reconnects on ``DATABASE_UNAVAILABLE`` and must stop on this. agentlog never asks for
    a password (libpq never reads a terminal), so a missing one is this error at once.
    """
    if not isinstance(err, psycopg.OperationalError) or isinstance(err, _NoAnswer):
        return None
    pgconn = err.pgconn
    needs_password = pgconn is not None and bool(pgconn.needs_password)
    text = str(err).strip()
    if not (needs_password or err.sqlstate in _AUTH_SQLSTATES or _AUTH_WORDING.search(text)):
        return None
    lines = text.splitlines() or [type(err).__name__]
    # The server's (or libpq's) own words, after "connection to server at ..., port N failed: ".
    reason = " ".join(lines[0].rsplit(" failed: ", 1)[-1].split())
    if needs_password:
        remedy = (
            "no password was given: put the role's password in the DSN "
            "(postgresql://USER:PASSWORD@HOST:PORT/DATABASE), in PGPASSWORD or in ~/.pgpass (mode 0600)"
        )
    elif "pg_hba" in text or "does not exist" in text:
        remedy = "check the user name, and the server's pg_hba.conf rules for this host, user and database"
    else:
        source = _PASSWORD_FILE.search(text)
        given = f"the password from {source[1]}" if source else "the password given"
        remedy = (
            f"{given} is not the role's: correct it in the DSN, PGPASSWORD or ~/.pgpass (libpq takes the "
            "first of them that has one)"
        )
    return DatabaseAuthError(
        f"PostgreSQL at {location} refused the login ({reason}): {remedy}; {SETUP_HINT}. Nothing was read "
        "or written; agentlog never prompts for a password"
    )


def describe_dsn(dsn: str) -> str:
    """:func:`_describe` of a DSN as given (a malformed one is named as such, never shown: it may hold a password)."""
    try:
        return _describe(conninfo.conninfo_to_dict(dsn))
    except psycopg.Error:
        return "(a malformed DSN)"


def _lineage(meta: Mapping[str, Any]) -> tuple[Any, ...]:
    """The header fields copied into columns (``None`` where the value does not fit the column)."""

    def integer(key: str) -> int | None:
        value = meta.get(key)
        return value if type(value) is int and -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER else None

    def text(key: str) -> str | None:
        value = meta.get(key)
        return value if type(value) is str and "\0" not in value else None

    return (
        integer("version"),
        integer("createdAt"),
        text("cwd"),
        text("parentSession"),
        integer("seedLength"),
        text("origin"),
        integer("delegationDepth"),
        text("agentPreset"),
    )


_MAX_PENDING_NOTIFICATIONS: Final = 4096
"""Most sessions remembered as notified while waiting for another (the listener hears every session)."""

_FAST_PATH_ROWS: Final = 2048
"""Largest batch (in stored rows) sent as one statement with array parameters; bigger ones use COPY."""


class _NoAnswer(psycopg.OperationalError):
    """The server did not answer one wait within the client-side deadline; the connection is closed."""


class _DeadlineConnection(psycopg.Connection[Any]):
    """A connection whose every wait on the server ends at ``call_timeout_s`` (``None``: no deadline).

    psycopg runs each statement, ``COMMIT`` and ``COPY`` block through :meth:`wait`; a wait that passes
    the deadline leaves the protocol mid-exchange, so the connection is closed at once (later calls on
    it fail fast instead of waiting again, e.g. a rollback on the way out of a transaction block). A
    wait that brings its own timeout (``notifies(timeout=...)``) keeps it: it is already bounded.
    """

    call_timeout_s: float | None = None

    def wait(self, gen: PQGen[Any], interval: float = 0.1, timeout: float | None = None) -> Any:
        deadline = self.call_timeout_s
        if timeout is not None or deadline is None:
            return super().wait(gen, interval, timeout)
        try:
            return super().wait(gen, interval, deadline)
        except psycopg.errors._WaitTimeout:
            self.pgconn.finish()  # not close(): the caller holds the connection's lock
            raise _NoAnswer(f"the server did not answer within {deadline:g} s") from None


class _Int8Array(list[int]):
    """Row seqs bound as ``bigint[]`` by :class:`_Int8ArrayDumper`."""


class _ByteaArray(list[bytes]):
    """Row bodies bound as ``bytea[]`` by :class:`_ByteaArrayDumper`."""


_ARRAY_HEADER = struct.Struct(">iiiii")  # dimensions, has nulls, element type, length, lower bound
_LENGTH = struct.Struct(">i")
_INT8_OID, _INT8_ARRAY_OID, _BYTEA_OID, _BYTEA_ARRAY_OID = 20, 1016, 17, 1001


class _Int8ArrayDumper(Dumper):
    """An append's seqs in PostgreSQL's binary array format, written directly: psycopg's generic list
    dumper inspects every list for its element type on every execution (a tenth of a per-step append)."""

    format = pq.Format.BINARY
    oid = _INT8_ARRAY_OID

    def dump(self, obj: Any) -> bytes:
        if not obj:
            return struct.pack(">iii", 0, 0, _INT8_OID)
        return _ARRAY_HEADER.pack(1, 0, _INT8_OID, len(obj), 1) + struct.pack(
            ">" + "iq" * len(obj), *itertools.chain.from_iterable((8, value) for value in obj)
        )


class _ByteaArrayDumper(Dumper):
    """An append's row bodies in PostgreSQL's binary array format (see :class:`_Int8ArrayDumper`)."""

    format = pq.Format.BINARY
    oid = _BYTEA_ARRAY_OID

    def dump(self, obj: Any) -> bytes:
        if not obj:
            return struct.pack(">iii", 0, 0, _BYTEA_OID)
        length = _LENGTH.pack
        parts = [_ARRAY_HEADER.pack(1, 0, _BYTEA_OID, len(obj), 1)]
        for body in obj:
            parts += (length(len(body)), body)
        return b"".join(parts)


psycopg.adapters.register_dumper(_Int8Array, _Int8ArrayDumper)
psycopg.adapters.register_dumper(_ByteaArray, _ByteaArrayDumper)


class _Batch:
    """One append batch in storage form: the rows (an event or a packed chunk run) and their first seqs."""

    __slots__ = ("bodies", "count", "events", "first", "seqs", "session_id")

    def __init__(self, session_id: str, events: Sequence[WireEvent]) -> None:
        self.session_id = session_id
        self.events = events
        self.first = events[0]["seq"]
        self.count = len(events)
        seqs, bodies = _storage_rows(events)
        self.seqs, self.bodies = _Int8Array(seqs), _ByteaArray(bodies)


def _storage_rows(events: Sequence[WireEvent]) -> tuple[list[int], list[bytes]]:
    """Pack the batch's chunk runs (the JSONL codec's rows) and key each stored row by its first seq.

    Verbatim events keep the JSON bytes the kernel produced; only packed rows are serialized here.
    Packing returns verbatim events as the very same objects, in order, so identity tells them apart.
    """
    records = pack_chunk_runs(events)
    if len(records) == len(events):
        return [event["seq"] for event in events], [event_json(event) for event in events]
    seqs: list[int] = []
    bodies: list[bytes] = []
    index = 0
    for record in records:
        seqs.append(events[index]["seq"])
        if record is events[index]:
            bodies.append(event_json(events[index]))
            index += 1
        else:
            bodies.append(dumps(record))
            data: Any = record["data"]
            index += len(data["texts"] if "texts" in data else data["args"])
    return seqs, bodies


class _AdvisoryLease:
    """A session-level advisory lock held on its own connection; closing the connection ends it.

    The leased session's writes run on this same connection (see ``PostgresBackend.append_batch``):
    the server releases the lock only when that backend exits, after it has processed every statement
    it received, so a dead writer's in-flight ``COMMIT`` is final before anyone else can hold the lease.
    """

    def __init__(self, owner: PostgresBackend, session_id: str, conn: psycopg.Connection[Any], key: int) -> None:
        self._owner = owner
        self.session_id = session_id
        self._conn: psycopg.Connection[Any] | None = conn
        self._key = key
        self._pid = conn.info.backend_pid
        self._mutex = threading.Lock()

    @property
    def connection(self) -> psycopg.Connection[Any] | None:
        """The lease's connection (tests terminate it to simulate a crashed host)."""
        return self._conn

    @contextmanager
    def writing(self) -> Iterator[psycopg.Connection[Any] | None]:
        """The lease's connection for one write, re-taking the lock on a new one if the old one died.

        ``None`` when the lease was released (the caller writes unfenced, as without a lease). A lock
        another writer took meanwhile is ``SESSION_LOCKED``: this writer lost its lease.
        """
        with self._mutex:
            conn = self._conn
            if conn is not None and (conn.closed or conn.broken):
                conn.close()
                conn = self._owner._try_lock(
                    self.session_id, self._key, "re-taking a lost writer lease", abandoned_pid=self._pid
                )
                if conn is None:
                    raise self._owner._locked(self.session_id)
                self._conn, self._pid = conn, conn.info.backend_pid
            yield conn

    def release(self) -> None:
        with self._mutex:
            conn, self._conn = self._conn, None
        if conn is None:
            return
        self._owner._forget_lease(self)
        try:
            if not conn.closed and not conn.broken:
                conn.execute(_sql.UNLOCK, (self._key,))
        except psycopg.Error:
            pass  # the lock ends with the connection anyway
        finally:
            conn.close()


class PostgresBackend:
    """Sessions in a PostgreSQL schema: one row per session, one row per event or packed chunk run.

    Thread-safe: every operation borrows a connection from a small private pool (``pool_size`` idle
    connections are kept); writer leases and the notification listener use dedicated connections.
    ``read_only=True`` (the inspection commands) never creates the schema — a schema that does not
    exist yet is ``STORE_NOT_FOUND`` — and refuses writes with ``STORAGE_READ_ONLY``.
    """

    name = "session-persistence-postgres"
    supports_raw_artifacts = False

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = DEFAULT_SCHEMA,
        pool_size: int = DEFAULT_POOL_SIZE,
        statement_timeout_ms: int = 0,
        connect_timeout_s: int = DEFAULT_CONNECT_TIMEOUT_S,
        call_timeout_s: float | None = None,
        read_only: bool = False,
    ) -> None:
        if not isinstance(schema, str) or not _SCHEMA_NAME.match(schema) or schema.startswith("pg_"):
            raise ValueError(
                f"schema must be a lower-case SQL identifier (letters, digits, _; not pg_*), got {schema!r}"
            )
        if type(pool_size) is not int or pool_size < 1:
            raise ValueError(f"pool_size must be a positive integer, got {pool_size!r}")
        if type(statement_timeout_ms) is not int or statement_timeout_ms < 0:
            raise ValueError(f"statement_timeout_ms must be a non-negative integer, got {statement_timeout_ms!r}")
        if type(connect_timeout_s) is not int or connect_timeout_s < 1:
            raise ValueError(f"connect_timeout_s must be a positive integer, got {connect_timeout_s!r}")
        if call_timeout_s is not None and (
            type(call_timeout_s) not in (int, float) or not math.isfinite(call_timeout_s) or call_timeout_s <= 0
        ):
            raise ValueError(f"call_timeout_s must be a positive finite number of seconds, got {call_timeout_s!r}")
        try:
            params = conninfo.conninfo_to_dict(dsn)
        except psycopg.Error as err:
            raise DatabaseUnavailableError(
                f"the PostgreSQL DSN is malformed ({err}); pass a URL such as postgresql://user@host:5432/dbname "
                "with --dsn or AGENTLOG_DSN"
            ) from None
        self.dsn = dsn
        self.schema = schema
        self.pool_size = pool_size
        self.statement_timeout_ms = statement_timeout_ms
        if call_timeout_s is None:
            call_timeout_s = (
                statement_timeout_ms / 1000 + CALL_TIMEOUT_GRACE_S if statement_timeout_ms else DEFAULT_CALL_TIMEOUT_S
            )
        self.call_timeout_s = float(call_timeout_s)
        """The client-side deadline of every wait on the server (see the module docstring)."""
        self.read_only = bool(read_only)
        self.location = _describe(params)
        self._connect_kwargs: dict[str, Any] = {}
        if "connect_timeout" not in params:
            self._connect_kwargs["connect_timeout"] = connect_timeout_s
        if "application_name" not in params:
            self._connect_kwargs["application_name"] = "agentlog"
        # Each end probes the other, so a partitioned host's lease is freed by the server (keepalive.py).
        self._connect_kwargs.update(keepalive_kwargs(params, self.call_timeout_s))
        self._sql = Statements(schema)
        self._mutex = threading.Lock()
        self._idle: list[psycopg.Connection[Any]] = []
        self._closed = False
        self._ready = False
        self._init_mutex = threading.Lock()
        self._store_id = ""
        self._leases: dict[str, _AdvisoryLease] = {}
        self._listen_mutex = threading.Lock()
        self._listener: psycopg.Connection[Any] | None = None
        self._notified: set[str] = set()

    # --- connections -------------------------------------------------------------------------------

    def _unavailable(self, err: BaseException, doing: str) -> DatabaseUnavailableError | DatabaseAuthError:
        """What a failed connection or call is: a refused login (never retried), else an unavailable server."""
        refused = refused_login(err, self.location)
        if refused is not None:
            return refused
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        if isinstance(err, _NoAnswer):
            return DatabaseUnavailableError(
                f"PostgreSQL at {self.location} did not answer within {self.call_timeout_s:g} s while {doing} "
                "(the client-side deadline, call_timeout_s); the connection was discarded and nothing was "
                "acknowledged. Retry: a write whose outcome was left unknown is found stored or not by the "
                "retry, never stored twice. If it persists, check the server (load, locks, a stopped process) "
                "or raise call_timeout_s"
            )
        if isinstance(err, psycopg.errors.QueryCanceled):
            hint = "the statement timeout expired; retry, or raise statement_timeout_ms"
        else:
            hint = "check that the server is running and accepts connections and that the DSN (--dsn / AGENTLOG_DSN) is right, then retry"  # noqa: E501
        return DatabaseUnavailableError(
            f"PostgreSQL at {self.location} is unavailable while {doing} ({reason}); nothing unacknowledged "
            f"was committed; {hint}"
        )

    def _connect(self) -> psycopg.Connection[Any]:
        """A new autocommit connection with the client-side deadline (connecting is bounded by
        ``connect_timeout``) and the statement timeout."""
        conn = _DeadlineConnection.connect(self.dsn, autocommit=True, **self._connect_kwargs)
        conn.call_timeout_s = self.call_timeout_s
        try:
            if self.statement_timeout_ms:
                conn.execute(_sql.SET_TIMEOUT, (str(self.statement_timeout_ms),))
        except BaseException:
            conn.close()
            raise
        return conn

    def _checkout(self) -> psycopg.Connection[Any]:
        while True:
            with self._mutex:
                if self._closed:
                    raise PersistenceError(f"{self.name} backend is closed")
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                return self._connect()
            if self._usable(conn):
                return conn
            conn.close()

    @staticmethod
    def _usable(conn: psycopg.Connection[Any]) -> bool:
        """An idle connection the server has not closed (an idle socket that is readable got EOF or a notice)."""
        if conn.closed or conn.broken or conn.info.transaction_status != pq.TransactionStatus.IDLE:
            return False
        try:
            readable, _, _ = select.select([conn.fileno()], [], [], 0)
        except (OSError, ValueError, psycopg.Error):
            return False
        return not readable

    def _checkin(self, conn: psycopg.Connection[Any]) -> None:
        if conn.closed or conn.broken or conn.info.transaction_status != pq.TransactionStatus.IDLE:
            conn.close()
            return
        with self._mutex:
            if not self._closed and len(self._idle) < self.pool_size:
                self._idle.append(conn)
                return
        conn.close()

    @contextmanager
    def _connection(self, doing: str) -> Iterator[psycopg.Connection[Any]]:
        """A ready connection (the schema checked) for one operation; connection errors become typed."""
        self._ensure_schema()
        try:
            conn = self._checkout()
        except _CONNECTION_ERRORS as err:
            raise self._unavailable(err, doing) from None
        with self._typed(conn, doing, pooled=True):
            yield conn

    @contextmanager
    def _typed(self, conn: psycopg.Connection[Any], doing: str, *, pooled: bool) -> Iterator[None]:
        """Run one operation on ``conn``: errors become typed; a pooled connection goes back when clean.

        A connection that is not pooled (a lease's) is closed only when it is no longer usable; the
        lease then re-takes its lock on a new one at the next write.
        """
        try:
            yield
        except _CONNECTION_ERRORS as err:
            conn.close()
            raise self._unavailable(err, doing) from None
        except (psycopg.errors.UndefinedTable, psycopg.errors.UndefinedColumn, psycopg.errors.InvalidSchemaName) as err:
            conn.close()
            self._ready = False  # the next operation checks (or re-creates) the schema again
            raise DatabaseSchemaError(
                f'the agentlog schema "{self.schema}" at {self.location} changed under this backend while '
                f"{doing} ({str(err).strip().splitlines()[0]}); nothing was committed. Retry, or check what "
                "else uses the schema"
            ) from None
        except psycopg.Error as err:
            if pooled or conn.info.transaction_status != pq.TransactionStatus.IDLE:
                conn.close()
            raise PersistenceError(
                f"PostgreSQL at {self.location} refused an operation while {doing} "
                f"({str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__}); nothing "
                "was committed"
            ) from None
        except BaseException:
            if not conn.closed and conn.info.transaction_status != pq.TransactionStatus.IDLE:
                conn.close()
            elif pooled:
                self._checkin(conn)
            raise
        else:
            if pooled:
                self._checkin(conn)

    # --- schema --------------------------------------------------------------------------------------

    def _ensure_schema(self) -> None:
        if self._ready:
            return
        with self._init_mutex:
            if self._ready:
                return
            with self._mutex:
                if self._closed:
                    raise PersistenceError(f"{self.name} backend is closed")
            try:
                conn = self._connect()
            except _CONNECTION_ERRORS as err:
                raise self._unavailable(err, "connecting") from None
            try:
                with conn.transaction():
                    conn.execute(_sql.INIT_LOCK, (_INIT_LOCK_KEY,))
                    tables = [row[0] for row in conn.execute(_sql.NAMESPACE_TABLES, (self.schema,))]
                    if not tables and self.read_only:
                        raise StoreNotFoundError(
                            f'no agentlog store in schema "{self.schema}" at {self.location} (nothing was '
                            "created); check --pg-schema / AGENTLOG_PG_SCHEMA and the database, or write a "
                            "session there first"
                        )
                    if not tables:
                        store_id = uuid.uuid4().hex
                        for statement in self._sql.ddl:
                            conn.execute(statement)
                        conn.execute(self._sql["insert_state"], (APPLICATION, SCHEMA_VERSION, store_id))
                    else:
                        store_id = self._check_schema(conn, tables)
            except _CONNECTION_ERRORS as err:
                conn.close()
                raise self._unavailable(err, "opening the session schema") from None
            except StoreNotFoundError:
                self._checkin(conn)
                raise
            except psycopg.Error as err:
                conn.close()
                raise DatabaseSchemaError(
                    f'cannot open the agentlog schema "{self.schema}" at {self.location}: {err}; check that the '
                    "user may create schemas and tables there, or choose another schema"
                ) from None
            except BaseException:
                conn.close()
                raise
            self._store_id = store_id
            self._ready = True
            self._checkin(conn)

    def _check_schema(self, conn: psycopg.Connection[Any], tables: list[str]) -> str:
        where = f'schema "{self.schema}" at {self.location}'
        if STATE_TABLE not in tables:
            raise DatabaseSchemaError(
                f"{where} holds tables agentlog did not create ({', '.join(tables[:5])}); it is left untouched. "
                "Choose another schema (schema=...) or database"
            )
        try:
            row = conn.execute(self._sql["select_state"]).fetchone()
        except psycopg.errors.UndefinedColumn:
            row = None
        if row is None or row[0] != APPLICATION or type(row[1]) is not int or type(row[2]) is not str:
            raise DatabaseSchemaError(
                f"{where} has an {STATE_TABLE} table agentlog did not write; it is left untouched. "
                "Choose another schema (schema=...) or database"
            )
        _, version, store_id = row
        if version > SCHEMA_VERSION:
            raise DatabaseSchemaError(
                f"{where} has agentlog schema version {version}, newer than this build supports "
                f"({SCHEMA_VERSION}); upgrade agentlog to use it"
            )
        if version not in READABLE_SCHEMA_VERSIONS:
            raise DatabaseSchemaError(
                f"{where} has agentlog schema version {version}, which this build does not know "
                f"(it writes {SCHEMA_VERSION}); it is left untouched"
            )
        found: dict[str, list[tuple[str, str]]] = {}
        for table, column, data_type in conn.execute(_sql.COLUMNS, (self.schema,)):
            found.setdefault(table, []).append((column, data_type))
        expected = {table: list(columns) for table, columns in EXPECTED_COLUMNS.items()}
        if found != expected:
            raise DatabaseSchemaError(
                f"{where} does not match agentlog schema version {version} (its tables or columns were "
                "changed by something else); it is left untouched. Choose another schema or database"
            )
        return str(store_id)

    def _refuse_write(self, what: str) -> None:
        if self.read_only:
            raise StorageAccessError(
                f'cannot {what}: the PostgreSQL store at {self.location} schema "{self.schema}" was opened '
                "read-only (read_only=True); open it without read_only to write",
                code="STORAGE_READ_ONLY",
            )

    # --- ids and revisions ---------------------------------------------------------------------------

    def validate_session_id(self, session_id: object) -> None:
        """Non-empty valid Unicode without NUL, at most ``MAX_SESSION_ID_BYTES`` UTF-8 bytes."""
        if not isinstance(session_id, str) or not session_id:
            raise InvalidSessionIdError(f"session id must be a non-empty string, got {session_id!r}")
        try:
            encoded = session_id.encode("utf-8")
        except UnicodeEncodeError as err:
            raise InvalidSessionIdError(
                f"session id holds a character the store cannot hold (a lone surrogate at index {err.start}); "
                "use an id of valid Unicode text"
            ) from None
        if "\0" in session_id:
            raise InvalidSessionIdError(
                f"session id holds a NUL character at index {session_id.index(chr(0))}, which PostgreSQL text "
                "cannot hold; use another id"
            )
        if len(encoded) > MAX_SESSION_ID_BYTES:
            raise InvalidSessionIdError(
                f"session id is {len(encoded)} UTF-8 bytes; the PostgreSQL backend holds at most "
                f"{MAX_SESSION_ID_BYTES}; use a shorter id"
            )

    def _revision(self, incarnation: str, revision: int, tail: str | None) -> str:
        """``postgres:<store id>:incarnation:<id>:revision:<n>:tail:<digest>``.

        The counter changes on every append, the incarnation on re-creation of a session row, the store
        id across databases; a database restored from a backup repeats all three and its next batch
        reaches a counter already handed out for the log the restore discarded. The digest of the
        newest event row (computed by the server, ``_sql._TAIL``) tells those logs apart.
        """
        return f"postgres:{self._store_id}:incarnation:{incarnation}:revision:{revision}:tail:{tail or 'none'}"

    def read_revision(self, session_id: str) -> str | None:
        with self._connection("reading a revision") as conn:
            row = conn.execute(self._sql["select_revision"], (session_id,)).fetchone()
        return None if row is None else self._revision(row[0], row[1], row[2])

    # --- reads -------------------------------------------------------------------------------------------

    def _corrupt(self, session_id: str, seq: int, why: str) -> SessionPersistenceCorruptionError:
        return SessionPersistenceCorruptionError(
            f'corrupt session log "{session_id}" in {self.location} schema "{self.schema}": invalid committed '
            f"event row at seq {seq} ({why}). The stored rows are left as they are; export the valid prefix "
            "with `agentlog export --partial`",
            location=f"{self.location} schema {self.schema}",
            offset=seq,
        )

    def _read(
        self, session_id: str, from_seq: int
    ) -> tuple[SessionHeader, list[dict[str, Any]], str, SessionPersistenceCorruptionError | None] | None:
        """Fetch and decode; the cycle collector waits (see ``kernel._gc``: it would re-scan every row)."""
        with gc_paused():
            return self._read_paused(session_id, from_seq)

    def _read_paused(
        self, session_id: str, from_seq: int
    ) -> tuple[SessionHeader, list[dict[str, Any]], str, SessionPersistenceCorruptionError | None] | None:
        with self._connection("reading a session") as conn:
            with conn.transaction():
                conn.execute(_sql.READ_SNAPSHOT)
                cur = conn.cursor(binary=True)
                row = cur.execute(self._sql["select_session"], (session_id,)).fetchone()
                if row is None:
                    return None
                header, incarnation, revision, next_seq, tail = row
                if from_seq:
                    rows = cur.execute(
                        self._sql["select_events_from"], (session_id, session_id, from_seq)
                    ).fetchall()
                else:
                    rows = cur.execute(self._sql["select_events"], (session_id,)).fetchall()
        meta = self._decode_header(session_id, header)
        # A whole read for the coordinator's cold load keeps packed runs compact (kernel.packedrun).
        compact = from_seq == 0 and compact_runs_requested()
        # A suffix read starts at the row holding from_seq, which may be a packed run that began earlier.
        expected = rows[0][0] if from_seq and rows and rows[0][0] < from_seq else from_seq
        events, expected, damage = self._decode_rows(session_id, rows, expected, from_seq, compact)
        if damage is None and expected < next_seq:
            damage = self._corrupt(session_id, expected, f"the session records {next_seq} events, found {expected}")
        return meta, events, self._revision(incarnation, revision, tail), damage

    def _decode_header(self, session_id: str, header: Any) -> SessionHeader:
        try:
            meta: SessionHeader = loads(bytes(header))  # the header this store wrote (restore checks it)
        except (ValueError, RecursionError) as err:
            raise SessionPersistenceCorruptionError(
                f'stored session "{session_id}" in {self.location} has an invalid header ({err}); it is left as it is',
                location=f"{self.location} schema {self.schema}",
            ) from None
        if not isinstance(meta, dict):
            raise SessionPersistenceCorruptionError(
                f'stored session "{session_id}" in {self.location} has a header that is not an object',
                location=f"{self.location} schema {self.schema}",
            )
        return meta

    def _decode_rows(
        self, session_id: str, rows: Sequence[Any], expected: int, from_seq: int, compact: bool
    ) -> tuple[list[dict[str, Any]], int, SessionPersistenceCorruptionError | None]:
        """The events of ordered ``(seq, body)`` rows from seq ``expected`` (those below ``from_seq`` left
        out; packed runs kept packed when ``compact``), the next expected seq and the damage that ended
        the rows (``None`` when every row decoded and continued the seqs)."""
        if address_space_limited():  # orjson can crash on an allocation failure: refuse up front instead
            bodies = [bytes(body) for _, body in rows]
            ensure_headroom(parse_reserve(bodies, one_call=False), sum(map(len, bodies)), f'session "{session_id}"')
            del bodies
        events: list[dict[str, Any]] = []
        damage: SessionPersistenceCorruptionError | None = None
        for seq, body in rows:
            if seq != expected:
                damage = self._corrupt(session_id, expected, f"seq {expected} is missing; the next row is seq {seq}")
                break
            try:
                value = loads(bytes(body))
            except (ValueError, RecursionError) as err:
                damage = self._corrupt(session_id, seq, f"unparsable JSON: {err}")
                break
            tag = value.get("type") if type(value) is dict else None
            if tag.__class__ is str and tag in CHUNK_ROW_TAGS:  # (an unhashable type is no tag either)
                if compact:  # the coordinator's cold load: the run stays packed (validated all the same)
                    try:
                        run = decode_storage_run(value)
                    except ChunkRowError as err:
                        damage = self._corrupt(session_id, seq, str(err))
                        break
                    assert run is not None
                    if run.seq0 != seq:
                        damage = self._corrupt(session_id, seq, "the packed row's first seq is not the row's seq")
                        break
                    events.append(run)  # type: ignore[arg-type]  # a ChunkRun item, as the file backends give
                    expected += run.n
                    continue
                try:
                    members = decode_storage_record(value)
                except ChunkRowError as err:
                    damage = self._corrupt(session_id, seq, str(err))
                    break
                if members[0]["seq"] != seq:  # members are seq0 + k by construction: the first decides
                    damage = self._corrupt(session_id, seq, "the packed row's first seq is not the row's seq")
                    break
                expected += len(members)
                events.extend(members if seq >= from_seq else members[from_seq - seq :])
                continue
            if not isinstance(value, dict) or value.get("seq") != seq:
                damage = self._corrupt(session_id, seq, "the row's JSON is not the event of its seq")
                break
            if seq >= from_seq:
                events.append(value)
            expected += 1
        return events, expected, damage

    def stream_stored(self, session_id: str, batch_bytes: int = 1 << 21) -> StoredStream | None:
        """The log's events a batch at a time (:class:`~agentlog.persistence.backend.StreamsStored`), packed
        rows kept packed as the coordinator's cold load keeps them. Never writes.

        Each page of rows is one short statement of its own (keyed by seq: a page costs its rows whatever
        the log's length), decoded before the next is fetched, so no connection is held while the caller
        works on a batch and the decoded log never exists whole. Committed rows are never rewritten, so
        the pages join into the log of the revision read first, up to the event count it records —
        unless the session changed meanwhile (deleted, re-created): the revision is read again at the
        end, and a different one raises :class:`~agentlog.errors.SessionTailChangedError` (read it again). Damage raises
        the row's typed error; a caller that reports it reads the log whole.
        """
        with self._connection("reading a session") as conn:
            row = conn.cursor(binary=True).execute(self._sql["select_session"], (session_id,)).fetchone()
        if row is None:
            return None
        header, incarnation, revision, next_seq, tail = row
        meta = self._decode_header(session_id, header)
        current = self._revision(incarnation, revision, tail)
        batches = batched_pages(
            self._stream_pages(session_id, next_seq),
            batch_bytes,
            lambda: self.read_revision(session_id) == current,
            f'session "{session_id}" in {self.location} schema "{self.schema}" changed while it was read a batch '
            "at a time; read it again",
            f"{self.location} schema {self.schema}",
        )
        return StoredStream(meta=meta, revision=current, batches=batches)

    def _stream_pages(self, session_id: str, next_seq: int) -> Iterator[tuple[list[Any], int]]:
        expected = 0
        while expected < next_seq:
            with self._connection("reading a session") as conn:
                rows = (
                    conn.cursor(binary=True)
                    .execute(self._sql["select_events_page"], (session_id, expected, _STREAM_PAGE_ROWS))
                    .fetchall()
                )
            if not rows:
                raise self._corrupt(session_id, expected, f"the session records {next_seq} events, found {expected}")
            with gc_paused():
                events, expected, damage = self._decode_rows(session_id, rows, expected, 0, True)
            if damage is not None:
                raise damage
            yield events, sum(len(body) for _, body in rows)

    def load_stored(self, session_id: str) -> StoredPrefix[None] | None:
        read = self._read(session_id, 0)
        if read is None:
            return None
        meta, events, revision, damage = read
        if damage is not None:
            raise damage
        return StoredPrefix(meta=meta, events=events, revision=revision)

    def load_stored_from(self, session_id: str, from_seq: int) -> StoredPrefix[None] | None:
        """Seek read: only the rows with ``seq >= from_seq`` are fetched and parsed (the primary key)."""
        if type(from_seq) is not int or not 0 <= from_seq <= MAX_SAFE_INTEGER:
            raise PersistenceError(f"fromSeq must be a non-negative safe integer, got {from_seq!r}")
        read = self._read(session_id, from_seq)
        if read is None:
            return None
        meta, events, revision, damage = read
        if damage is not None:
            raise damage
        return StoredPrefix(meta=meta, events=events, revision=revision)

    def read_prefix(self, session_id: str) -> PartialRead | None:
        read = self._read(session_id, 0)
        if read is None:
            return None
        meta, events, revision, damage = read
        return PartialRead(meta=meta, events=events, revision=revision, damage=damage)

    def list_sessions(self) -> list[SessionListing]:
        """Every stored session's header, sorted by id, from one query (the primary-key index)."""
        with self._connection("listing sessions") as conn:
            rows = conn.cursor(binary=True).execute(self._sql["select_sessions"]).fetchall()
        return [self._listing(*row) for row in rows]

    def _listing(
        self, session_id: str, header: bytes, incarnation: str, revision: int, tail: str | None
    ) -> SessionListing:
        location = f"{self.location} schema {self.schema}"
        try:
            meta = loads(bytes(header))
            if not isinstance(meta, dict) or meta.get("id") != session_id:
                raise ValueError("the header is not this session's object")
        except (ValueError, RecursionError) as err:
            return SessionListing(
                id=session_id,
                header=None,
                location=location,
                error_code=SessionPersistenceCorruptionError.code,
                error_message=f'stored session "{session_id}" has invalid metadata: {err}',
            )
        listing = SessionListing(
            id=session_id, header=meta, revision=self._revision(incarnation, revision, tail), location=location
        )
        version = meta.get("version")
        if version != 0:
            listing.error_code = SessionFormatUnsupportedError.code
            listing.error_message = (
                f'session "{session_id}" has format version {version!r}, which this build cannot read; '
                "upgrade agentlog to read it"
            )
        return listing

    def list_revisions(self) -> dict[str, str]:
        """Every stored session's revision by id, sorted, from one SELECT of the id and revision columns."""
        return self._revisions(self._sql["select_revisions"], ())

    def list_revisions_of(self, session_ids: Sequence[str]) -> dict[str, str]:
        """The revisions of those of ``session_ids`` that are stored (as :meth:`list_revisions` words
        them): a reader that knows which sessions moved lists only those."""
        return self._revisions(self._sql["select_revisions_of"], (list(session_ids),))

    def _revisions(self, statement: str, params: tuple[Any, ...]) -> dict[str, str]:
        with self._connection("listing revisions") as conn:
            rows = conn.execute(statement, params).fetchall()
        return {sid: self._revision(incarnation, revision, tail) for sid, incarnation, revision, tail in rows}

    # --- writes ------------------------------------------------------------------------------------------

    def append_batch(self, meta: Mapping[str, Any], events: Sequence[WireEvent], materialized: bool) -> None:
        if not events:
            return
        self._refuse_write("append events")
        session_id = meta["id"]
        self.validate_session_id(session_id)
        first = events[0]["seq"]
        for index, event in enumerate(events):
            if event["seq"] != first + index:
                raise PersistenceError(
                    f'append batch of "{session_id}" is not contiguous: seq {event["seq"]} at index {index}'
                )
        batch = _Batch(session_id, events)
        header = dumps(dict(meta)) if not materialized else b""
        with self._mutex:
            lease = self._leases.get(session_id)
        if lease is not None:  # fenced: on the lease's own connection
            self._ensure_schema()
            with lease.writing() as conn:
                if conn is not None:
                    with self._typed(conn, "appending events", pooled=False):
                        self._append(conn, meta, header, batch, materialized)
                    return
        with self._connection("appending events") as conn:
            self._append(conn, meta, header, batch, materialized)

    def _append(
        self, conn: psycopg.Connection[Any], meta: Mapping[str, Any], header: bytes, batch: _Batch, materialized: bool
    ) -> None:
        q = self._sql
        session_id, first = batch.session_id, batch.first
        if materialized and len(batch.bodies) <= _FAST_PATH_ROWS:
            # The common case in one round trip: one autocommit statement advances the session only if
            # the batch starts at the stored next seq, inserts the rows and notifies. No row back means
            # it did not apply (nothing was written): the transaction below says why.
            applied = conn.cursor(binary=True).execute(
                q["append_fast"], (first + batch.count, session_id, first, batch.seqs, batch.bodies)
            ).fetchone()
            if applied is not None:
                return
        with conn.transaction():
            cur = conn.cursor(binary=True)
            if not materialized:
                created = cur.execute(
                    q["insert_session"], (session_id, header, *_lineage(meta), uuid.uuid4().hex)
                ).rowcount
                row = cur.execute(q["lock_session"], (session_id,)).fetchone()
                assert row is not None
                if created != 1:
                    if bytes(row[0]) == header and self._already_stored(cur, batch, row[3]):
                        return
                    rest = self._rest_after_landed_prefix(cur, batch, row[3]) if bytes(row[0]) == header else None
                    if rest is None:
                        raise PersistenceError(
                            f'refusing to materialize "{session_id}": a log already exists (load/resume it instead)'
                        )
                    batch, first = rest, rest.first
            else:
                row = cur.execute(q["lock_session"], (session_id,)).fetchone()
                if row is None:
                    raise PersistenceError(f'session "{session_id}" has no stored log to append to')
            next_seq = row[3]
            if next_seq != first:
                if self._already_stored(cur, batch, next_seq):
                    return
                rest = self._rest_after_landed_prefix(cur, batch, next_seq)
                if rest is not None:
                    batch, first = rest, rest.first
            if next_seq != first:
                raise SessionConflictError(
                    f'session "{session_id}" was appended to by another writer: this batch starts at seq {first}, '
                    f"the store's next seq is {next_seq}; nothing of the batch was stored. Reload the session "
                    "and retry",
                    expected=first,
                    found=next_seq,
                )
            with cur.copy(q["copy_events"]) as copy:
                copy.set_types(["text", "int8", "bytea"])
                for seq, body in zip(batch.seqs, batch.bodies, strict=True):
                    copy.write_row((session_id, seq, body))
            cur.execute(q["advance_session"], (first + batch.count, session_id))  # and pg_notify(NOTIFY_CHANNEL)

    def _already_stored(self, cur: psycopg.Cursor[Any], batch: _Batch, next_seq: int) -> bool:
        """Whether the batch is committed already, byte for byte (a retry after a lost acknowledgement).

        Packing is a pure function of the batch, so a retry of the same batch has the same rows.
        """
        first, end = batch.first, batch.first + batch.count
        if next_seq < end:
            return False
        rows = cur.execute(self._sql["select_event_span"], (batch.session_id, first, end)).fetchall()
        return len(rows) == len(batch.bodies) and all(
            seq == batch.seqs[i] and bytes(body) == batch.bodies[i] for i, (seq, body) in enumerate(rows)
        )

    def _rest_after_landed_prefix(self, cur: psycopg.Cursor[Any], batch: _Batch, next_seq: int) -> _Batch | None:
        """The part of ``batch`` after ``next_seq`` when the part before it is stored already, else ``None``.

        A retry after an unknown outcome (the earlier attempt's write landed after its deadline) carries
        that batch and the events appended since. The stored rows from the batch's first seq must decode
        to exactly its leading events (packing may have cut the runs differently, so events are compared,
        not rows); anything else is another writer's, and a conflict.
        """
        first, end = batch.first, batch.first + batch.count
        if not first < next_seq < end:
            return None
        stored: list[Any] = []
        for _, body in cur.execute(self._sql["select_event_span"], (batch.session_id, first, next_seq)).fetchall():
            try:
                stored.extend(decode_storage_record(loads(bytes(body))))
            except (ValueError, RecursionError, ChunkRowError):
                return None
        landed = batch.events[: next_seq - first]
        if len(stored) != len(landed) or any(
            loads(event_json(event)) != found for event, found in zip(landed, stored, strict=True)
        ):
            return None
        return _Batch(batch.session_id, batch.events[next_seq - first :])

    def commit_repair(self, meta: Mapping[str, Any], torn_marker: None, closers: Sequence[WireEvent]) -> None:
        """A transaction cannot tear: there is never a torn tail, only closers to append."""
        if torn_marker is not None:
            raise PersistenceError("the PostgreSQL backend never reports a torn tail")
        if closers:
            self.append_batch(meta, closers, True)

    # --- writer leases -----------------------------------------------------------------------------------

    def lock_writer(self, meta: Mapping[str, Any]) -> _AdvisoryLease:
        """The session's writer lease, or ``SESSION_LOCKED`` at once when another writer holds it."""
        lease = self.try_lock_writer(meta)
        if lease is None:
            raise self._locked(meta["id"])
        return lease

    def try_lock_writer(self, meta: Mapping[str, Any]) -> _AdvisoryLease | None:
        """One attempt at the writer lease: the lease, or ``None`` when another writer holds it.

        Never waits for the holder (a caller that wants to wait loops on it, with its own backoff and
        deadline); a server that does not answer is ``DATABASE_UNAVAILABLE`` as for any call.
        """
        self._refuse_write("take a writer lease")
        session_id = meta["id"]
        self.validate_session_id(session_id)
        self._ensure_schema()
        key = _lock_key(self.schema, session_id)
        conn = self._try_lock(session_id, key, "taking the writer lock")
        if conn is None:
            return None
        lease = _AdvisoryLease(self, session_id, conn, key)
        with self._mutex:
            self._leases[session_id] = lease
        return lease

    def _locked(self, session_id: str) -> SessionLockedError:
        """``SESSION_LOCKED`` naming the lease's holder as the server sees it, read on a connection of
        its own right after the refused attempt (best-effort: a holder that has just let go, or a server
        that does not answer, leaves the holder unnamed)."""
        holder = None
        try:
            conn = self._connect()
        except (psycopg.Error, OSError):
            conn = None
        if conn is not None:
            try:
                holder = _lease_holder(conn, _lock_key(self.schema, session_id))
            finally:
                conn.close()
        return locked_error(session_id, holder, lock="its PostgreSQL writer lease")

    def _try_lock(
        self, session_id: str, key: int, doing: str, *, abandoned_pid: int = 0
    ) -> psycopg.Connection[Any] | None:
        """A new connection holding the session's advisory lock, or ``None`` at once when it is held.

        ``abandoned_pid`` is the server backend of this lease's previous connection, given up on (it
        died or missed its deadline). If that backend still holds the lock, the server is asked to end
        it and the caller gets ``DATABASE_UNAVAILABLE`` (retry), not ``None``: it may still commit what
        it was sent, so the lease cannot pass to a new connection before it is gone.
        """
        try:
            conn = self._connect()
        except _CONNECTION_ERRORS as err:
            raise self._unavailable(err, doing) from None
        try:
            row = conn.execute(_sql.TRY_LOCK, (key,)).fetchone()
            if row is not None and row[0] is True:
                return conn
            ended = None
            if abandoned_pid:
                try:
                    ended = conn.execute(
                        _sql.TERMINATE_HOLDER, (abandoned_pid, (key >> 32) & 0xFFFF_FFFF, key & 0xFFFF_FFFF)
                    ).fetchone()
                except _CONNECTION_ERRORS:
                    raise
                except psycopg.Error:  # not allowed to end it: the lease is simply held
                    ended = None
        except _CONNECTION_ERRORS as err:
            conn.close()
            raise self._unavailable(err, doing) from None
        except BaseException:
            conn.close()
            raise
        conn.close()
        if ended is not None:
            raise DatabaseUnavailableError(
                f'the writer lease of session "{session_id}" is still held by this writer\'s previous '
                f"connection to PostgreSQL at {self.location} (server backend pid {abandoned_pid}), which "
                "was given up on and may still commit its last write; the server was asked to end it. "
                "Retry once it has: nothing is stored twice"
            )
        return None

    def _forget_lease(self, lease: _AdvisoryLease) -> None:
        with self._mutex:
            if self._leases.get(lease.session_id) is lease:
                del self._leases[lease.session_id]

    # --- change notification -----------------------------------------------------------------------------

    def wait_for_change(self, session_id: str, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for a commit to ``session_id`` (LISTEN on ``agentlog_events``).

        A hint for tailers: ``True`` when a notification for the session arrived (since the previous
        call or within the wait), ``False`` on timeout. The first call starts listening, so a commit just
        before it is not reported; a caller re-reads after every wait, whatever it returns.
        """
        deadline = time.monotonic() + max(0.0, float(timeout_s))
        with self._listen_mutex:
            if session_id in self._notified:
                self._notified.discard(session_id)
                return True
            try:
                conn = self._listening()
                while True:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return False
                    # The generator holds the connection's lock while suspended: always close it.
                    notifies = conn.notifies(timeout=remaining)
                    try:
                        for notify in notifies:
                            if notify.payload == session_id:
                                return True
                            if len(self._notified) >= _MAX_PENDING_NOTIFICATIONS:
                                # Only a hint: forgetting one delays that session's tailer by one poll.
                                self._notified.clear()
                            self._notified.add(notify.payload)
                    finally:
                        notifies.close()
            except _CONNECTION_ERRORS as err:
                listener, self._listener = self._listener, None
                if listener is not None:
                    listener.close()
                raise self._unavailable(err, "waiting for a change notification") from None

    def _listening(self) -> psycopg.Connection[Any]:
        conn = self._listener
        if conn is not None and not conn.closed and not conn.broken:
            return conn
        with self._mutex:
            if self._closed:
                raise PersistenceError(f"{self.name} backend is closed")
        conn = self._connect()
        try:
            conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
        except BaseException:
            conn.close()
            raise
        self._listener = conn
        return conn

    # --- staged sessions ---------------------------------------------------------------------------------

    def stage_session(self, meta: Mapping[str, Any]) -> _StagedSession:
        """A new session written in ONE transaction on a connection of its own, committed at ``publish``.

        The connection also holds the session's writer lease (``SESSION_LOCKED`` at once when another
        writer has it). Nothing is visible before the commit; a client that dies before it (a crash, a
        lost connection) leaves nothing: the server rolls the transaction back and ends the lease.
        """
        self._refuse_write("stage a session")
        session_id = meta["id"]
        self.validate_session_id(session_id)
        self._ensure_schema()
        conn = self._try_lock(session_id, _lock_key(self.schema, session_id), "taking the writer lock")
        if conn is None:
            raise self._locked(session_id)
        return _StagedSession(self, dict(meta), conn)

    def _stage_batch(self, conn: psycopg.Connection[Any], meta: Mapping[str, Any], batch: _Batch) -> None:
        q = self._sql
        cur = conn.cursor(binary=True)
        if batch.first == 0:
            conn.execute("BEGIN")
            created = cur.execute(
                q["insert_session"], (batch.session_id, dumps(dict(meta)), *_lineage(meta), uuid.uuid4().hex)
            ).rowcount
            if created != 1:
                raise PersistenceError(
                    f'refusing to materialize "{batch.session_id}": a log already exists (load/resume it instead)'
                )
        with cur.copy(q["copy_events"]) as copy:
            copy.set_types(["text", "int8", "bytea"])
            for seq, body in zip(batch.seqs, batch.bodies, strict=True):
                copy.write_row((batch.session_id, seq, body))
        cur.execute(q["advance_session"], (batch.first + batch.count, batch.session_id))

    # --- delete ------------------------------------------------------------------------------------------

    def delete_session(self, session_id: str, step: DeleteStep | None = None) -> bool:
        """Remove the session's event rows and its row in one transaction (and notify its tails).

        Under this backend's lease of the session the delete runs on the lease's connection, as an
        append would, so a writer that lost its lease cannot slip a batch in after it.
        """
        self._refuse_write("delete a session")
        self.validate_session_id(session_id)
        if step is not None:
            step("begin")
        with self._mutex:
            lease = self._leases.get(session_id)
        if lease is not None:
            self._ensure_schema()
            with lease.writing() as conn:
                if conn is not None:
                    with self._typed(conn, "deleting a session", pooled=False):
                        return self._delete(conn, session_id, step)
        with self._connection("deleting a session") as conn:
            return self._delete(conn, session_id, step)

    def _delete(self, conn: psycopg.Connection[Any], session_id: str, step: DeleteStep | None) -> bool:
        q = self._sql
        with conn.transaction():
            cur = conn.cursor()
            # The session row first: an append in flight holds it (the delete waits for its commit, then
            # removes its rows too); one after it finds no session. Nothing else keeps rows from
            # outliving their session (schema version 2 has no foreign key).
            cur.execute(q["lock_session_for_delete"], (session_id,))
            if step is not None:
                step("events")
            cur.execute(q["delete_events"], (session_id,))
            if step is not None:
                step("session")
            deleted = cur.execute(q["delete_session"], (session_id,)).fetchone() is not None
            if step is not None:
                step("commit")
        return deleted

    # --- the rest of the protocol ------------------------------------------------------------------------

    def read_raw(self, session_id: str) -> RawArtifact | None:
        raise PersistenceError("this session persistence backend does not expose raw artifacts")

    def locate(self, meta: Mapping[str, Any]) -> str | None:
        return None

    def derived_directory(self) -> str | None:
        """The store's (created) directory of the reading host's cache (:mod:`..host_cache`)."""
        return host_cache.key_directory(host_cache.address_key(self.dsn, self.schema))

    def store_identity(self) -> str | None:
        """``postgres:<host-cache key>`` (:class:`~..backend.IdentifiesStore`): the store's address (its
        connection parameters without the password, and its schema)."""
        return host_cache.POSTGRES_IDENTITY_PREFIX + host_cache.address_key(self.dsn, self.schema)

    def derived_path(self, name: str, suffix: str) -> str | None:
        """A PostgreSQL store has no place on disk beside it."""
        return None

    def close(self) -> None:
        with self._mutex:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()


class _StagedSession:
    """:meth:`PostgresBackend.stage_session`'s log: one open transaction on the lease's own connection."""

    def __init__(self, backend: PostgresBackend, meta: dict[str, Any], conn: psycopg.Connection[Any]) -> None:
        self._backend = backend
        self._meta = meta
        self._conn: psycopg.Connection[Any] | None = conn
        self._next_seq = 0

    def _open(self) -> psycopg.Connection[Any]:
        if self._conn is None:
            raise PersistenceError(f'the staged log of "{self._meta["id"]}" was already published or discarded')
        return self._conn

    def append(self, events: Sequence[WireEvent]) -> None:
        conn = self._open()
        if not events:
            return
        session_id = self._meta["id"]
        first = events[0]["seq"]
        if first != self._next_seq:
            raise PersistenceError(f'staged append of "{session_id}" starts at seq {first}, expected {self._next_seq}')
        batch = _Batch(session_id, events)
        try:
            with self._backend._typed(conn, "staging an imported session", pooled=False):
                self._backend._stage_batch(conn, self._meta, batch)
        except BaseException:
            self.discard()
            raise
        self._next_seq += len(events)

    def publish(self) -> None:
        conn = self._open()
        if self._next_seq == 0:
            raise PersistenceError(f'the staged log of "{self._meta["id"]}" has no events to publish')
        try:
            with self._backend._typed(conn, "committing an imported session", pooled=False):
                conn.execute("COMMIT")
        finally:
            self.discard()  # the lease ends with the connection (after the COMMIT, or rolling it back)

    def discard(self) -> None:
        """Close the connection: the server rolls back whatever was not committed and ends the lease."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
