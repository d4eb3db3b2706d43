"""Full-text session search over a derived SQLite FTS5 index (runtime spec §4.3, the original's
``SqliteSessionQueryEngine``).

:class:`SqliteSearch` is a :class:`~agentlog.query.engine.SessionQuery` (every exact read is inherited)
that adds :meth:`~SqliteSearch.search_sessions` and :meth:`~SqliteSearch.search_events`. Why it is built
this way:

* **The index is derived, the store is the truth.** Every search first *reconciles* the index with the
  corpus: stored sessions by their backend revision (an unchanged revision is never re-read), live
  sessions of this process by a fingerprint. The observation is *stable* — listing, inspections, a second
  listing and the live population must agree, with one retry — and the changes are applied in one
  ``BEGIN IMMEDIATE`` transaction, so a crash (even ``kill -9``) leaves the index as it was and the next
  search redoes the work. The query path reads stored logs with ``inspect`` (never repairs, never takes a
  writer lock): a search never writes the store.
* **Live sessions are connection-local.** Their rows live in TEMP tables, dropped on reopen; stored
  sessions live in the main database and survive reopens, so reopening an unchanged store inspects
  nothing. A live session shadows its stored log (the live row wins; its log is never read while live).
* **Generations make cursors honest.** A page cursor is bound to its normalized request and to a
  generation: cross-session cursors go stale on any corpus change or persistence mount/unmount,
  within-session cursors only when *their* session changes.
* **One operation at a time.** A lock serializes searches (and :meth:`~SqliteSearch.close`, which waits
  for the accepted operation); a waiting search still honours its cancellation signal.
* **CJK substring companion** (agentlog addition, :mod:`agentlog.query.cjk`): documents containing CJK
  text are also entered into trigram tables; a query containing a CJK character is answered there as a
  substring query (trigram MATCH for three or more code points, else a scan of the companion rows with
  a registered marking function) with the same filters, ranking, cursors and hit shapes. Every other
  query takes the original's ``unicode61`` one-phrase path unchanged.

Deviations from the original, on purpose: a stored session whose listing is damaged, or whose inspection
reports ``SESSION_CORRUPT``, is left out of the corpus and reported in :attr:`SqliteSearch.skipped`
instead of failing every search of the store (a within-session search of it is
``SESSION_QUERY_CORRUPT_SESSION``); a session deleted between listing and inspection makes the
observation unstable (retried) rather than a persistence failure; a damaged index file that carries our
application id is rebuilt from the logs (see :mod:`agentlog.query.schema`); a live session's fingerprint
is a per-object token plus its event count instead of a hash of its JSON (see ``_fingerprint``); the main
generation is read inside the write transaction, and a main generation moved by another process sharing
the index file also stales this process's cross-session cursors (the original supports one owner only).

Cancellation: the backends are synchronous, so a started ``list``/``inspect`` always finishes; the
signal is checked before and after each of them, before any SQLite work and while queued for the lock.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sqlite3
import threading
import uuid
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from ..errors import (
    PersistenceError,
    SessionNotFoundError,
    SessionPersistenceCorruptionError,
    SessionQueryError,
)
from ..kernel.jsonvalue import MAX_SAFE_INTEGER, thaw
from ..kernel.session import Session
from ..kernel.store import SessionStore
from ..persistence.coordinator import PersistenceCoordinator
from .cjk import (
    COMPANION_LIVE_TABLE,
    COMPANION_PERSISTED_TABLE,
    companion_text,
    fold,
    has_cjk,
    mark_substrings,
    trigram_match_expression,
    uses_substring,
)
from .cursor import decode_cursor, encode_cursor
from .documents import build_documents, indexed_columns
from .engine import SessionQuery, Signal, assert_headers_compatible, js_integer
from .normalize import (
    FTS_HIGHLIGHT_END,
    FTS_HIGHLIGHT_START,
    SQLITE_MAX_PAGE_LIMIT,
    EventSearchRequest,
    SessionSearchRequest,
    SqlWhere,
    assert_fts5_outer_predicate_count,
    assert_portable_binding_count,
    build_event_where,
    build_session_where,
    make_snippet,
    normalize_event_request,
    normalize_session_request,
    quote_fts_data,
    request_fingerprint,
    sanitize_fts_text,
)
from .schema import (
    JOURNAL_MODES,
    MEMORY_PATH,
    discard_database_files,
    file_is_ours,
    is_corruption,
    open_search_database,
    reset_search_database,
)

__all__ = [
    "DEFAULT_LIMIT",
    "INDEX_FILE_NAME",
    "MAX_LIMIT",
    "OPEN_AT",
    "SNIPPET_CHARS",
    "SqliteSearch",
    "default_index_path",
]

logger = logging.getLogger("agentlog.query.search")

DEFAULT_LIMIT: Final = 20
MAX_LIMIT: Final = 100
SNIPPET_CHARS: Final = 240
OPEN_AT: Final = ("startup", "first-search", "never")
INDEX_FILE_NAME: Final = ".agentlog-search.sqlite3"
SQLITE_INDEX_SUFFIX: Final = ".search.sqlite3"

# One transient source change gets a retry; repeated churn fails rather than monopolizing the queue.
STABLE_OBSERVATION_ATTEMPTS: Final = 2
_T = TypeVar("_T")
_WAIT_SLICE_S: Final = 0.02
_MARKER_BYTES: Final = len(FTS_HIGHLIGHT_START.encode("utf-8"))
_HEADER_FIELDS: Final = (
    ("cwd", "cwd"),
    ("parent_session", "parentSession"),
    ("seed_length", "seedLength"),
    ("delegation_depth", "delegationDepth"),
    ("agent_preset", "agentPreset"),
)


# --- observation records ---------------------------------------------------------------------------------


@dataclass
class _Loaded:
    header: dict[str, Any]
    documents: list[dict[str, Any]]


@dataclass
class _Persisted:
    header: dict[str, Any] | None
    """The listed header; ``None`` when the revision listing showed it unchanged (not read)."""
    revision: str
    loaded: _Loaded | None = None


@dataclass
class _Live:
    session: Session
    header: dict[str, Any]
    count: int
    fingerprint: str


@dataclass(frozen=True)
class _Binding:
    identity: int
    service: PersistenceCoordinator | None


@dataclass
class _Observation:
    binding: _Binding
    persisted: dict[str, _Persisted]
    live: dict[str, _Live]
    skipped: dict[str, tuple[str, dict[str, str]]] = field(default_factory=dict)
    """Stored sessions left out of the corpus: id → (revision, skipped record)."""


class _Unstable(Exception):
    """The observed corpus moved under the observation: retry it."""


# --- errors ----------------------------------------------------------------------------------------------


def _aborted() -> SessionQueryError:
    return SessionQueryError("session-search aborted", "SESSION_QUERY_ABORTED")


def _check(signal: Signal | None) -> None:
    if signal is not None and signal.is_set():
        raise _aborted()


def _invalid_config(detail: str, engine: str = "SQLite") -> SessionQueryError:
    """``engine``: the index the provider runs on, so a provider sharing these checks names its own."""
    return SessionQueryError(f"session-search {engine} config: {detail}", "SESSION_QUERY_INVALID_CONFIG")


def _index_closed(engine: str = "SQLite") -> SessionQueryError:
    return SessionQueryError(f"session-search {engine} index is closed", "SESSION_QUERY_INDEX_FAILED")


def _message(err: BaseException) -> str:
    return str(err) if isinstance(err, Exception) and str(err) else "unknown error"


@dataclass(frozen=True)
class _Limits:
    default_limit: int
    max_limit: int
    snippet_chars: int


def _check_config(
    *,
    path: object,
    open_at: object,
    journal_mode: object,
    default_limit: object,
    max_limit: object,
    snippet_chars: object,
    read_window_max: object,
    persisted_inspect_concurrency: object,
    engine: str = "SQLite",
) -> _Limits:
    """The original's ``resolveConfig`` checks, in its order, with its messages; the resolved numbers."""
    if not isinstance(path, str) or not path.strip():
        raise _invalid_config("path must not be blank", engine)
    if open_at not in OPEN_AT:
        raise _invalid_config("openAt is not supported", engine)
    limits: list[int] = []
    for name, value in (("defaultLimit", default_limit), ("maxLimit", max_limit)):
        number = js_integer(value)
        if number is None or not 1 <= number <= SQLITE_MAX_PAGE_LIMIT:
            raise _invalid_config(f"{name} must be an integer between 1 and {SQLITE_MAX_PAGE_LIMIT}", engine)
        limits.append(number)
    snippet = js_integer(snippet_chars)
    if snippet is None or snippet < 1:
        raise _invalid_config("snippetChars must be a positive integer", engine)
    window = js_integer(read_window_max)
    if window is None or window < 0:
        raise _invalid_config("readWindowMax must be a non-negative integer", engine)
    concurrency = js_integer(persisted_inspect_concurrency)
    if concurrency is None or not 1 <= concurrency <= MAX_SAFE_INTEGER:
        raise _invalid_config("persistedInspectConcurrency must be a positive safe integer", engine)
    if limits[0] > limits[1]:
        raise _invalid_config("defaultLimit must be less than or equal to maxLimit", engine)
    if journal_mode not in JOURNAL_MODES:
        raise _invalid_config("journalMode is not supported", engine)
    return _Limits(limits[0], limits[1], snippet)


