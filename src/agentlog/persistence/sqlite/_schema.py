"""SQLite store: the schema (statements, the DDL's reference objects), opening a database, a header's columns.

The statements of ``sql/*.sql`` loaded once, the schema objects a fresh database gets (what every
open and every mutation compares against), the journal-mode retry, ``openDatabase`` (pragmas, the
ownership decisions of spec §5.3, initialisation) and its read-only twin, and the ``sessions`` columns
of a session header.
"""

from __future__ import annotations

import re
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from importlib import resources
from typing import Any, Final

from ...errors import PersistenceError, SessionFormatUnsupportedError
from ...kernel.jsonvalue import MAX_SAFE_INTEGER

SCHEMA_VERSION: Final = 17
APPLICATION_ID: Final = 0x44534850  # "DSHP" = 1146308688, shared with the original's databases
DEFAULT_BUSY_TIMEOUT_MS: Final = 5000
MAX_BUSY_TIMEOUT_MS: Final = 2_147_483_647
JOURNAL_BUSY_RETRY_INTERVAL_MS: Final = 10
JOURNAL_MODES: Final = ("wal", "delete", "truncate", "persist")
MEMORY: Final = ":memory:"
SQLITE_BUSY: Final = 5

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
