"""The PostgreSQL backend's own behaviour, against the real server (beside the shared contract).

Optimistic concurrency under interleavings of two backends (two hosts), the advisory-lock writer lease
across processes (takeover after ``kill -9``), schema refusal, a bad DSN, a statement timeout,
``pg_terminate_backend`` in the middle of a flush, a stopped server backend (SIGSTOP: the client-side
deadline, and a retry whose earlier attempt's outcome was unknown), change notification and cursor paging.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import conninfo, pq, sql

import agentlog as al
from _postgres import drop_schema, keepalive_for, keepalive_of
from agentlog.errors import (
    AgentlogError,
    DatabaseSchemaError,
    DatabaseUnavailableError,
    InvalidSessionIdError,
    PersistenceError,
    SessionConflictError,
    SessionLockedError,
    SessionPersistenceCorruptionError,
)
from agentlog.kernel.jsoncodec import dumps, loads
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.postgres import PostgresBackend
from agentlog.persistence.postgres import backend as backend_module
from agentlog.testing.builders import (
    assistant_event,
    chunk_event,
    closed_turn,
    header,
    step_end,
    step_start,
    turn_end,
    turn_start,
    user_event,
)

Factory = Callable[..., PostgresBackend]


def ev(seq: int, note: str = "") -> dict[str, Any]:
    return {"type": "plugin/note", "seq": seq, "time": 1000 + seq, "data": {"note": note}, "ignorable": True}


def stored_rows(dsn: str, schema: str, session_id: str) -> list[tuple[int, bytes]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        statement = sql.SQL("SELECT seq, body FROM {}.events WHERE session_id = %s ORDER BY seq").format(
            sql.Identifier(schema)
        )
        return [(seq, bytes(body)) for seq, body in conn.execute(statement, (session_id,))]


def wait_until(predicate: Callable[[], bool], what: str, limit_s: float = 300.0) -> None:
    """Poll ``predicate`` until it holds (a liveness bound, not a timing assertion)."""
    deadline = time.monotonic() + limit_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.01)


class _Outcome(list[BaseException | None]):
    """What a background write ended with (``None``: it returned), and the pid of its blocked backend."""

    blocked_pid: int = 0


def blocked_write(dsn: str, write: Callable[[], object]) -> tuple[threading.Thread, _Outcome]:
    """Run ``write`` in a thread and return once exactly one agentlog backend waits on a row lock (a
    blocker holds the row the write needs); the thread's outcome is recorded when it ends."""
    outcome = _Outcome()

    def run() -> None:
        try:
            write()
            outcome.append(None)
        except BaseException as err:
            outcome.append(err)

    thread = threading.Thread(target=run)
    thread.start()
    query = (
        "SELECT pid FROM pg_stat_activity WHERE application_name = 'agentlog' AND wait_event_type = 'Lock' "
        "AND datname = current_database()"
    )
    with psycopg.connect(dsn, autocommit=True) as admin:

        def blocked() -> bool:
            pids = [row[0] for row in admin.execute(query)]
            if len(pids) == 1:
                outcome.blocked_pid = pids[0]
            return len(pids) == 1

        wait_until(blocked, "the writer's insert to block")
    return thread, outcome


# --- optimistic concurrency ------------------------------------------------------------------------------


def test_a_stale_writer_gets_session_conflict_naming_the_seqs_and_nothing_of_its_batch_is_stored(
    pg_backends: Factory, pg_dsn: str, pg_schema: str
) -> None:
    host_a, host_b = pg_backends(), pg_backends()
    meta = header("s")
    host_a.append_batch(meta, [ev(0), ev(1)], False)
    host_b.append_batch(meta, [ev(2, "b")], True)  # B is current: it read next seq 2
    with pytest.raises(SessionConflictError) as caught:
        host_a.append_batch(meta, [ev(2, "a"), ev(3, "a")], True)  # A still believes next seq is 2
    assert caught.value.code == "SESSION_CONFLICT"
    assert (caught.value.expected, caught.value.found) == (2, 3)
    assert "seq 2" in str(caught.value) and "3" in str(caught.value)
    rows = stored_rows(pg_dsn, pg_schema, "s")
    assert [seq for seq, _ in rows] == [0, 1, 2]
    assert rows[2][1] == dumps(ev(2, "b"))
    # A gap is refused the same way (the batch must start exactly at the stored next seq).
    with pytest.raises(SessionConflictError) as gap:
        host_a.append_batch(meta, [ev(5)], True)
    assert (gap.value.expected, gap.value.found) == (5, 3)
    assert host_a.read_revision("s") == host_b.read_revision("s")


def test_a_second_materialization_of_one_id_is_refused_and_stores_nothing(
    pg_backends: Factory, pg_dsn: str, pg_schema: str
) -> None:
    host_a, host_b = pg_backends(), pg_backends()
    host_a.append_batch(header("s", cwd="/a"), [ev(0, "a")], False)
    with pytest.raises(PersistenceError) as caught:
        host_b.append_batch(header("s", cwd="/b"), [ev(0, "b")], False)
    assert "already exists" in str(caught.value)
    assert stored_rows(pg_dsn, pg_schema, "s") == [(0, dumps(ev(0, "a")))]
    stored = host_b.load_stored("s")
    assert stored is not None and stored.meta["cwd"] == "/a"


def test_a_replayed_batch_whose_acknowledgement_was_lost_succeeds_without_a_duplicate(
    pg_backends: Factory, pg_dsn: str, pg_schema: str
) -> None:
    backend = pg_backends()
    meta = header("s")
    backend.append_batch(meta, [ev(0), ev(1)], False)
    backend.append_batch(meta, [ev(0), ev(1)], False)  # the same first batch again: already committed
    backend.append_batch(meta, [ev(2)], True)
    backend.append_batch(meta, [ev(2)], True)
    assert [seq for seq, _ in stored_rows(pg_dsn, pg_schema, "s")] == [0, 1, 2]
    with pytest.raises(SessionConflictError):
        backend.append_batch(meta, [ev(2, "different")], True)


