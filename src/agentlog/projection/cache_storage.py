"""Storage media of the persisted projection cache (runtime spec §3.1).

The cache is derived and rebuildable: nothing in it is ever needed for correctness, so every medium
here prefers *forgetting* to *guessing*. A record is one session's whole checkpoint
(``{identity, rows}``, plus the log revision it was verified against when that is known, and the
anchor event the rows were folded through); every write replaces exactly one session's record,
atomically, and listing reads every record with one query.

Two media:

* :class:`MemoryCacheStorage` — a dict, for tests and the :class:`~agentlog.persistence.memory.MemoryBackend`.
* :class:`SqliteCacheStorage` — one SQLite database per store (WAL, owner-only mode ``0600``). Its
  ``application_id`` marks the file as a projection cache, ``user_version`` carries the domain version
  (:data:`DOMAIN_VERSION`, the original's ``session_projcache`` version 3) and a ``cache_state`` row names
  the store it was built for. A file that is damaged, of another domain version, not a projection cache
  at all, or built for another store is discarded and rebuilt (with a warning) — never read.

Where a store keeps its cache (:func:`cache_path_for`): a JSONL store at ``<root>/.projections.sqlite``
(the listing skips files in the root and dot-names are not project directories); a SQLite store in a
sibling file ``<database>.projections.sqlite`` (a PostgreSQL store: in the reading host's cache
directory, :mod:`agentlog.persistence.host_cache`) — the SQLite backend checks an exact copy of its schema
at every open and inside every write transaction, so a foreign table inside its database would make it
refuse its own store, and cache writes would contend with log appends for the one write lock.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import sqlite3
import stat
import threading
import urllib.parse
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple, Protocol

from ..errors import PersistenceError, StorageAccessError
from ..kernel import jsoncodec
from ..kernel.jsonvalue import MAX_SAFE_INTEGER
from ..persistence.backend import IdentifiesStore, PlacesDerivedFiles
from ..persistence.host_cache import POSTGRES_CACHE_FILE
from ..persistence.storage_errors import sqlite_storage_code, storage_error

__all__ = [
    "APPLICATION_ID",
    "CACHE_FILE_NAME",
    "DOMAIN_VERSION",
    "CacheRecord",
    "CacheStorage",
    "MemoryCacheStorage",
    "ServedViews",
    "SqliteCacheStorage",
    "cache_path_for",
    "open_cache_storage",
    "parse_record",
    "parse_views",
    "store_id_for",
]

logger = logging.getLogger("agentlog.projection.cache")

DOMAIN_VERSION: Final = 3
"""The original's ``session_projcache`` domain version: a different version discards the whole medium."""

APPLICATION_ID: Final = 0x414C5043  # "ALPC": agentlog projection cache
CACHE_FILE_NAME: Final = ".projections.sqlite"
SQLITE_SUFFIX: Final = ".projections.sqlite"
BUSY_TIMEOUT_S: Final = 5.0

_SCHEMA: Final = (
    "CREATE TABLE IF NOT EXISTS cache_state (singleton INTEGER PRIMARY KEY CHECK (singleton = 1), "
    "store_id TEXT NOT NULL) STRICT",
    "CREATE TABLE IF NOT EXISTS sessions (session_id TEXT PRIMARY KEY, identity TEXT NOT NULL, "
    "rows TEXT NOT NULL, revision TEXT, domain_version INTEGER NOT NULL, digest TEXT NOT NULL, "
    "views TEXT, views_digest TEXT, anchor TEXT) STRICT",
)
_BASE_COLUMNS: Final = ["session_id", "identity", "rows", "revision", "domain_version", "digest"]
_VIEWS_COLUMNS: Final = [*_BASE_COLUMNS, "views", "views_digest"]
_COLUMNS: Final = [*_VIEWS_COLUMNS, "anchor"]


