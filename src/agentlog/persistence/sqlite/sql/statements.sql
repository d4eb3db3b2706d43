-- Every statement the SQLite session backend runs (spec §5.3-§5.7). Values are bound as
-- parameters; nothing here is assembled or interpolated at run time. Each statement starts with a
-- "-- name: <key>" line; sqlite.py loads them by key.

-- name: trusted_schema_off
PRAGMA trusted_schema = OFF;

-- name: trusted_schema
PRAGMA trusted_schema;

-- name: mmap_size_off
PRAGMA mmap_size = 0;

-- name: mmap_size
PRAGMA mmap_size;

-- name: foreign_keys_on
PRAGMA foreign_keys = ON;

-- name: synchronous_full
PRAGMA synchronous = FULL;

-- name: synchronous
PRAGMA synchronous;

-- name: journal_mode_wal
PRAGMA journal_mode = WAL;

-- name: journal_mode_delete
PRAGMA journal_mode = DELETE;

-- name: journal_mode_truncate
PRAGMA journal_mode = TRUNCATE;

-- name: journal_mode_persist
PRAGMA journal_mode = PERSIST;

-- name: user_version
PRAGMA user_version;

-- name: application_id
PRAGMA application_id;

-- name: schema_version
PRAGMA schema_version;

-- name: set_application_id
PRAGMA application_id = 1146308688;

-- name: set_user_version
PRAGMA user_version = 17;

-- name: count_user_objects
SELECT COUNT(*) AS count FROM sqlite_schema WHERE name NOT GLOB 'sqlite_*';

-- name: schema_objects
SELECT type, name, tbl_name, sql FROM sqlite_schema WHERE name NOT GLOB 'sqlite_*' ORDER BY type, name;

-- name: begin_immediate
BEGIN IMMEDIATE;

-- name: begin_deferred
BEGIN;

-- name: commit
COMMIT;

-- name: rollback
ROLLBACK;

-- name: insert_store_identity
INSERT INTO persistence_state (singleton, store_id) VALUES (1, ?);

-- name: select_store_identity
SELECT store_id FROM persistence_state WHERE singleton = 1;

-- name: select_session_with_tail
-- A session row with its tail row (the event row of the highest seq; NULLs when it has none), in one
-- statement so the two are one snapshot. The revision carries a digest of the tail row: a database
-- restored from a backup repeats the incarnation and the counter, never the newest row written after
-- it (see SqliteBackend._revision). The listing statements below do the same for every session.
SELECT s.id, s.version, s.created_at, s.cwd, s.parent_session, s.seed_length, s.origin, s.delegation_depth,
       s.agent_preset, s.incarnation, s.revision,
       e.seq, e.type, e.time, e.data, e.source_event_seqs, e.surface_op, e.ignorable
FROM sessions AS s
LEFT JOIN events AS e
  ON e.session_id = s.id AND e.seq = (SELECT MAX(t.seq) FROM events AS t WHERE t.session_id = s.id)
WHERE s.id = ?;

-- name: select_sessions_with_tail
SELECT s.id, s.version, s.created_at, s.cwd, s.parent_session, s.seed_length, s.origin, s.delegation_depth,
       s.agent_preset, s.incarnation, s.revision,
       e.seq, e.type, e.time, e.data, e.source_event_seqs, e.surface_op, e.ignorable
FROM sessions AS s
LEFT JOIN events AS e
  ON e.session_id = s.id AND e.seq = (SELECT MAX(t.seq) FROM events AS t WHERE t.session_id = s.id);

-- name: select_session_revisions_with_tail
SELECT s.id, s.incarnation, s.revision,
       e.seq, e.type, e.time, e.data, e.source_event_seqs, e.surface_op, e.ignorable
FROM sessions AS s
LEFT JOIN events AS e
  ON e.session_id = s.id AND e.seq = (SELECT MAX(t.seq) FROM events AS t WHERE t.session_id = s.id);

-- name: upsert_session
INSERT INTO sessions (id, version, created_at, cwd, parent_session, seed_length, origin, delegation_depth,
                      agent_preset, incarnation, revision)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0)
ON CONFLICT (id) DO UPDATE SET
  version = excluded.version,
  created_at = excluded.created_at,
  cwd = excluded.cwd,
  parent_session = excluded.parent_session,
  seed_length = excluded.seed_length,
  origin = excluded.origin,
  delegation_depth = excluded.delegation_depth,
  agent_preset = excluded.agent_preset;

-- name: bump_revision
UPDATE sessions SET revision = revision + 1 WHERE id = ?;

-- name: select_rows
SELECT seq, type, time, data, source_event_seqs, surface_op, ignorable
FROM events WHERE session_id = ? ORDER BY seq;

-- name: select_rows_from
SELECT seq, type, time, data, source_event_seqs, surface_op, ignorable
FROM events WHERE session_id = ? AND seq >= ? ORDER BY seq;

-- name: select_rows_page
SELECT seq, type, time, data, source_event_seqs, surface_op, ignorable
FROM events WHERE session_id = ? AND seq >= ? ORDER BY seq LIMIT ?;

-- name: select_tail_rows
SELECT seq, type, time, data, source_event_seqs, surface_op, ignorable
FROM events WHERE session_id = ? ORDER BY seq DESC LIMIT 2;

-- name: select_packed_predecessors
SELECT seq, type, time, data, source_event_seqs, surface_op, ignorable
FROM events
WHERE session_id = ? AND seq >= ? AND seq < ? AND ignorable = 0
  AND type IN ('text-chunks', 'reasoning-chunks', 'tool-call-chunks')
ORDER BY seq;

-- name: insert_event
INSERT INTO events (session_id, seq, type, time, data, source_event_seqs, surface_op, ignorable)
VALUES (?, ?, ?, ?, ?, ?, ?, ?);

-- name: delete_events_from
DELETE FROM events WHERE session_id = ? AND seq >= ?;

-- name: attach_staged
ATTACH DATABASE ? AS agentlog_staged;

-- name: detach_staged
DETACH DATABASE agentlog_staged;

-- name: copy_staged_session
INSERT INTO main.sessions SELECT * FROM agentlog_staged.sessions WHERE id = ?;

-- name: copy_staged_events
INSERT INTO main.events SELECT * FROM agentlog_staged.events WHERE session_id = ? ORDER BY seq;

-- name: delete_session_events
DELETE FROM events WHERE session_id = ?;

-- name: delete_session
DELETE FROM sessions WHERE id = ?;