def test_racing_writers_never_lose_duplicate_or_reorder_a_seq(
    pg_backends: Factory, pg_dsn: str, pg_schema: str
) -> None:
    """Four threads over two backends each commit 15 events by read-next-seq-then-append, retrying on conflict."""
    hosts = [pg_backends(), pg_backends()]
    meta = header("race")
    hosts[0].append_batch(meta, [ev(0, "seed")], False)
    conflicts = [0]
    failures: list[BaseException] = []

    def writer(name: str, backend: PostgresBackend) -> None:
        try:
            for k in range(15):
                while True:
                    stored = backend.load_stored_from("race", 0)
                    assert stored is not None
                    next_seq = len(stored.events)
                    try:
                        backend.append_batch(meta, [ev(next_seq, f"{name}-{k}")], True)
                        break
                    except SessionConflictError as err:
                        assert err.expected == next_seq and err.found is not None and err.found > next_seq
                        conflicts[0] += 1
        except BaseException as err:  # reported by the main thread
            failures.append(err)

    threads = [threading.Thread(target=writer, args=(f"w{i}", hosts[i % 2])) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures, failures
    rows = stored_rows(pg_dsn, pg_schema, "race")
    assert [seq for seq, _ in rows] == list(range(61))
    notes = [loads(body)["data"]["note"] for _, body in rows[1:]]
    for i in range(4):
        assert [note for note in notes if note.startswith(f"w{i}-")] == [f"w{i}-{k}" for k in range(15)]
    assert sorted(notes) == sorted(f"w{i}-{k}" for i in range(4) for k in range(15))
    loaded = hosts[1].load_stored("race")
    assert loaded is not None and [event["seq"] for event in loaded.events] == list(range(61))


# --- the writer lease across processes -------------------------------------------------------------------

HOLDER = textwrap.dedent(
    """
    import sys
    import agentlog as al
    from agentlog.persistence.coordinator import PersistenceCoordinator
    from agentlog.persistence.postgres import PostgresBackend

    dsn, schema = sys.argv[1], sys.argv[2]
    store = al.SessionStore()
    coordinator = PersistenceCoordinator(store, PostgresBackend(dsn, schema=schema))
    session = store.create("shared", meta={"cwd": "/work"})
    session.append("turn/start", {"turn": 1})
    session.append("user/message", al.user_message("hello", id="u1"), {"surfaceOp": "append"})
    store.flush(session)
    print(session.seq - 1, flush=True)
    sys.stdin.readline()  # hold the session live (and its lease) until killed
    """
)


def test_the_lease_refuses_a_second_process_at_once_and_passes_on_after_kill_9(pg_dsn: str, pg_schema: str) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, pg_dsn, pg_schema], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None
        acknowledged = int(holder.stdout.readline())
        assert acknowledged == 1
        backend = PostgresBackend(pg_dsn, schema=pg_schema)
        store = al.SessionStore()
        coordinator = PersistenceCoordinator(store, backend)
        try:
            with pytest.raises(SessionLockedError) as caught:
                backend.lock_writer({"id": "shared"})
            assert caught.value.code == "SESSION_LOCKED"
            with pytest.raises(SessionLockedError):
                coordinator.resume("shared")
            # Readers never take the lease: a load of the live session's stored prefix works meanwhile.
            assert [event["seq"] for event in backend.load_stored("shared").events] == [0, 1]  # type: ignore[union-attr]

            os.kill(holder.pid, signal.SIGKILL)
            holder.wait()

            def taken() -> bool:
                try:
                    backend.lock_writer({"id": "shared"}).release()
                except SessionLockedError:
                    return False
                return True

            wait_until(taken, "the server to end the killed holder's lease")
            session = coordinator.resume("shared")  # the takeover repairs the interrupted turn
            events = [al.thaw(event) for event in session.events]
            assert [event["type"] for event in events[:2]] == ["turn/start", "user/message"]
            assert events[2]["type"] == "turn/end" and events[2]["data"]["reason"] == {"kind": "interrupted"}
            store.dispose(session)
        finally:
            coordinator.close()
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


def test_session_locked_names_the_lease_holder_pid_host_and_since_when(pg_dsn: str, pg_schema: str) -> None:
    started_ms = time.time_ns() // 1_000_000
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, pg_dsn, pg_schema], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and int(holder.stdout.readline()) == 1
        locked_ms = time.time_ns() // 1_000_000
        backend = PostgresBackend(pg_dsn, schema=pg_schema)
        try:
            with pytest.raises(SessionLockedError) as caught:
                backend.lock_writer({"id": "shared"})
        finally:
            backend.close()
        found = caught.value.holder
        assert found is not None
        # The server's view: the lease connection's backend, client host and start (not the client's pid).
        with psycopg.connect(pg_dsn, autocommit=True) as admin:
            row = admin.execute(
                "SELECT a.pid, coalesce(a.client_hostname, host(a.client_addr)), a.application_name FROM pg_locks l "
                "JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.granted AND "
                "l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            ).fetchone()
        assert row is not None
        backend_pid, host, application = row
        assert found["backendPid"] == backend_pid and found["pid"] is None
        assert found["application"] == application == "agentlog"
        if host is not None:
            assert found["hostname"] == host
        assert started_ms - 1000 <= found["acquiredAt"] <= locked_ms + 1000  # the lease connection's start
        message = str(caught.value)
        assert f"the client of PostgreSQL backend pid {backend_pid} on host " in message
        assert ' as "agentlog" since ' in message and "wait=True" in message
    finally:
        if holder.poll() is None:
            holder.kill()
        holder.wait()


def test_release_ends_the_lease_and_another_backend_takes_it(pg_backends: Factory) -> None:
    first, second = pg_backends(), pg_backends()
    lease = first.lock_writer({"id": "s"})
    with pytest.raises(SessionLockedError):
        second.lock_writer({"id": "s"})
    with pytest.raises(SessionLockedError):
        first.lock_writer({"id": "s"})  # a second holder in the same process is refused too
    other = second.lock_writer({"id": "another"})  # leases are per session
    lease.release()
    lease.release()  # idempotent
    second.lock_writer({"id": "s"}).release()
    other.release()


def test_try_lock_writer_is_one_attempt_that_never_waits_for_the_holder(pg_backends: Factory, pg_dsn: str) -> None:
    """The primitive a caller that waits for the lease loops on: ``None`` while held, the lease once free."""
    first, second = pg_backends(), pg_backends()
    lease = first.try_lock_writer({"id": "s"})
    assert lease is not None
    assert second.try_lock_writer({"id": "s"}) is None
    assert _advisory_lock_holders(pg_dsn) == 1  # the refused attempt holds nothing
    lease.release()
    taken = second.try_lock_writer({"id": "s"})
    assert taken is not None
    with pytest.raises(SessionLockedError):
        first.lock_writer({"id": "s"})
    taken.release()


def _advisory_lock_holders(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as admin:
        row = admin.execute(
            "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database "
            "WHERE l.locktype = 'advisory' AND l.granted AND d.datname = current_database()"
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_a_lease_whose_connection_is_terminated_ends(pg_backends: Factory, pg_dsn: str) -> None:
    first, second = pg_backends(), pg_backends()
    lease = first.lock_writer({"id": "s"})
    assert lease.connection is not None
    pid = lease.connection.info.backend_pid
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))

    def taken() -> bool:
        try:
            second.lock_writer({"id": "s"}).release()
        except SessionLockedError:
            return False
        return True

    wait_until(taken, "the terminated lease to end")
    lease.release()  # releasing a dead lease is harmless


def test_a_write_in_flight_when_its_lease_ends_never_commits_after_another_writer_takes_the_lease(
    pg_backends: Factory, pg_dsn: str, pg_schema: str, row_blocker: Callable[[str], psycopg.Connection[Any]]
) -> None:
    """The lease fences its writer: the writes of a leased session run on the lease's own connection.

    A crashed host's in-flight COMMIT is still processed by its server backend after the host is gone;
    were the write on another connection than the lock, a new writer could take the lease, read, and
    then see the dead writer's batch land under it. Here the old writer's insert is blocked, its lease's
    backend is terminated, a second host takes the lease, and only then is the blocker released.
    """
    host_a, host_b = pg_backends(), pg_backends()
    meta = header("s")
    host_a.append_batch(meta, [ev(0)], False)
    lease = host_a.lock_writer(meta)
    assert lease.connection is not None
    lease_pid = lease.connection.info.backend_pid
    blocker = row_blocker(f"INSERT INTO {pg_schema}.events (session_id, seq, body) VALUES ('s', 3, 'b'::bytea)")
    thread, outcome = blocked_write(pg_dsn, lambda: host_a.append_batch(meta, [ev(1), ev(2), ev(3)], True))
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (lease_pid,))

    def taken() -> bool:
        try:
            host_b.lock_writer(meta).release()
        except SessionLockedError:
            return False
        return True

    wait_until(taken, "host B to take the ended lease")
    new_lease = host_b.lock_writer(meta)
    try:
        blocker.rollback()
        thread.join()
        assert len(outcome) == 1 and isinstance(outcome[0], DatabaseUnavailableError), outcome
        assert [seq for seq, _ in stored_rows(pg_dsn, pg_schema, "s")] == [0]  # nothing landed under B's lease
        with pytest.raises(SessionLockedError):
            host_a.append_batch(meta, [ev(1)], True)  # A's retry cannot write while B holds the lease
        host_b.append_batch(meta, [ev(1, "b")], True)
    finally:
        new_lease.release()
    with pytest.raises(SessionConflictError):
        host_a.append_batch(meta, [ev(1)], True)  # A takes its lease back, and optimistic concurrency refuses it
    lease.release()
    assert [body for _, body in stored_rows(pg_dsn, pg_schema, "s")] == [dumps(ev(0)), dumps(ev(1, "b"))]