@dataclass(frozen=True)
class CacheRecord:
    """One session's stored checkpoint.

    ``identity`` is ``{createdAt, cwd?}`` of the log lifecycle the rows were folded from; ``rows`` is
    ``{key: {ver, seq, val}}``. ``revision`` (an agentlog addition) is the backend revision of the stored
    log the rows were verified to be the complete fold of, or ``None`` when that is not known: a reader
    whose listing shows the same revision may serve the rows without reading the log.
    """

    identity: Mapping[str, Any]
    rows: Mapping[str, Mapping[str, Any]]
    revision: str | None = None
    views: Mapping[str, Any] | None = None
    """The served form of ``rows`` (agentlog addition, see :class:`ServedViews`), written by the cache
    from the very same rows, or ``None``. Never needed: a reader without it parses the rows."""
    anchor: str | None = None
    """``"<seq>:<digest>"`` of the event at the rows' cut (``"-1"`` for a cut before any event), or
    ``None`` when not known (agentlog addition, see :func:`agentlog.projection.cache.anchor_of`). A cold
    read folds only the log past the rows, trusting the stored log up to them to be the one they were
    folded from; the anchor is how it checks that the event there is still the same one (a log restored
    from a backup, or rewritten under the record, holds another), and refolds the whole log if not."""


class ServedViews(NamedTuple):
    """What a listing read returns per session: the record's identity and revision, and the views blob.

    The listing read checks only the record's views digest (and decodes the JSON): a reader checks
    the shape of exactly what it serves (``ProjectionCache`` does), so a thousand rows cost one
    decode and one checksum each. ``identity`` is the decoded JSON as stored (any value: the reader
    compares it with the listing's header).

    ``views`` is ``{"code": stamp, "rows": {key: [ver, seq]}, "views": {key: view}}``: the ``[ver,
    seq]`` of every stored row (host-only ones included) and the client-visible views the writing
    registry computed from exactly those rows (a row its unit's schema rejected has no view). A reader
    serves a view only for a registered client-visible unit whose ``stateVersion`` is the row's
    ``ver``, from a record written by the same code ``stamp`` (a view is the unit's code applied to
    the state: another release may compute it differently without bumping ``stateVersion``).
    """

    identity: Any
    revision: str | None
    views: Mapping[str, Any]


def _is_int(value: object, low: int) -> bool:
    return type(value) is int and low <= value <= MAX_SAFE_INTEGER


def parse_record(
    identity: object, rows: object, revision: object = None, *, copy: bool = True, anchor: object = None
) -> CacheRecord | None:
    """The record if ``identity``/``rows`` have the stored shape (spec §3.1 schemas), else ``None``.

    Row ``val``s are not checked here: the registry validates them against each unit's own schema and
    refolds the unit when one is rejected.
    """
    if not isinstance(identity, Mapping) or not _is_int(identity.get("createdAt"), 0):
        return None
    if set(identity) - {"createdAt", "cwd"} or ("cwd" in identity and type(identity["cwd"]) is not str):
        return None
    if not isinstance(rows, Mapping):
        return None
    for key, row in rows.items():
        if type(key) is not str or not isinstance(row, Mapping) or "val" not in row:
            return None
        if not _is_int(row.get("ver"), 0) or not _is_int(row.get("seq"), -1):
            return None
    if revision is not None and type(revision) is not str:
        return None
    if anchor is not None and type(anchor) is not str:
        return None
    if not copy:  # freshly parsed JSON: nothing else holds these objects
        return CacheRecord(identity, rows, revision, anchor=anchor)
    return CacheRecord(dict(identity), {key: dict(row) for key, row in rows.items()}, revision, anchor=anchor)


def parse_views(views: object) -> Mapping[str, Any] | None:
    """The views blob if it has the :class:`ServedViews` shape (the views themselves are plain JSON
    by construction: they were decoded from JSON text), else ``None``."""
    if not isinstance(views, Mapping) or type(views.get("code")) is not str:
        return None
    rows, served = views.get("rows"), views.get("views")
    if not isinstance(rows, Mapping) or not isinstance(served, Mapping):
        return None
    for cut in rows.values():
        if type(cut) is not list or len(cut) != 2 or not _is_int(cut[0], 0) or not _is_int(cut[1], -1):
            return None
    if any(key not in rows for key in served):
        return None
    return {key: value for key, value in views.items() if key not in _LISTING_KEYS}


_LISTING_KEYS: Final = frozenset({"identity", "revision"})
"""What the stored views text adds to the blob (the record's own columns): left out of a record's views."""