def default_index_path(backend: object) -> str | None:
    """Where a store keeps its search index by default (``None``: keep it in memory).

    A JSONL store: ``<root>/.agentlog-search.sqlite3`` (the listing ignores files in the root, and a
    dot-name is never a project directory). A SQLite store: the sibling ``<database>.search.sqlite3`` —
    never inside the store's own database, which checks an exact copy of its schema (spec: the index is
    a dedicated derived database). A PostgreSQL store: ``search.sqlite3`` in its directory of the reading
    host's cache (:mod:`agentlog.persistence.host_cache`: ``~/.cache/agentlog/postgres/<key>/``; each host
    keeps its own index, reconciled by revision on every search). A memory store, or anything else: ``None``.
    """
    from ..persistence.backend import PlacesDerivedFiles
    from ..persistence.host_cache import POSTGRES_INDEX_FILE

    if not isinstance(backend, PlacesDerivedFiles):
        return None
    directory = backend.derived_directory()
    if directory is not None:
        return os.path.join(directory, POSTGRES_INDEX_FILE)
    return backend.derived_path(INDEX_FILE_NAME, SQLITE_INDEX_SUFFIX)


# --- the provider ----------------------------------------------------------------------------------------


class SqliteSearch(SessionQuery):
    """Session query with SQLite FTS5 search over the live-preferred corpus.

    ``path`` is a dedicated derived database (or ``:memory:``), never the store's own database.
    ``open_at``: ``"startup"`` opens and validates in the constructor (failure raises
    ``SESSION_QUERY_INDEX_FAILED`` and nothing is left open); ``"first-search"`` opens on the first
    search; ``"never"`` disables both search methods (``SESSION_QUERY_SEARCH_DISABLED``) and never
    touches SQLite, while the inherited reads keep working.
    """

    _engine = "SQLite"  # what the config and closed-index messages name (the original's texts say SQLite)

    def __init__(
        self,
        coordinator: PersistenceCoordinator | None = None,
        *,
        path: str,
        store: SessionStore | None = None,
        open_at: str = "startup",
        journal_mode: str = "wal",
        default_limit: int = DEFAULT_LIMIT,
        max_limit: int = MAX_LIMIT,
        snippet_chars: int = SNIPPET_CHARS,
        read_window_max: int = 50,
        persisted_inspect_concurrency: int = 4,
    ) -> None:
        limits = _check_config(
            path=path,
            open_at=open_at,
            journal_mode=journal_mode,
            default_limit=default_limit,
            max_limit=max_limit,
            snippet_chars=snippet_chars,
            read_window_max=read_window_max,
            persisted_inspect_concurrency=persisted_inspect_concurrency,
            engine=self._engine,
        )
        super().__init__(
            coordinator,
            store=store,
            read_window_max=read_window_max,
            persisted_inspect_concurrency=persisted_inspect_concurrency,
        )
        self.path = path
        self.open_at = open_at
        self.journal_mode = journal_mode
        self.default_limit = limits.default_limit
        self.max_limit = limits.max_limit
        self.snippet_chars = limits.snippet_chars
        self.skipped: list[dict[str, str]] = []
        """Stored sessions the last search left out of the corpus: ``{"sessionId", "code", "message"}``."""
        self._instance = str(uuid.uuid4())
        self._serial = threading.Lock()  # one operation at a time
        self._conn: sqlite3.Connection | None = None
        self._open_failure: SessionQueryError | None = None
        self._opened = 0  # how many times the database was opened (readiness is shared: once)
        self._closed = False
        self._last_identity: int | None = None
        self._persistence_epoch = 0
        self._global_generation = 0
        self._local_generation = 0
        self._seen_main: int | None = None
        self._skipped_revisions: dict[str, tuple[int, str, dict[str, str]]] = {}
        # (the indexed revisions, the observation of an unchanged store built from them)
        self._unmoved: tuple[Mapping[str, str], dict[str, _Persisted]] | None = None
        # Stored headers of sessions that were live when last listed (binding identity, header): a
        # stored header never changes, so the revision fast path can check a live session against it.
        self._stored_headers: dict[str, tuple[int, dict[str, Any]]] = {}
        # One-term queries are ranked from the term side table; False forces the general (highlight)
        # path, which the equivalence tests compare it with.
        self._term_path = True
        # The stored rows' revisions as of a main generation (every write of stored rows, by any process
        # sharing the file, moves it): an unchanged index is not re-read on every search.
        self._indexed_cache: tuple[int, dict[str, str]] | None = None
        self._tokens: dict[int, tuple[weakref.ref[Session], str]] = {}
        self._unsubscribe_deletes = (
            coordinator.on_deleted(self._forget_deleted) if coordinator is not None and open_at != "never" else None
        )
        if open_at == "startup":
            try:
                self._ensure_ready()
            except BaseException:
                super().close()
                raise

    # -- public -------------------------------------------------------------------------------------
    def search_sessions(
        self,
        *,
        query: object,
        session_filters: object = None,
        event_filters: object = None,
        limit: object = None,
        cursor: object = None,
        signal: Signal | None = None,
    ) -> dict[str, Any]:
        """One page of sessions ranked by their best matching event: ``{items, nextCursor?}``.

        Each item is ``{header, live, persisted, bestMatch: {sessionId, seq, type, time, surface,
        snippet}}``. The request is validated and copied before waiting for the serializer.
        """
        self._assert_enabled()
        request = normalize_session_request(
            query=query,
            session_filters=session_filters,
            event_filters=event_filters,
            limit=limit,
            cursor=cursor,
            default_limit=self.default_limit,
            max_limit=self.max_limit,
        )
        session_where = build_session_where(request.session_filters)
        event_where = build_event_where(request.event_filters)
        fingerprint = request_fingerprint(request)

        def operation() -> dict[str, Any]:
            binding = self._reconcile(signal)
            _check(signal)
            generation = str(self._global_generation)
            offset = 0
            if request.cursor is not None:
                offset = decode_cursor(
                    request.cursor,
                    instance=self._instance,
                    scope="sessions",
                    fingerprint=fingerprint,
                    generation=generation,
                )
            rows = self._query_sessions(request, session_where, event_where, offset, binding)
            return self._page(rows, request.limit, offset, self._session_hit, "sessions", fingerprint, generation)

        return self._serialized(signal, operation)

    def search_events(
        self,
        *,
        session_id: object,
        query: object,
        filters: object = None,
        limit: object = None,
        cursor: object = None,
        signal: Signal | None = None,
    ) -> dict[str, Any]:
        """One page of one session's matching events: ``{session: header, items, nextCursor?}``."""
        self._assert_enabled()
        request = normalize_event_request(
            session_id=session_id,
            query=query,
            filters=filters,
            limit=limit,
            cursor=cursor,
            default_limit=self.default_limit,
            max_limit=self.max_limit,
        )
        event_where = build_event_where(request.filters)
        fingerprint = request_fingerprint(request)

        def operation() -> dict[str, Any]:
            binding = self._reconcile(signal)
            _check(signal)
            header, generation = self._target(request.session_id, binding)
            offset = 0
            if request.cursor is not None:
                offset = decode_cursor(
                    request.cursor,
                    instance=self._instance,
                    scope="events",
                    fingerprint=fingerprint,
                    generation=generation,
                )
            rows = self._query_events(request, event_where, offset, binding)
            page = self._page(rows, request.limit, offset, self._event_hit, "events", fingerprint, generation)
            return {"session": header, **page}

        return self._serialized(signal, operation)

    def rebuild(self, progress: Callable[[int, int], None] | None = None, *, signal: Signal | None = None) -> None:
        """Drop every derived row and index the whole corpus again (``agentlog reindex --search``).

        ``progress(done, total)`` is called after each stored session is written, inside the one write
        transaction (``total`` = stored sessions to write): the index commits after the last call, so an
        interrupted rebuild leaves an empty, consistent index that the next search fills.
        """
        self._assert_enabled()

        def operation() -> None:
            conn = self._require()
            main = self._main_generation(conn)
            try:
                reset_search_database(conn)
                # Moved on, so another process sharing the file sees that its rows are gone.
                conn.execute("UPDATE search_state SET global_generation = ? WHERE singleton = 1", (main + 1,))
                self._indexed_cache = None
            except sqlite3.Error as err:
                raise SessionQueryError(f"session-search rebuild failed: {err}", "SESSION_QUERY_INDEX_FAILED") from err
            # Everything is re-inspected and every earlier cursor must go stale.
            self._last_identity = None
            self._persistence_epoch += 1
            self._global_generation += 1
            self._skipped_revisions.clear()
            self._reconcile(signal, progress=progress)
            self._give_back_free_pages(conn)

        self._serialized(signal, operation)

    @staticmethod
    def _give_back_free_pages(conn: sqlite3.Connection) -> None:
        """Shrink the file to what the rebuilt index uses (the pages of deleted sessions' documents stay
        free in the file otherwise: a store that deleted most of its sessions would keep its old size)."""
        try:
            if int(conn.execute("PRAGMA freelist_count").fetchone()[0]) > 0:
                conn.execute("VACUUM")
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.Error as err:
            logger.warning("session-search: the rebuilt index could not be compacted (%s); it stays usable", err)

    def forget(self, session_ids: Sequence[str], *, signal: Signal | None = None) -> int:
        """Drop the stored documents of ``session_ids`` now (a deleted session's), in one transaction.

        A search would drop them anyway at its next reconciliation (the store no longer lists them); this
        removes them at delete time, so a deleted session's text does not linger in the index file of a
        store nobody searches. Moves the main generation (cross-session cursors go stale, as on any
        corpus change). Returns how many of the ids had stored rows.
        """
        self._assert_enabled()
        ids = list(session_ids)

        def operation() -> int:
            conn = self._ensure_ready()
            began = False
            try:
                conn.execute("BEGIN IMMEDIATE")
                began = True
                payload = json.dumps(ids)
                row = conn.execute(
                    "SELECT count(*) FROM persisted_sessions WHERE id IN (SELECT value FROM json_each(?))", (payload,)
                ).fetchone()
                found = int(row[0])
                if found:
                    main = self._main_generation(conn) + 1
                    _delete_sessions(conn, "persisted", ids)
                    conn.execute("UPDATE search_state SET global_generation = ? WHERE singleton = 1", (main,))
                    self._indexed_cache = None
                conn.execute("COMMIT")
                return found
            except BaseException as err:
                if began:
                    try:
                        conn.execute("ROLLBACK")
                    except sqlite3.Error:
                        pass
                if not isinstance(err, sqlite3.Error):
                    raise
                raise SessionQueryError(
                    f"session-search forget failed: {_message(err)}", "SESSION_QUERY_INDEX_FAILED"
                ) from err

        return self._serialized(signal, operation)

    def _forget_deleted(self, session_id: str) -> None:
        if not self._closed:
            self.forget([session_id])

    def close(self) -> None:
        """Close the index after the accepted operation finishes; queued and later searches then fail
        with ``SESSION_QUERY_INDEX_FAILED`` ("index is closed"). Idempotent."""
        self._closed = True
        if self._unsubscribe_deletes is not None:
            self._unsubscribe_deletes()
        with self._serial:
            conn, self._conn = self._conn, None
            if conn is not None:
                conn.close()
        super().close()

    # -- lifecycle ----------------------------------------------------------------------------------
    def _assert_enabled(self) -> None:
        """Refuse full-text calls under ``open_at="never"`` before any normalization or SQLite work."""
        if self.open_at == "never":
            raise SessionQueryError(
                'session search is disabled: this deployment configures the session-query index with openAt "never"',
                "SESSION_QUERY_SEARCH_DISABLED",
            )

    def _open(self) -> None:
        conn = open_search_database(self.path, self.journal_mode)
        try:
            main = self._main_generation(conn)
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        self._indexed_cache = None
        self._opened += 1
        # Monotone across reopens (a rebuilt file restarts its counter): cursors never come back to life.
        self._global_generation = max(self._global_generation + (1 if self._opened > 1 else 0), main)
        self._local_generation = max(self._local_generation, main)

    def _ensure_ready(self) -> sqlite3.Connection:
        """Open the database once; a failed open is remembered (readiness is shared, as in the original)."""
        if self._conn is not None:
            return self._conn
        if self._open_failure is not None:
            raise self._open_failure
        try:
            self._open()
        except SessionQueryError as err:
            self._open_failure = err
            raise
        except Exception as err:
            failure = SessionQueryError(
                f"session-search SQLite index failed to open: {_message(err)}", "SESSION_QUERY_INDEX_FAILED"
            )
            failure.__cause__ = err
            self._open_failure = failure
            raise failure from err
        assert self._conn is not None
        return self._conn

    def _require(self) -> sqlite3.Connection:
        if self._conn is None:
            raise _index_closed(self._engine)
        return self._conn

    def _acquire(self, signal: Signal | None) -> None:
        """Wait for the serializer, still honouring cancellation and close while queued."""
        while True:
            if self._closed:
                raise _index_closed(self._engine)
            _check(signal)
            if self._serial.acquire(timeout=_WAIT_SLICE_S):
                return

    def _serialized(self, signal: Signal | None, operation: Callable[[], _T]) -> _T:
        """Run ``operation`` alone, on a ready index. Damaged index bytes found on the way discard a
        file that is ours and run the operation once more on the rebuilt (empty) index; any other SQLite
        failure is ``SESSION_QUERY_INDEX_FAILED``."""
        if self._closed:
            raise _index_closed(self._engine)
        self._acquire(signal)
        try:
            if self._closed:
                raise _index_closed(self._engine)
            for attempt in (1, 2):
                _check(signal)
                self._ensure_ready()
                _check(signal)
                try:
                    return operation()
                except (sqlite3.Error, SessionQueryError) as err:
                    if attempt == 1 and self.path != MEMORY_PATH and self._damaged(err):
                        self._discard_damaged(err)
                        continue
                    if isinstance(err, sqlite3.Error):
                        raise SessionQueryError(
                            f"session-search SQLite index failed: {err}", "SESSION_QUERY_INDEX_FAILED"
                        ) from err
                    raise
            raise AssertionError("unreachable")
        finally:
            self._serial.release()

    @staticmethod
    def _damaged(err: BaseException) -> bool:
        """Whether an operation failed on damaged index bytes (directly or as the chained cause)."""
        return is_corruption(err) or (err.__cause__ is not None and is_corruption(err.__cause__))

    def _discard_damaged(self, err: BaseException) -> None:
        """Damage found by a search: rebuild a file that is provably ours, else refuse (never trust it)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
        actual = os.path.abspath(self.path)
        if not file_is_ours(actual):
            failure = SessionQueryError(
                f'session-search database at "{actual}" is damaged and does not carry the session-search '
                "application id; refusing to replace it (delete it to rebuild the index)",
                "SESSION_QUERY_INDEX_FAILED",
            )
            self._open_failure = failure
            raise failure from err
        logger.warning('session-search index "%s" is damaged (%s); rebuilding it from the logs', actual, err)
        discard_database_files(actual)
        self._last_identity = None
        self._persistence_epoch += 1
        self._global_generation += 1
        self._skipped_revisions.clear()

    # -- reconciliation -----------------------------------------------------------------------------
    def _binding(self) -> _Binding:
        while True:
            identity = self.binding_epoch
            service = self.persistence
            if self.binding_epoch == identity:
                return _Binding(identity, service)

    def _fingerprint(self, session: Session, count: int) -> str:
        """A live session's fingerprint: a token unique to the Session object plus its event count.

        The original hashes the JSON of header and events; a live log is append-only and its header
        immutable, so (this object, this many events) names the same content at a fraction of the
        cost. The token (not ``id()``, which Python reuses after collection) is held weakly.
        """
        key = id(session)
        entry = self._tokens.get(key)
        if entry is None or entry[0]() is not session:
            tokens = self._tokens

            def forget(ref: weakref.ref[Session]) -> None:
                current = tokens.get(key)
                if current is not None and current[0] is ref:
                    del tokens[key]

            entry = (weakref.ref(session, forget), uuid.uuid4().hex)
            tokens[key] = entry
        return f"{entry[1]}:{count}"

    def _reconcile(self, signal: Signal | None, *, progress: Callable[[int, int], None] | None = None) -> _Binding:
        _check(signal)
        conn = self._require()
        main = self._main_generation(conn)
        if main != self._seen_main:
            # Another process sharing this index changed its stored rows: our cross-session cursors
            # count in a corpus that moved, so they must go stale too.
            if self._seen_main is not None:
                self._global_generation += 1
            self._seen_main = main
        cached = self._indexed_cache
        if cached is not None and cached[0] == main:
            indexed_persisted = cached[1]
        else:
            indexed_persisted = self._indexed_persisted(conn)
            self._indexed_cache = (main, indexed_persisted)
        indexed_live = self._indexed_live(conn)
        observation = self._observe_stable(indexed_persisted, signal)
        _check(signal)
        mounted = observation.binding.service is not None
        persisted_changes = (
            [entry for entry in observation.persisted.values() if entry.loaded is not None] if mounted else []
        )
        persisted_deletes = [sid for sid in indexed_persisted if sid not in observation.persisted] if mounted else []
        live_changes = [
            entry
            for sid, entry in observation.live.items()
            if indexed_live.get(sid) != (entry.fingerprint, 1 if sid in observation.persisted else 0)
        ]
        live_deletes = [sid for sid in indexed_live if sid not in observation.live]
        pointer_changed = self._last_identity is not None and self._last_identity != observation.binding.identity
        has_writes = bool(persisted_changes or persisted_deletes or live_changes or live_deletes)
        # Live documents are built only for sessions that changed, from the observed prefix.
        live_documents = {entry.header["id"]: self._live_documents(entry) for entry in live_changes}
        local = self._local_generation
        if has_writes:
            local = self._apply(
                conn,
                observation,
                persisted_changes,
                persisted_deletes,
                live_changes,
                live_deletes,
                live_documents,
                progress,
            )
        if has_writes or pointer_changed:
            self._global_generation += 1
        if pointer_changed:
            self._persistence_epoch += 1
        self._local_generation = local
        self._last_identity = observation.binding.identity
        if mounted:
            self._skipped_revisions = {
                sid: (observation.binding.identity, revision, record)
                for sid, (revision, record) in observation.skipped.items()
            }
            self.skipped = [record for _, record in observation.skipped.values()]
        else:
            self.skipped = []
        return observation.binding

    def _indexed_persisted(self, conn: Any) -> dict[str, str]:
        """The stored sessions in the index: id → the revision its rows were built from."""
        return {str(row[0]): str(row[1]) for row in conn.execute("SELECT id, revision FROM persisted_sessions")}

    def _indexed_live(self, conn: Any) -> dict[str, tuple[str, int]]:
        """This connection's live sessions in the index: id → (fingerprint, persisted flag)."""
        return {
            str(row[0]): (str(row[1]), int(row[2]))
            for row in conn.execute("SELECT id, fingerprint, persisted FROM temp.live_sessions")
        }

    def _live_documents(self, entry: _Live) -> list[dict[str, Any]]:
        # Committed events are frozen: the documents read them in place, no copy needed.
        return build_documents(entry.header["id"], list(entry.session.events[: entry.count]))

    def _apply(
        self,
        conn: sqlite3.Connection,
        observation: _Observation,
        persisted_changes: list[_Persisted],
        persisted_deletes: list[str],
        live_changes: list[_Live],
        live_deletes: list[str],
        live_documents: dict[str, list[dict[str, Any]]],
        progress: Callable[[int, int], None] | None,
    ) -> int:
        began = False
        try:
            conn.execute("BEGIN IMMEDIATE")
            began = True
            # Read inside the write transaction: another process's commit cannot be overtaken.
            main = self._main_generation(conn)
            persisted_changed = bool(persisted_changes or persisted_deletes)
            if persisted_changed:
                main += 1
                self._indexed_cache = None
            local = self._local_generation
            changed_ids = [entry.loaded.header["id"] for entry in persisted_changes if entry.loaded is not None]
            _delete_sessions(conn, "persisted", [*persisted_deletes, *changed_ids])
            total = len(persisted_changes)
            for done, entry in enumerate(persisted_changes, 1):
                assert entry.loaded is not None
                conn.execute(
                    "INSERT INTO persisted_sessions (id, version, created_at, cwd, parent_session, seed_length, "
                    "delegation_depth, agent_preset, revision, generation) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (*_header_bindings(entry.loaded.header), entry.revision, main),
                )
                _insert_documents(conn, "persisted", entry.loaded.documents)
                if progress is not None:
                    progress(done, total)
            if persisted_changed:
                conn.execute("UPDATE search_state SET global_generation = ? WHERE singleton = 1", (main,))
            _delete_sessions(conn, "live", [*live_deletes, *(e.header["id"] for e in live_changes)])
            for change in live_changes:
                local = max(local, main) + 1
                sid = change.header["id"]
                conn.execute(
                    "INSERT INTO temp.live_sessions (id, version, created_at, cwd, parent_session, seed_length, "
                    "delegation_depth, agent_preset, fingerprint, persisted, generation) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        *_header_bindings(change.header),
                        change.fingerprint,
                        1 if sid in observation.persisted else 0,
                        local,
                    ),
                )
                _insert_documents(conn, "live", live_documents[sid])
            conn.execute("COMMIT")
            self._seen_main = main
            return local
        except BaseException as err:
            if began:
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass  # the original failure remains the actionable cause
            if not isinstance(err, Exception):
                raise
            raise SessionQueryError(
                f"session-search reconciliation failed: {_message(err)}", "SESSION_QUERY_INDEX_FAILED"
            ) from err

    @staticmethod
    def _main_generation(conn: sqlite3.Connection) -> int:
        row = conn.execute("SELECT global_generation FROM search_state WHERE singleton = 1").fetchone()
        return int(row[0])

    def _observe_stable(self, indexed: Mapping[str, str], signal: Signal | None) -> _Observation:
        for _attempt in range(STABLE_OBSERVATION_ATTEMPTS):
            _check(signal)
            binding = self._binding()
            initially_live = set(self._live_sessions())
            persisted: dict[str, _Persisted] = {}
            skipped: dict[str, tuple[str, dict[str, str]]] = {}
            if binding.service is not None:
                try:
                    persisted, skipped = self._observe_persisted(binding, indexed, initially_live, signal)
                except _Unstable:
                    continue
                except BaseException as err:
                    if not isinstance(err, Exception):
                        raise
                    if _is_abort(err) or (signal is not None and signal.is_set()):
                        raise _aborted() from err
                    if self.binding_epoch != binding.identity:
                        continue  # a failure of a binding that was meanwhile replaced: retry
                    if isinstance(err, SessionQueryError):
                        raise
                    raise SessionQueryError(
                        f"session-search persistence observation failed: {_message(err)}",
                        "SESSION_QUERY_PERSISTENCE_FAILED",
                    ) from err
            live: dict[str, _Live] = {}
            for sid, session in self._live_sessions().items():
                header = thaw(session.header)
                durable = persisted.get(sid)
                if durable is not None and durable.header is not None:
                    assert_headers_compatible(header, durable.header)
                live[sid] = _Live(session, header, len(session.events), "")
            if set(live) != initially_live:
                continue
            if self.binding_epoch != binding.identity:
                continue
            for observed in live.values():
                observed.fingerprint = self._fingerprint(observed.session, observed.count)
            return _Observation(binding, persisted, live, skipped)
        raise SessionQueryError(
            "session-search persistence observation did not stabilize after one retry",
            "SESSION_QUERY_PERSISTENCE_FAILED",
        )

    def _observe_persisted(
        self,
        binding: _Binding,
        indexed: Mapping[str, str],
        initially_live: set[str],
        signal: Signal | None,
    ) -> tuple[dict[str, _Persisted], dict[str, tuple[str, dict[str, str]]]]:
        service = binding.service
        assert service is not None
        can_reuse = self._last_identity is None or self._last_identity == binding.identity
        observed = self._observe_by_revisions(binding, indexed, initially_live, can_reuse, signal)
        if observed is not None:
            return observed
        before, skipped = _materialize(service.list())
        for sid in initially_live:
            entry = before.get(sid)
            if entry is not None and entry.header is not None:
                self._stored_headers[sid] = (binding.identity, entry.header)
        _check(signal)
        for sid, entry in before.items():
            if can_reuse and indexed.get(sid) == entry.revision:
                continue
            # Never read a stored log while it is live here: ``inspect`` is non-mutating, so an owner
            # attaching after this check cannot cause a repair; the live-population check retries.
            if sid in initially_live or self.store.get(sid) is not None:
                continue
            remembered = self._skipped_revisions.get(sid)
            if remembered is not None and remembered[0] == binding.identity and remembered[1] == entry.revision:
                skipped[sid] = (entry.revision, remembered[2])
                continue
            _check(signal)
            try:
                snapshot = service.inspect(sid)
            except SessionPersistenceCorruptionError as err:
                _check(signal)
                skipped[sid] = (
                    entry.revision,
                    {"sessionId": sid, "code": err.code, "message": str(err)},
                )
                continue
            except SessionNotFoundError:
                _check(signal)
                raise _Unstable() from None  # deleted since the listing
            _check(signal)
            header = thaw(snapshot.meta)
            if entry.header is not None:
                assert_headers_compatible(entry.header, header)
            entry.loaded = _Loaded(header, build_documents(sid, list(snapshot.events)))
        for sid in skipped:
            before.pop(sid, None)
        _check(signal)
        after, after_skipped = _materialize(service.list())
        _check(signal)
        if not _same_listing(before, after, skipped, after_skipped):
            raise _Unstable()
        if self.binding_epoch != binding.identity:
            raise _Unstable()
        return before, skipped

    def _observe_by_revisions(
        self,
        binding: _Binding,
        indexed: Mapping[str, str],
        initially_live: set[str],
        can_reuse: bool,
        signal: Signal | None,
    ) -> tuple[dict[str, _Persisted], dict[str, tuple[str, dict[str, str]]]] | None:
        """The stable observation through the binding's revision listing, or ``None`` when it has none
        (or a live session's stored header was never seen): then the listing observation runs.

        The same observation as the original's — list, inspect what moved, list again and compare — with
        a listing of revisions instead of headers: a stored session's header is what ``inspect`` returns
        (the listing's copy is only ever compared with it), and a damaged header fails that inspection
        and is skipped. When nothing moved nothing is inspected, and the one listing is the whole
        observation (there is nothing a second one could disagree with). So a search of an unchanged
        store costs a stat per session, and M14's one changed session costs its own read, not a header
        parse of every other.
        """
        service = binding.service
        quick = getattr(service, "list_revisions", None)
        if service is None or quick is None:
            return None
        before = self._revision_listing(service, quick)
        _check(signal)
        if can_reuse and before == indexed and not initially_live and not self.store.list():
            # Nothing moved and nothing is live (every search of an unchanged store): the listing is the
            # index's own, so it is well-formed and there is nothing to inspect or list again. The
            # observation is the same object while the indexed rows are (it is only ever read).
            unmoved = self._unmoved
            if unmoved is None or unmoved[0] is not indexed:
                unmoved = self._unmoved = (indexed, {sid: _Persisted(None, rev) for sid, rev in indexed.items()})
            return unmoved[1], {}
        if not isinstance(before, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in before.items()
        ):
            return None  # the listing observation refuses malformed snapshots with its typed error
        live = initially_live | {session.id for session in self.store.list()}
        persisted = {sid: _Persisted(None, revision) for sid, revision in before.items()}
        skipped: dict[str, tuple[str, dict[str, str]]] = {}
        moved: list[str] = []
        for sid, revision in before.items():
            if sid in live:
                # Never read a stored log while it is live here; its stored header (immutable) was seen
                # by a listing observation, which checks it against the live one.
                stored = self._stored_headers.get(sid)
                if stored is None or stored[0] != binding.identity:
                    return None
                persisted[sid].header = stored[1]
                continue
            if can_reuse and indexed.get(sid) == revision:
                continue
            remembered = self._skipped_revisions.get(sid)
            if remembered is not None and remembered[0] == binding.identity and remembered[1] == revision:
                del persisted[sid]
                skipped[sid] = (revision, remembered[2])
                continue
            moved.append(sid)
        for sid, loaded in self._inspect_moved(service, moved, signal):
            if isinstance(loaded, SessionPersistenceCorruptionError):
                del persisted[sid]
                skipped[sid] = (before[sid], {"sessionId": sid, "code": loaded.code, "message": str(loaded)})
                continue
            if isinstance(loaded, SessionNotFoundError):
                raise _Unstable() from None  # deleted since the listing
            persisted[sid].loaded = loaded
        if moved:
            after = self._revision_listing(service, quick)
            _check(signal)
            if after != before:
                raise _Unstable()
        if self.binding_epoch != binding.identity:
            raise _Unstable()
        return persisted, skipped

    def _inspect_moved(
        self, service: PersistenceCoordinator, session_ids: Sequence[str], signal: Signal | None
    ) -> Iterator[tuple[str, _Loaded | SessionPersistenceCorruptionError | SessionNotFoundError]]:
        """Each moved session's header and documents, in order (inspected one at a time, lazily: the
        caller stops at the first that is gone), or the corruption or absence its inspection met."""
        for sid in session_ids:
            _check(signal)
            loaded = _inspect_one(service, sid)
            _check(signal)
            yield sid, loaded

    def _revision_listing(self, service: PersistenceCoordinator, quick: Callable[[], object]) -> object:
        """The service's revision listing (``quick``); a provider that can tell the store did not move
        since its last listing may answer from it instead."""
        return quick()

    # -- queries ------------------------------------------------------------------------------------
    def _query_sessions(
        self,
        request: SessionSearchRequest,
        session_where: SqlWhere,
        event_where: SqlWhere,
        offset: int,
        binding: _Binding,
    ) -> list[dict[str, Any]]:
        assert_fts5_outer_predicate_count(session_where.predicate_count + event_where.predicate_count)
        where = [part for part in (session_where.sql, event_where.sql) if part]
        filters = [*session_where.params, *event_where.params]
        selected, params, path = self._candidates(request.query, binding.service is not None)
        # Counted as the original binds them (each filter value once); the statement binds the same values.
        assert_portable_binding_count(len(params) + len(filters) + 2)
        sql = (
            f"{selected}, "
            "ranked AS (SELECT *, ROW_NUMBER() OVER (PARTITION BY session_id "
            "ORDER BY match_count DESC, document_length ASC, time DESC, seq DESC) AS event_rank FROM matched) "
            "SELECT * FROM ranked WHERE event_rank = 1 "
            "ORDER BY match_count DESC, document_length ASC, time DESC, session_id ASC, seq DESC LIMIT ? OFFSET ?"
        )
        statement, bindings = _pushed_down(sql, params, where, filters, binding.service is not None)
        rows = self._rows(statement, [*bindings, request.limit + 1, offset])
        return self._page_marks(rows, request.query, path)

    def _query_events(
        self, request: EventSearchRequest, event_where: SqlWhere, offset: int, binding: _Binding
    ) -> list[dict[str, Any]]:
        assert_fts5_outer_predicate_count(1 + event_where.predicate_count)
        where = [part for part in ("session_id = ?", event_where.sql) if part]
        filters = [request.session_id, *event_where.params]
        selected, params, path = self._candidates(request.query, binding.service is not None)
        assert_portable_binding_count(len(params) + len(filters) + 2)
        sql = (
            f"{selected} SELECT * FROM matched "
            "ORDER BY match_count DESC, document_length ASC, time DESC, seq DESC LIMIT ? OFFSET ?"
        )
        statement, bindings = _pushed_down(sql, params, where, filters, binding.service is not None)
        rows = self._rows(statement, [*bindings, request.limit + 1, offset])
        return self._page_marks(rows, request.query, path)

    def _candidates(self, query: str, visible: bool) -> tuple[str, list[Any], str]:
        """The candidate CTEs of one query and which path made them: ``"substring"`` (a CJK query, the
        companion), ``"term"`` (one ``unicode61`` term, the term table) or ``"phrase"`` (the original's
        ``highlight()`` formulation, which every other query takes)."""
        if uses_substring(query):
            return (*_substring_documents(query, visible), "substring")
        term = self._single_term(query)
        if term is not None:
            return (*_term_documents(term, visible), "term")
        return (*_selected_documents(query, visible), "phrase")

    def _page_marks(self, rows: list[dict[str, Any]], query: str, path: str) -> list[dict[str, Any]]:
        if path == "term":
            return self._highlight_page(rows, query)
        if path == "substring":
            return self._mark_page(rows, query)
        return rows

    def _mark_page(self, rows: list[dict[str, Any]], query: str) -> list[dict[str, Any]]:
        """``marked_text`` for a substring page: its rows' companion texts, marked in Python."""
        conn = self._require()
        for live, table in ((0, COMPANION_PERSISTED_TABLE), (1, f"temp.{COMPANION_LIVE_TABLE}")):
            docs = [row["doc"] for row in rows if row["live"] == live]
            if not docs:
                continue
            try:
                texts = dict(
                    conn.execute(
                        f"SELECT rowid, text FROM {table} WHERE rowid IN (SELECT value FROM json_each(?))",
                        (json.dumps(docs),),
                    ).fetchall()
                )
            except sqlite3.Error as err:
                raise SessionQueryError(f"session-search query failed: {err}", "SESSION_QUERY_INDEX_FAILED") from err
            for row in rows:
                if row["live"] == live:
                    text = texts.get(row["doc"], "")
                    row["marked_text"] = mark_substrings(text, query) or text
        return rows

    def _single_term(self, query: str) -> str | None:
        """The query's one ``unicode61`` term, or ``None`` (several terms, none, a CJK query, or the
        staging table unavailable): tokenized by the index's own tokenizer, never re-implemented."""
        if not self._term_path or uses_substring(query):
            return None
        conn = self._require()
        try:
            conn.execute("INSERT INTO temp.term_stage (rowid, text) VALUES (1, ?)", (query,))
            try:
                terms = conn.execute("SELECT term FROM temp.term_stage_terms").fetchall()
            finally:
                conn.execute("INSERT INTO temp.term_stage (term_stage) VALUES ('delete-all')")
        except sqlite3.Error:
            return None  # e.g. a read-only connection: the general path needs no staging write
        return str(terms[0][0]) if len(terms) == 1 else None

    def _highlight_page(self, rows: list[dict[str, Any]], query: str) -> list[dict[str, Any]]:
        """``marked_text`` for the rows of one page (``highlight()`` of just these documents)."""
        conn = self._require()
        expression = quote_fts_data(query)
        for live, table in ((0, "persisted_docs"), (1, "live_docs")):
            docs = [row["doc"] for row in rows if row["live"] == live]
            if not docs:
                continue
            source = table if live == 0 else f"temp.{table}"
            try:
                marked = dict(
                    conn.execute(
                        f"SELECT rowid, highlight({table}, 0, ?, ?) FROM {source} WHERE {table} MATCH ? "
                        "AND rowid IN (SELECT value FROM json_each(?))",
                        (FTS_HIGHLIGHT_START, FTS_HIGHLIGHT_END, expression, json.dumps(docs)),
                    ).fetchall()
                )
            except sqlite3.Error as err:
                raise SessionQueryError(f"session-search query failed: {err}", "SESSION_QUERY_INDEX_FAILED") from err
            for row in rows:
                if row["live"] == live:
                    row["marked_text"] = marked.get(row["doc"], "")
        return rows

    def _rows(self, sql: str, bindings: Sequence[Any]) -> list[dict[str, Any]]:
        conn = self._require()
        try:
            cursor = conn.execute(sql, tuple(bindings))
            names = [column[0] for column in cursor.description]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
        except sqlite3.Error as err:
            raise SessionQueryError(f"session-search query failed: {err}", "SESSION_QUERY_INDEX_FAILED") from err

    def _target(self, session_id: str, binding: _Binding) -> tuple[dict[str, Any], str]:
        conn = self._require()
        columns = (
            "id AS session_id, version, created_at, cwd, parent_session, seed_length, delegation_depth, "
            "agent_preset, generation"
        )
        cursor = conn.execute(f"SELECT {columns} FROM temp.live_sessions WHERE id = ?", (session_id,))
        row = cursor.fetchone()
        if row is not None:
            names = [column[0] for column in cursor.description]
            record = dict(zip(names, row, strict=True))
            return _row_header(record), f"live:{record['generation']}"
        if binding.service is not None:
            cursor = conn.execute(f"SELECT {columns} FROM persisted_sessions WHERE id = ?", (session_id,))
            row = cursor.fetchone()
            if row is not None:
                names = [column[0] for column in cursor.description]
                record = dict(zip(names, row, strict=True))
                return _row_header(record), f"persisted:{self._persistence_epoch}:{record['generation']}"
            for entry in self.skipped:
                if entry["sessionId"] == session_id:
                    # Listed but left out as damaged: saying "not found" would send the user looking
                    # for a session that is right there.
                    raise SessionQueryError(
                        f'session "{session_id}" cannot be searched: {entry["message"]}',
                        "SESSION_QUERY_CORRUPT_SESSION",
                    )
        raise SessionQueryError(f'session "{session_id}" not found', "SESSION_QUERY_SESSION_NOT_FOUND")

    def _page(
        self,
        rows: list[Any],
        limit: int,
        offset: int,
        convert: Callable[[Mapping[str, Any]], dict[str, Any]],
        scope: str,
        fingerprint: str,
        generation: str,
    ) -> dict[str, Any]:
        page: dict[str, Any] = {"items": [convert(row) for row in rows[:limit]]}
        if len(rows) > limit:
            page["nextCursor"] = encode_cursor(
                instance=self._instance,
                scope=scope,
                fingerprint=fingerprint,
                generation=generation,
                offset=offset + limit,
            )
        return page

    def _event_hit(self, row: Mapping[str, Any]) -> dict[str, Any]:
        return {
            "sessionId": row["session_id"],
            "seq": row["seq"],
            "type": row["type"],
            "time": row["time"],
            "surface": row["surface"],
            "snippet": make_snippet(row["marked_text"], self.snippet_chars),
        }

    def _session_hit(self, row: Mapping[str, Any]) -> dict[str, Any]:
        return {
            "header": _row_header(row),
            "live": row["live"] == 1,
            "persisted": row["persisted"] == 1,
            "bestMatch": self._event_hit(row),
        }