# --- schema ----------------------------------------------------------------------------------------------


def _admin(dsn: str, *statements: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement.encode())


def test_a_schema_holding_foreign_tables_is_refused_untouched(pg_dsn: str, pg_schema: str) -> None:
    _admin(pg_dsn, f"CREATE SCHEMA {pg_schema}", f"CREATE TABLE {pg_schema}.users (id int)")
    backend = PostgresBackend(pg_dsn, schema=pg_schema)
    try:
        with pytest.raises(DatabaseSchemaError) as caught:
            backend.list_sessions()
        assert caught.value.code == "DATABASE_SCHEMA"
        assert "did not create" in str(caught.value) and "users" in str(caught.value)
        with pytest.raises(DatabaseSchemaError):
            backend.append_batch(header("s"), [ev(0)], False)
    finally:
        backend.close()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        tables = conn.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (pg_schema,))
        assert [row[0] for row in tables] == ["users"]


def test_a_newer_schema_version_is_refused(pg_backends: Factory, pg_dsn: str, pg_schema: str) -> None:
    pg_backends().append_batch(header("s"), [ev(0)], False)
    _admin(pg_dsn, f"UPDATE {pg_schema}.agentlog_state SET schema_version = 99")
    with pytest.raises(DatabaseSchemaError) as caught:
        pg_backends().load_stored("s")
    assert "version 99" in str(caught.value) and "upgrade agentlog" in str(caught.value)


def _step(first: int) -> list[dict[str, Any]]:
    """One model step as a flush carries it: step/start, twenty streamed chunks, the message, step/end."""
    chunks = [chunk_event(first + 1 + i, f"part {i} ") for i in range(20)]
    return [step_start(first), *chunks, assistant_event(first + 21), step_end(first + 22)]


def test_each_durable_step_is_one_round_trip_of_one_statement(pg_backends: Factory) -> None:
    """A flush of an existing session sends one statement and waits for one answer (libpq's own
    protocol trace: one Sync from the client, one ReadyForQuery back), whatever rows the step packs into."""
    backend = pg_backends()
    meta = header("s")
    lease = backend.lock_writer(meta)
    try:
        backend.append_batch(meta, [turn_start(0)], False)
        first = 1
        for _ in range(6):  # past psycopg's preparing of the statement (its fifth use)
            backend.append_batch(meta, _step(first), True)
            first += 23
        assert lease.connection is not None
        pgconn = lease.connection.pgconn
        with tempfile.TemporaryFile("w+") as trace:
            pgconn.trace(trace.fileno())
            pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
            for _ in range(3):
                backend.append_batch(meta, _step(first), True)
                first += 23
            pgconn.untrace()
            trace.seek(0)
            messages = [line.split("\t")[0] + " " + line.split("\t")[2].split()[0] for line in trace if line.strip()]
    finally:
        lease.release()
    sent = [m for m in messages if m.startswith("F ")]
    assert sent == ["F Bind", "F Describe", "F Execute", "F Sync"] * 3
    assert messages.count("B ReadyForQuery") == 3
    stored = backend.load_stored("s")
    assert stored is not None and len(stored.events) == first


def test_a_delete_racing_an_append_leaves_no_event_rows_behind(
    pg_backends: Factory, pg_dsn: str, pg_schema: str
) -> None:
    """An append that reaches the session while a delete is between its two statements either lands
    before the delete takes the session or finds it gone: it never leaves rows without a session."""
    deleter, writer = pg_backends(), pg_backends()
    deleter.append_batch(header("s"), [ev(0), ev(1)], False)
    outcome: list[BaseException | None] = []

    def append() -> None:
        try:
            writer.append_batch(header("s"), [ev(2)], True)
            outcome.append(None)
        except BaseException as err:  # reported to the test thread
            outcome.append(err)

    def blocked_on_a_lock() -> bool:  # a statement on this test's schema waits for a lock
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND position(%s IN query) > 0",
                (pg_schema,),
            ).fetchone()
        return row is not None and row[0] > 0

    appender = threading.Thread(target=append)

    def step(name: str) -> None:
        if name == "session":  # the events are deleted, the session row is not yet
            appender.start()
            wait_until(lambda: not appender.is_alive() or blocked_on_a_lock(), "the append to land or wait")

    assert deleter.delete_session("s", step) is True
    appender.join()
    assert stored_rows(pg_dsn, pg_schema, "s") == []
    assert deleter.load_stored("s") is None
    assert len(outcome) == 1 and isinstance(outcome[0], PersistenceError)
    assert "no stored log" in str(outcome[0])
    # The id is free again: a new session of that name starts from seq 0.
    deleter.append_batch(header("s"), [ev(0)], False)
    assert [seq for seq, _ in stored_rows(pg_dsn, pg_schema, "s")] == [0]


def _as_schema_version_1(dsn: str, schema: str) -> None:
    """Make a new store what earlier releases created: version 1, event rows referencing their session."""
    _admin(
        dsn,
        f"ALTER TABLE {schema}.events ADD FOREIGN KEY (session_id) REFERENCES {schema}.sessions (id) "
        "ON DELETE CASCADE",
        f"UPDATE {schema}.agentlog_state SET schema_version = 1",
    )


def _version_and_foreign_keys(dsn: str, schema: str) -> tuple[int, int]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        version = conn.execute(
            sql.SQL("SELECT schema_version FROM {}.agentlog_state").format(sql.Identifier(schema))
        ).fetchone()
        keys = conn.execute(
            "SELECT count(*) FROM information_schema.table_constraints WHERE table_schema = %s "
            "AND constraint_type = 'FOREIGN KEY'",
            (schema,),
        ).fetchone()
    assert version is not None and keys is not None
    return version[0], keys[0]