class CacheStorage(Protocol):
    """A medium for cache records (all methods thread-safe; ``put``/``delete`` replace one record atomically)."""

    def get(self, session_id: str) -> CacheRecord | None: ...

    def get_many(self, session_ids: Iterable[str] | None = None) -> dict[str, CacheRecord]: ...

    def get_views(self, session_ids: Iterable[str] | None = None) -> dict[str, ServedViews]:
        """The listing read: identity, revision and views blob of every record that has one (one query)."""
        ...

    def put(self, session_id: str, record: CacheRecord) -> None: ...

    def delete(self, session_id: str) -> None: ...

    def clear(self) -> None: ...

    def close(self) -> None: ...


_MemoryRecord = tuple[bytes, bytes, str | None, bytes | None, str | None]
"""identity JSON, rows JSON, revision, views JSON, anchor."""


@dataclass
class MemoryCacheStorage:
    """An in-process medium (tests, the memory backend): records kept as JSON text, like a durable one,
    so nothing the caller holds aliases a stored record."""

    records: dict[str, _MemoryRecord] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @staticmethod
    def _decode(stored: _MemoryRecord) -> CacheRecord | None:
        identity, rows, revision, views, anchor = stored
        record = parse_record(jsoncodec.loads(identity), jsoncodec.loads(rows), revision, copy=False, anchor=anchor)
        if record is None or views is None:
            return record
        return CacheRecord(record.identity, record.rows, record.revision, parse_views(jsoncodec.loads(views)), anchor)

    def get(self, session_id: str) -> CacheRecord | None:
        with self._lock:
            stored = self.records.get(session_id)
        return None if stored is None else self._decode(stored)

    def _picked(self, session_ids: Iterable[str] | None) -> dict[str, _MemoryRecord]:
        with self._lock:
            if session_ids is None:
                return dict(self.records)
            return {sid: self.records[sid] for sid in session_ids if sid in self.records}

    def get_many(self, session_ids: Iterable[str] | None = None) -> dict[str, CacheRecord]:
        out: dict[str, CacheRecord] = {}
        for sid, stored in self._picked(session_ids).items():
            decoded = self._decode(stored)
            if decoded is not None:
                out[sid] = decoded
        return out

    def get_views(self, session_ids: Iterable[str] | None = None) -> dict[str, ServedViews]:
        out: dict[str, ServedViews] = {}
        for sid, (_identity, _rows, _revision, views, _anchor) in self._picked(session_ids).items():
            served = None if views is None else _served_views(jsoncodec.loads(views))
            if served is not None:
                out[sid] = served
        return out

    def put(self, session_id: str, record: CacheRecord) -> None:
        views = None if record.views is None else jsoncodec.dumps(_listing_blob(record))
        stored = (jsoncodec.dumps(record.identity), jsoncodec.dumps(record.rows), record.revision, views, record.anchor)
        decoded = self._decode(stored)
        if decoded is None or (views is not None and decoded.views is None):
            raise ValueError(f'projection cache record for "{session_id}" has an invalid shape')
        with self._lock:
            self.records[session_id] = stored

    def delete(self, session_id: str) -> None:
        with self._lock:
            self.records.pop(session_id, None)

    def clear(self) -> None:
        with self._lock:
            self.records.clear()

    def close(self) -> None:
        pass