# --- helpers ---------------------------------------------------------------------------------------------


def _is_abort(err: BaseException) -> bool:
    return isinstance(err, SessionQueryError) and err.code == "SESSION_QUERY_ABORTED"


def _materialize(listings: object) -> tuple[dict[str, _Persisted], dict[str, tuple[str, dict[str, str]]]]:
    """A persistence listing as ``{id: (header copy, revision)}``; damaged entries set aside.

    Malformed listings (not a list, a non-string revision, a duplicate id) are refused, as the
    original refuses malformed snapshots.
    """
    if not isinstance(listings, list):
        raise PersistenceError("persistence snapshots must be an array")
    result: dict[str, _Persisted] = {}
    skipped: dict[str, tuple[str, dict[str, str]]] = {}
    for listing in listings:
        sid = getattr(listing, "id", None)
        if not isinstance(sid, str):
            raise PersistenceError("persistence snapshot id must be a string")
        if sid in result or sid in skipped:
            raise PersistenceError(f'persistence listed duplicate session "{sid}"')
        if not getattr(listing, "ok", False):
            code = str(getattr(listing, "error_code", None) or "SESSION_CORRUPT")
            message = str(getattr(listing, "error_message", None) or f'session "{sid}" cannot be listed')
            skipped[sid] = (f"damaged:{code}:{message}", {"sessionId": sid, "code": code, "message": message})
            continue
        revision = getattr(listing, "revision", None)
        if not isinstance(revision, str):
            raise PersistenceError("persistence snapshot revision must be a string")
        header = getattr(listing, "header", None)
        if not isinstance(header, Mapping):
            raise PersistenceError(f'persistence listed no header for session "{sid}"')
        result[sid] = _Persisted(thaw(header), revision)
    return result, skipped