def test_a_store_of_schema_version_1_is_used_as_it_is(pg_backends: Factory, pg_dsn: str, pg_schema: str) -> None:
    """Schema version 1 (earlier releases: the event rows reference their session row) still opens, writes,
    reads and deletes, and is left at version 1 with its constraint."""
    pg_backends().list_sessions()
    _as_schema_version_1(pg_dsn, pg_schema)
    backend = pg_backends()
    backend.append_batch(header("s"), [ev(0)], False)
    backend.append_batch(header("s"), [ev(1, "x")], True)
    loaded = backend.load_stored("s")
    assert loaded is not None and [event["seq"] for event in loaded.events] == [0, 1]
    assert backend.delete_session("s") is True
    assert stored_rows(pg_dsn, pg_schema, "s") == []
    version, keys = _version_and_foreign_keys(pg_dsn, pg_schema)
    assert (version, keys) == (1, 1)


def test_the_documented_upgrade_turns_a_version_1_store_into_version_2(
    pg_backends: Factory, pg_dsn: str, pg_schema: str
) -> None:
    """docs/postgres.md's two statements, on a version 1 store: the key is gone, the sessions are intact."""
    pg_backends().append_batch(header("s"), [ev(0), ev(1)], False)
    _as_schema_version_1(pg_dsn, pg_schema)
    text = (Path(__file__).parents[2] / "docs" / "postgres.md").read_text(encoding="utf-8")
    block = text.split("```sql\n", 1)[1].split("```", 1)[0]
    statements = [line for line in block.splitlines() if line.strip()]
    assert len(statements) == 2 and all(line.count("agentlog.") == 1 for line in statements)
    _admin(pg_dsn, *(line.replace("agentlog.", f"{pg_schema}.") for line in statements))
    backend = pg_backends()
    loaded = backend.load_stored("s")
    assert loaded is not None and [event["seq"] for event in loaded.events] == [0, 1]
    version, keys = _version_and_foreign_keys(pg_dsn, pg_schema)
    assert (version, keys) == (2, 0)


def test_a_new_store_is_schema_version_2_without_a_per_row_reference_check(
    pg_backends: Factory, pg_dsn: str, pg_schema: str
) -> None:
    """Version 2 drops version 1's foreign key from the event rows to their session (a check per inserted
    row, a sixth of a step's commit); deletes take the session row first instead (the race test above)."""
    pg_backends().list_sessions()
    version, keys = _version_and_foreign_keys(pg_dsn, pg_schema)
    assert (version, keys) == (2, 0)


def test_an_altered_schema_is_refused(pg_backends: Factory, pg_dsn: str, pg_schema: str) -> None:
    pg_backends().list_sessions()
    _admin(pg_dsn, f"ALTER TABLE {pg_schema}.events ADD COLUMN extra text")
    with pytest.raises(DatabaseSchemaError) as caught:
        pg_backends().list_sessions()
    assert "does not match" in str(caught.value)


def test_two_backends_creating_one_schema_at_once_both_succeed(pg_backends: Factory) -> None:
    backends = [pg_backends() for _ in range(4)]
    errors: list[BaseException] = []

    def use(backend: PostgresBackend) -> None:
        try:
            backend.list_sessions()
        except BaseException as err:
            errors.append(err)

    threads = [threading.Thread(target=use, args=(backend,)) for backend in backends]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []


# --- a bad DSN, a lost connection, a timeout --------------------------------------------------------------


def test_a_server_refusing_connections_is_a_typed_error_at_open(pg_schema: str) -> None:
    backend = PostgresBackend("postgresql://postgres@127.0.0.1:1/postgres", schema=pg_schema)
    try:
        for operation in (
            lambda: backend.list_sessions(),
            lambda: backend.load_stored("s"),
            lambda: backend.append_batch(header("s"), [ev(0)], False),
            lambda: backend.lock_writer({"id": "s"}),
        ):
            with pytest.raises(DatabaseUnavailableError) as caught:
                operation()
            assert caught.value.code == "DATABASE_UNAVAILABLE"
            assert "127.0.0.1:1" in str(caught.value) and "DSN" in str(caught.value)
    finally:
        backend.close()


def test_a_missing_database_and_a_malformed_dsn_are_typed(pg_schema: str) -> None:
    backend = PostgresBackend("postgresql://postgres@127.0.0.1:5432/agentlog_no_such_db", schema=pg_schema)
    try:
        with pytest.raises(DatabaseUnavailableError) as caught:
            backend.list_sessions()
        assert "agentlog_no_such_db" in str(caught.value)
    finally:
        backend.close()
    with pytest.raises(DatabaseUnavailableError) as malformed:
        PostgresBackend("host=127.0.0.1 port", schema=pg_schema)
    assert "malformed" in str(malformed.value)


def test_the_password_never_appears_in_an_error(pg_schema: str) -> None:
    backend = PostgresBackend("postgresql://postgres:s3cret-pw@127.0.0.1:1/postgres", schema=pg_schema)
    try:
        with pytest.raises(DatabaseUnavailableError) as caught:
            backend.list_sessions()
        assert "s3cret-pw" not in str(caught.value)
    finally:
        backend.close()


@pytest.fixture
def row_blocker(pg_dsn: str, pg_schema: str) -> Iterator[Callable[[str], psycopg.Connection[Any]]]:
    """``block(sql)`` runs ``sql`` in an open transaction of its own connection (rolled back at teardown)."""
    held: list[psycopg.Connection[Any]] = []

    def block(statement: str) -> psycopg.Connection[Any]:
        conn = psycopg.connect(pg_dsn)
        held.append(conn)
        conn.execute(statement.encode())
        return conn

    yield block
    for conn in held:
        conn.rollback()
        conn.close()


def test_a_statement_timeout_is_typed_and_stores_nothing(
    pg_backends: Factory, pg_dsn: str, pg_schema: str, row_blocker: Callable[[str], psycopg.Connection[Any]]
) -> None:
    backend = pg_backends(statement_timeout_ms=200)
    meta = header("s")
    backend.append_batch(meta, [ev(0)], False)
    blocker = row_blocker(f"SELECT 1 FROM {pg_schema}.sessions WHERE id = 's' FOR UPDATE")
    with pytest.raises(DatabaseUnavailableError) as caught:
        backend.append_batch(meta, [ev(1)], True)
    assert "statement timeout" in str(caught.value)
    blocker.rollback()
    assert [seq for seq, _ in stored_rows(pg_dsn, pg_schema, "s")] == [0]
    backend.append_batch(meta, [ev(1)], True)  # the retry succeeds
    assert [seq for seq, _ in stored_rows(pg_dsn, pg_schema, "s")] == [0, 1]


def test_pg_terminate_backend_in_the_middle_of_a_flush_is_typed_and_a_retry_stores_each_event_once(
    pg_backends: Factory, pg_dsn: str, pg_schema: str, row_blocker: Callable[[str], psycopg.Connection[Any]]
) -> None:
    """The writer's insert blocks on an uncommitted row of a blocker at seq 7; its backend is terminated there."""
    backend = pg_backends()
    coordinator = PersistenceCoordinator(al.SessionStore(), backend)
    try:
        meta = header("s")
        first = closed_turn()
        coordinator.create(meta)
        coordinator.append("s", first)
        start = len(first)
        batch = [ev(start + k, f"n{k}") for k in range(6)]
        blocker = row_blocker(
            f"INSERT INTO {pg_schema}.events (session_id, seq, body) VALUES ('s', {start + 3}, 'blocker'::bytea)"
        )
        thread, outcome = blocked_write(pg_dsn, lambda: coordinator.append("s", batch))
        with psycopg.connect(pg_dsn, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (outcome.blocked_pid,))
        thread.join()
        blocker.rollback()
        assert len(outcome) == 1 and isinstance(outcome[0], DatabaseUnavailableError), outcome
        assert outcome[0].code == "DATABASE_UNAVAILABLE"
        assert [seq for seq, _ in stored_rows(pg_dsn, pg_schema, "s")] == list(range(start))  # nothing of the batch

        coordinator.append("s", batch)  # the retry succeeds
        rows = stored_rows(pg_dsn, pg_schema, "s")
        assert [seq for seq, _ in rows] == list(range(start + 6))
        assert [body for _, body in rows[start:]] == [dumps(event) for event in batch]
        reloaded = PostgresBackend(pg_dsn, schema=pg_schema)
        try:
            stored = reloaded.load_stored("s")
            assert stored is not None and [event["seq"] for event in stored.events] == list(range(start + 6))
        finally:
            reloaded.close()
    finally:
        coordinator.close()