class SqliteCacheStorage:
    """One SQLite database holding every cached session record of one store.

    ``store_id`` names the store the file belongs to; a file built for another store (a copied cache
    file, a store copied elsewhere) is discarded on open. Opening is lazy (the first operation) and a
    failed open is not remembered. Damage found at open or by any later statement discards the file and
    starts a fresh one; reads then answer "absent" and the caller refolds from the log.
    """

    def __init__(self, path: str | os.PathLike[str], *, store_id: str | Callable[[], str | None]) -> None:
        self.path = os.path.abspath(os.fspath(path))
        self._store_id = store_id
        self.store_id: str | None = store_id if isinstance(store_id, str) else None
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._closed = False

    # -- opening ----------------------------------------------------------------------------------
    def _discard(self, reason: str) -> None:
        """Drop the connection and delete the file (and its WAL companions): it is rebuilt from logs."""
        logger.warning(
            'session projection cache: discarding "%s" (%s); it will be rebuilt from the logs', self.path, reason
        )
        self._drop()
        for suffix in ("", "-wal", "-shm", "-journal"):
            try:
                os.unlink(self.path + suffix)
            except FileNotFoundError:
                pass

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except sqlite3.Error:
                pass

    def _create_file(self) -> None:
        try:
            info = os.lstat(self.path)
        except FileNotFoundError:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
            os.close(fd)
            return
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.ENXIO, "not a regular file", self.path)
        if info.st_mode & 0o077:
            os.chmod(self.path, 0o600, follow_symlinks=False)

    def _connect(self) -> sqlite3.Connection:
        if not isinstance(self._store_id, str):
            # Resolved when first needed: a store materializes with its first durable write, which
            # every cache write follows (log durable before cache).
            self.store_id = self._store_id()
            if self.store_id is None:
                raise _StoreNotMaterialized(self.path)
        self._create_file()
        uri = "file:" + urllib.parse.quote(self.path) + "?mode=rw"
        conn = sqlite3.connect(uri, uri=True, isolation_level=None, timeout=BUSY_TIMEOUT_S, check_same_thread=False)
        try:
            conn.execute("PRAGMA trusted_schema = OFF")
            conn.execute("PRAGMA journal_mode = WAL")
            # Atomic either way; a commit lost to a power cut only leaves the cache behind the log.
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("BEGIN IMMEDIATE")
            try:
                problem = self._check_or_initialise(conn)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        except BaseException:
            conn.close()
            raise
        if problem is not None:
            conn.close()
            self._discard(problem)
            return self._connect()
        return conn

    def _check_or_initialise(self, conn: sqlite3.Connection) -> str | None:
        """``None`` when the file is (now) this store's cache; else why it must be discarded."""
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if app_id == 0 and version == 0 and not tables:
            for statement in _SCHEMA:
                conn.execute(statement)
            conn.execute("INSERT INTO cache_state (singleton, store_id) VALUES (1, ?)", (self.store_id,))
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            conn.execute(f"PRAGMA user_version = {DOMAIN_VERSION}")
            return None
        if app_id != APPLICATION_ID:
            return "not a projection cache database"
        if version != DOMAIN_VERSION:
            return f"domain version {version}, expected {DOMAIN_VERSION}"
        if not {"cache_state", "sessions"} <= tables:
            return "incomplete schema"
        columns = [row[1] for row in conn.execute("PRAGMA table_info(sessions)")]
        if columns == _BASE_COLUMNS:  # written before the views columns: add them (records lack views)
            conn.execute("ALTER TABLE sessions ADD COLUMN views TEXT")
            conn.execute("ALTER TABLE sessions ADD COLUMN views_digest TEXT")
            columns = _VIEWS_COLUMNS
        if columns == _VIEWS_COLUMNS:  # written before the anchor column: add it (records lack anchors)
            conn.execute("ALTER TABLE sessions ADD COLUMN anchor TEXT")
        elif columns != _COLUMNS:
            return "unexpected schema"
        row = conn.execute("SELECT store_id FROM cache_state WHERE singleton = 1").fetchone()
        if row is None or row[0] != self.store_id:
            return "built for another store"
        return None

    def _run(self, what: str, fn: Any, *, default: Any = None, soft: bool) -> Any:
        """Run ``fn(conn)``; damage discards the file and retries once on a fresh one.

        ``soft`` reads answer ``default`` when the medium cannot be opened at all (the cache is never
        required); writes raise a typed error (:meth:`_typed`), and the cache's fail-soft write path
        logs it.
        """
        with self._lock:
            if self._closed:
                raise RuntimeError("session projection cache storage is closed")
            for attempt in (1, 2):
                try:
                    if self._conn is None:
                        self._conn = self._connect()
                    return fn(self._conn)
                except sqlite3.DatabaseError as err:
                    if isinstance(err, sqlite3.OperationalError) and not _is_damage(err):
                        self._drop()
                        if soft:
                            logger.warning("session projection cache: %s failed: %s", what, err)
                            return default
                        raise self._typed(what, err) from err
                    if attempt == 2:
                        raise self._typed(what, err) from err
                    try:
                        self._discard(f"{what}: {err}")
                    except OSError as failure:
                        if soft:
                            logger.warning("session projection cache: %s failed: %s", what, failure)
                            return default
                        raise self._typed(what, failure) from failure
                except _StoreNotMaterialized as err:
                    if soft:
                        return default  # nothing can be cached for a store without logs
                    raise PersistenceError(
                        f'session projection cache {what} failed: the identity of the store beside "{self.path}" '
                        "cannot be read (no session was stored yet, or the store cannot be opened); write a "
                        "session first, or check the store with agentlog verify"
                    ) from err
                except OSError as err:
                    self._drop()
                    if soft:
                        logger.warning("session projection cache: %s failed: %s", what, err)
                        return default
                    raise self._typed(what, err) from err
            raise AssertionError("unreachable")

    def _typed(self, what: str, err: BaseException) -> PersistenceError:
        """A medium failure as a typed error naming the cache file, the reason and the remedy.

        The codes are the session backends' (:func:`~agentlog.persistence.storage_errors.sqlite_storage_code`
        for SQLite's result codes, :func:`~agentlog.persistence.storage_errors.storage_error` for the OS's
        errno): a full disk is ``STORAGE_FULL`` whether the log or its cache hit it. The message adds that
        the cache is derived data, so nothing a session stored was touched.
        """
        derived = "the cache is derived data: no session log was touched, and ls and stats work without it"
        if isinstance(err, OSError):
            where = err.filename if isinstance(err.filename, str) else self.path
            typed = storage_error(err, where, f"{what} the session projection cache")
            return StorageAccessError(f"{typed.message}; {derived}", code=typed.code, path=self.path)
        code = sqlite_storage_code(err, self.path)
        if code is not None:
            remedy = _STORAGE_REMEDIES.get(code, "check the disk and the file system, then retry")
            return StorageAccessError(
                f'session projection cache {what} failed on "{self.path}": {err} — {remedy}; {derived}',
                code=code,
                path=self.path,
            )
        if isinstance(err, sqlite3.DatabaseError) and _is_damage(err):
            return PersistenceError(
                f'session projection cache {what} failed: "{self.path}" is damaged and could not be rebuilt ({err}); '
                f"delete it (agentlog reindex --projections rebuilds it); {derived}"
            )
        return PersistenceError(
            f'session projection cache {what} failed on "{self.path}": {err} — if another agentlog command is '
            f"writing the cache, retry when it is done; {derived}"
        )

    # -- records ----------------------------------------------------------------------------------
    @staticmethod
    def _decode(session_id: str, row: tuple[Any, ...]) -> CacheRecord | None:
        identity, rows, revision, domain_version, digest, views, views_digest, anchor = row
        if domain_version != DOMAIN_VERSION:
            return None
        if (
            type(identity) is not str
            or type(rows) is not str
            or (anchor is not None and type(anchor) is not str)
            or digest != _digest(session_id, identity, rows, revision, anchor)
        ):
            # SQLite does not checksum pages: a flipped bit inside a JSON text would otherwise be served.
            logger.warning('session projection cache: record for "%s" fails its digest; ignoring it', session_id)
            return None
        try:
            record = parse_record(jsoncodec.loads(identity), jsoncodec.loads(rows), revision, copy=False, anchor=anchor)
        except Exception:  # a malformed record is absent, never served
            return None
        if record is None or type(views) is not str or views_digest != _views_digest(session_id, views):
            return record  # views are optional: a record without (intact) ones is served from its rows
        try:
            parsed = parse_views(jsoncodec.loads(views))
        except Exception:
            return record
        return CacheRecord(record.identity, record.rows, record.revision, parsed, record.anchor)

    _RECORD_COLUMNS: Final = "identity, rows, revision, domain_version, digest, views, views_digest, anchor"

    def get(self, session_id: str) -> CacheRecord | None:
        def body(conn: sqlite3.Connection) -> CacheRecord | None:
            row = conn.execute(
                f"SELECT {self._RECORD_COLUMNS} FROM sessions WHERE session_id = ?", (session_id,)
            ).fetchone()
            return None if row is None else self._decode(session_id, row)

        result: CacheRecord | None = self._run("read", body, soft=True)
        return result

    def get_many(self, session_ids: Iterable[str] | None = None) -> dict[str, CacheRecord]:
        wanted = None if session_ids is None else set(session_ids)

        def body(conn: sqlite3.Connection) -> dict[str, CacheRecord]:
            out: dict[str, CacheRecord] = {}
            for sid, *rest in conn.execute(f"SELECT session_id, {self._RECORD_COLUMNS} FROM sessions"):
                if wanted is not None and sid not in wanted:
                    continue
                record = self._decode(sid, tuple(rest))
                if record is not None:
                    out[sid] = record
            return out

        result: dict[str, CacheRecord] = self._run("listing read", body, default={}, soft=True)
        return result

    def get_views(self, session_ids: Iterable[str] | None = None) -> dict[str, ServedViews]:
        """One query over the listing columns only (the rows texts are neither read nor hashed): the
        views digest covers exactly what is served — the session id and the views text, which carries
        the record's identity and revision."""
        wanted = None if session_ids is None else set(session_ids)
        loads = jsoncodec.loads

        def body(conn: sqlite3.Connection) -> dict[str, ServedViews]:
            out: dict[str, ServedViews] = {}
            statement = (
                "SELECT session_id, views, views_digest FROM sessions "
                f"WHERE views IS NOT NULL AND domain_version = {DOMAIN_VERSION}"
            )
            for sid, views, digest in conn.execute(statement):
                if wanted is not None and sid not in wanted:
                    continue
                if type(views) is not str or digest != _views_digest(sid, views):
                    logger.warning('session projection cache: views of "%s" fail their digest; ignoring them', sid)
                    continue
                try:
                    served = _served_views(loads(views))
                except Exception:  # malformed: absent (the reader falls back to the rows)
                    continue
                if served is not None:
                    out[sid] = served
            return out

        result: dict[str, ServedViews] = self._run("listing read", body, default={}, soft=True)
        return result

    def put(self, session_id: str, record: CacheRecord) -> None:
        if parse_record(record.identity, record.rows, record.revision, anchor=record.anchor) is None:
            raise ValueError(f'projection cache record for "{session_id}" has an invalid shape')
        if record.views is not None and parse_views(record.views) is None:
            raise ValueError(f'projection cache record for "{session_id}" has an invalid shape')
        identity = jsoncodec.dumps(record.identity).decode()
        rows = jsoncodec.dumps(record.rows).decode()
        digest = _digest(session_id, identity, rows, record.revision, record.anchor)
        views = None if record.views is None else jsoncodec.dumps(_listing_blob(record)).decode()
        views_digest = None if views is None else _views_digest(session_id, views)
        anchor = record.anchor
        values = (session_id, identity, rows, record.revision, DOMAIN_VERSION, digest, views, views_digest, anchor)
        marks = ", ".join("?" * len(values))
        statement = f"INSERT OR REPLACE INTO sessions (session_id, {self._RECORD_COLUMNS}) VALUES ({marks})"
        self._run("write", lambda conn: conn.execute(statement, values), soft=False)

    def delete(self, session_id: str) -> None:
        self._run(
            "delete", lambda conn: conn.execute("DELETE FROM sessions WHERE session_id = ?", (session_id,)), soft=False
        )

    def clear(self) -> None:
        self._run("clear", lambda conn: conn.execute("DELETE FROM sessions"), soft=False)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._drop()


