"""Full-text session search inside a PostgreSQL store (the PostgreSQL counterpart of
:class:`~agentlog.query.sqlite.SqliteSearch`).

:class:`PostgresSearch` answers :meth:`~PostgresSearch.search_sessions` and
:meth:`~PostgresSearch.search_events` with the semantics of :class:`SqliteSearch` — same documents
(§4.2), same phrase/term/substring contract, ranking and ties, snippets, cursors, filters and errors —
from an index kept **in the store's database**, so every host reading the store shares one index and no
host rebuilds anything locally. Why it is built this way:

* **One index for all hosts.** The stored sessions' rows live in a dedicated schema beside the store's
  (``<store schema>_search``; never inside the store's own schema, whose exact layout the backend
  checks). The reconciler is :class:`SqliteSearch`'s, keyed by each session's backend revision: a host
  whose store moved re-reads only the sessions whose revision changed, replaces their rows in one
  transaction (serialized between hosts by a lock on the index's state row) and moves the shared
  ``global_generation``; a second host with nothing on disk finds the index already built. Live
  sessions of this process are connection-local (``TEMP`` tables), as in the SQLite provider.
* **Exact parity by construction, not by re-implementation.** Tokenizing, phrase matching and
  highlighting are FTS5 ``unicode61`` (case and diacritics folded) — the SQLite provider's own
  definition — so this provider runs that very tokenizer, in private in-memory SQLite databases used as
  a library (:class:`_Fts5`): documents are tokenized there when indexed (ASCII text by the C
  accelerator, which applies unicode61's rules and is held to FTS5 by a property test) and each term's
  frequency and token positions stored in PostgreSQL (``*_terms``, one B-tree row per term and document,
  carrying the document's own columns so a one-term query needs no other table); a query is tokenized
  there; a page's documents are highlighted there (a one-term query's ASCII texts in Python, for the
  same snippets). PostgreSQL does the candidate retrieval,
  the filters, the shadowing of stored rows by live ones and (but for phrases) the ranking: the same
  ``ORDER BY`` as the SQLite provider, ``session_id`` compared bytewise with ``COLLATE "C"`` like
  SQLite's ``BINARY``.
* **Three query paths, as in the SQLite provider.** One term: candidates and ``match_count`` come from
  the term table, ranked and paged entirely in PostgreSQL; only the page is read and highlighted. A
  phrase of several terms: PostgreSQL returns the documents holding every term with the terms'
  positions; the occurrences are matched and counted as ``highlight()`` marks them (overlapping ones
  merge) and ranked in Python with the same keys (linear in the positions, where a per-document SQL
  subquery cost a tenth of a millisecond a document). A query with a CJK character: a substring query
  over the folded companion text of CJK-bearing documents (:mod:`agentlog.query.cjk`), which carries
  its event columns, counted in SQL with the SQLite provider's formula.
* **A subclass of SqliteSearch**, to share its reconciler, serializer, cursors and hit shapes (so an
  ``isinstance(search, SqliteSearch)`` holds for it too); only storage and queries are its own.
* **Deviations.** Error messages name SQLite where the inherited code words them ("SQLite index failed
  to open"); a failed connection is not remembered (the next search connects again), since a server
  comes back; lone surrogates cannot occur in stored text (the kernel refuses them) and a query's are
  sanitized as in the SQLite provider.
"""

from __future__ import annotations

import collections
import functools
import hashlib
import itertools
import queue
import re
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Final

import psycopg
from psycopg import conninfo, sql

from .. import _accel
from ..errors import (
    DatabaseAuthError,
    SessionNotFoundError,
    SessionPersistenceCorruptionError,
    SessionQueryError,
)
from ..kernel.store import SessionStore
from ..persistence.coordinator import PersistenceCoordinator
from ..persistence.postgres.backend import DEFAULT_CALL_TIMEOUT_S, PostgresBackend, describe_dsn, refused_login
from ..persistence.postgres.keepalive import keepalive_kwargs
from .cjk import companion_text, fold, has_cjk, mark_substrings, uses_substring
from .documents import indexed_columns
from .engine import Signal
from .normalize import (
    FTS_HIGHLIGHT_END,
    FTS_HIGHLIGHT_START,
    EventSearchRequest,
    SessionSearchRequest,
    SqlWhere,
    assert_fts5_outer_predicate_count,
    assert_portable_binding_count,
    quote_fts_data,
    sanitize_fts_text,
)
from .sqlite import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    SNIPPET_CHARS,
    SqliteSearch,
    _Binding,
    _check,
    _header_bindings,
    _index_closed,
    _inspect_one,
    _Live,
    _Loaded,
    _message,
    _Observation,
    _Persisted,
    _row_header,
)

__all__ = ["INDEX_SCHEMA_SUFFIX", "PostgresSearch", "index_schema"]

INDEX_SCHEMA_SUFFIX: Final = "_search"
INDEX_APPLICATION: Final = "agentlog-search"
INDEX_VERSION: Final = 4
_OUR_TABLES: Final = frozenset(
    {"search_state", "persisted_sessions", "persisted_docs", "persisted_terms", "persisted_folded"}
)
_BATCH_DOCUMENTS: Final = 5_000
"""Documents tokenized and copied per batch of a reconciliation's write."""
_ID_BLOCK: Final = 16_384
"""Doc ids drawn from the sequence at once by a reconciliation's inspection threads (:class:`_DocIds`)."""
_EARLY_WRITE_SESSIONS: Final = 8
"""Moved sessions from which a reconciliation's write begins while they are read (:class:`_EarlyWrite`)."""
_TOKENIZERS: Final = 2
"""Batches tokenized at once while indexing (each by its own in-memory SQLite database)."""
_ANALYZE_AFTER: Final = 10_000
"""Documents written by one reconciliation after which the index tables are analyzed at once."""
_INIT_LOCK: Final = 0x6167_7365_6172_6368 - (1 << 63)  # "agsearch" as a signed bigint
_WORD: Final = re.compile(r"\b(session_id|seq|type|time|surface|cwd|created_at|parent_session)\b")
_DOC_COLUMNS: Final = frozenset({"session_id", "seq", "type", "time", "surface"})
_LIVE_CLAUSE: Final = re.compile(r"^live = 1$")
_PERSISTED_CLAUSE: Final = re.compile(r"^persisted = 1$")


def index_schema(store_schema: str) -> str:
    """The schema holding the search index of the store in ``store_schema`` (at most 63 bytes)."""
    name = store_schema + INDEX_SCHEMA_SUFFIX
    if len(name) <= 63:
        return name
    digest = hashlib.sha256(store_schema.encode()).hexdigest()[:12]
    return f"{store_schema[: 63 - len(INDEX_SCHEMA_SUFFIX) - 13]}_{digest}{INDEX_SCHEMA_SUFFIX}"


_RESERVE: Final = "SELECT nextval(%s::regclass) FROM generate_series(1, %s)"
"""Doc ids for a batch of documents: each ``nextval`` is atomic, so hosts drawing at once never share
one (a block taken by ``setval`` would have to be taken under the index's lock)."""
_ROW_KEYS: Final = sql.SQL(
    "SELECT id, incarnation || ':' || revision::text || ':' || xmin::text FROM {schema}.sessions"
)
"""What each stored session's revision rests on: its incarnation, counter and row version, by id."""
_RELIST_MOVED: Final = 64
"""Moved sessions up to which only they are listed again (more: the whole store is)."""


def _index_failed(detail: str, err: BaseException | None = None) -> SessionQueryError:
    failure = SessionQueryError(f"session-search PostgreSQL index failed: {detail}", "SESSION_QUERY_INDEX_FAILED")
    if err is not None:
        failure.__cause__ = err
    return failure


class _Prepared(_Loaded):
    """A stored session's documents with their index rows already built (by an inspection thread):
    the document rows, the term rows as ``COPY`` text and the folded CJK rows, keyed by doc ids drawn
    from the index's sequence. The reconciliation's write only copies them."""

    def __init__(
        self,
        header: dict[str, Any],
        documents: list[dict[str, Any]],
        rows: list[tuple[Any, ...]],
        term_rows: str,
        foldings: list[tuple[Any, ...]],
    ) -> None:
        super().__init__(header, documents)
        self.rows = rows
        self.term_rows = term_rows
        self.foldings = foldings