# --- a stalled server: every call has a client-side deadline -----------------------------------------------

STALL_GUARD_S = 120.0
"""How long a stopped backend stays stopped at most: only ends a test whose call never returned."""


def _process_state(pid: int) -> str:
    """The kernel's state letter of a process on this host ('T': stopped)."""
    with open(f"/proc/{pid}/stat", "rb") as stat:
        return stat.read().rsplit(b")", 1)[1].split()[0].decode()


@contextmanager
def stopped_backend(pid: int) -> Iterator[Callable[[], bool]]:
    """SIGSTOP the server backend ``pid`` (the server runs on this host, tests run as root); SIGCONT it on
    exit. Yields ``still_stopped()``: False once the hang guard had to lift the stall itself."""
    guard = threading.Timer(STALL_GUARD_S, os.kill, (pid, signal.SIGCONT))
    os.kill(pid, signal.SIGSTOP)
    guard.start()
    try:
        yield lambda: guard.is_alive() and _process_state(pid) == "T"
    finally:
        guard.cancel()
        os.kill(pid, signal.SIGCONT)


def _lease_holder(dsn: str) -> int:
    """The pid of the one server backend holding an advisory lock in the test database (the writer lease)."""
    with psycopg.connect(dsn, autocommit=True) as admin:
        pids = [
            row[0]
            for row in admin.execute(
                "SELECT l.pid FROM pg_locks l JOIN pg_database d ON d.oid = l.database "
                "WHERE l.locktype = 'advisory' AND l.granted AND d.datname = current_database()"
            )
        ]
    assert len(pids) == 1, pids
    return pids[0]


def _idle_agentlog_backends(dsn: str) -> list[int]:
    with psycopg.connect(dsn, autocommit=True) as admin:
        return [
            row[0]
            for row in admin.execute(
                "SELECT pid FROM pg_stat_activity WHERE application_name = 'agentlog' AND state = 'idle' "
                "AND datname = current_database()"
            )
        ]


def _retry_until_committed(write: Callable[[], object]) -> int:
    """Retry ``write`` while the server still ends the stalled backend (typed errors only); the attempts made."""
    attempts = 0
    outcome: list[BaseException] = []

    def attempt() -> bool:
        nonlocal attempts
        attempts += 1
        try:
            write()
        except DatabaseUnavailableError as err:
            outcome.append(err)
            return False
        return True

    wait_until(attempt, "a retry to commit", limit_s=STALL_GUARD_S)
    return attempts


def test_a_flush_whose_server_backend_is_stopped_fails_typed_before_the_stall_ends_and_a_retry_commits_once(
    pg_backends: Factory, pg_dsn: str, pg_schema: str
) -> None:
    backend = pg_backends(statement_timeout_ms=2000)
    store = al.SessionStore()
    coordinator = PersistenceCoordinator(store, backend)
    try:
        session = store.create("s", meta={"cwd": "/work"})
        session.append("turn/start", {"turn": 1})
        store.flush(session)
        session.append("user/message", al.user_message("stalled"), {"surfaceOp": "append"})
        session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
        with stopped_backend(_lease_holder(pg_dsn)) as still_stopped:
            with pytest.raises(DatabaseUnavailableError) as caught:
                store.flush(session)
            assert still_stopped(), "the flush returned only when the stall was lifted"
            # The stopped backend still holds the lease and may still commit what it was sent: a retry
            # now must neither take the lease on a new connection nor report another writer.
            with pytest.raises(DatabaseUnavailableError, match="previous connection"):
                store.flush(session)
            assert still_stopped()
            assert [seq for seq, _ in stored_rows(pg_dsn, pg_schema, "s")] == [0]
        assert caught.value.code == "DATABASE_UNAVAILABLE"
        assert "did not answer within" in str(caught.value)
        _retry_until_committed(lambda: store.flush(session))
        rows = stored_rows(pg_dsn, pg_schema, "s")
        assert [seq for seq, _ in rows] == [0, 1, 2]
        assert [loads(body) for _, body in rows] == [dict(event) for event in session.events]
    finally:
        coordinator.close()


def test_a_batch_that_landed_after_its_deadline_is_not_written_again_by_a_retry_carrying_more_events(
    pg_backends: Factory, pg_dsn: str, pg_schema: str
) -> None:
    """The stalled backend still runs the append it was sent once it continues (a commit whose outcome
    the writer never learnt); the retry then holds that batch and the events appended since."""
    backend = pg_backends(call_timeout_s=2.0)
    store = al.SessionStore()
    coordinator = PersistenceCoordinator(store, backend)
    try:
        session = store.create("s", meta={"cwd": "/work"})
        session.append("turn/start", {"turn": 1})
        store.flush(session)
        session.append("user/message", al.user_message("stalled"), {"surfaceOp": "append"})
        with stopped_backend(_lease_holder(pg_dsn)) as still_stopped:
            with pytest.raises(DatabaseUnavailableError, match="did not answer within"):
                store.flush(session)
            assert still_stopped()
        wait_until(lambda: len(stored_rows(pg_dsn, pg_schema, "s")) == 2, "the stalled append to land")
        session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
        _retry_until_committed(lambda: store.flush(session))
        rows = stored_rows(pg_dsn, pg_schema, "s")
        assert [loads(body) for _, body in rows] == [dict(event) for event in session.events]
    finally:
        coordinator.close()


def test_a_read_and_an_unleased_write_on_a_stopped_backend_fail_typed_before_the_stall_ends(
    pg_backends: Factory, pg_dsn: str, pg_schema: str
) -> None:
    backend = pg_backends(pool_size=1, call_timeout_s=2.0)
    meta = header("s")
    backend.append_batch(meta, [ev(0)], False)
    [stalled] = _idle_agentlog_backends(pg_dsn)  # the one pooled connection
    with stopped_backend(stalled) as still_stopped:
        with pytest.raises(DatabaseUnavailableError, match="did not answer within"):
            backend.read_revision("s")
        assert still_stopped()
    assert backend.read_revision("s") is not None  # the stopped connection was discarded: a fresh one
    [pid] = [pid for pid in _idle_agentlog_backends(pg_dsn) if pid != stalled]
    with stopped_backend(pid) as still_stopped:
        with pytest.raises(DatabaseUnavailableError, match="did not answer within"):
            backend.append_batch(meta, [ev(1)], True)
        assert still_stopped()
    _retry_until_committed(lambda: backend.append_batch(meta, [ev(1)], True))
    assert [body for _, body in stored_rows(pg_dsn, pg_schema, "s")] == [dumps(ev(0)), dumps(ev(1))]