def _digest(session_id: str, identity: str, rows: str, revision: str | None, anchor: str | None = None) -> str:
    """A keyed-by-content digest of one stored record (its session id included: rows cannot be swapped).

    The anchor is hashed after the rest, and only when present: a record written before anchors were
    stored keeps the digest it was written with."""
    h = hashlib.blake2b(digest_size=16)
    for part in (session_id, identity, rows, revision or ""):
        data = part.encode("utf-8", "surrogatepass")
        h.update(len(data).to_bytes(8, "big"))
        h.update(data)
    h.update(b"\x01" if revision is not None else b"\x00")
    if anchor is not None:
        data = anchor.encode("utf-8", "surrogatepass")
        h.update(b"anchor" + len(data).to_bytes(8, "big"))
        h.update(data)
    return h.hexdigest()


def _listing_blob(record: CacheRecord) -> dict[str, Any]:
    """The stored ``views`` text's object: the views blob with the record's identity and revision in it,
    so a listing read decodes one text per session."""
    assert record.views is not None
    return {**record.views, "identity": record.identity, "revision": record.revision}


def _served_views(blob: object) -> ServedViews | None:
    if type(blob) is not dict:
        return None
    revision = blob.get("revision")
    if revision is not None and type(revision) is not str:
        return None
    return ServedViews(blob.get("identity"), revision, blob)