class _DocIds:
    """Doc ids drawn from the index's sequence a block at a time, for the inspection threads.

    One draw per session cost a round trip each (a tenth of a first index's time), and a draw would wait
    behind a ``COPY`` holding the connection; ids of a block left unused are a gap, as any failed write's.
    """

    def __init__(self, draw: Callable[[int], list[int]]) -> None:
        self._draw = draw
        self._lock = threading.Lock()
        self._ids: list[int] = []
        self._at = 0

    def take(self, count: int) -> list[int]:
        with self._lock:
            if len(self._ids) - self._at < count:
                self._ids = self._draw(max(count, _ID_BLOCK))
                self._at = 0
            ids = self._ids[self._at : self._at + count]
            self._at += count
            return ids


class _EarlyWrite:
    """A reconciliation's write, begun while its sessions are still being read.

    When many stored sessions moved (a first index), the server's share of the work — the ``COPY`` of the
    term rows and its B-tree inserts, about as long as reading and extracting the logs — runs on the
    database's core while this process reads the next sessions, instead of after all of them. So the
    reconciliation's transaction opens before the reads: under the index's lock, the moved sessions'
    rows are deleted (each is either replaced or, if it can no longer be read, dropped — as ``_apply``
    would do), and a copier thread copies each prepared session's rows as it arrives. ``_apply`` then
    finishes in the same transaction and commits; any other way out (an error, a store that moved
    during the reads, an abort) rolls everything back, as if nothing had been written.
    """

    def __init__(self, search: PostgresSearch, conn: psycopg.Connection[Any], session_ids: Sequence[str]) -> None:
        self._search = search
        self._conn = conn
        self._transaction = conn.transaction()
        self._transaction.__enter__()
        try:
            conn.execute(search._q("SELECT 1 FROM {s}.search_state WHERE singleton = 1 FOR UPDATE"))
            search._delete(conn, "persisted", list(session_ids))
        except BaseException as err:
            self._transaction.__exit__(type(err), err, err.__traceback__)
            raise
        self.deleted = frozenset(session_ids)
        self._queue: queue.SimpleQueue[_Prepared | None] = queue.SimpleQueue()
        self._error: BaseException | None = None
        self._aborted = False
        self._thread = threading.Thread(target=self._copy_all, name="agentlog-search-copy", daemon=True)
        self._thread.start()

    def put(self, prepared: _Prepared) -> None:
        self._raise_failure()
        self._queue.put(prepared)

    def _raise_failure(self) -> None:
        """The copier's failure, as the index's (met while the logs are still read, it is not theirs)."""
        if self._error is not None:
            raise _index_failed(_message(self._error), self._error)

    def _copy_all(self) -> None:
        arrivals = iter(self._queue.get, None)  # until finish() or abort() ends the stream
        try:
            self._search._copy_prepared(self._conn, itertools.takewhile(lambda _: not self._aborted, arrivals))
        except BaseException as err:  # handed to the reconciliation's thread, which rolls back
            self._error = err

    def finish(self) -> None:
        """Wait until every prepared session is copied; raise the copier's error if it met one."""
        self._queue.put(None)
        self._thread.join()
        self._raise_failure()

    def commit(self) -> None:
        self._transaction.__exit__(None, None, None)

    def abort(self) -> None:
        """Stop copying and roll the transaction back (a broken connection is left to the caller)."""
        self._aborted = True
        self._queue.put(None)
        self._thread.join()
        try:
            self._transaction.__exit__(psycopg.Rollback, psycopg.Rollback(), None)
        except psycopg.Error:
            pass  # the connection is gone: _serialized drops it and reports the original failure


_COPY_ESCAPES: Final = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def _copy_columns(values: Sequence[Any]) -> str:
    """``values`` as the tab-separated fields of a ``COPY`` text row (none is NULL)."""
    return "\t".join(str(value).translate(_COPY_ESCAPES) for value in values)


# --- FTS5 as a library --------------------------------------------------------------------------------------


class _Fts5:
    """The SQLite provider's tokenizer and highlighter, in a private in-memory database.

    Not thread-safe on its own: the provider's serializer runs one operation at a time.
    """

    def __init__(self) -> None:
        conn = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
        conn.execute("CREATE VIRTUAL TABLE stage USING fts5(text, content = '', tokenize = 'unicode61')")
        conn.execute("CREATE VIRTUAL TABLE stage_terms USING fts5vocab(stage, instance)")
        conn.execute("CREATE VIRTUAL TABLE marks USING fts5(text, tokenize = 'unicode61')")
        self._conn = conn

    def close(self) -> None:
        self._conn.close()

    def term_rows(self, documents: Sequence[tuple[int, str, str]]) -> str:
        """The ``(term, doc, frequency, positions, <columns>)`` rows of every term of every ``(doc, text,
        columns)``, as the text of a PostgreSQL ``COPY`` (``columns``: the document's own columns, already
        ``COPY`` text, copied onto each of its rows). A ``unicode61`` term holds no tab, newline or other
        separator; a backslash is escaped anyway."""
        if _accel.ascii_term_rows is not None:
            # ASCII text is tokenized in C (FTS5 unicode61's rules, held to FTS5 by a property test);
            # FTS5 itself tokenizes the rest.
            ascii_rows, others = _accel.ascii_term_rows(documents)
            if not others:
                return ascii_rows
            return ascii_rows + self._fts5_term_rows([documents[index] for index in others])
        return self._fts5_term_rows(documents)

    def _fts5_term_rows(self, documents: Sequence[tuple[int, str, str]]) -> str:
        conn = self._conn
        conn.executemany("INSERT INTO stage (rowid, text) VALUES (?, ?)", [(doc, text) for doc, text, _ in documents])
        try:
            rows = conn.execute(
                "SELECT doc, replace(term, '\\', '\\\\') || char(9) || doc || char(9) || count(*) || char(9) "
                "|| '{' || group_concat(\"offset\", ',') || '}' FROM stage_terms GROUP BY term, doc"
            ).fetchall()
        finally:
            conn.execute("INSERT INTO stage (stage) VALUES ('delete-all')")
        columns = {doc: extra for doc, _text, extra in documents}
        return "".join(f"{line}\t{columns[doc]}\n" for doc, line in rows)

    def terms(self, text: str) -> list[str]:
        """The term instances of ``text`` (a query), in order."""
        return [term for term, _doc, _n in self._instances(text)]

    def _instances(self, text: str) -> list[tuple[str, int, int]]:
        conn = self._conn
        conn.execute("INSERT INTO stage (rowid, text) VALUES (1, ?)", (text,))
        try:
            return conn.execute('SELECT term, doc, "offset" FROM stage_terms ORDER BY "offset"').fetchall()
        finally:
            conn.execute("INSERT INTO stage (stage) VALUES ('delete-all')")

    def highlight(self, documents: Sequence[tuple[int, str]], query: str) -> dict[int, str]:
        """``highlight()`` of the documents the one-phrase query matches: ``{doc: marked text}``."""
        if not documents:
            return {}
        conn = self._conn
        conn.executemany("INSERT INTO marks (rowid, text) VALUES (?, ?)", documents)
        try:
            return dict(
                conn.execute(
                    "SELECT rowid, highlight(marks, 0, ?, ?) FROM marks WHERE marks MATCH ?",
                    (FTS_HIGHLIGHT_START, FTS_HIGHLIGHT_END, quote_fts_data(query)),
                ).fetchall()
            )
        finally:
            conn.execute("DELETE FROM marks")


_ASCII_TERM_MAX: Final = 32_768
"""FTS5 cuts a term at this many bytes; a longer ASCII token or query term is left to FTS5 itself."""


def _mark_ascii_term(text: str, term: str, key: int, marked: dict[int, str]) -> bool:
    """FTS5 ``highlight()`` of an ASCII ``text`` for the one-term query ``term``, into ``marked[key]``
    (left out, as FTS5 leaves out a document that does not match, when no token is the term); ``False``
    when FTS5 must decide (non-ASCII text, a NUL — stored text has none — or a token or term at FTS5's
    length cut).

    On ASCII text a ``unicode61`` token is a run of letters and digits, folded to lower case; a token
    equal to the term is a phrase instance. Only the first is marked: a page's marked text feeds only its
    snippet (:func:`~agentlog.query.normalize.make_snippet`), which drops the marks and keeps the first
    match in view, so the snippet is FTS5's to the character (a long repetitive document has hundreds of
    instances, each a string operation, for nothing).
    """
    if not text.isascii() or not term.isascii() or len(term) >= _ASCII_TERM_MAX or "\0" in text:
        return False
    if len(text) >= _ASCII_TERM_MAX and _ASCII_LONG_TOKEN.search(text):
        return False
    first = _ascii_term_pattern(term).search(text)
    if first is not None:
        start, end = first.span()
        marked[key] = text[:start] + FTS_HIGHLIGHT_START + text[start:end] + FTS_HIGHLIGHT_END + text[end:]
    return True


