"""The SQLite schema of the derived session-search index and the rules for opening one (spec §4.3).

The index is *derived*: every row in it can be rebuilt from the session logs, so the file may be reset
or rebuilt whenever it is of an older layout or damaged. It is also a file at a path a user chose, so
the opening rules refuse to touch anything that is not provably ours — a foreign SQLite database (an
``application_id`` of another application), an unmarked database that holds tables, or our file with
tables we did not create are refused untouched, before any mutating pragma runs.

Opening, in order (the original's ``openSearchDatabase``):

1. A missing file path gets its parent directories (mode ``0700``) and the file itself, created
   exclusively with mode ``0600``; existing directories and files keep their modes. SQLite creates the
   WAL/journal sidecars with the mode of the database file, so they are owner-only too.
2. ``application_id`` neither 0 nor :data:`APPLICATION_ID` → refused ("belongs to another application").
3. ``application_id`` 0 with any user table (names not matching ``sqlite_*`` by GLOB) → refused.
4. Ours: a user table, view or trigger outside the derived set → refused; ``user_version`` other than
   :data:`SCHEMA_VERSION` (or a version-8 file without the substring companion tables, see below) →
   every user table is dropped and ``user_version`` reset to 0 (in-place rebuild).
5. Journal mode, then the persistent schema (which stamps the application id and the version), then the
   connection-local TEMP schema. Any failure closes the handle and is reported as
   ``SESSION_QUERY_INDEX_FAILED``.

**Damage.** A file whose bytes are corrupt (SQLite reports ``SQLITE_CORRUPT`` or ``SQLITE_NOTADB``) is
never read as an index. If its on-disk header still carries the SQLite magic and our application id
(bytes 68–71), the file is ours and derived, so it is deleted with its sidecars and rebuilt from the logs
— what a user expects of a cache. A damaged file without that evidence might be anybody's data (a wrong
``--index`` path), so it is refused with ``SESSION_QUERY_INDEX_FAILED`` and left as it is; deleting it
is the user's call. The same rule applies when damage is only found later, by a search
(:func:`is_corruption`, :func:`file_is_ours`, :func:`discard_database_files`).

**The substring companion** (agentlog addition, :mod:`agentlog.query.cjk`): ``persisted_grams`` (and
``temp.live_grams``) are trigram FTS5 tables beside the ``unicode61`` ones, holding only documents that
contain CJK text. They are part of the derived set, so rule 4 accepts them; a version-8 file written
without them (by the original, or an older agentlog) is rebuilt, because its persisted documents were
never entered into the companion and CJK searches would silently miss them.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import urllib.parse
from typing import Final

from ..errors import SessionQueryError, describe_error
from .cjk import COMPANION_LIVE_DDL, COMPANION_PERSISTED_DDL, COMPANION_TABLES

__all__ = [
    "APPLICATION_ID",
    "DERIVED_USER_TABLES",
    "JOURNAL_MODES",
    "MEMORY_PATH",
    "SCHEMA_VERSION",
    "discard_database_files",
    "file_is_ours",
    "is_corruption",
    "open_search_database",
    "reset_search_database",
]

logger = logging.getLogger("agentlog.query.search")

SCHEMA_VERSION: Final = 8
"""The original's derived-index schema version (``PRAGMA user_version``); another version resets in place."""

APPLICATION_ID: Final = 0x44534851
"""``PRAGMA application_id`` of a session-search index ("DSHQ"): protects other databases from resets."""

JOURNAL_MODES: Final = ("wal", "delete", "truncate", "persist")
MEMORY_PATH: Final = ":memory:"
BUSY_TIMEOUT_S: Final = 5.0
_SQLITE_MAGIC: Final = b"SQLite format 3\x00"