def _views_digest(session_id: str, views: str) -> str:
    """The check of what a listing read serves: the session id and the views text (which carries the
    identity and revision; the rows text is not part of it, it is not read).

    A CRC-32 of one length-prefixed buffer: what it guards against is damage (SQLite does not checksum
    pages), not forgery — the file is the owner's own, like the logs — and a listing checks a thousand
    of these per command (a fifth of the cost of a cryptographic hash here)."""
    data = f"{len(session_id)}:{session_id}{views}".encode("utf-8", "surrogatepass")
    return format(zlib.crc32(data), "08x")


class _StoreNotMaterialized(Exception):
    """Internal: the store has no durable state yet, so no cache can belong to it."""

    def __init__(self, path: str) -> None:
        super().__init__(f'the store of projection cache "{path}" holds no session yet')


_STORAGE_REMEDIES: Final = {
    "STORAGE_FULL": "free space on that file system and retry",
    "STORAGE_READ_ONLY": "remount the file system read-write (or make the file writable), then retry",
    "STORAGE_PERMISSION_DENIED": "make the file and its directory readable and writable by this user, then retry",
    "STORAGE_IO": "check the disk and the file system, then retry",
}


def _is_damage(err: sqlite3.DatabaseError) -> bool:
    """Whether an OperationalError means the file is unusable (as opposed to busy, full or read-only)."""
    code = getattr(err, "sqlite_errorcode", None)
    if code is not None:
        return (code & 0xFF) in (11, 26)  # SQLITE_CORRUPT, SQLITE_NOTADB
    text = str(err).lower()
    return "malformed" in text or "not a database" in text