def test_each_end_gives_up_on_a_silent_peer_after_about_twice_the_call_deadline(pg_backends: Factory) -> None:
    """A partitioned host closes nothing: the server must probe it to free its lease (after 6 s of
    silence, then 3 probes 2 s apart: 12 s, also the user timeout of an unacknowledged answer)."""
    backend = pg_backends(call_timeout_s=6.0)
    lease = backend.lock_writer(header("s"))
    try:
        assert lease.connection is not None
        assert keepalive_of(lease.connection) == keepalive_for(6, 2, 3, 12_000)
    finally:
        lease.release()
    backend.append_batch(header("s"), [ev(0)], False)
    conn = backend._checkout()  # a pooled connection, as reads and unleased writes use
    try:
        assert keepalive_of(conn) == keepalive_for(6, 2, 3, 12_000)
    finally:
        backend._checkin(conn)


def _lease_keepalive(dsn: str, schema: str) -> dict[str, int]:
    """The keepalive both ends apply to a writer lease's connection (call deadline 6 s)."""
    backend = PostgresBackend(dsn, schema=schema, call_timeout_s=6.0)
    lease = backend.lock_writer(header("s"))
    try:
        assert lease.connection is not None
        return keepalive_of(lease.connection)
    finally:
        lease.release()
        backend.close()


def test_keepalive_settings_of_the_dsn_win(pg_dsn: str, pg_schema: str) -> None:
    dsn = conninfo.make_conninfo(pg_dsn, keepalives_idle="77", options="-c tcp_keepalives_idle=99")
    assert _lease_keepalive(dsn, pg_schema) == {
        **keepalive_for(6, 2, 3, 12_000),
        "server_keepalives_idle": 99,
        "client_keepalives_idle": 77,
    }