_FTS_SHADOWS: Final = ("data", "idx", "content", "docsize", "config")
_ORIGINAL_TABLES: Final = frozenset(
    {"search_state", "persisted_sessions", "persisted_docs", *(f"persisted_docs_{s}" for s in _FTS_SHADOWS)}
)
_SIDE_TABLES: Final = frozenset({"persisted_doc_meta", "persisted_terms", "persisted_gram_folded"})
DERIVED_USER_TABLES: Final = _ORIGINAL_TABLES | frozenset(COMPANION_TABLES) | _SIDE_TABLES
"""Every table the persistent schema may hold: the original's three (with the FTS5 shadow tables of
``persisted_docs``), the substring companion's, and the two side tables (agentlog additions):
``persisted_doc_meta`` — each document's event columns by its ``persisted_docs`` rowid (an FTS5
UNINDEXED column is read through the content table at ~2 µs a row and cannot be looked up; this is a
B-tree, with an index by session for deletes) — and ``persisted_terms`` — each document's ``unicode61``
term frequencies, so a one-term query is ranked without re-tokenizing every matching document through
``highlight()`` — and ``persisted_gram_folded``, the folded text of each CJK-bearing document, from which a
substring query counts its occurrences in SQL."""

_META_COLUMNS: Final = (
    "doc INTEGER PRIMARY KEY, session_id TEXT NOT NULL, seq INTEGER NOT NULL, type TEXT NOT NULL, "
    "time INTEGER NOT NULL, surface TEXT NOT NULL, codepoint_length INTEGER NOT NULL"
)
_TERM_COLUMNS: Final = "term TEXT NOT NULL, doc INTEGER NOT NULL, n INTEGER NOT NULL, PRIMARY KEY (term, doc)"

_HEADER_COLUMNS: Final = (
    "id TEXT PRIMARY KEY, version INTEGER NOT NULL, created_at INTEGER NOT NULL, cwd TEXT, "
    "parent_session TEXT, seed_length INTEGER, delegation_depth INTEGER, agent_preset TEXT"
)
_DOC_COLUMNS: Final = (
    "text, session_id UNINDEXED, seq UNINDEXED, type UNINDEXED, time UNINDEXED, surface UNINDEXED, "
    "codepoint_length UNINDEXED"
)

PERSISTENT_SCHEMA: Final = (
    "CREATE TABLE IF NOT EXISTS search_state (singleton INTEGER PRIMARY KEY CHECK (singleton = 1), "
    "global_generation INTEGER NOT NULL) STRICT",
    "INSERT OR IGNORE INTO search_state (singleton, global_generation) VALUES (1, 0)",
    f"CREATE TABLE IF NOT EXISTS persisted_sessions ({_HEADER_COLUMNS}, revision TEXT NOT NULL, "
    "generation INTEGER NOT NULL) STRICT",
    f"CREATE VIRTUAL TABLE IF NOT EXISTS persisted_docs USING fts5({_DOC_COLUMNS}, tokenize = 'unicode61')",
    COMPANION_PERSISTED_DDL,
    f"CREATE TABLE IF NOT EXISTS persisted_doc_meta ({_META_COLUMNS}) STRICT",
    "CREATE INDEX IF NOT EXISTS persisted_doc_meta_by_session ON persisted_doc_meta (session_id)",
    f"CREATE TABLE IF NOT EXISTS persisted_terms ({_TERM_COLUMNS}) WITHOUT ROWID, STRICT",
    "CREATE INDEX IF NOT EXISTS persisted_terms_by_doc ON persisted_terms (doc)",
    "CREATE TABLE IF NOT EXISTS persisted_gram_folded (doc INTEGER PRIMARY KEY, folded TEXT NOT NULL) STRICT",
)

