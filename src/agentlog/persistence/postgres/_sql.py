"""Every statement the PostgreSQL backend runs, composed once per schema name.

The schema name is the only thing interpolated, always as a quoted identifier (``psycopg.sql``); values
are always bound as parameters. The DDL is versioned by ``SCHEMA_VERSION`` in ``agentlog_state``; the
``EXPECTED_COLUMNS`` table is what an existing schema must hold exactly to be adopted.
"""

from __future__ import annotations

from typing import Final

from psycopg import sql

SCHEMA_VERSION: Final = 2
"""The version a new store is created with. Version 1 (earlier releases) had the event rows reference
their session row (a foreign key: a lookup and a row lock per inserted row, a sixth of a step's commit);
version 2 has no such key, and a delete takes the session row first so that no append can slip rows in
after it. This build uses either as it is (``READABLE_SCHEMA_VERSIONS``) and never converts one."""
READABLE_SCHEMA_VERSIONS: Final = (1, 2)
APPLICATION: Final = "agentlog"
STATE_TABLE: Final = "agentlog_state"
NOTIFY_CHANNEL: Final = "agentlog_events"

# The tables and columns (name, data type) of schema versions 1 and 2, in ordinal order.
EXPECTED_COLUMNS: Final[dict[str, tuple[tuple[str, str], ...]]] = {
    "agentlog_state": (
        ("singleton", "integer"),
        ("application", "text"),
        ("schema_version", "integer"),
        ("store_id", "text"),
    ),
    "events": (
        ("session_id", "text"),
        ("seq", "bigint"),
        ("body", "bytea"),
    ),
    "sessions": (
        ("id", "text"),
        ("header", "bytea"),
        ("version", "bigint"),
        ("created_at", "bigint"),
        ("cwd", "text"),
        ("parent_session", "text"),
        ("seed_length", "bigint"),
        ("origin", "text"),
        ("delegation_depth", "bigint"),
        ("agent_preset", "text"),
        ("incarnation", "text"),
        ("revision", "bigint"),
        ("next_seq", "bigint"),
    ),
}

_DDL: Final = (
    "CREATE SCHEMA IF NOT EXISTS {schema}",
    """CREATE TABLE {schema}.agentlog_state (
        singleton      integer PRIMARY KEY CHECK (singleton = 1),
        application    text NOT NULL,
        schema_version integer NOT NULL,
        store_id       text NOT NULL
    )""",
    """CREATE TABLE {schema}.sessions (
        id               text COLLATE "C" PRIMARY KEY,
        header           bytea NOT NULL,
        version          bigint,
        created_at       bigint,
        cwd              text,
        parent_session   text,
        seed_length      bigint,
        origin           text,
        delegation_depth bigint,
        agent_preset     text,
        incarnation      text NOT NULL,
        revision         bigint NOT NULL,
        next_seq         bigint NOT NULL CHECK (next_seq >= 0)
    )""",
    """CREATE TABLE {schema}.events (
        session_id text COLLATE "C" NOT NULL,
        seq        bigint NOT NULL CHECK (seq >= 0),
        body       bytea NOT NULL,
        PRIMARY KEY (session_id, seq)
    )""",
    "CREATE INDEX sessions_parent_idx ON {schema}.sessions (parent_session) WHERE parent_session IS NOT NULL",
)

_TAIL: Final = (
    "(SELECT encode(substring(sha256(e.body) FROM 1 FOR 12), 'hex') FROM {schema}.events AS e "
    "WHERE e.session_id = s.id ORDER BY e.seq DESC LIMIT 1)"
)
"""The digest of a session's newest event row (NULL without rows), which every revision carries: a
database restored from a backup repeats the store id, the incarnation and the counter, never the row
written after the restore (see ``PostgresBackend._revision``)."""