@functools.lru_cache(maxsize=64)
def _ascii_term_pattern(term: str) -> re.Pattern[str]:
    """The whole tokens equal to ``term`` (ASCII letters folded), as FTS5 ``unicode61`` delimits them."""
    return re.compile(rf"(?<![A-Za-z0-9])({re.escape(term)})(?![A-Za-z0-9])", re.IGNORECASE | re.ASCII)


_ASCII_LONG_TOKEN: Final = re.compile(f"[A-Za-z0-9]{{{_ASCII_TERM_MAX}}}")


# --- the provider -------------------------------------------------------------------------------------------


class PostgresSearch(SqliteSearch):
    """Session search whose index lives in the PostgreSQL database of the store.

    ``PostgresSearch(coordinator)`` indexes the coordinator's PostgreSQL store (its DSN and schema);
    ``dsn``/``schema`` name the database and the *store* schema explicitly (the index is in
    :func:`index_schema` of it), e.g. for a search over live sessions only. Every other option, and every
    result and error, is :class:`SqliteSearch`'s (there is no ``path`` or ``journal_mode``), naming the
    PostgreSQL index where the SQLite provider's messages name SQLite.
    """

    _engine = "PostgreSQL"

    def __init__(
        self,
        coordinator: PersistenceCoordinator | None = None,
        *,
        dsn: str | None = None,
        schema: str | None = None,
        store: SessionStore | None = None,
        open_at: str = "startup",
        default_limit: int = DEFAULT_LIMIT,
        max_limit: int = MAX_LIMIT,
        snippet_chars: int = SNIPPET_CHARS,
        read_window_max: int = 50,
        persisted_inspect_concurrency: int = 4,
    ) -> None:
        backend = getattr(coordinator, "backend", None)
        if dsn is None:
            dsn = getattr(backend, "dsn", None)
        if schema is None:
            schema = getattr(backend, "schema", None)
        if not isinstance(dsn, str) or not dsn.strip():
            raise SessionQueryError(
                "session-search PostgreSQL config: dsn is required (pass dsn=, or a coordinator over a "
                "PostgreSQL store)",
                "SESSION_QUERY_INVALID_CONFIG",
            )
        if not isinstance(schema, str) or not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", schema):
            raise SessionQueryError(
                "session-search PostgreSQL config: schema must be a lower-case SQL identifier",
                "SESSION_QUERY_INVALID_CONFIG",
            )
        self.dsn = dsn
        timeout = getattr(backend, "call_timeout_s", None)
        # The store backend's call deadline sets how soon each end gives up on a silent peer (keepalive.py).
        self._call_timeout_s = (
            float(timeout) if isinstance(timeout, (int, float)) and timeout > 0 else DEFAULT_CALL_TIMEOUT_S
        )
        self.store_schema = schema
        self.index_schema = index_schema(schema)
        self._s = sql.Identifier(self.index_schema)
        self._fts = _Fts5()
        self._tokenizers: queue.SimpleQueue[_Fts5] = queue.SimpleQueue()
        for _ in range(_TOKENIZERS):
            self._tokenizers.put(_Fts5())
        self._live_rows: dict[str, tuple[str, int]] | None = None
        self._early: _EarlyWrite | None = None
        # (service, connection number, every session row's key, the revision listing read after them)
        self._listing_cache: tuple[PersistenceCoordinator, int, dict[str, str], dict[str, str]] | None = None
        self._fts_lock = threading.Lock()
        super().__init__(
            coordinator,
            path=f"postgresql:{self.index_schema}",
            store=store,
            open_at=open_at,
            default_limit=default_limit,
            max_limit=max_limit,
            snippet_chars=snippet_chars,
            read_window_max=read_window_max,
            persisted_inspect_concurrency=persisted_inspect_concurrency,
        )

    def _q(self, text: str) -> sql.Composed:
        """``text`` with ``{s}`` as the index schema (the only interpolated identifier)."""
        return sql.SQL(text).format(s=self._s)

    # -- lifecycle ----------------------------------------------------------------------------------
    def _open(self) -> None:
        try:
            keepalive = keepalive_kwargs(conninfo.conninfo_to_dict(self.dsn), self._call_timeout_s)
            conn = psycopg.connect(self.dsn, autocommit=True, application_name="agentlog-search", **keepalive)
        except psycopg.Error as err:
            refused = refused_login(err, describe_dsn(self.dsn))
            if refused is not None:  # as the store's own connections report it: never a retryable failure
                raise refused from None
            raise _index_failed(f"cannot connect ({_message(err)})", err) from None
        try:
            # A common word ranks tens of thousands of candidates: sorted in memory, not spilled to disk.
            conn.execute(f"SET work_mem = '{_WORK_MEM}'")
            self._create_schema(conn)
            main = self._main_generation(conn)
        except BaseException:
            conn.close()
            raise
        self._conn = conn  # type: ignore[assignment]
        self._indexed_cache = None
        self._live_rows = None
        self._opened += 1
        self._global_generation = max(self._global_generation + (1 if self._opened > 1 else 0), main)
        self._local_generation = max(self._local_generation, main)

    def _create_schema(self, conn: psycopg.Connection[Any]) -> None:
        """Create (or adopt) the index schema; refuse one holding tables the index did not create."""
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_INIT_LOCK,))
            tables = {
                str(row[0])
                for row in conn.execute(
                    "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                    "WHERE n.nspname = %s AND c.relkind IN ('r', 'p', 'v', 'm', 'f')",
                    (self.index_schema,),
                )
            }
            if tables - _OUR_TABLES:
                raise _index_failed(
                    f'schema "{self.index_schema}" holds tables the search index did not create '
                    f"({', '.join(sorted(tables - _OUR_TABLES)[:5])}); it is left untouched"
                )
            if "search_state" in tables:
                row = conn.execute(self._q("SELECT application, version FROM {s}.search_state")).fetchone()
                if row is None or row[0] != INDEX_APPLICATION:
                    raise _index_failed(f'schema "{self.index_schema}" has a search_state the index did not write')
                if row[1] == INDEX_VERSION and tables == _OUR_TABLES:
                    self._create_temp(conn)
                    return
            if tables:
                conn.execute(self._q("DROP SCHEMA {s} CASCADE"))  # another layout of ours: rebuilt from the logs
            for statement in _PERSISTENT_DDL:
                conn.execute(self._q(statement))
            conn.execute(
                self._q("INSERT INTO {s}.search_state VALUES (1, %s, %s, 0)"), (INDEX_APPLICATION, INDEX_VERSION)
            )
        self._create_temp(conn)

    @staticmethod
    def _create_temp(conn: psycopg.Connection[Any]) -> None:
        for statement in _TEMP_DDL:
            conn.execute(statement)

    def _ensure_ready(self) -> Any:
        conn = self._conn
        if conn is not None and getattr(conn, "closed", False):
            self._conn = None  # the server ended it: reopened, with empty live overlays
        try:
            return super()._ensure_ready()
        except SessionQueryError as err:
            self._open_failure = None  # a server can come back: the next search tries again
            if isinstance(err.__cause__, DatabaseAuthError):  # the store's own code: the fix is the login's
                raise err.__cause__ from None
            raise

    def _serialized(self, signal: Signal | None, operation: Callable[[], Any]) -> Any:
        """Run ``operation`` alone on a ready connection; a database failure is
        ``SESSION_QUERY_INDEX_FAILED`` (a lost connection is reopened by the next operation)."""
        if self._closed:
            raise _index_closed(self._engine)
        self._acquire(signal)
        try:
            if self._closed:
                raise _index_closed(self._engine)
            _check(signal)
            self._ensure_ready()
            _check(signal)
            try:
                return operation()
            except psycopg.Error as err:
                self._drop_if_broken()
                raise _index_failed(_message(err), err) from None
            except SessionQueryError as err:
                if isinstance(err.__cause__, psycopg.Error):
                    self._drop_if_broken()
                raise
        finally:
            self._serial.release()

    def _drop_if_broken(self) -> None:
        conn = self._conn
        if conn is not None and (
            getattr(conn, "closed", False) or conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE  # type: ignore[attr-defined]
        ):
            try:
                conn.close()
            finally:
                self._conn = None
                self._open_failure = None

    def close(self) -> None:
        super().close()
        with self._fts_lock:
            self._fts.close()
            while not self._tokenizers.empty():  # close() is idempotent
                self._tokenizers.get_nowait().close()

    # -- reconciliation storage -----------------------------------------------------------------------
    def _revision_listing(self, service: PersistenceCoordinator, quick: Callable[[], object]) -> object:
        """The store's revision listing, answered from the last one for every session whose row is as
        it was then.

        ``list_revisions`` of a PostgreSQL store digests every session's newest event row (a thousand
        index probes and hashes: most of a search's time when the store is unchanged, and of a search
        after one session moved). Every write of the store moves its session's row (``revision`` and a
        new row version, ``xmin``), and a re-created session changes its ``incarnation``; so one read of
        every row's (id, incarnation, revision, xmin) — :data:`_ROW_KEYS`, read before the revisions it
        guards — tells which sessions can have moved since the last listing: only those are listed again
        (or, when most moved, all). The listing is cached per connection: a database restored from a
        backup (which repeats revisions and transaction ids) is reached through a new connection, whose
        first search lists again. Only for the plain coordinator over a PostgreSQL backend of this very
        store; anything else lists as before.
        """
        if not self._lists_this_store(service):
            return quick()
        conn = self._require()
        try:
            statement = _ROW_KEYS.format(schema=sql.Identifier(self.store_schema))
            if self._early is None:
                keys = dict(conn.execute(statement).fetchall())
            else:  # in the reconciliation's open write: a failure must not abort it
                with conn.transaction():
                    keys = dict(conn.execute(statement).fetchall())
        except psycopg.Error:
            return quick()  # no store tables yet (or no answer): the listing reports what is wrong
        cached = self._listing_cache
        fresh: object
        if cached is not None and cached[0] is service and cached[1] == self._opened:
            seen, listing = cached[2], cached[3]
            if keys == seen:
                return dict(listing)
            moved = [sid for sid, key in keys.items() if seen.get(sid) != key]
            if len(moved) <= _RELIST_MOVED:
                backend: PostgresBackend = service.backend  # type: ignore[assignment]
                # (a session deleted meanwhile is not in the answer; only deletions: nothing to ask)
                again = backend.list_revisions_of(moved) if moved else {}
                gone = set(moved)
                fresh = {sid: revision for sid, revision in listing.items() if sid in keys and sid not in gone}
                fresh.update(again)
                self._listing_cache = (service, self._opened, keys, dict(fresh))
                return fresh
        fresh = quick()
        if isinstance(fresh, dict):
            self._listing_cache = (service, self._opened, keys, dict(fresh))
        return fresh

    def _inspect_moved(
        self, service: PersistenceCoordinator, session_ids: Sequence[str], signal: Signal | None
    ) -> Iterator[tuple[str, _Loaded | SessionPersistenceCorruptionError | SessionNotFoundError]]:
        """The moved sessions read and extracted by ``persisted_inspect_concurrency`` threads, handed on
        in the listing's order: a read waits on the server (the GIL released) while another thread
        folds and extracts the log before it, so a first index does not pay every read's round trips
        in turn. At most twice as many sessions as threads are in flight."""
        workers = min(self.persisted_inspect_concurrency, len(session_ids))
        if workers <= 1:
            yield from super()._inspect_moved(service, session_ids, signal)
            return

        conn = self._require()
        doc_ids = _DocIds(lambda count: self._reserve_docs(conn, "persisted", count))
        self._abort_early()  # a retried observation starts its write again
        if len(session_ids) >= _EARLY_WRITE_SESSIONS:
            self._early = _EarlyWrite(self, conn, session_ids)
        early = self._early

        def load(sid: str) -> _Loaded | SessionPersistenceCorruptionError | SessionNotFoundError | None:
            if signal is not None and signal.is_set():
                return None  # the caller's check reports the abort
            loaded = _inspect_one(service, sid)
            if not isinstance(loaded, _Loaded):
                return loaded
            rows, term_rows, foldings = self._index_rows(loaded.documents, doc_ids.take(len(loaded.documents)))
            return _Prepared(loaded.header, loaded.documents, rows, term_rows, foldings)

        ids = iter(session_ids)
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="agentlog-search-inspect") as pool:
            pending = collections.deque((sid, pool.submit(load, sid)) for sid in itertools.islice(ids, 2 * workers))
            try:
                while pending:
                    sid, future = pending.popleft()
                    _check(signal)
                    loaded = future.result()
                    _check(signal)
                    following = next(ids, None)
                    if following is not None:
                        pending.append((following, pool.submit(load, following)))
                    assert loaded is not None
                    if early is not None and isinstance(loaded, _Prepared):
                        early.put(loaded)
                    yield sid, loaded
            finally:
                for _sid, left in pending:
                    left.cancel()

    def _reserve_docs(self, conn: psycopg.Connection[Any], source: str, count: int) -> list[int]:
        """``count`` doc ids from the source's sequence (ids a failed write leaves unused are a gap)."""
        if count == 0:
            return []
        sequence = self._tables(source)[4]
        return [int(row[0]) for row in conn.execute(_RESERVE, (sequence, count))]

    def _index_rows(
        self, documents: Sequence[Mapping[str, Any]], ids: Sequence[int]
    ) -> tuple[list[tuple[Any, ...]], str, list[tuple[Any, ...]]]:
        """The document rows (keyed by ``ids``), the term rows (``COPY`` text) and the folded rows of
        CJK-bearing documents, built by a tokenizer of the pool (one is made when all are busy)."""
        rows = []
        foldings = []
        for doc, document in zip(ids, documents, strict=True):
            text = sanitize_fts_text(document["text"])
            row = (doc, *indexed_columns(document, text))
            rows.append((*row, text))
            if has_cjk(text):
                foldings.append((*row, fold(companion_text(text))))
        try:
            tokenizer = self._tokenizers.get_nowait()
        except queue.Empty:
            tokenizer = _Fts5()
        try:
            # Each term row carries its document's columns: a one-term query ranks from the term rows alone.
            term_rows = tokenizer.term_rows([(row[0], row[7], _copy_columns(row[1:7])) for row in rows])
        finally:
            self._tokenizers.put(tokenizer)
        return rows, term_rows, foldings

    def _lists_this_store(self, service: PersistenceCoordinator) -> bool:
        found = getattr(service, "backend", None)
        if not isinstance(found, PostgresBackend):
            return False
        backend: PostgresBackend = found
        return (
            type(service).list_revisions is PersistenceCoordinator.list_revisions
            and getattr(service, "_lister", None) is backend
            and type(backend).list_revisions is PostgresBackend.list_revisions
            and backend.dsn == self.dsn
            and backend.schema == self.store_schema
        )

    def _main_generation(self, conn: Any) -> int:  # type: ignore[override]
        row = conn.execute(self._q("SELECT global_generation FROM {s}.search_state WHERE singleton = 1")).fetchone()
        return int(row[0])

    def _indexed_persisted(self, conn: Any) -> dict[str, str]:
        return {str(r[0]): str(r[1]) for r in conn.execute(self._q("SELECT id, revision FROM {s}.persisted_sessions"))}

    def _indexed_live(self, conn: Any) -> dict[str, tuple[str, int]]:
        # Only this instance writes its connection's TEMP rows: read once after each write, then mirrored.
        if self._live_rows is None:
            self._live_rows = {
                str(r[0]): (str(r[1]), int(r[2]))
                for r in conn.execute("SELECT id, fingerprint, persisted FROM pg_temp.live_sessions")
            }
        return dict(self._live_rows)

    def _apply(  # type: ignore[override]
        self,
        conn: psycopg.Connection[Any],
        observation: _Observation,
        persisted_changes: list[_Persisted],
        persisted_deletes: list[str],
        live_changes: list[_Live],
        live_deletes: list[str],
        live_documents: dict[str, list[dict[str, Any]]],
        progress: Callable[[int, int], None] | None,
    ) -> int:
        self._live_rows = None
        early, self._early = self._early, None
        try:
            if early is not None:
                early.finish()  # every prepared session is in the open transaction (or its error raised)
            # Inside an early write's transaction this is a savepoint; the early write commits after it.
            with conn.transaction():
                # Hosts sharing the index write it one at a time; the generation is read under the lock.
                conn.execute(self._q("SELECT 1 FROM {s}.search_state WHERE singleton = 1 FOR UPDATE"))
                main = self._main_generation(conn)
                persisted_changed = bool(persisted_changes or persisted_deletes)
                known = self._indexed_cache
                after: dict[str, str] | None = None
                if persisted_changed:
                    self._indexed_cache = None
                    # The indexed revisions after this write, when nobody else wrote since they were read.
                    after = dict(known[1]) if known is not None and known[0] == main else None
                    main += 1
                local = self._local_generation
                changed = [entry.loaded.header["id"] for entry in persisted_changes if entry.loaded is not None]
                deleted = early.deleted if early is not None else frozenset()  # the early write's own deletes
                # A re-read session (not prepared: one moved, an append as a rule) keeps its rows that are
                # as they were; only its new or changed documents are written.
                reread = [entry.loaded for entry in persisted_changes if type(entry.loaded) is _Loaded]
                kept = self._replace_changed_documents(conn, reread) if reread else {}
                deleted = deleted | kept.keys()
                self._delete(conn, "persisted", [sid for sid in [*persisted_deletes, *changed] if sid not in deleted])
                total = len(persisted_changes)
                sessions: list[tuple[Any, ...]] = []
                documents: list[dict[str, Any]] = []
                prepared: list[_Prepared] = []
                for entry in persisted_changes:
                    assert entry.loaded is not None
                    sessions.append((*_header_bindings(entry.loaded.header), entry.revision, main))
                    if isinstance(entry.loaded, _Prepared):
                        if early is None:  # (an early write's copier has copied every prepared session)
                            prepared.append(entry.loaded)
                    else:
                        documents.extend(kept.get(entry.loaded.header["id"], entry.loaded.documents))
                self._copy(conn, self._q("COPY {s}.persisted_sessions FROM STDIN"), sessions)
                self._copy_prepared(conn, prepared)
                self._insert_documents(conn, "persisted", documents)
                if progress is not None:
                    for done in range(1, total + 1):
                        progress(done, total)
                if persisted_changed:
                    conn.execute(
                        self._q("UPDATE {s}.search_state SET global_generation = %s WHERE singleton = 1"), (main,)
                    )
                self._delete(conn, "live", [*live_deletes, *(e.header["id"] for e in live_changes)])
                live_rows: list[tuple[Any, ...]] = []
                live_docs: list[dict[str, Any]] = []
                for change in live_changes:
                    local = max(local, main) + 1
                    sid = change.header["id"]
                    flag = 1 if sid in observation.persisted else 0
                    live_rows.append((*_header_bindings(change.header), change.fingerprint, flag, local))
                    live_docs.extend(live_documents[sid])
                self._copy(conn, sql.SQL("COPY pg_temp.live_sessions FROM STDIN"), live_rows)
                self._insert_documents(conn, "live", live_docs)
            if early is not None:
                finished: _EarlyWrite = early
                early = None  # committed or failed, never rolled back by the handlers below
                finished.commit()
            if after is not None:
                for sid in persisted_deletes:
                    after.pop(sid, None)
                after.update((entry.loaded.header["id"], entry.revision) for entry in persisted_changes if entry.loaded)
                self._indexed_cache = (main, after)
            self._seen_main = main
            if sum(len(entry.loaded.documents) for entry in persisted_changes if entry.loaded) >= _ANALYZE_AFTER:
                # A bulk load (the first index): the planner's statistics must know the new term counts
                # now, not when autovacuum gets to them, or phrase queries start from a common term.
                for table in ("persisted_terms", "persisted_docs", "persisted_sessions", "persisted_folded"):
                    conn.execute(self._q(f"ANALYZE {{s}}.{table}"))
            return local
        except SessionQueryError:
            if early is not None:
                early.abort()
            raise
        except Exception as err:
            if early is not None:
                early.abort()
            self._drop_if_broken()
            raise SessionQueryError(
                f"session-search reconciliation failed: {_message(err)}", "SESSION_QUERY_INDEX_FAILED"
            ) from err
        except BaseException:
            if early is not None:
                early.abort()
            raise

    def _reconcile(self, signal: Signal | None, *, progress: Callable[[int, int], None] | None = None) -> _Binding:
        try:
            return super()._reconcile(signal, progress=progress)
        finally:
            self._abort_early()  # begun, but no write followed (nothing to write, an error, an abort)

    def _abort_early(self) -> None:
        early, self._early = self._early, None
        if early is not None:
            early.abort()

    def forget(self, session_ids: Sequence[str], *, signal: Signal | None = None) -> int:
        """Drop the stored documents of ``session_ids`` now (deleted sessions), for every host, in one
        transaction under the index's lock; moves the shared generation (other hosts' cursors go stale).
        Returns how many of the ids had stored rows."""
        self._assert_enabled()
        ids = list(session_ids)

        def operation() -> int:
            conn = self._ensure_ready()
            with conn.transaction():
                conn.execute(self._q("SELECT 1 FROM {s}.search_state WHERE singleton = 1 FOR UPDATE"))
                row = conn.execute(self._q("SELECT count(*) FROM {s}.persisted_sessions WHERE id = ANY(%s)"), (ids,))
                found = int(row.fetchone()[0])
                if found:
                    main = self._main_generation(conn) + 1
                    self._delete(conn, "persisted", ids)
                    conn.execute(
                        self._q("UPDATE {s}.search_state SET global_generation = %s WHERE singleton = 1"), (main,)
                    )
                    self._indexed_cache = None
            return found

        return int(self._serialized(signal, operation))

    def _tables(
        self, source: str
    ) -> tuple[sql.Composed | sql.SQL, sql.Composed | sql.SQL, sql.Composed | sql.SQL, sql.Composed | sql.SQL, str]:
        """(sessions, docs, terms, folded, doc sequence) of ``persisted`` or ``live`` rows."""
        if source == "persisted":
            return (
                self._q("{s}.persisted_sessions"),
                self._q("{s}.persisted_docs"),
                self._q("{s}.persisted_terms"),
                self._q("{s}.persisted_folded"),
                f"{sql.Identifier(self.index_schema).as_string(None)}.persisted_doc_seq",
            )
        return (
            sql.SQL("pg_temp.live_sessions"),
            sql.SQL("pg_temp.live_docs"),
            sql.SQL("pg_temp.live_terms"),
            sql.SQL("pg_temp.live_folded"),
            "pg_temp.live_doc_seq",
        )

    def _replace_changed_documents(
        self, conn: psycopg.Connection[Any], reread: list[_Loaded]
    ) -> dict[str, list[dict[str, Any]]]:
        """Delete the stored rows of the ``reread`` sessions that are no longer among their documents (and
        their session rows); return each session's documents not stored as they are, to be written.

        A log only grows, so after an append nearly every document is stored already, identical in every
        column: rewriting them all cost most of a search after one turn. A document is kept when its
        session, seq, type, time, surface, length and text are all the stored row's."""
        ids = [entry.header["id"] for entry in reread]
        stored: dict[tuple[Any, ...], int] = {
            tuple(row[1:]): int(row[0])
            for row in conn.execute(
                self._q(
                    'SELECT doc, session_id, seq, type, "time", surface, codepoint_length, text '
                    "FROM {s}.persisted_docs WHERE session_id = ANY(%s)"
                ),
                (ids,),
            )
        }
        fresh: dict[str, list[dict[str, Any]]] = {}
        for entry in reread:
            written = fresh[entry.header["id"]] = []
            for document in entry.documents:
                text = sanitize_fts_text(document["text"])
                if stored.pop((*indexed_columns(document, text), text), None) is None:
                    written.append(document)
        gone = list(stored.values())
        if gone:
            _, docs, terms, folded, _sequence = self._tables("persisted")
            for table in (terms, folded, docs):
                conn.execute(sql.SQL("DELETE FROM {} WHERE doc = ANY(%s)").format(table), (gone,))
        conn.execute(self._q("DELETE FROM {s}.persisted_sessions WHERE id = ANY(%s)"), (ids,))
        return fresh

    def _delete(self, conn: psycopg.Connection[Any], source: str, ids: list[str]) -> None:
        if not ids:
            return
        sessions, docs, terms, folded, _ = self._tables(source)
        selected = sql.SQL("SELECT doc FROM {} WHERE session_id = ANY(%s)").format(docs)
        for table in (terms, folded):
            conn.execute(sql.SQL("DELETE FROM {} WHERE doc IN ({})").format(table, selected), (ids,))
        conn.execute(sql.SQL("DELETE FROM {} WHERE session_id = ANY(%s)").format(docs), (ids,))
        conn.execute(sql.SQL("DELETE FROM {} WHERE id = ANY(%s)").format(sessions), (ids,))

    @staticmethod
    def _copy(conn: psycopg.Connection[Any], statement: sql.Composed | sql.SQL, rows: Iterable[Sequence[Any]]) -> None:
        rows = list(rows)
        if not rows:
            return
        with conn.cursor() as cur, cur.copy(statement) as copy:
            for row in rows:
                copy.write_row(row)

    def _insert_documents(self, conn: psycopg.Connection[Any], source: str, documents: list[dict[str, Any]]) -> None:
        """Documents, their term rows (FTS5's own tokenizer) and the folded companion text of CJK-bearing
        ones; every row keyed by the document's id from the source's sequence.

        In batches, pipelined: tokenizer threads prepare the next batches (each with its own in-memory
        SQLite, which releases the GIL) while this thread copies the finished ones to the server.
        """
        if not documents:
            return
        ids = self._reserve_docs(conn, source, len(documents))
        statements = self._copy_statements(source)

        def prepare(start: int) -> tuple[list[tuple[Any, ...]], str, list[tuple[Any, ...]]]:
            end = start + _BATCH_DOCUMENTS
            return self._index_rows(documents[start:end], ids[start:end])

        # Batches are tokenized by the tokenizer workers (SQLite releases the GIL) while this thread
        # copies the finished ones to the server, in order; at most a few batches are held at once.
        starts = list(range(0, len(documents), _BATCH_DOCUMENTS))
        with ThreadPoolExecutor(max_workers=_TOKENIZERS, thread_name_prefix="agentlog-search-tokenize") as pool:
            pending: list[Future[tuple[list[tuple[Any, ...]], str, list[tuple[Any, ...]]]]] = []
            for start in starts:
                pending.append(pool.submit(prepare, start))
                if len(pending) > _TOKENIZERS:
                    self._copy_batch(conn, statements, *pending.pop(0).result())
            for future in pending:
                self._copy_batch(conn, statements, *future.result())

    def _copy_prepared(self, conn: psycopg.Connection[Any], prepared: Iterable[_Prepared]) -> None:
        """Copy sessions' prepared rows as they come, a few thousand documents per ``COPY`` of each table;
        a copied session's rows are released (an early write's copier holds a first index's sessions)."""
        statements = self._copy_statements("persisted")
        batch: list[_Prepared] = []
        size = 0
        for entry in itertools.chain(prepared, [None]):
            if entry is not None:
                batch.append(entry)
                size += len(entry.rows)
            if batch and (entry is None or size >= _BATCH_DOCUMENTS):
                self._copy_batch(
                    conn,
                    statements,
                    [row for item in batch for row in item.rows],
                    "".join(item.term_rows for item in batch),
                    [row for item in batch for row in item.foldings],
                )
                for item in batch:
                    item.rows, item.term_rows, item.foldings = [], "", []
                batch, size = [], 0

    def _copy_statements(self, source: str) -> tuple[sql.Composed, sql.Composed, sql.Composed]:
        _, docs, terms, folded, _sequence = self._tables(source)
        return (
            sql.SQL("COPY {} (doc, session_id, seq, type, time, surface, codepoint_length, text) FROM STDIN").format(
                docs
            ),
            sql.SQL(
                "COPY {} (term, doc, n, pos, session_id, seq, type, time, surface, codepoint_length) FROM STDIN"
            ).format(terms),
            sql.SQL("COPY {} (doc, session_id, seq, type, time, surface, codepoint_length, folded) FROM STDIN").format(
                folded
            ),
        )

    def _copy_batch(
        self,
        conn: psycopg.Connection[Any],
        statements: tuple[sql.Composed, sql.Composed, sql.Composed],
        rows: list[tuple[Any, ...]],
        term_rows: str,
        foldings: list[tuple[Any, ...]],
    ) -> None:
        self._copy(conn, statements[0], rows)
        if term_rows:
            # In term order, as FTS5's vocabulary gave them: a term's rows then lie side by side in the
            # table, so a query reads a few heap pages per batch, not one per document (the C tokenizer
            # writes a document's terms together; unsorted, every query slowed by a third).
            ordered = "".join(sorted(term_rows.splitlines(keepends=True)))
            with conn.cursor() as cur, cur.copy(statements[1]) as out:
                out.write(ordered)
        self._copy(conn, statements[2], foldings)

    def rebuild(self, progress: Callable[[int, int], None] | None = None, *, signal: Signal | None = None) -> None:
        """Drop every stored row and index the whole corpus again (for every host sharing the index)."""
        self._assert_enabled()

        def operation() -> None:
            conn = self._require()
            with conn.transaction():
                conn.execute(self._q("SELECT 1 FROM {s}.search_state WHERE singleton = 1 FOR UPDATE"))
                main = self._main_generation(conn)
                for table in ("persisted_terms", "persisted_folded", "persisted_docs", "persisted_sessions"):
                    conn.execute(self._q(f"DELETE FROM {{s}}.{table}"))
                for table in ("live_terms", "live_folded", "live_docs", "live_sessions"):
                    conn.execute(f"DELETE FROM pg_temp.{table}")
                conn.execute(
                    self._q("UPDATE {s}.search_state SET global_generation = %s WHERE singleton = 1"), (main + 1,)
                )
            self._indexed_cache = None
            self._live_rows = None
            self._last_identity = None
            self._persistence_epoch += 1
            self._global_generation += 1
            self._skipped_revisions.clear()
            self._reconcile(signal, progress=progress)

        self._serialized(signal, operation)

    def _require(self) -> Any:
        if self._conn is None:
            raise _index_closed(self._engine)
        return self._conn

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
        clauses = [*_clauses(session_where), *_clauses(event_where)]
        values = [*session_where.params, *event_where.params]
        assert_portable_binding_count(len(values) + 6)
        return self._search(request.query, clauses, values, offset, request.limit, binding, sessions=True)

    def _query_events(
        self, request: EventSearchRequest, event_where: SqlWhere, offset: int, binding: _Binding
    ) -> list[dict[str, Any]]:
        assert_fts5_outer_predicate_count(1 + event_where.predicate_count)
        clauses = ["session_id = ?", *_clauses(event_where)]
        values = [request.session_id, *event_where.params]
        assert_portable_binding_count(len(values) + 6)
        return self._search(request.query, clauses, values, offset, request.limit, binding, sessions=False)

    def _search(
        self,
        query: str,
        clauses: list[str],
        values: list[Any],
        offset: int,
        limit: int,
        binding: _Binding,
        *,
        sessions: bool,
    ) -> list[dict[str, Any]]:
        visible = binding.service is not None
        params: dict[str, Any] = {f"f{i}": value for i, value in enumerate(values)}
        params["visible"] = visible
        if uses_substring(query):
            needle = fold(query)
            params["needle"] = needle
            params["needle_bytes"] = len(needle.encode("utf-8"))
            params["pattern"] = "%" + needle.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
            rows = self._ranked(_SUBSTRING, clauses, params, offset, limit, visible, sessions=sessions)
            return self._mark_substring_page(rows, query)
        with self._fts_lock:
            terms = self._fts.terms(query)
        if not terms:
            return []  # FTS5: a phrase without a token matches nothing
        if len(terms) == 1 and self._term_path:
            params["term"] = terms[0]
            rows = self._ranked(_TERM, clauses, params, offset, limit, visible, sessions=sessions)
            return self._highlight_page(rows, query, term=terms[0])
        distinct = list(dict.fromkeys(terms))
        params.update({f"term{i}": term for i, term in enumerate(distinct)})
        if len(distinct) == len(terms):
            # Distinct terms: occurrences cannot overlap, so the marks are the occurrences, counted by the
            # server (each position of the first term followed by the others), which ranks and pages too.
            # A repeated term's overlapping occurrences merge into one mark: counted here, in one pass
            # over each document's sorted positions (the server's set tests cost the square of a long
            # position list: 63 µs a document, against a few here).
            arm = _phrase_count_arm(len(terms))
            rows = self._ranked(arm, clauses, params, offset, limit, visible, sessions=sessions)
            return self._highlight_page(rows, query)
        candidates = self._rows_of(
            f"SELECT * FROM ({_arms(_phrase_arm(len(distinct)), clauses, visible)}) AS c", params, binary=True
        )  # binary: the position arrays are read without parsing their text
        page = _rank_phrase(candidates, [distinct.index(term) for term in terms], offset, limit, sessions=sessions)
        return self._highlight_page(self._with_texts(page), query)

    def _with_texts(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The page's rows with their documents' texts (one query per source)."""
        conn = self._require()
        for live, table in ((0, self._q("{s}.persisted_docs")), (1, sql.SQL("pg_temp.live_docs"))):
            docs = [row["doc"] for row in rows if row["live"] == live]
            if docs:
                found = dict(
                    conn.execute(sql.SQL("SELECT doc, text FROM {} WHERE doc = ANY(%s)").format(table), (docs,))
                )
                for row in rows:
                    if row["live"] == live:
                        row["text"] = found.get(row["doc"], "")
        return rows

    def _single_term(self, query: str) -> str | None:
        """The query's one ``unicode61`` term, or ``None`` (several, none, or a CJK query)."""
        if not self._term_path or uses_substring(query):
            return None
        with self._fts_lock:
            terms = self._fts.terms(query)
        return terms[0] if len(terms) == 1 else None

    def _rows_of(self, statement: str, params: Mapping[str, Any], *, binary: bool = False) -> list[dict[str, Any]]:
        conn = self._require()
        with conn.cursor(binary=binary) as cur:
            cur.execute(statement.replace("{s}", sql.Identifier(self.index_schema).as_string(None)), params)
            names = [column.name for column in cur.description or ()]
            return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

    def _ranked(
        self,
        arm: str,
        clauses: list[str],
        params: dict[str, Any],
        offset: int,
        limit: int,
        visible: bool,
        *,
        sessions: bool,
    ) -> list[dict[str, Any]]:
        """One page of ranked candidates, each with its document's text (for the page's marks)."""
        candidates = _arms(arm, clauses, visible)
        if sessions:
            page = (
                "ranked AS (SELECT *, ROW_NUMBER() OVER (PARTITION BY session_id "
                'ORDER BY match_count DESC, document_length ASC, "time" DESC, seq DESC) AS event_rank FROM matched), '
                "page AS (SELECT * FROM ranked WHERE event_rank = 1 ORDER BY match_count DESC, document_length ASC, "
                '"time" DESC, session_id COLLATE "C" ASC, seq DESC LIMIT %(limit)s OFFSET %(offset)s)'
            )
            order = (
                'page.match_count DESC, page.document_length ASC, page."time" DESC, page.session_id COLLATE "C" ASC, '
                "page.seq DESC"
            )
        else:
            page = (
                'page AS (SELECT * FROM matched ORDER BY match_count DESC, document_length ASC, "time" DESC, '
                "seq DESC LIMIT %(limit)s OFFSET %(offset)s)"
            )
            order = 'page.match_count DESC, page.document_length ASC, page."time" DESC, page.seq DESC'
        header = ", ".join(f"CASE WHEN page.live = 0 THEN ps.{c} ELSE ls.{c} END AS {c}" for c in _HEADER_COLUMNS)
        statement = (
            f"WITH candidates AS MATERIALIZED ({candidates}), "
            f"matched AS (SELECT * FROM candidates WHERE match_count > 0), {page} "
            f"SELECT page.session_id, {header}, page.live, page.persisted, page.seq, "
            'CASE WHEN page.live = 0 THEN pd."type" ELSE ld."type" END AS "type", page."time", '
            "CASE WHEN page.live = 0 THEN pd.surface ELSE ld.surface END AS surface, page.doc, "
            "page.document_length, page.match_count, coalesce(pd.text, ld.text) AS text FROM page "
            "LEFT JOIN {s}.persisted_docs AS pd ON page.live = 0 AND pd.doc = page.doc "
            "LEFT JOIN pg_temp.live_docs AS ld ON page.live = 1 AND ld.doc = page.doc "
            "LEFT JOIN {s}.persisted_sessions AS ps ON page.live = 0 AND ps.id = page.session_id "
            f"LEFT JOIN pg_temp.live_sessions AS ls ON page.live = 1 AND ls.id = page.session_id ORDER BY {order}"
        )
        return self._rows_of(statement, {**params, "limit": limit + 1, "offset": offset})

    def _highlight_page(
        self, rows: list[dict[str, Any]], query: str, *, term: str | None = None
    ) -> list[dict[str, Any]]:
        """``marked_text`` of a page's rows: FTS5 ``highlight()`` of their texts (for a one-term query,
        ASCII texts are marked here, for the same snippets: a third of such a search's own time)."""
        texts = [(index, row["text"] or "") for index, row in enumerate(rows)]
        marked: dict[int, str] = {}
        if term is not None:
            texts = [entry for entry in texts if not _mark_ascii_term(entry[1], term, entry[0], marked)]
        if texts:
            with self._fts_lock:
                marked.update(self._fts.highlight(texts, query))
        for index, row in enumerate(rows):
            row["marked_text"] = marked.get(index, "")
        return rows

    def _mark_substring_page(self, rows: list[dict[str, Any]], query: str) -> list[dict[str, Any]]:
        for row in rows:
            text = companion_text(row["text"] or "")
            row["marked_text"] = mark_substrings(text, query) or text
        return rows

    def _target(self, session_id: str, binding: _Binding) -> tuple[dict[str, Any], str]:
        conn = self._require()
        columns = (
            "id AS session_id, version, created_at, cwd, parent_session, seed_length, delegation_depth, "
            "agent_preset, generation"
        )
        with conn.cursor() as cur:
            cur.execute(f"SELECT {columns} FROM pg_temp.live_sessions WHERE id = %s", (session_id,))
            row = cur.fetchone()
            if row is not None:
                record = dict(zip([c.name for c in cur.description or ()], row, strict=True))
                return _row_header(record), f"live:{record['generation']}"
            if binding.service is not None:
                cur.execute(self._q(f"SELECT {columns} FROM {{s}}.persisted_sessions WHERE id = %s"), (session_id,))
                row = cur.fetchone()
                if row is not None:
                    record = dict(zip([c.name for c in cur.description or ()], row, strict=True))
                    return _row_header(record), f"persisted:{self._persistence_epoch}:{record['generation']}"
                for entry in self.skipped:
                    if entry["sessionId"] == session_id:
                        raise SessionQueryError(
                            f'session "{session_id}" cannot be searched: {entry["message"]}',
                            "SESSION_QUERY_CORRUPT_SESSION",
                        )
        raise SessionQueryError(f'session "{session_id}" not found', "SESSION_QUERY_SESSION_NOT_FOUND")


# --- SQL ------------------------------------------------------------------------------------------------------

_WORK_MEM: Final = "32MB"
"""The search connection's sort memory (the server's default, 4 MB, spills a common word's ranking)."""

_HEADER_DDL: Final = (
    'id text COLLATE "C" PRIMARY KEY, version bigint NOT NULL, created_at bigint NOT NULL, cwd text, '
    "parent_session text, seed_length bigint, delegation_depth bigint, agent_preset text"
)
_DOCS_DDL: Final = (
    'doc bigint PRIMARY KEY, session_id text COLLATE "C" NOT NULL, seq bigint NOT NULL, type text NOT NULL, '
    "time bigint NOT NULL, surface text NOT NULL, codepoint_length bigint NOT NULL, text text NOT NULL"
)
# A term row carries its document's columns (those the filters and the ranking read): a one-term query
# ranks and filters from the term rows alone, with no lookup of each candidate's document row.
_TERMS_DDL: Final = (
    'term text COLLATE "C" NOT NULL, doc bigint NOT NULL, n integer NOT NULL, pos integer[] NOT NULL, '
    'session_id text COLLATE "C" NOT NULL, seq bigint NOT NULL, type text NOT NULL, time bigint NOT NULL, '
    "surface text NOT NULL, codepoint_length bigint NOT NULL, PRIMARY KEY (term, doc)"
)

# The companion of CJK-bearing documents carries their event columns: a substring query reads it alone.
_FOLDED_DDL: Final = _DOCS_DDL.replace("text text NOT NULL", "folded text NOT NULL")

_PERSISTENT_DDL: Final = (
    "CREATE SCHEMA IF NOT EXISTS {s}",
    "CREATE TABLE {s}.search_state (singleton integer PRIMARY KEY CHECK (singleton = 1), application text NOT NULL, "
    "version integer NOT NULL, global_generation bigint NOT NULL)",
    f"CREATE TABLE {{s}}.persisted_sessions ({_HEADER_DDL}, revision text NOT NULL, generation bigint NOT NULL)",
    f"CREATE TABLE {{s}}.persisted_docs ({_DOCS_DDL})",
    "CREATE INDEX ON {s}.persisted_docs (session_id)",
    f"CREATE TABLE {{s}}.persisted_terms ({_TERMS_DDL})",
    "CREATE INDEX ON {s}.persisted_terms (doc)",
    f"CREATE TABLE {{s}}.persisted_folded ({_FOLDED_DDL})",
    "CREATE SEQUENCE {s}.persisted_doc_seq",
)
_TEMP_DDL: Final = (
    f"CREATE TEMP TABLE IF NOT EXISTS live_sessions ({_HEADER_DDL}, fingerprint text NOT NULL, "
    "persisted integer NOT NULL CHECK (persisted IN (0, 1)), generation bigint NOT NULL)",
    f"CREATE TEMP TABLE IF NOT EXISTS live_docs ({_DOCS_DDL})",
    "CREATE INDEX IF NOT EXISTS live_docs_by_session ON pg_temp.live_docs (session_id)",
    f"CREATE TEMP TABLE IF NOT EXISTS live_terms ({_TERMS_DDL})",
    "CREATE INDEX IF NOT EXISTS live_terms_by_doc ON pg_temp.live_terms (doc)",
    f"CREATE TEMP TABLE IF NOT EXISTS live_folded ({_FOLDED_DDL})",
    "CREATE TEMP SEQUENCE IF NOT EXISTS live_doc_seq",
)

# One arm per source: ``{docs}``, ``{sessions}``, ``{terms}``, ``{folded}`` are the source's tables,
# ``{availability}`` its live/persisted columns; ``d`` is the document row and ``s`` its session row.
# A ranked arm's candidates carry only what ranking and paging read (a common word has tens of thousands
# of documents: wide rows made the sort spill to disk); the page's rows get their session's header and
# their document's type, surface and text afterwards (``PostgresSearch._ranked``).
_COMMON: Final = (
    'SELECT d.session_id AS session_id, {availability}, d.seq AS seq, d."time" AS "time", d.doc AS doc, '
    "d.codepoint_length AS document_length, "
)
_HEADER_COLUMNS: Final = (
    "version",
    "created_at",
    "cwd",
    "parent_session",
    "seed_length",
    "delegation_depth",
    "agent_preset",
)
# Every column of a hit, for the arm whose candidates are ranked here (:func:`_rank_phrase`).
_COMMON_WIDE: Final = (
    "SELECT d.session_id AS session_id, "
    + "".join(f"s.{column} AS {column}, " for column in _HEADER_COLUMNS)
    + '{availability}, d.seq AS seq, d."type" AS "type", d."time" AS "time", d.surface AS surface, d.doc AS doc, '
    "d.codepoint_length AS document_length, "
)
_TERM: Final = (
    _COMMON + "d.n AS match_count FROM {terms} AS d JOIN {sessions} AS s ON s.id = d.session_id "
    "WHERE d.term = %(term)s"
)
"""One term's candidates from its term rows alone (``d``: they carry their document's columns)."""


def _phrase_arm(distinct: int) -> str:
    """The arm of a phrase's candidates: the documents holding each of its ``distinct`` terms
    (``%(termI)s``), with every term's token positions (``posI``), matched in :func:`_rank_phrase`."""
    positions = ", ".join(f"{_term_row(i)}.pos AS pos{i}" for i in range(distinct))
    return _COMMON_WIDE + positions + _phrase_from(distinct)


def _term_row(index: int) -> str:
    """The alias of term ``index``'s row in a phrase arm: the first term's row is ``d``, the document's
    columns (a term row carries them), the others ``tI``."""
    return "d" if index == 0 else f"t{index}"


def _phrase_from(terms: int) -> str:
    """The ``FROM`` of a phrase arm: the documents holding each of ``terms`` terms (``%(termI)s``, term
    ``I``'s row as :func:`_term_row`), with their session rows."""
    joins = "".join(
        f" JOIN {{terms}} AS t{i} ON t{i}.doc = d.doc AND t{i}.term = %(term{i})s" for i in range(1, terms)
    )
    return f" FROM {{terms}} AS d{joins} JOIN {{sessions}} AS s ON s.id = d.session_id WHERE d.term = %(term0)s"


def _phrase_count_arm(length: int) -> str:
    """The arm of a phrase of ``length`` distinct terms (``%(termI)s``, in phrase order) with its
    occurrences counted in ``match_count``: the positions of the first term that each next term follows
    at its offset (what :func:`_phrase_marks` counts when no two occurrences can overlap)."""
    follows = " AND ".join(f"p + {i} = ANY(t{i}.pos)" for i in range(1, length))
    count = f"(SELECT count(*) FROM unnest(d.pos) AS p WHERE {follows})" if follows else "cardinality(d.pos)"
    return _COMMON + f"{count} AS match_count" + _phrase_from(length)


def _phrase_marks(row: Mapping[str, Any], phrase: Sequence[int]) -> int:
    """How many marks FTS5 ``highlight()`` makes for the phrase (term indexes ``phrase``) in one
    document: its occurrences' starts, with overlapping occurrences merged into one mark (adjacent
    ones are two)."""
    length = len(phrase)
    first = row[f"pos{phrase[0]}"]
    if length == 1:
        return len(first)
    if all(index == phrase[0] for index in phrase):
        # One term repeated: an occurrence is a run of consecutive positions (they strictly increase).
        if _accel.repeated_term_marks is not None and type(first) is list:
            counted = _accel.repeated_term_marks(first, length)  # None: not plainly sorted, decided below
            if counted is not None:
                return int(counted)
        ordered = sorted(first)
        span = length - 1
        starts: Iterable[int] = (p for p, q in zip(ordered, ordered[span:], strict=False) if q - p == span)
    else:
        following = [(offset, set(row[f"pos{index}"])) for offset, index in enumerate(phrase) if offset]
        starts = (p for p in sorted(first) if all(p + offset in positions for offset, positions in following))
    marks = 0
    previous: int | None = None
    for start in starts:
        if previous is None or start - previous >= length:
            marks += 1
        previous = start
    return marks


def _rank_phrase(
    candidates: list[dict[str, Any]], phrase: Sequence[int], offset: int, limit: int, *, sessions: bool
) -> list[dict[str, Any]]:
    """The page (``limit + 1`` rows from ``offset``) of the documents the phrase occurs in, ranked by
    the SQL paths' keys (``session_id`` by code point: SQLite's ``BINARY`` order of UTF-8)."""
    matched = []
    for row in candidates:
        count = _phrase_marks(row, phrase)
        if count:
            row["match_count"] = count
            matched.append(row)

    def event_key(row: Mapping[str, Any]) -> tuple[Any, ...]:
        return (-row["match_count"], row["document_length"], -row["time"], -row["seq"])

    if sessions:
        best: dict[str, dict[str, Any]] = {}
        for row in matched:
            current = best.get(row["session_id"])
            if current is None or event_key(row) < event_key(current):
                best[row["session_id"]] = row
        ordered = sorted(
            best.values(),
            key=lambda r: (-r["match_count"], r["document_length"], -r["time"], r["session_id"], -r["seq"]),
        )
    else:
        ordered = sorted(matched, key=event_key)
    return ordered[offset : offset + limit + 1]


_SUBSTRING: Final = (
    _COMMON + "(octet_length(d.folded) - octet_length(replace(d.folded, %(needle)s, ''))) / %(needle_bytes)s "
    "AS match_count FROM {folded} AS d JOIN {sessions} AS s ON s.id = d.session_id WHERE d.folded LIKE %(pattern)s"
)


def _clauses(where: SqlWhere) -> list[str]:
    """A compiled filter as its separate clauses (no clause the compiler makes contains ``AND``)."""
    return [clause for clause in where.sql.split(" AND ") if clause] if where.sql else []


def _arm_filter(clauses: list[str], *, live: bool, visible: bool) -> str:
    """The request's filters in one arm, in PostgreSQL: qualified columns, ``%(fN)s`` placeholders
    (each value bound once, referenced by both arms), booleans for SQLite's ``0`` and availability."""
    out: list[str] = []
    number = 0
    for clause in clauses:
        if clause == "0":
            out.append("FALSE")
            continue
        if _LIVE_CLAUSE.match(clause):
            out.append("TRUE" if live else "FALSE")
            continue
        if _PERSISTED_CLAUSE.match(clause):
            out.append(("s.persisted = 1" if visible else "FALSE") if live else "TRUE")
            continue
        text = _WORD.sub(lambda m: f'd."{m.group(1)}"' if m.group(1) in _DOC_COLUMNS else f"s.{m.group(1)}", clause)
        text = text.replace("AS INTEGER", "AS double precision")
        pieces = text.split("?")
        rebuilt = pieces[0]
        for piece in pieces[1:]:
            rebuilt += f"%(f{number})s" + piece
            number += 1
        out.append(rebuilt)
    return "".join(f" AND ({clause})" for clause in out)


def _arms(arm: str, clauses: list[str], visible: bool) -> str:
    """The candidate UNION ALL: stored documents of sessions without a live row (only while persistence
    is visible), then this connection's live documents; each with the request's filters."""
    persisted = arm.format(
        availability="0 AS live, 1 AS persisted",
        docs="{s}.persisted_docs",
        sessions="{s}.persisted_sessions",
        terms="{s}.persisted_terms",
        folded="{s}.persisted_folded",
    )
    live = arm.format(
        availability="1 AS live, CASE WHEN %(visible)s THEN s.persisted ELSE 0 END AS persisted",
        docs="pg_temp.live_docs",
        sessions="pg_temp.live_sessions",
        terms="pg_temp.live_terms",
        folded="pg_temp.live_folded",
    )
    return (
        f"{persisted} AND %(visible)s AND NOT EXISTS (SELECT 1 FROM pg_temp.live_sessions AS shadow "
        f"WHERE shadow.id = d.session_id){_arm_filter(clauses, live=False, visible=visible)} "
        f"UNION ALL {live}{_arm_filter(clauses, live=True, visible=visible)}"
    )