TEMPORARY_SCHEMA: Final = (
    f"CREATE TEMP TABLE IF NOT EXISTS live_sessions ({_HEADER_COLUMNS}, fingerprint TEXT NOT NULL, "
    "persisted INTEGER NOT NULL CHECK (persisted IN (0, 1)), generation INTEGER NOT NULL) STRICT",
    f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.live_docs USING fts5({_DOC_COLUMNS}, tokenize = 'unicode61')",
    COMPANION_LIVE_DDL,
    f"CREATE TEMP TABLE IF NOT EXISTS live_doc_meta ({_META_COLUMNS}) STRICT",
    "CREATE INDEX IF NOT EXISTS temp.live_doc_meta_by_session ON live_doc_meta (session_id)",
    f"CREATE TEMP TABLE IF NOT EXISTS live_terms ({_TERM_COLUMNS}) WITHOUT ROWID, STRICT",
    "CREATE INDEX IF NOT EXISTS temp.live_terms_by_doc ON live_terms (doc)",
    "CREATE TEMP TABLE IF NOT EXISTS live_gram_folded (doc INTEGER PRIMARY KEY, folded TEXT NOT NULL) STRICT",
    # Tokenizes a batch of documents (or a query) with the index's own tokenizer: its instance
    # vocabulary gives exact per-document term frequencies; emptied after every use.
    "CREATE VIRTUAL TABLE IF NOT EXISTS temp.term_stage USING fts5(text, content = '', tokenize = 'unicode61')",
    "CREATE VIRTUAL TABLE IF NOT EXISTS temp.term_stage_terms USING fts5vocab(temp, term_stage, instance)",
)


class IndexRefusedError(Exception):
    """The file at the index path is not (provably) a session-search index: it is left untouched."""


def is_corruption(err: BaseException) -> bool:
    """Whether SQLite reported damaged bytes (``SQLITE_CORRUPT``/``SQLITE_NOTADB``, any extended code)."""
    if not isinstance(err, sqlite3.DatabaseError):
        return False
    code = getattr(err, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)
    text = str(err)
    return "malformed" in text or "not a database" in text


def file_is_ours(path: str) -> bool:
    """Whether the bytes on disk carry the SQLite magic and our application id (header bytes 68–71).

    Read from the raw file, not through SQLite: it is asked exactly when SQLite cannot be trusted.
    """
    try:
        with open(path, "rb") as handle:
            header = handle.read(100)
    except OSError:
        return False
    return (
        len(header) == 100
        and header.startswith(_SQLITE_MAGIC)
        and int.from_bytes(header[68:72], "big") == APPLICATION_ID
    )


def discard_database_files(path: str) -> None:
    """Delete an index file and its sidecars (only ever called for a file :func:`file_is_ours` accepts)."""
    for suffix in ("", "-wal", "-shm", "-journal"):
        try:
            os.unlink(path + suffix)
        except FileNotFoundError:
            pass


def _failed(detail: str) -> SessionQueryError:
    return SessionQueryError(f"session-search SQLite index failed to open: {detail}", "SESSION_QUERY_INDEX_FAILED")


def open_search_database(path: str, journal_mode: str) -> sqlite3.Connection:
    """Open, validate and initialise the index at ``path`` (a dedicated file, or ``:memory:``).

    Returns a connection in autocommit mode (``isolation_level=None``: transactions are explicit)
    usable from any thread (the caller serializes). Raises ``SESSION_QUERY_INDEX_FAILED`` with the cause
    chained; nothing is left open on failure.
    """
    if journal_mode not in JOURNAL_MODES:
        raise _failed(f"journal mode {journal_mode!r} is not supported")
    try:
        if path == MEMORY_PATH:
            return _connect_and_initialise(MEMORY_PATH, journal_mode, memory=True)
        actual = os.path.abspath(path)
        _create_missing(actual)
        try:
            return _connect_and_initialise(actual, journal_mode, memory=False)
        except sqlite3.DatabaseError as err:
            if not is_corruption(err):
                raise
            if not file_is_ours(actual):
                raise IndexRefusedError(
                    f'session-search database at "{actual}" is damaged and does not carry the session-search '
                    "application id; refusing to replace it (delete it to rebuild the index)"
                ) from err
            logger.warning('session-search index "%s" is damaged (%s); rebuilding it from the logs', actual, err)
            discard_database_files(actual)
            _create_missing(actual)
            return _connect_and_initialise(actual, journal_mode, memory=False)
    except SessionQueryError:
        raise
    except IndexRefusedError as err:
        raise _failed(str(err)) from err
    except Exception as err:
        raise _failed(str(err) or describe_error(err)) from err