def test_keepalive_settings_of_pgoptions_win_when_the_dsn_has_no_options(
    pg_dsn: str, pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGOPTIONS", "-c tcp_keepalives_count=9")
    assert _lease_keepalive(pg_dsn, pg_schema) == {**keepalive_for(6, 2, 3, 12_000), "server_keepalives_count": 9}


def test_the_client_deadline_option_is_checked(pg_schema: str) -> None:
    for bad in (0, -1.0, float("nan"), float("inf"), "5", True):
        with pytest.raises(ValueError, match="call_timeout_s"):
            PostgresBackend("postgresql://postgres@127.0.0.1:5432/postgres", schema=pg_schema, call_timeout_s=bad)


def test_an_idle_pooled_connection_killed_by_the_server_is_replaced(pg_backends: Factory, pg_dsn: str) -> None:
    backend = pg_backends()
    backend.append_batch(header("s"), [ev(0)], False)
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        # With a timeout the call returns once each backend has exited (its socket closed), as an idle
        # kill by the server (idle_session_timeout, a restart) is long over when the pool next hands the
        # connection out; without one, the read below raced the termination it was meant to follow.
        admin.execute(
            "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity WHERE application_name = 'agentlog' "
            "AND datname = current_database() AND pid <> pg_backend_pid() AND state = 'idle'"
        )

    def readable() -> bool:
        return backend.read_revision("s") is not None

    wait_until(readable, "a read over a fresh connection")
    backend.append_batch(header("s"), [ev(1)], True)


# --- ids, notification, paging -------------------------------------------------------------------------


def test_ids_postgres_cannot_hold_are_refused_before_any_io(pg_schema: str) -> None:
    backend = PostgresBackend("postgresql://postgres@127.0.0.1:1/postgres", schema=pg_schema)
    for bad in ("a\0b", "x" * 1001, "\ud800", ""):
        with pytest.raises(InvalidSessionIdError):
            backend.validate_session_id(bad)
    backend.validate_session_id("ü" * 500)
    backend.close()


def test_wait_for_change_wakes_on_a_commit_to_the_session_and_times_out_otherwise(pg_backends: Factory) -> None:
    tailer, writer = pg_backends(), pg_backends()
    meta = header("s")
    writer.append_batch(meta, [ev(0)], False)
    assert tailer.wait_for_change("s", 0.05) is False  # starts listening (later commits are buffered); nothing new
    result: list[bool] = []
    thread = threading.Thread(target=lambda: result.append(tailer.wait_for_change("s", 30)))
    thread.start()
    # Commits to other sessions do not wake it as this session's change; this one does.
    writer.append_batch(header("other"), [ev(0)], False)
    writer.append_batch(meta, [ev(1)], True)
    thread.join()
    assert result == [True]
    assert tailer.wait_for_change("other", 0.01) is True  # the other session's notification was kept
    assert tailer.wait_for_change("s", 0.01) is False


def test_notifications_for_sessions_nobody_waits_for_are_bounded(pg_backends: Factory, pg_dsn: str) -> None:
    """A tailer hears every session's commits; the ones it is not waiting for must not pile up forever."""
    from agentlog.persistence.postgres import backend as pg

    tailer = pg_backends()
    tailer.append_batch(header("s"), [ev(0)], False)
    assert tailer.wait_for_change("s", 0.01) is False  # listening
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for start in range(0, pg._MAX_PENDING_NOTIFICATIONS + 100, 1000):
            stop = min(start + 1000, pg._MAX_PENDING_NOTIFICATIONS + 100)
            conn.execute(
                "SELECT pg_notify('agentlog_events', 'other-' || n) FROM generate_series(%s::int, %s::int) AS n",
                (start, stop - 1),
            )
    assert tailer.wait_for_change("s", 0.5) is False  # drains them all, none for "s"
    assert len(tailer._notified) <= pg._MAX_PENDING_NOTIFICATIONS


def test_listing_is_in_code_point_id_order(pg_backends: Factory) -> None:
    backend = pg_backends()
    ids = sorted(["b", "a", "Z", "ä", "a0", "é", "c"])
    for sid in ids:
        backend.append_batch(header(sid), [ev(0)], False)
    listed = [listing.id for listing in backend.list_sessions()]
    assert listed == ids  # code-point order, whatever the database's collation
    assert list(backend.list_revisions()) == ids


def test_listing_some_revisions_words_them_as_the_whole_listing(pg_backends: Factory) -> None:
    backend = pg_backends()
    for sid in ("a", "b", "c"):
        backend.append_batch(header(sid), [ev(0)], False)
    backend.append_batch(header("b"), [ev(1)], True)
    whole = backend.list_revisions()
    assert backend.list_revisions_of(["b", "missing", "a"]) == {"a": whole["a"], "b": whole["b"]}
    assert backend.list_revisions_of([]) == {}


def _restore_data(dsn: str, schema: str, backup: str) -> None:
    """A data-only restore (as ``pg_restore --data-only`` after a truncate): the rows of ``backup``'s
    tables put back into ``schema``'s."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        ident, saved = sql.Identifier(schema), sql.Identifier(backup)
        conn.execute(sql.SQL("TRUNCATE {0}.sessions, {0}.events").format(ident))
        conn.execute(sql.SQL("INSERT INTO {}.sessions SELECT * FROM {}.sessions").format(ident, saved))
        conn.execute(sql.SQL("INSERT INTO {}.events SELECT * FROM {}.events").format(ident, saved))


def test_a_database_restored_from_a_backup_never_repeats_a_revision_of_another_log(
    pg_backends: Factory, pg_dsn: str, pg_schema: str
) -> None:
    """A restored database brings back the backup's store id, incarnation and change counter, and the
    next batch reaches a counter already handed out for the log the restore threw away: the revision
    must still differ from it (the projection cache and the search index trust an equal revision)."""
    backend = pg_backends()
    backend.append_batch(header("s"), [ev(0, "kept")], False)
    backup = f"{pg_schema}_backup"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(backup)))
        for table in ("sessions", "events"):
            conn.execute(
                sql.SQL("CREATE TABLE {}.{} AS SELECT * FROM {}.{}").format(
                    sql.Identifier(backup), sql.Identifier(table), sql.Identifier(pg_schema), sql.Identifier(table)
                )
            )
    try:
        backend.append_batch(header("s"), [ev(1, "lost")], True)
        lost = backend.read_revision("s")
        _restore_data(pg_dsn, pg_schema, backup)
        backend.append_batch(header("s"), [ev(1, "written after the restore")], True)
        restored = backend.read_revision("s")
        assert restored is not None and restored != lost
        stored = backend.load_stored("s")
        assert stored is not None and stored.revision == restored
        assert backend.list_revisions() == {"s": restored}
        assert [listing.revision for listing in backend.list_sessions()] == [restored]
        suffix = backend.load_stored_from("s", 1)
        assert suffix is not None and suffix.revision == restored
    finally:
        drop_schema(pg_dsn, backup)


# --- packed chunk runs -----------------------------------------------------------------------------------


def _chunky_session(turns: int = 3) -> list[dict[str, Any]]:
    """Closed turns whose steps stream a run of ten text deltas (one packed row per batch it falls in)."""
    events: list[dict[str, Any]] = []
    for turn in range(1, turns + 1):
        s = len(events)
        events += [turn_start(s, turn), user_event(s + 1, f"q{turn}"), step_start(s + 2, turn)]
        base = len(events)
        events += [chunk_event(base + k, f"t{turn}-{k} ", turn=turn) for k in range(8)]
        events += [chunk_event(base + 8 + k, f"x{k}", turn=turn) for k in range(2)]
        s = len(events)
        events += [assistant_event(s, f"a{turn}", turn=turn), step_end(s + 1, turn), turn_end(s + 2, turn)]
    return events


def test_chunk_runs_are_stored_packed_and_every_suffix_read_equals_the_whole_read_sliced(
    pg_backends: Factory, pg_dsn: str, pg_schema: str
) -> None:
    backend = pg_backends()
    events = _chunky_session()
    backend.append_batch(header("s"), events[:20], False)
    backend.append_batch(header("s"), events[20:], True)  # a run split across two batches packs per batch
    rows = stored_rows(pg_dsn, pg_schema, "s")
    assert len(rows) < len(events)
    assert any(loads(body)["type"] == "text-chunks" for _, body in rows)
    whole = backend.load_stored("s")
    assert whole is not None
    assert [al.thaw(event) for event in whole.events] == events
    for from_seq in range(len(events) + 2):
        suffix = backend.load_stored_from("s", from_seq)
        assert suffix is not None and suffix.revision == whole.revision
        assert [al.thaw(event) for event in suffix.events] == events[from_seq:], from_seq


def test_a_retried_packed_batch_is_recognised_as_stored_and_a_different_one_conflicts(pg_backends: Factory) -> None:
    backend = pg_backends()
    events = _chunky_session(2)
    backend.append_batch(header("s"), events[:3], False)
    backend.append_batch(header("s"), events[3:], True)
    backend.append_batch(header("s"), events[3:], True)  # the same batch again: already stored, a no-op
    changed = [dict(event) for event in events[3:]]
    changed[2] = chunk_event(changed[2]["seq"], "other")
    with pytest.raises(SessionConflictError):
        backend.append_batch(header("s"), changed, True)
    stored = backend.load_stored("s")
    assert stored is not None and [al.thaw(event) for event in stored.events] == events


def test_a_retry_holding_a_landed_batch_and_later_events_stores_only_the_later_ones(pg_backends: Factory) -> None:
    """The retry's run of deltas is cut into other packed rows than the landed batch's: events decide."""
    backend = pg_backends()
    events = _chunky_session(2)
    backend.append_batch(header("s"), events[:3], False)
    backend.append_batch(header("s"), events[3:8], True)  # landed, though its writer never learnt it
    changed = [dict(event) for event in events[3:]]
    changed[2] = chunk_event(changed[2]["seq"], "other")
    with pytest.raises(SessionConflictError):
        backend.append_batch(header("s"), changed, True)  # another writer's prefix: refused
    backend.append_batch(header("s"), events[3:], True)  # the retry, with what was appended since
    stored = backend.load_stored("s")
    assert stored is not None and [al.thaw(event) for event in stored.events] == events

    fresh = pg_backends()
    fresh.append_batch(header("t"), events[:5], False)  # a materialization that landed unacknowledged
    fresh.append_batch(header("t"), events, False)
    stored = fresh.load_stored("t")
    assert stored is not None and [al.thaw(event) for event in stored.events] == events


def test_a_damaged_packed_row_is_corruption_at_its_seq_never_a_silently_shorter_session(
    pg_backends: Factory, pg_dsn: str, pg_schema: str
) -> None:
    backend = pg_backends()
    events = _chunky_session(1)
    backend.append_batch(header("s"), events, False)
    packed_seq = next(seq for seq, body in stored_rows(pg_dsn, pg_schema, "s") if loads(body)["type"] == "text-chunks")
    _admin(
        pg_dsn,
        f'UPDATE {pg_schema}.events SET body = convert_to(\'{{"type":"text-chunks","seq0":{packed_seq},'
        f"\"time0\":1,\"data\":{{}}}}', 'UTF8') WHERE session_id = 's' AND seq = {packed_seq}",
    )
    with pytest.raises(SessionPersistenceCorruptionError) as caught:
        backend.load_stored("s")
    assert f"seq {packed_seq}" in str(caught.value)
    partial = backend.read_prefix("s")
    assert partial is not None and len(partial.events) == packed_seq and partial.damage is not None


# --- many hosts on loopback -----------------------------------------------------------------------------


def _fork(body: Callable[[int], None]) -> tuple[int, int]:
    """Fork a child running ``body(write_fd)`` (exit 0 when it returns, 3 when it raises); → (pid, read_fd)."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        os.close(read_fd)
        try:
            body(write_fd)
        except BaseException:
            os._exit(3)
        os._exit(0)
    os.close(write_fd)
    return pid, read_fd


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 4096):
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks)