def _same_header(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return (
        a.get("version") == b.get("version")
        and a.get("id") == b.get("id")
        and a.get("createdAt") == b.get("createdAt")
        and a.get("cwd") == b.get("cwd")
        and a.get("parentSession") == b.get("parentSession")
        and a.get("seedLength") == b.get("seedLength")
        and (a.get("delegationDepth") or 0) == (b.get("delegationDepth") or 0)
        and a.get("agentPreset") == b.get("agentPreset")
    )


def _same_listing(
    before: Mapping[str, _Persisted],
    after: Mapping[str, _Persisted],
    before_skipped: Mapping[str, tuple[str, dict[str, str]]],
    after_skipped: Mapping[str, tuple[str, dict[str, str]]],
) -> bool:
    """Whether two listings show the same population, revisions and headers.

    A session set aside after the first listing (its inspection reported damage) must still be listed
    at the same revision; a damaged listing entry must still be damaged.
    """
    if set(before) | set(before_skipped) != set(after) | set(after_skipped):
        return False
    for sid, first in before.items():
        second = after.get(sid)
        if second is None or second.revision != first.revision:
            return False
        if first.header is not None and second.header is not None and not _same_header(first.header, second.header):
            return False
    for sid, (revision, _) in before_skipped.items():
        if sid in after:
            if after[sid].revision != revision:
                return False
        elif after_skipped[sid][0] != revision:
            return False
    return True


def _header_bindings(header: Mapping[str, Any]) -> tuple[Any, ...]:
    return (
        header["id"],
        header["version"],
        header["createdAt"],
        header.get("cwd"),
        header.get("parentSession"),
        header.get("seedLength"),
        header.get("delegationDepth"),
        header.get("agentPreset"),
    )


def _row_header(row: Mapping[str, Any]) -> dict[str, Any]:
    header: dict[str, Any] = {"version": row["version"], "id": row["session_id"], "createdAt": row["created_at"]}
    for column, key in _HEADER_FIELDS:
        value = row[column]
        if value is not None:
            header[key] = value
    return header


_DOC_TABLES: Final = {
    "persisted": (
        "persisted_sessions",
        "persisted_docs",
        COMPANION_PERSISTED_TABLE,
        "persisted_doc_meta",
        "persisted_terms",
        "persisted_gram_folded",
    ),
    "live": (
        "temp.live_sessions",
        "temp.live_docs",
        f"temp.{COMPANION_LIVE_TABLE}",
        "temp.live_doc_meta",
        "temp.live_terms",
        "temp.live_gram_folded",
    ),
}


def _delete_sessions(conn: sqlite3.Connection, source: str, ids: list[str]) -> None:
    """Delete sessions' rows. Documents are found by their rowids through the meta table's session
    index (an FTS5 UNINDEXED column can only be scanned: deleting one session's rows by ``session_id``
    read every document of the index). A companion row shares its document's rowid."""
    if not ids:
        return
    sessions, docs, grams, meta, terms, folded = _DOC_TABLES[source]
    payload = json.dumps(ids)
    selected = f"SELECT doc FROM {meta} WHERE session_id IN (SELECT value FROM json_each(?))"
    for table in (docs, grams):
        conn.execute(f"DELETE FROM {table} WHERE rowid IN ({selected})", (payload,))
    for table in (terms, folded):
        conn.execute(f"DELETE FROM {table} WHERE doc IN ({selected})", (payload,))
    conn.execute(f"DELETE FROM {meta} WHERE session_id IN (SELECT value FROM json_each(?))", (payload,))
    conn.execute(f"DELETE FROM {sessions} WHERE id IN (SELECT value FROM json_each(?))", (payload,))


def _inspect_one(
    service: PersistenceCoordinator, sid: str
) -> _Loaded | SessionPersistenceCorruptionError | SessionNotFoundError:
    """A stored session's header and documents, or the corruption or absence its inspection met."""
    try:
        snapshot = service.inspect(sid)
    except (SessionPersistenceCorruptionError, SessionNotFoundError) as err:
        return err
    return _Loaded(thaw(snapshot.meta), build_documents(sid, list(snapshot.events)))


def _insert_documents(conn: sqlite3.Connection, source: str, documents: list[dict[str, Any]]) -> None:
    """Insert documents with explicit rowids: the meta row, the term frequencies and the companion row
    of a document all carry its ``persisted_docs``/``live_docs`` rowid."""
    if not documents:
        return
    _, docs, grams, meta, terms, folded = _DOC_TABLES[source]
    first = int(conn.execute(f"SELECT coalesce(max(doc), 0) FROM {meta}").fetchone()[0]) + 1
    rows = []
    metas = []
    companion = []
    foldings = []
    for rowid, document in enumerate(documents, first):
        text = sanitize_fts_text(document["text"])
        row = indexed_columns(document, text)
        rows.append((rowid, text, *row))
        metas.append((rowid, *row))
        if has_cjk(text):
            stored = companion_text(text)
            companion.append((rowid, stored, *row))
            foldings.append((rowid, fold(stored)))
    columns = "(rowid, text, session_id, seq, type, time, surface, codepoint_length) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
    conn.executemany(f"INSERT INTO {docs} {columns}", rows)
    conn.executemany(
        f"INSERT INTO {meta} (doc, session_id, seq, type, time, surface, codepoint_length) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        metas,
    )
    # Term frequencies from the index's own tokenizer (a staging table with the same tokenizer).
    conn.executemany("INSERT INTO temp.term_stage (rowid, text) VALUES (?, ?)", [(row[0], row[1]) for row in rows])
    conn.execute(
        f"INSERT INTO {terms} (term, doc, n) SELECT term, doc, count(*) FROM temp.term_stage_terms GROUP BY term, doc"
    )
    conn.execute("INSERT INTO temp.term_stage (term_stage) VALUES ('delete-all')")
    if companion:
        conn.executemany(f"INSERT INTO {grams} {columns}", companion)
        conn.executemany(f"INSERT INTO {folded} (doc, folded) VALUES (?, ?)", foldings)


def _selected_documents(query: str, visible: bool) -> tuple[str, list[Any]]:
    """The candidate CTEs (``candidates`` and ``matched``) of the original's ``unicode61`` path and their
    bindings, in placeholder order.

    Candidates are the UNION ALL of stored documents of sessions without a live row (only while
    persistence is visible) and live documents, each carrying the header columns, the event columns,
    ``marked_text`` (FTS5 ``highlight()``) and ``document_length``; ``matched`` adds ``match_count``, the
    number of start markers, as the original computes it. The CTE is ``MATERIALIZED``, so that
    ``highlight()`` — the dominant cost of a broad query — runs once per row, not once per reference;
    the request's filters are placed in each arm (``{persisted_filters}``/``{live_filters}``, see
    :func:`_pushed_down`), so it runs only for rows that pass them.
    """
    flag = 1 if visible else 0
    expression = quote_fts_data(query)

    def arm(alias: str, table: str, sessions: str, availability: str) -> str:
        return (
            f"SELECT {alias}.session_id AS session_id, {sessions}.version AS version, "
            f"{sessions}.created_at AS created_at, {sessions}.cwd AS cwd, "
            f"{sessions}.parent_session AS parent_session, {sessions}.seed_length AS seed_length, "
            f"{sessions}.delegation_depth AS delegation_depth, {sessions}.agent_preset AS agent_preset, "
            f"{availability}, CAST({alias}.seq AS INTEGER) AS seq, {alias}.type AS type, "
            f"CAST({alias}.time AS INTEGER) AS time, {alias}.surface AS surface, "
            f"highlight({table}, 0, ?, ?) AS marked_text, CAST({alias}.codepoint_length AS INTEGER) AS document_length "
        )

    persisted = arm("pd", "persisted_docs", "ps", "0 AS live, 1 AS persisted")
    live = arm("ld", "live_docs", "ls", "1 AS live, CASE WHEN ? = 1 THEN ls.persisted ELSE 0 END AS persisted")
    sql = (
        f"WITH candidates AS MATERIALIZED ({persisted}"
        "FROM persisted_docs AS pd JOIN persisted_sessions AS ps ON ps.id = pd.session_id "
        f"{_SHADOW}pd.session_id "
        "WHERE persisted_docs MATCH ? AND ? = 1 AND shadow.live_id IS NULL{persisted_filters} "
        f"UNION ALL {live}"
        "FROM temp.live_docs AS ld JOIN temp.live_sessions AS ls ON ls.id = ld.session_id "
        "WHERE live_docs MATCH ?{live_filters}"
        "), matched AS (SELECT *, (length(CAST(marked_text AS BLOB)) "
        "- length(CAST(replace(marked_text, ?, '') AS BLOB))) / ? AS match_count FROM candidates)"
    )
    marks = [FTS_HIGHLIGHT_START, FTS_HIGHLIGHT_END]
    return sql, [*marks, expression, flag, flag, *marks, expression, FTS_HIGHLIGHT_START, _MARKER_BYTES]


def _substring_documents(query: str, visible: bool) -> tuple[str, list[Any]]:
    """The candidate CTEs of a CJK (substring) query, over the companion.

    Candidates are the CJK-bearing documents holding the folded query (trigram MATCH for three or more
    code points; below that an ``instr`` scan of the folded texts — a regular table, a B-tree away from
    each row's event columns); ``match_count`` is the number of non-overlapping occurrences of the folded
    query in the folded text, counted in SQL — exactly the marks
    :func:`~agentlog.query.cjk.mark_substrings` makes, which only the page's rows get
    (:meth:`SqliteSearch._mark_page`). Same columns as the other paths, with ``doc`` instead of
    ``marked_text``.
    """
    flag = 1 if visible else 0
    needle = fold(query)
    expression = trigram_match_expression(query)

    def arm(prefix: str, grams: str, tables: tuple[str, str, str]) -> tuple[str, list[Any]]:
        folded, meta, sessions = tables
        found: str
        found_params: list[Any]
        if expression is not None:
            name = grams.split(".")[-1]
            found, found_params = f"{prefix}f.doc IN (SELECT rowid FROM {grams} WHERE {name} MATCH ?)", [expression]
        else:
            found, found_params = f"instr({prefix}f.folded, ?) > 0", [needle]
        if prefix == "p":
            availability, head = "0 AS live, 1 AS persisted", []
        else:
            availability, head = "1 AS live, CASE WHEN ? = 1 THEN ls.persisted ELSE 0 END AS persisted", [flag]
        sql = (
            f"SELECT {prefix}m.session_id AS session_id, {prefix}s.version AS version, "
            f"{prefix}s.created_at AS created_at, {prefix}s.cwd AS cwd, {prefix}s.parent_session AS parent_session, "
            f"{prefix}s.seed_length AS seed_length, {prefix}s.delegation_depth AS delegation_depth, "
            f"{prefix}s.agent_preset AS agent_preset, {availability}, "
            f"{prefix}m.seq AS seq, {prefix}m.type AS type, {prefix}m.time AS time, {prefix}m.surface AS surface, "
            f"{prefix}m.doc AS doc, (length(CAST({prefix}f.folded AS BLOB)) "
            f"- length(CAST(replace({prefix}f.folded, ?, '') AS BLOB))) / ? "
            f"AS match_count, {prefix}m.codepoint_length AS document_length "
            f"FROM {folded} AS {prefix}f JOIN {meta} AS {prefix}m ON {prefix}m.doc = {prefix}f.doc "
            f"JOIN {sessions} AS {prefix}s ON {prefix}s.id = {prefix}m.session_id "
            + (f"{_SHADOW}pm.session_id " if prefix == "p" else "")
            + f"WHERE {found}"
        )
        return sql, [*head, needle, len(needle.encode("utf-8")), *found_params]

    persisted, persisted_params = arm(
        "p", COMPANION_PERSISTED_TABLE, ("persisted_gram_folded", "persisted_doc_meta", "persisted_sessions")
    )
    live, live_params = arm(
        "l", f"temp.{COMPANION_LIVE_TABLE}", ("temp.live_gram_folded", "temp.live_doc_meta", "temp.live_sessions")
    )
    sql = (
        f"WITH candidates AS MATERIALIZED ({persisted} AND ? = 1 AND shadow.live_id IS NULL{{persisted_filters}} "
        f"UNION ALL {live}{{live_filters}}), matched AS (SELECT * FROM candidates WHERE match_count > 0)"
    )
    return sql, [*persisted_params, flag, *live_params]


# Stored rows of a session that is live here are shadowed by its live rows. An anti-join: a correlated
# NOT EXISTS per candidate row cost several microseconds a row (a third of a broad query); the subquery
# exposes one uniquely named column, so a filter's bare column names stay unambiguous.
_SHADOW: Final = "LEFT JOIN (SELECT id AS live_id FROM temp.live_sessions) AS shadow ON shadow.live_id = "

_SLOTS: Final = re.compile(r"(\?|\{persisted_filters\}|\{live_filters\})")
_LIVE_CLAUSE: Final = re.compile(r"\blive = 1\b")
_PERSISTED_CLAUSE: Final = re.compile(r"\bpersisted = 1\b")
_TRAILING: Final = object()


def _pushed_down(
    sql: str, params: list[Any], where: list[str], filters: list[Any], visible: bool
) -> tuple[str, list[Any]]:
    """``sql`` with the request's compiled filters placed in both arms of the candidate UNION ALL, and
    every placeholder numbered, so the filter values are bound once and referenced by both arms.

    The original filters the UNION's rows; filtering inside each arm selects the same rows (every
    filter column resolves to the arm's own table column: ``session_id``, ``seq``, ``time``, ``type`` and
    ``surface`` to the documents table, the header columns to the sessions table) but before
    ``highlight()`` runs. The availability clauses become the arm's constants (``live`` is 0 for stored
    rows and 1 for live ones; ``persisted`` is 1 for stored rows and ``ls.persisted`` for live ones while
    persistence is visible). Returns the statement and its bindings for every placeholder but the
    trailing ones (``LIMIT ? OFFSET ?``), which the caller appends in order.
    """
    arms = {
        "{persisted_filters}": _PERSISTED_CLAUSE.sub("1", _LIVE_CLAUSE.sub("0", " AND ".join(where))),
        "{live_filters}": _PERSISTED_CLAUSE.sub(
            "ls.persisted = 1" if visible else "0", _LIVE_CLAUSE.sub("1", " AND ".join(where))
        ),
    }
    values = iter(params)
    bindings: list[Any] = []
    numbers: list[int] | None = None
    out: list[str] = []
    for token in _SLOTS.split(sql):
        if token == "?":
            bindings.append(next(values, _TRAILING))
            out.append(f"?{len(bindings)}")
        elif token in arms:
            if not where:
                continue
            if numbers is None:
                numbers = list(range(len(bindings) + 1, len(bindings) + 1 + len(filters)))
                bindings.extend(filters)
            pieces = arms[token].split("?")
            assert len(pieces) == len(numbers) + 1, "one filter value per placeholder"
            numbered = [f"{piece}?{number}" for piece, number in zip(pieces, numbers, strict=False)]
            out.append(f" AND ({''.join(numbered)}{pieces[-1]})")
        else:
            out.append(token)
    trailing = bindings.index(_TRAILING) if _TRAILING in bindings else len(bindings)
    assert all(value is _TRAILING for value in bindings[trailing:]), "only LIMIT and OFFSET may trail"
    return "".join(out), bindings[:trailing]


def _term_documents(term: str, visible: bool) -> tuple[str, list[Any]]:
    """The candidate CTEs for a query of exactly one ``unicode61`` term, from the side tables.

    The same rows, columns and ``match_count`` as :func:`_selected_documents` (a one-term phrase matches
    the documents holding the term, and ``highlight()`` marks each occurrence: its marker count is the
    term's frequency), without reading the documents: the term index gives the frequencies, the meta table
    the event columns. Candidates carry ``doc`` (the document's rowid) instead of ``marked_text``; the
    page's rows are highlighted afterwards (:meth:`SqliteSearch._highlight_page`).
    """
    flag = 1 if visible else 0

    def arm(prefix: str, terms: str, meta: str, sessions: str) -> str:
        return (
            f"SELECT {prefix}m.session_id AS session_id, {prefix}s.version AS version, "
            f"{prefix}s.created_at AS created_at, {prefix}s.cwd AS cwd, {prefix}s.parent_session AS parent_session, "
            f"{prefix}s.seed_length AS seed_length, {prefix}s.delegation_depth AS delegation_depth, "
            f"{prefix}s.agent_preset AS agent_preset, "
            + (
                "0 AS live, 1 AS persisted, "
                if prefix == "p"
                else "1 AS live, CASE WHEN ? = 1 THEN ls.persisted ELSE 0 END AS persisted, "
            )
            + f"{prefix}m.seq AS seq, {prefix}m.type AS type, {prefix}m.time AS time, {prefix}m.surface AS surface, "
            f"{prefix}m.doc AS doc, {prefix}t.n AS match_count, {prefix}m.codepoint_length AS document_length "
            f"FROM {terms} AS {prefix}t JOIN {meta} AS {prefix}m ON {prefix}m.doc = {prefix}t.doc "
            f"JOIN {sessions} AS {prefix}s ON {prefix}s.id = {prefix}m.session_id "
            + (f"{_SHADOW}pm.session_id " if prefix == "p" else "")
            + f"WHERE {prefix}t.term = ?"
        )

    sql = (
        "WITH candidates AS MATERIALIZED ("
        + arm("p", "persisted_terms", "persisted_doc_meta", "persisted_sessions")
        + " AND ? = 1 AND shadow.live_id IS NULL{persisted_filters} UNION ALL "
        + arm("l", "temp.live_terms", "temp.live_doc_meta", "temp.live_sessions")
        + "{live_filters}), matched AS (SELECT * FROM candidates)"
    )
    return sql, [term, flag, flag, term]