_STATEMENTS: Final = {
    "insert_state": "INSERT INTO {schema}.agentlog_state (singleton, application, schema_version, store_id) "
    "VALUES (1, %s, %s, %s)",
    "select_state": "SELECT application, schema_version, store_id FROM {schema}.agentlog_state WHERE singleton = 1",
    # A delete's first statement: an append waits for the delete (or finds the session gone after it).
    "lock_session_for_delete": "SELECT 1 FROM {schema}.sessions WHERE id = %s FOR UPDATE",
    "lock_session": "SELECT header, incarnation, revision, next_seq FROM {schema}.sessions WHERE id = %s "
    "FOR NO KEY UPDATE",
    "select_session": "SELECT s.header, s.incarnation, s.revision, s.next_seq, " + _TAIL + " FROM {schema}.sessions "
    "AS s WHERE s.id = %s",
    "select_revision": "SELECT s.incarnation, s.revision, " + _TAIL + " FROM {schema}.sessions AS s WHERE s.id = %s",
    "insert_session": "INSERT INTO {schema}.sessions (id, header, version, created_at, cwd, parent_session, "
    "seed_length, origin, delegation_depth, agent_preset, incarnation, revision, next_seq) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, 0, 0) ON CONFLICT (id) DO NOTHING",
    # One round trip: advance the session and notify listeners (inside the append transaction).
    "advance_session": "WITH advanced AS (UPDATE {schema}.sessions SET next_seq = %s, revision = revision + 1 "
    "WHERE id = %s RETURNING id) SELECT pg_notify('agentlog_events', id) FROM advanced",
    "copy_events": "COPY {schema}.events (session_id, seq, body) FROM STDIN (FORMAT BINARY)",
    "select_events": "SELECT seq, body FROM {schema}.events WHERE session_id = %s ORDER BY seq",
    # From the row holding from_seq: the last row starting at or before it (it may be a packed run).
    "select_events_from": "SELECT seq, body FROM {schema}.events WHERE session_id = %s AND seq >= "
    "COALESCE((SELECT max(seq) FROM {schema}.events WHERE session_id = %s AND seq <= %s), 0) ORDER BY seq",
    # One autocommit statement: advance only from the expected next seq, insert the rows, notify.
    "append_fast": "WITH advanced AS (UPDATE {schema}.sessions SET next_seq = %s, revision = revision + 1 "
    "WHERE id = %s AND next_seq = %s RETURNING id), inserted AS (INSERT INTO {schema}.events (session_id, seq, "
    "body) SELECT advanced.id, rows.seq, rows.body FROM advanced, unnest(%b::bigint[], %b::bytea[]) AS "
    "rows(seq, body)) SELECT pg_notify('agentlog_events', id) FROM advanced",
    # One page of a streamed read: keyed by seq, so a page costs its rows whatever the log's length.
    "select_events_page": "SELECT seq, body FROM {schema}.events WHERE session_id = %s AND seq >= %s ORDER BY seq "
    "LIMIT %s",
    "select_event_span": "SELECT seq, body FROM {schema}.events WHERE session_id = %s AND seq >= %s AND seq < %s "
    "ORDER BY seq",
    "select_sessions": "SELECT s.id, s.header, s.incarnation, s.revision, " + _TAIL + " FROM {schema}.sessions AS s "
    "ORDER BY s.id",
    "delete_events": "DELETE FROM {schema}.events WHERE session_id = %s",
    # The session row goes last and notifies in the same statement: a tail waiting on the session wakes
    # up, reads again and finds it gone.
    "delete_session": "WITH deleted AS (DELETE FROM {schema}.sessions WHERE id = %s RETURNING id) "
    "SELECT pg_notify('agentlog_events', id) FROM deleted",
    "select_revisions": "SELECT s.id, s.incarnation, s.revision, " + _TAIL + " FROM {schema}.sessions AS s "
    "ORDER BY s.id",
    "select_revisions_of": "SELECT s.id, s.incarnation, s.revision, " + _TAIL + " FROM {schema}.sessions AS s "
    "WHERE s.id = ANY(%s)",
}

NAMESPACE_TABLES: Final = "SELECT c.relname FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind IN ('r', 'p', 'v', 'm', 'f') ORDER BY c.relname"  # noqa: E501
COLUMNS: Final = (
    "SELECT table_name, column_name, data_type FROM information_schema.columns "
    "WHERE table_schema = %s ORDER BY table_name, ordinal_position"
)
INIT_LOCK: Final = "SELECT pg_advisory_xact_lock(%s)"
TRY_LOCK: Final = "SELECT pg_try_advisory_lock(%s)"
UNLOCK: Final = "SELECT pg_advisory_unlock(%s)"
# Ask the server to end one backend, if it still holds the advisory lock of a bigint key (whose high and
# low 32 bits pg_locks shows as classid and objid, objsubid 1): this writer's own abandoned connection.
TERMINATE_HOLDER: Final = (
    "SELECT pg_terminate_backend(l.pid) FROM pg_catalog.pg_locks l JOIN pg_catalog.pg_database d "
    "ON d.oid = l.database WHERE l.locktype = 'advisory' AND l.granted AND l.pid = %s "
    "AND d.datname = current_database() AND l.classid = %s::bigint::oid AND l.objid = %s::bigint::oid "
    "AND l.objsubid = 1"
)
LEASE_HOLDER: Final = (
    "SELECT a.pid, a.application_name, host(a.client_addr), a.client_hostname,"
    " (extract(epoch FROM a.backend_start) * 1000)::bigint"
    " FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
    " WHERE l.locktype = 'advisory' AND l.granted AND l.database = (SELECT oid FROM pg_database"
    " WHERE datname = current_database()) AND l.classid::bigint = %s AND l.objid::bigint = %s"
    " AND l.objsubid = 1 LIMIT 1"
)
"""The holder of a session's advisory lease (a bigint key is ``classid`` high and ``objid`` low 32 bits)."""
SET_TIMEOUT: Final = "SELECT set_config('statement_timeout', %s, false)"
READ_SNAPSHOT: Final = "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"


class Statements:
    """The statements of one schema name, composed with the name as a quoted identifier."""

    def __init__(self, schema: str) -> None:
        ident = sql.Identifier(schema)
        self.ddl: tuple[sql.Composed, ...] = tuple(sql.SQL(text).format(schema=ident) for text in _DDL)
        # Composed once into text: psycopg caches a text query's conversion, but renders a Composed
        # again on every execution (a tenth of a per-step append's own time).
        self._by_name = {name: sql.SQL(text).format(schema=ident).as_string(None) for name, text in _STATEMENTS.items()}

    def __getitem__(self, name: str) -> str:
        return self._by_name[name]