def _create_missing(path: str) -> None:
    """Rule 1: owner-only parents and file for a missing path; an existing file keeps its mode."""
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    os.close(fd)


def _connect_and_initialise(path: str, journal_mode: str, *, memory: bool) -> sqlite3.Connection:
    if memory:
        conn = sqlite3.connect(MEMORY_PATH, isolation_level=None, check_same_thread=False)
    else:
        # mode=rw: the file was created above; never let SQLite create one with its own default mode.
        uri = "file:" + urllib.parse.quote(path) + "?mode=rw"
        conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_S)
    try:
        # The file is data from disk: a crafted schema must not run functions through triggers or views.
        conn.execute("PRAGMA trusted_schema = OFF")
        _validate(conn, path)
        # Mutating pragmas only after refusing foreign or canonical files. The mode is a closed set.
        conn.execute(f"PRAGMA journal_mode = {journal_mode.upper()}")
        _ensure_persistent_schema(conn)
        _ensure_temporary_schema(conn)
    except BaseException:
        conn.close()
        raise
    return conn


def _user_objects(conn: sqlite3.Connection) -> tuple[list[str], list[str]]:
    """User tables, and every other user schema object (views, triggers) by name."""
    rows = conn.execute("SELECT type, name FROM sqlite_master WHERE name NOT GLOB 'sqlite_*' ORDER BY name").fetchall()
    tables = [str(name) for kind, name in rows if kind == "table"]
    others = [str(name) for kind, name in rows if kind in ("view", "trigger")]
    return tables, others


def _validate(conn: sqlite3.Connection, path: str) -> None:
    """Rules 2–4: refuse what is not ours; reset an incompatible derived layout in place."""
    application_id = int(conn.execute("PRAGMA application_id").fetchone()[0])
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    tables, others = _user_objects(conn)
    if application_id not in (0, APPLICATION_ID):
        raise IndexRefusedError(f'session-search database at "{path}" belongs to another application')
    if application_id == 0 and tables:
        raise IndexRefusedError(f'session-search database at "{path}" is not an empty or recognized derived index')
    if application_id != APPLICATION_ID:
        return
    unknown = [name for name in tables if name not in DERIVED_USER_TABLES] + others
    if unknown:
        raise IndexRefusedError(
            f'session-search database at "{path}" has unrecognized user tables: {", ".join(unknown)}'
        )
    # A file without the companion (the original's, or an earlier layout of ours) is rebuilt: CJK
    # searches would otherwise silently miss its documents.
    complete = not tables or ("persisted_grams" in tables and _SIDE_TABLES.issubset(tables))
    if version != SCHEMA_VERSION or not complete:
        _drop_user_tables(conn, tables)


def _drop_user_tables(conn: sqlite3.Connection, tables: list[str]) -> None:
    conn.execute("BEGIN IMMEDIATE")
    try:
        # Name order drops each FTS5 table before its shadow tables (which it drops with it).
        for name in sorted(tables):
            conn.execute(f"DROP TABLE IF EXISTS {_quote(name)}")
        conn.execute("PRAGMA user_version = 0")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _ensure_persistent_schema(conn: sqlite3.Connection) -> None:
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        for statement in PERSISTENT_SCHEMA:
            conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _ensure_temporary_schema(conn: sqlite3.Connection) -> None:
    for statement in TEMPORARY_SCHEMA:
        conn.execute(statement)


def reset_search_database(conn: sqlite3.Connection) -> None:
    """Drop every derived row (persistent and TEMP) and recreate the empty schema (a forced rebuild)."""
    tables, _ = _user_objects(conn)
    _drop_user_tables(conn, tables)
    for name in (
        "live_docs",
        "live_sessions",
        "live_grams",
        "live_doc_meta",
        "live_terms",
        "live_gram_folded",
        "term_stage_terms",
        "term_stage",
    ):
        conn.execute(f"DROP TABLE IF EXISTS temp.{_quote(name)}")
    _ensure_persistent_schema(conn)
    _ensure_temporary_schema(conn)


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