def cache_path_for(backend: object) -> str | None:
    """Where a backend's store keeps its cache file, or ``None`` for an in-process store (memory medium).

    A PostgreSQL store has no place on disk: its cache is ``projections.sqlite`` in its directory of the
    reading host's cache (:mod:`agentlog.persistence.host_cache`), created here.
    """
    if not isinstance(backend, PlacesDerivedFiles):
        return None
    directory = backend.derived_directory()
    if directory is not None:
        return os.path.join(directory, POSTGRES_CACHE_FILE)
    return backend.derived_path(CACHE_FILE_NAME, SQLITE_SUFFIX)


def store_id_for(backend: object) -> str | None:
    """The identity a cache file is bound to — which store (not which file) it was built for — or
    ``None`` while the store holds nothing yet (no root directory, no database).

    SQLite stores carry a random store id (``persistence_state.store_id``, written with the database):
    a new database at the same path, next to a cache file left behind, never shares it. JSONL stores
    have no id of their own: the real path and the inode of the root stand in, so a store copied
    elsewhere (or recreated at the same path) rebuilds its cache instead of trusting a copied file. The
    backend says which (:class:`~agentlog.persistence.backend.IdentifiesStore`); one that cannot binds
    its cache to the backend instance, so every process rebuilds it.
    """
    if isinstance(backend, IdentifiesStore):
        return backend.store_identity()
    return f"memory:{id(backend)}"  # no identity of its own (a memory store): this instance


def open_cache_storage(backend: object) -> CacheStorage:
    """The cache medium for a backend's store: a SQLite file beside it, or memory for in-process stores.

    The file is opened (and checked, or discarded and rebuilt) at the first operation, once the store
    exists. A store whose cache file cannot live beside it (a directory or another non-file in its
    place, a store directory this user cannot write) gets a memory medium with a warning: the cache is
    never required for correctness.
    """
    path = cache_path_for(backend)
    if path is None:
        return MemoryCacheStorage()
    problem: str | None = None
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        parent = os.path.dirname(path)
        if os.path.isdir(parent) and not os.access(parent, os.W_OK):
            problem = f'its directory "{parent}" is not writable'
    except OSError as err:
        problem = str(err)
    else:
        if not stat.S_ISREG(info.st_mode):
            problem = "it is not a regular file"
    if problem is not None:
        logger.warning(
            'session projection cache: "%s" is unusable (%s); caching in memory for this process', path, problem
        )
        return MemoryCacheStorage()
    return SqliteCacheStorage(path, store_id=lambda: store_id_for(backend))