def test_eight_hosts_write_eight_sessions_concurrently_and_two_contend_for_one(pg_dsn: str, pg_schema: str) -> None:
    PostgresBackend(pg_dsn, schema=pg_schema).list_sessions()  # the schema exists before the hosts start

    def host(index: int) -> Callable[[int], None]:
        def body(fd: int) -> None:
            backend = PostgresBackend(pg_dsn, schema=pg_schema, pool_size=2)
            meta = header(f"host-{index}")
            lease = backend.lock_writer(meta)
            for batch in range(20):
                events = [ev(batch * 10 + k, f"h{index}") for k in range(10)]
                backend.append_batch(meta, events, batch > 0)
            lease.release()
            backend.close()
            os.write(fd, b"done\n")

        return body

    def contender(fd: int) -> None:
        backend = PostgresBackend(pg_dsn, schema=pg_schema)
        meta = header("contended")
        try:
            lease = backend.lock_writer(meta)
        except SessionLockedError:
            os.write(fd, b"locked\n")
            return
        backend.append_batch(meta, [ev(0), ev(1)], False)
        os.write(fd, b"won 1\n")
        time.sleep(3600)  # hold the lease until killed
        lease.release()

    writers = [_fork(host(i)) for i in range(8)]
    contenders = [_fork(contender) for _ in range(2)]
    try:
        for pid, fd in writers:
            assert _read_all(fd) == b"done\n"
            assert os.waitpid(pid, 0)[1] == 0
        outputs: dict[int, bytes] = {}
        for pid, fd in contenders:
            line = b""
            while not line.endswith(b"\n"):
                chunk = os.read(fd, 64)
                assert chunk, "a contender died without reporting"
                line += chunk
            outputs[pid] = line
        assert sorted(outputs.values()) == [b"locked\n", b"won 1\n"]  # exactly one wins the lease
        winner = next(pid for pid, line in outputs.items() if line.startswith(b"won"))
        os.kill(winner, signal.SIGKILL)
        backend = PostgresBackend(pg_dsn, schema=pg_schema)
        try:
            leases: list[Any] = []

            def taken() -> bool:
                try:
                    leases.append(backend.lock_writer({"id": "contended"}))
                except SessionLockedError:
                    return False
                return True

            wait_until(taken, "the killed winner's lease to end")  # the other host takes over
            stored = backend.load_stored("contended")
            assert stored is not None and [event["seq"] for event in stored.events] == [0, 1]
            backend.append_batch(header("contended"), [ev(2)], True)
            leases[0].release()
            for index in range(8):
                rows = stored_rows(pg_dsn, pg_schema, f"host-{index}")
                assert [seq for seq, _ in rows] == list(range(200))
                assert all(body == dumps(ev(seq, f"h{index}")) for seq, body in rows)
        finally:
            backend.close()
    finally:
        for pid, fd in contenders:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(pid, 0)
            os.close(fd)


def test_a_schema_dropped_under_a_backend_is_a_typed_error_and_the_next_operation_recreates_it(
    pg_backends: Factory, pg_dsn: str, pg_schema: str
) -> None:
    backend = pg_backends()
    backend.append_batch(header("s"), [ev(0)], False)
    _admin(pg_dsn, f"DROP SCHEMA {pg_schema} CASCADE")
    with pytest.raises(DatabaseSchemaError) as caught:
        backend.load_stored("s")
    assert "changed under this backend" in str(caught.value)
    assert backend.load_stored("s") is None  # checked again: an empty, fresh schema
    backend.append_batch(header("s"), [ev(0)], False)
    assert [seq for seq, _ in stored_rows(pg_dsn, pg_schema, "s")] == [0]


@pytest.mark.parametrize("kind", ['{"a":1}', "[1]"])
def test_a_row_whose_type_is_not_a_string_is_refused_with_a_typed_error(
    pg_backends: Factory, pg_dsn: str, pg_schema: str, kind: str
) -> None:
    """An object or array ``type`` is an unknown type like any other: the typed refusal, never a
    ``TypeError`` from the storage-tag lookup."""
    backend = pg_backends()
    backend.append_batch(header("s"), _chunky_session(1), False)
    _admin(
        pg_dsn,
        f'UPDATE {pg_schema}.events SET body = convert_to(\'{{"type":{kind},"seq":1,"time":1,"data":{{}}}}\', '
        f"'UTF8') WHERE session_id = 's' AND seq = 1",
    )
    for compact in (False, True):
        coordinator = PersistenceCoordinator(al.SessionStore(), pg_backends())
        with pytest.raises(AgentlogError) as caught:
            if compact:
                coordinator.prepare("s")
            else:
                coordinator.inspect("s")
        assert caught.value.code == "SESSION_FORMAT_UNSUPPORTED", caught.value
        coordinator.close()


def _damage(schema: str, rows: list[tuple[int, bytes]], how: str) -> tuple[str, int, str]:
    """One damaged plain row of session ``s``: → (the statement, the seq reported, what the report says)."""
    seq = [seq for seq, body in rows if loads(body)["type"] != "text-chunks"][-4]  # a plain row mid-log
    last = rows[-1][0]
    events = f"{schema}.events"
    where = f"WHERE session_id = 's' AND seq = {seq}"
    if how == "gap":
        return f"DELETE FROM {events} {where}", seq, f"seq {seq} is missing; the next row is seq {seq + 1}"
    if how == "renumbered":  # the last row moved on, its body unchanged: the bodies alone still count on
        statement = f"UPDATE {events} SET seq = seq + 5 WHERE session_id = 's' AND seq = {last}"
        return statement, last, f"seq {last} is missing; the next row is seq {last + 5}"
    if how == "unparsable":
        return f"UPDATE {events} SET body = '{{'::bytea {where}", seq, "unparsable JSON"
    if how == "other-seq":  # the next event's body: contiguous bodies are not enough, each must be its row's
        body = dumps(ev(seq + 1)).decode()
        statement = f"UPDATE {events} SET body = convert_to('{body}', 'UTF8') {where}"
        return statement, seq, "the row's JSON is not the event of its seq"
    raise AssertionError(how)


@pytest.mark.parametrize("how", ["gap", "renumbered", "unparsable", "other-seq"])
def test_a_damaged_plain_row_is_reported_at_its_seq_by_compact_and_expanded_reads_alike(
    pg_backends: Factory, pg_dsn: str, pg_schema: str, how: str
) -> None:
    """Cold loads take plain rows in bulk; a damaged one still ends the valid prefix exactly where it is."""
    from agentlog.kernel.packedrun import compact_chunk_runs, expand_items

    backend = pg_backends()
    events = _chunky_session(3)
    backend.append_batch(header("s"), events, False)
    statement, seq, why = _damage(pg_schema, stored_rows(pg_dsn, pg_schema, "s"), how)
    _admin(pg_dsn, statement)
    expanded = backend.read_prefix("s")
    with compact_chunk_runs():
        compact = backend.read_prefix("s")
    for partial in (expanded, compact):
        assert partial is not None and partial.damage is not None
        assert f"at seq {seq} (" in str(partial.damage) and why in str(partial.damage)
        assert [al.thaw(event) for event in expand_items(partial.events)] == events[:seq]
    with pytest.raises(SessionPersistenceCorruptionError, match=f"at seq {seq} "):
        with compact_chunk_runs():
            backend.load_stored("s")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(st.integers(-(2**63), 2**63 - 1), max_size=40),
    st.lists(st.binary(max_size=300), max_size=40),
)
def test_an_appends_arrays_reach_the_server_as_bound(pg_dsn: str, seqs: list[int], bodies: list[bytes]) -> None:
    """The append's own array dumpers (seqs, bodies) give the server exactly the values bound."""
    with psycopg.connect(pg_dsn) as conn:
        row = conn.cursor(binary=True).execute(
            "SELECT %b::bigint[], %b::bytea[]", (backend_module._Int8Array(seqs), backend_module._ByteaArray(bodies))
        ).fetchone()
    assert row is not None
    assert (row[0] or [], [bytes(body) for body in row[1] or []]) == (seqs, bodies)
