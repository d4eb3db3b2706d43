"""SQLite session backend, schema 17 (spec ``persistence.md`` §5; checklist §8.10 and §8.12).

Every checklist test is named after its item and carries a ``# spec 8.10 #<n>`` comment. The original's
tests drive the assembled plugin (Cordis config, the built bundle); here the same behaviour is pinned on
``SqliteBackend`` directly, which is what the coordinator calls. Physical facts (rows, rowids, pragmas)
are read with a separate ``sqlite3`` connection, and damage is inserted by hand the way a foreign or
crashed writer would leave it.
"""

from __future__ import annotations

import ast
import os
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

import agentlog.persistence.sqlite.backend as sqlite_module
from agentlog.errors import (
    PersistenceError,
    SessionFormatUnsupportedError,
    SessionLockedError,
    SessionPersistenceCorruptionError,
    StorageAccessError,
)
from agentlog.kernel.jsoncodec import dumps
from agentlog.persistence.memory import MemoryBackend
from agentlog.persistence.sqlite.backend import APPLICATION_ID, SQL, SqliteBackend, select_journal_mode

MAX_SAFE = 2**53 - 1
SID = "s1"
CWD = "/work/project"
SRC = Path(sqlite_module.__file__).resolve().parent


# --- builders and helpers -----------------------------------------------------------------------------


def meta(session_id: str = SID, **extra: Any) -> dict[str, Any]:
    return {"version": 0, "id": session_id, "createdAt": 1000, "cwd": CWD, **extra}


def ev(kind: str, seq: int, data: Any = None, **extra: Any) -> dict[str, Any]:
    return {"type": kind, "seq": seq, "time": 1000 + seq, "data": {} if data is None else data, **extra}


def chunk(seq: int, text: str = "x", *, kind: str = "text-delta", step: int = 1) -> dict[str, Any]:
    return ev("assistant/chunk", seq, {"turn": 1, "step": step, "chunk": {"type": kind, "index": 0, "text": text}})


def tool_chunk(seq: int, args: str, call_id: str, name: str | None = None) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool-call-delta", "index": 0, "id": call_id}
    if name is not None:
        block["name"] = name
    block["argumentsDelta"] = args
    return ev("assistant/chunk", seq, {"turn": 1, "step": 1, "chunk": block})


def turn_start(seq: int) -> dict[str, Any]:
    return ev("turn/start", seq, {"turn": 1})


def turn_end(seq: int) -> dict[str, Any]:
    return ev("turn/end", seq, {"turn": 1, "reason": {"kind": "completed"}})


def user(seq: int, text: str = "hello") -> dict[str, Any]:
    data = {"id": f"u{seq}", "role": "user", "content": [{"type": "text", "text": text}], "source": {"kind": "user"}}
    return ev("user/message", seq, data, surfaceOp="append")


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "db" / "sessions.sqlite"


@pytest.fixture
def backends() -> Iterator[list[SqliteBackend]]:
    created: list[SqliteBackend] = []
    yield created
    for backend in created:
        backend.close()


@pytest.fixture
def open_backend(db: Path, backends: list[SqliteBackend]) -> Any:
    def factory(path: Path | str | None = None, **options: Any) -> SqliteBackend:
        backend = SqliteBackend(str(db if path is None else path), **options)
        backends.append(backend)
        return backend

    return factory


def raw(db: Path) -> sqlite3.Connection:
    """A foreign connection (autocommit) for inspecting and damaging the file."""
    return sqlite3.connect(str(db), isolation_level=None, timeout=10)


def physical(db: Path, session_id: str = SID) -> list[tuple[Any, ...]]:
    with raw(db) as con:
        return con.execute(
            "SELECT rowid, seq, type, time, data, source_event_seqs, surface_op, ignorable FROM events "
            "WHERE session_id = ? ORDER BY seq",
            (session_id,),
        ).fetchall()


def insert_row(db: Path, seq: int, kind: str, data: Any, ignorable: int | None = None, session_id: str = SID) -> None:
    con = raw(db)
    try:
        con.execute(
            "INSERT INTO events (session_id, seq, type, time, data, ignorable) VALUES (?, ?, ?, ?, ?, ?)",
            (session_id, seq, kind, 1000 + seq, data, ignorable),
        )
    finally:
        con.close()


def execute(db: Path, *statements: str) -> None:
    con = raw(db)
    try:
        for statement in statements:
            con.execute(statement)
    finally:
        con.close()


def make_database(db: Path, ddl: str, *, version: int = 17, application_id: int = APPLICATION_ID) -> None:
    """A hand-built database: ``ddl``, a store identity, then the two identity pragmas."""
    db.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    con = raw(db)
    try:
        con.executescript(ddl)
        if "persistence_state" in ddl:
            con.execute("INSERT INTO persistence_state (singleton, store_id) VALUES (1, ?)", (str(uuid.uuid4()),))
        con.execute(f"PRAGMA application_id = {application_id}")
        con.execute(f"PRAGMA user_version = {version}")
    finally:
        con.close()
    os.chmod(db, 0o600)


# --- §8.10 physical packing -----------------------------------------------------------------------------


def test_264_packs_through_the_assembled_backend(open_backend: Any, db: Path) -> None:
    # spec 8.10 #264 — adapted: there is no cordis.yml; the same packing is pinned through the backend.
    backend = open_backend()
    backend.append_batch(meta(), [turn_start(0), *(chunk(seq, f"c{seq}") for seq in range(1, 5)), turn_end(5)], False)
    rows = physical(db)
    assert [(row[1], row[2], row[7]) for row in rows] == [
        (0, "turn/start", None),
        (1, "text-chunks", 0),
        (5, "turn/end", None),
    ]
    assert dumps(backend.load_stored(SID).events) == dumps(
        [turn_start(0), *(chunk(seq, f"c{seq}") for seq in range(1, 5)), turn_end(5)]
    )


def test_265_packs_each_append_once_without_rewriting_earlier_rows_and_seeks_inside_packed_rows(
    open_backend: Any, db: Path
) -> None:
    # spec 8.10 #265 — 104 events appended as 3 + 1 + 100 → 7 rows.
    backend = open_backend()
    events = [turn_start(0), ev("step/start", 1, {"turn": 1, "step": 1}), *(chunk(s) for s in range(2, 102))]
    events += [ev("step/end", 102, {"turn": 1, "step": 1}), turn_end(103)]
    backend.append_batch(meta(), events[:3], False)
    first = physical(db)
    backend.append_batch(meta(), events[3:4], True)
    second = physical(db)
    backend.append_batch(meta(), events[4:], True)
    rows = physical(db)
    assert len(rows) == 7
    assert rows[: len(first)] == first and rows[: len(second)] == second  # rowids and bytes unchanged
    assert [row[2] for row in rows] == [
        "turn/start",
        "step/start",
        "assistant/chunk",
        "assistant/chunk",
        "text-chunks",
        "step/end",
        "turn/end",
    ]
    for from_seq in (0, 2, 25, 101, 104, 105):
        suffix = backend.load_stored_from(SID, from_seq)
        assert suffix is not None and suffix.torn_marker is None
        assert suffix.events == events[from_seq:], from_seq
    with raw(db) as con:
        assert con.execute("PRAGMA user_version").fetchone()[0] == 17


def test_266_bounds_paced_stream_wal_extent_without_rewriting_committed_rows(open_backend: Any, db: Path) -> None:
    # spec 8.10 #266 — 1,004 events in 40-event appends → 31 rows, inserts only, stable WAL when idle.
    backend = open_backend()
    events = [
        turn_start(0),
        ev("step/start", 1, {"turn": 1, "step": 1}),
        *(chunk(s, "abc" * 50) for s in range(2, 1002)),
    ]
    events += [ev("step/end", 1002, {"turn": 1, "step": 1}), turn_end(1003)]
    seen: dict[int, tuple[Any, ...]] = {}
    for start in range(0, len(events), 40):
        backend.append_batch(meta(), events[start : start + 40], start > 0)
        rows = {row[0]: row for row in physical(db)}
        for rowid, row in seen.items():
            assert rows[rowid] == row  # nothing committed earlier was changed or removed
        seen = rows
    assert len(seen) == 31
    with raw(db) as con:
        largest = con.execute("SELECT MAX(length(CAST(data AS BLOB))) FROM events").fetchone()[0]
    assert largest <= 1_048_576
    wal = Path(str(db) + "-wal")
    size = wal.stat().st_size
    for _ in range(3):
        backend.load_stored(SID)
        backend.list_sessions()
        backend.read_revision(SID)
    time.sleep(0.05)
    assert wal.stat().st_size == size
    assert backend.load_stored(SID).events == events


def test_267_includes_a_packed_predecessor_when_an_overlapping_scalar_tail_hides_it(
    open_backend: Any, db: Path
) -> None:
    # spec 8.10 #267
    backend = open_backend()
    chunks = [chunk(seq, f"c{seq}") for seq in range(4)]
    backend.append_batch(meta(), chunks, False)
    insert_row(db, 2, "turn/start", '{"turn":9}')  # a foreign scalar row overlapping the packed span
    # Issue 7 defect 13: the overlap is committed corruption (the original cut it as a torn tail) — and
    # it is only visible because the packed predecessor holding seq 2 was read.
    with pytest.raises(SessionPersistenceCorruptionError, match="invalid committed physical row at seq 2"):
        backend.load_stored_from(SID, 2)
    execute(db, "DELETE FROM events WHERE type = 'turn/start'")
    suffix = backend.load_stored_from(SID, 2)
    assert suffix is not None and suffix.events == chunks[2:]
    execute(db, "UPDATE events SET data = '{\"broken\":' WHERE seq = 0")
    with pytest.raises(SessionPersistenceCorruptionError, match="invalid committed physical row at seq 0"):
        backend.load_stored_from(SID, 2)  # the malformed predecessor fails closed


def test_268_waits_for_a_competing_process_within_the_configured_busy_timeout(open_backend: Any, db: Path) -> None:
    # spec 8.10 #268
    backend = open_backend(busy_timeout_ms=10_000)
    backend.append_batch(meta(), [turn_start(0)], False)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                f"""
                import sqlite3, sys, time
                con = sqlite3.connect({str(db)!r}, isolation_level=None)
                con.execute("BEGIN IMMEDIATE")
                print("locked", flush=True)
                time.sleep(0.6)
                con.execute("COMMIT")
                """
            ),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        started = time.monotonic()
        backend.append_batch(meta(), [turn_end(1)], True)
        assert time.monotonic() - started >= 0.2  # it waited for the other process instead of failing
    finally:
        holder.wait(10)
    assert [e["seq"] for e in backend.load_stored(SID).events] == [0, 1]


def test_269_rejects_an_older_sqlite_physical_schema(open_backend: Any, db: Path) -> None:
    # spec 8.10 #269
    open_backend().list_sessions()
    execute(db, "PRAGMA user_version = 16")
    with pytest.raises(SessionFormatUnsupportedError, match=r"schema version 16.*incompatible with this build \(17\)"):
        open_backend().list_sessions()


def test_270_rejects_a_stale_physical_append_without_replacing_the_winning_tail(open_backend: Any) -> None:
    # spec 8.10 #270 — two connections: the winner appends first, the stale writer is refused.
    winner, stale = open_backend(), open_backend()
    winner.append_batch(meta(), [turn_start(0), user(1)], False)
    for batch, materialized in (([turn_start(0)], False), ([user(1)], True)):
        with pytest.raises(PersistenceError, match="stored next seq is 2"):
            stale.append_batch(meta(), batch, materialized)
    with pytest.raises(PersistenceError, match=f"session {SID} append starts at seq 0, stored next seq is 2"):
        stale.append_batch(meta(), [turn_start(0)], False)
    assert winner.load_stored(SID).events == [turn_start(0), user(1)]


def test_271_rejects_a_stale_repair_without_deleting_a_newer_winning_tail(open_backend: Any, db: Path) -> None:
    # spec 8.10 #271 — adapted to issue 7 defect 13: SQLite hands out no torn markers (a row cannot
    # tear), so staleness is the closers' position; a marker is refused outright and nothing is deleted.
    first, second = open_backend(), open_backend()
    first.append_batch(meta(), [turn_start(0)], False)
    assert first.load_stored(SID).torn_marker is None
    closer = ev("turn/end", 1, {"turn": 1, "reason": {"kind": "interrupted"}})
    second.commit_repair(meta(), None, [closer])  # the winner repairs first
    second.append_batch(meta(), [turn_start(2)], True)
    with pytest.raises(PersistenceError, match="repair is stale: closer starts at seq 1, stored next seq is 3"):
        first.commit_repair(meta(), None, [closer])
    with pytest.raises(PersistenceError, match="SQLite rows cannot tear"):
        first.commit_repair(meta(), 1, [])
    assert first.load_stored(SID).events == [turn_start(0), closer, turn_start(2)]


# --- §8.10 schema ownership -----------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["wal", "delete", "truncate", "persist", "memory"])
def test_272_accepts_every_configured_journal_mode_and_sqlite_memory_mode_result(open_backend: Any, mode: str) -> None:
    # spec 8.10 #272
    backend = open_backend(":memory:") if mode == "memory" else open_backend(journal_mode=mode)
    assert backend.list_sessions() == []
    conn = backend._conn
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == mode
    assert conn.execute("PRAGMA trusted_schema").fetchone()[0] == 0
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    if mode != "memory":
        assert conn.execute("PRAGMA mmap_size").fetchone()[0] == 0
    backend.append_batch(meta(), [turn_start(0)], False)
    assert backend.load_stored(SID).events == [turn_start(0)]


def busy() -> sqlite3.OperationalError:
    err = sqlite3.OperationalError("database is locked")
    err.sqlite_errorcode = 5
    return err


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_273_retries_a_busy_journal_mode_transition_within_its_retry_budget() -> None:
    # spec 8.10 #273 — 2 attempts, one 10 ms pause.
    clock, attempts = FakeClock(), []

    def run() -> str:
        attempts.append(1)
        if len(attempts) == 1:
            raise busy()
        return "wal"

    assert select_journal_mode(run, clock.now + 5, clock=clock, sleep=clock.sleep) == "wal"
    assert len(attempts) == 2 and clock.sleeps == [0.01]


def test_274_does_not_retry_journal_failures_outside_the_available_busy_budget() -> None:
    # spec 8.10 #274 — busy with a 0 ms budget, or a non-busy error: exactly one attempt.
    clock = FakeClock()
    attempts: list[int] = []

    def always_busy() -> str:
        attempts.append(1)
        raise busy()

    with pytest.raises(sqlite3.OperationalError):
        select_journal_mode(always_busy, clock.now, clock=clock, sleep=clock.sleep)
    assert len(attempts) == 1 and clock.sleeps == []

    attempts.clear()

    def failing() -> str:
        attempts.append(1)
        raise sqlite3.OperationalError("disk I/O error")

    with pytest.raises(sqlite3.OperationalError, match="disk I/O error"):
        select_journal_mode(failing, clock.now + 5, clock=clock, sleep=clock.sleep)
    assert len(attempts) == 1


def test_275_starts_no_journal_retry_after_its_open_relative_cutoff() -> None:
    # spec 8.10 #275 — the sleep crosses the deadline (a slow scheduler): no further attempt starts.
    clock, attempts = FakeClock(), []

    def always_busy() -> str:
        attempts.append(1)
        raise busy()

    def oversleep(seconds: float) -> None:
        clock.now += 1.0

    with pytest.raises(sqlite3.OperationalError):
        select_journal_mode(always_busy, clock.now + 0.005, clock=clock, sleep=oversleep)
    assert len(attempts) == 1


def test_276_paces_repeated_busy_journal_mode_attempts() -> None:
    # spec 8.10 #276 — a real 50 ms budget → 2..6 attempts.
    attempts: list[int] = []

    def always_busy() -> str:
        attempts.append(1)
        raise busy()

    with pytest.raises(sqlite3.OperationalError):
        select_journal_mode(always_busy, time.monotonic() + 0.05)
    assert 2 <= len(attempts) <= 6


def test_277_rejects_unversioned_incompatible_and_foreign_application_databases(
    open_backend: Any, tmp_path: Path
) -> None:
    # spec 8.10 #277
    cases = [
        ("CREATE TABLE notes (x);", 0, 0, "has an unversioned schema or application identity"),
        ("", 0, 42, "has an unversioned schema or application identity"),
        ("", 5, 0, "has schema version 5, incompatible with this build"),
        (SQL["schema"], 17, 42, "has application id 42, expected 1146308688"),
    ]
    for index, (ddl, version, application_id, message) in enumerate(cases):
        path = tmp_path / f"case{index}" / "db.sqlite"
        make_database(path, ddl, version=version, application_id=application_id)
        before = path.read_bytes()
        with pytest.raises(PersistenceError, match=message):
            open_backend(path).list_sessions()
        assert path.read_bytes() == before  # refused without touching the file


def test_278_rejects_changed_columns_and_non_strict_owned_tables(open_backend: Any, tmp_path: Path) -> None:
    # spec 8.10 #278
    schema = SQL["schema"]
    variants = {
        "extra column": schema.replace("  ignorable ", "  extra TEXT,\n  ignorable "),
        "non-strict events": schema.replace(
            "PRIMARY KEY (session_id, seq)\n) STRICT;", "PRIMARY KEY (session_id, seq)\n);"
        ),
        "loose lookalike": schema.replace("data              ANY NOT NULL", "data              TEXT NOT NULL"),
        "extra index": schema + "\nCREATE INDEX events_by_type ON events (type);",
    }
    for name, ddl in variants.items():
        assert ddl != schema, name
        path = tmp_path / name.replace(" ", "-") / "db.sqlite"
        make_database(path, ddl)
        with pytest.raises(PersistenceError, match="does not contain the required schema objects"):
            open_backend(path).list_sessions()


def test_279_rejects_schema_ownership_changes_observed_at_mutation_time(open_backend: Any, db: Path) -> None:
    # spec 8.10 #279 — the open connection validated the schema; another connection changes it later.
    backend = open_backend()
    backend.append_batch(meta(), [turn_start(0)], False)
    execute(db, "PRAGMA user_version = 18")
    with pytest.raises(PersistenceError, match=r"schema changed before mutation \(expected 17, got 18\)"):
        backend.append_batch(meta(), [turn_end(1)], True)
    execute(db, "PRAGMA user_version = 17", "PRAGMA application_id = 7")
    with pytest.raises(
        PersistenceError, match=r"application id changed before mutation \(expected 1146308688, got 7\)"
    ):
        backend.commit_repair(meta(), None, [turn_end(1)])
    execute(db, f"PRAGMA application_id = {APPLICATION_ID}", "CREATE INDEX sneaky ON events (type)")
    with pytest.raises(PersistenceError, match="does not contain the required schema objects"):
        backend.append_batch(meta(), [turn_end(1)], True)
    assert [row[1] for row in physical(db)] == [0]  # every refused mutation was rolled back


def test_280_validates_creation_time_and_restores_every_optional_header_field(open_backend: Any, db: Path) -> None:
    # spec 8.10 #280
    backend = open_backend()
    full = {
        "version": 0,
        "id": SID,
        "createdAt": 1234,
        "cwd": CWD,
        "parentSession": "parent",
        "seedLength": 3,
        "origin": "subagent",
        "delegationDepth": 2,
        "agentPreset": "reviewer",
    }
    backend.append_batch(full, [turn_start(0)], False)
    stored = backend.load_stored(SID)
    assert stored.meta == full and list(stored.meta) == list(full)
    minimal = {"version": 0, "id": "s2", "createdAt": 0}
    backend.append_batch(minimal, [turn_start(0)], False)
    assert backend.load_stored("s2").meta == minimal  # delegationDepth absent stays absent (§5.8)
    for bad in (1.5, -1, MAX_SAFE + 1, True, "1000"):
        with pytest.raises(PersistenceError, match="createdAt must be a non-negative safe integer"):
            backend.append_batch(meta("s3", createdAt=bad), [turn_start(0)], False)
    with pytest.raises(PersistenceError, match="cwd must be an absolute path"):
        backend.append_batch(meta("s3", cwd="relative/dir"), [turn_start(0)], False)
    assert backend.read_revision("s3") is None


def test_281_rejects_malformed_sqlite_row_primitives_generically(open_backend: Any, db: Path) -> None:
    # spec 8.10 #281 — session-row field errors, event-row field errors, invalid store_id.
    backend = open_backend()
    backend.append_batch(meta(), [turn_start(0), turn_end(1)], False)
    session_damage = {
        "incarnation = 'not-a-uuid'": "stored session incarnation must be a UUID",
        "origin = 'root'": "stored session origin must be subagent or null",
        "cwd = 'relative'": "stored session cwd must be absolute",
        "created_at = -5": "stored session createdAt must be a non-negative safe integer",
        "revision = -1": "stored session revision must be a non-negative safe integer",
        "seed_length = -1": "stored session seedLength must be a non-negative safe integer or null",
        "delegation_depth = -1": "stored session delegationDepth must be a non-negative safe integer or null",
        "id = ''": "stored session id must be a non-empty string",
    }
    for index, (assignment, message) in enumerate(session_damage.items()):
        victim = f"victim-{index}"
        backend.append_batch(meta(victim), [turn_start(0)], False)
        execute(db, f"UPDATE sessions SET {assignment} WHERE id = '{victim}'")
        target = "" if assignment.startswith("id =") else victim
        with pytest.raises(SessionPersistenceCorruptionError, match=message):
            backend.load_stored(target)
        listed = {item.id: item for item in backend.list_sessions()}
        assert listed[target].error_code == "SESSION_CORRUPT" and message in (listed[target].error_message or "")
    # Event-row primitives: a committed row (before the turn/end) with a non-text, non-blob data value.
    execute(db, "UPDATE events SET data = 5 WHERE seq = 0")
    with pytest.raises(SessionPersistenceCorruptionError, match="invalid committed physical row at seq 0") as info:
        backend.load_stored(SID)
    assert "stored data must be a string or blob" in str(info.value) and info.value.offset == 0
    # Store identity.
    execute(db, "UPDATE persistence_state SET store_id = 'nope'")
    with pytest.raises(PersistenceError, match="has no valid store identity"):
        open_backend().list_sessions()


def test_282_rejects_invalid_durable_metadata_before_exposing_a_session_header(open_backend: Any, db: Path) -> None:
    # spec 8.10 #282 — load refuses; listing reports the damaged session (never hides it, never fails).
    backend = open_backend()
    backend.append_batch(meta("a-good"), [turn_start(0)], False)
    backend.append_batch(meta("b-bad"), [turn_start(0)], False)
    backend.append_batch(meta("c-future", version=1), [turn_start(0)], False)
    execute(db, "UPDATE sessions SET origin = 'elsewhere' WHERE id = 'b-bad'")
    with pytest.raises(SessionPersistenceCorruptionError, match="origin must be subagent or null") as info:
        backend.load_stored("b-bad")
    assert info.value.location == str(db)
    with pytest.raises(SessionPersistenceCorruptionError):
        backend.read_revision("b-bad")
    listing = backend.list_sessions()
    assert [item.id for item in listing] == ["a-good", "b-bad", "c-future"]
    good, bad, future = listing
    assert good.ok and good.header == meta("a-good") and good.location == str(db) and good.revision
    assert bad.header is None and bad.error_code == "SESSION_CORRUPT" and bad.revision is None
    assert "origin must be subagent or null" in (bad.error_message or "")
    assert future.header == meta("c-future", version=1) and future.error_code == "SESSION_FORMAT_UNSUPPORTED"
    assert "written by a newer harness" in (future.error_message or "")


def test_283_uses_the_shared_persistence_application_identity(open_backend: Any, db: Path) -> None:
    # spec 8.10 #283
    assert APPLICATION_ID == 0x44534850 == 1146308688
    open_backend().list_sessions()
    with raw(db) as con:
        assert con.execute("PRAGMA application_id").fetchone()[0] == 0x44534850
        assert con.execute("PRAGMA user_version").fetchone()[0] == 17
        store_id = con.execute("SELECT store_id FROM persistence_state WHERE singleton = 1").fetchone()[0]
    assert uuid.UUID(store_id).version == 4


# --- §8.10 edge behavior ----------------------------------------------------------------------------------


def test_284_keeps_a_fresh_database_unopened_until_the_first_persistence_operation(open_backend: Any, db: Path) -> None:
    # spec 8.10 #284 — (the JS warning-filter half has no Python counterpart)
    backend = open_backend()
    assert db.parent.is_dir() and not db.exists()
    lock = backend.lock_writer(meta())  # locks live beside the database and do not open it
    lock.release()
    assert not db.exists()
    assert backend.list_sessions() == []
    assert db.exists() and (db.stat().st_mode & 0o777) == 0o600


def test_285_disposes_after_path_validation_without_opening_the_database(open_backend: Any, db: Path) -> None:
    # spec 8.10 #285
    backend = open_backend()
    backend.close()
    assert not db.exists()
    with pytest.raises(PersistenceError, match="closed"):
        backend.list_sessions()


def test_286_uses_constructor_defaults_and_exposes_locate_and_prepare_directly(open_backend: Any) -> None:
    # spec 8.10 #286 — "prepare" is the coordinator's; the backend side of it is load_stored.
    backend = open_backend()
    assert (backend.name, backend.supports_raw_artifacts) == ("session-persistence-sqlite", False)
    assert (backend.journal_mode, backend.busy_timeout_ms) == ("wal", 5000)
    assert backend.locate(meta()) is None
    with pytest.raises(PersistenceError, match="does not expose raw artifacts"):
        backend.read_raw(SID)
    backend.append_batch(meta(), [turn_start(0)], False)
    assert backend.load_stored(SID).meta == meta()
    for bad in ({"journal_mode": "memory"}, {"busy_timeout_ms": -1}, {"busy_timeout_ms": 2**31}, {"max_depth": 0}):
        with pytest.raises(ValueError):
            open_backend(**bad)


def test_287_keeps_empty_mutations_inert_and_rolls_back_a_repair_without_metadata(open_backend: Any, db: Path) -> None:
    # spec 8.10 #287
    backend = open_backend()
    backend.append_batch(meta(), [], False)
    backend.commit_repair(meta(), None, [])
    assert not db.exists()  # nothing to do: no transaction, not even an open
    backend.append_batch(meta(), [turn_start(0)], False)
    revision = backend.read_revision(SID)
    backend.append_batch(meta(), [], True)
    assert backend.read_revision(SID) == revision
    with pytest.raises(PersistenceError, match="session ghost metadata row is missing"):
        backend.commit_repair(meta("ghost"), None, [turn_end(0)])
    with pytest.raises(PersistenceError, match="session ghost metadata row is missing"):
        backend.append_batch(meta("ghost"), [turn_start(0)], True)
    assert physical(db, "ghost") == []


def test_288_rejects_torn_markers_damaged_logs_and_stale_closer_positions(open_backend: Any, db: Path) -> None:
    # spec 8.10 #288 — adapted to issue 7 defect 13: a damaged row is corruption, never a tail to delete.
    backend = open_backend()
    backend.append_batch(meta(), [turn_start(0), user(1)], False)
    with pytest.raises(PersistenceError, match="closer starts at seq 5, stored next seq is 2"):
        backend.commit_repair(meta(), None, [turn_end(5)])
    insert_row(db, 2, "assistant/chunk", "{torn")
    with pytest.raises(SessionPersistenceCorruptionError, match="invalid committed physical row at seq 2"):
        backend.commit_repair(meta(), None, [turn_end(3)])
    with pytest.raises(PersistenceError, match="SQLite rows cannot tear"):
        backend.commit_repair(meta(), 2, [turn_end(2)])
    assert len(physical(db)) == 3  # the refused repairs deleted nothing


def test_289_rejects_malformed_physical_tail_rows_before_appending(open_backend: Any, db: Path) -> None:
    # spec 8.10 #289
    backend = open_backend()
    backend.append_batch(meta(), [turn_start(0), user(1)], False)
    insert_row(db, 2, "assistant/chunk", "{torn")
    for first in (2, 3):
        with pytest.raises(
            SessionPersistenceCorruptionError, match=f"session {SID} has an invalid physical tail at seq 2"
        ):
            backend.append_batch(meta(), [ev("step/start", first, {"turn": 1, "step": 1})], True)
    insert_row(db, 3, "text-chunks", '{"turn":1}', ignorable=0)  # a malformed packed tail row as well
    with pytest.raises(PersistenceError, match="invalid physical tail at seq 2"):
        backend.append_batch(meta(), [ev("step/start", 4, {})], True)
    assert len(physical(db)) == 4


def test_290_rejects_missing_and_empty_store_identities(open_backend: Any, db: Path) -> None:
    # spec 8.10 #290 — the refusal repeats on every operation (a failed open is retried, issue 7 defect 16).
    open_backend().list_sessions()
    for statement in ("UPDATE persistence_state SET store_id = ''", "DELETE FROM persistence_state"):
        execute(db, statement)
        backend = open_backend()
        with pytest.raises(PersistenceError, match=f'session database at "{db}" has no valid store identity'):
            backend.list_sessions()
        with pytest.raises(PersistenceError, match="has no valid store identity"):
            backend.load_stored(SID)


def test_291_rejects_invalid_paths_during_service_initialization(tmp_path: Path) -> None:
    # spec 8.10 #291 — Python's platform error for a NUL byte is ValueError (JS: ERR_INVALID_ARG_VALUE).
    with pytest.raises(ValueError, match="null"):
        SqliteBackend(str(tmp_path / "bad\0dir" / "db.sqlite"))
    with pytest.raises(ValueError, match="null"):
        SqliteBackend(str(tmp_path / "db\0.sqlite"))


def test_292_rejects_non_files_and_symbolic_links(tmp_path: Path) -> None:
    # spec 8.10 #292 — directory, symlinked file, symlinked parent.
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    (home / "dir.sqlite").mkdir()
    with pytest.raises(PersistenceError, match="must be a regular file, not a symbolic link"):
        SqliteBackend(str(home / "dir.sqlite"))
    target = home / "real.sqlite"
    target.touch(mode=0o600)
    (home / "link.sqlite").symlink_to(target)
    with pytest.raises(PersistenceError, match="must be a regular file, not a symbolic link"):
        SqliteBackend(str(home / "link.sqlite"))
    (tmp_path / "linked-parent").symlink_to(home)
    with pytest.raises(PersistenceError, match="must be a real directory"):
        SqliteBackend(str(tmp_path / "linked-parent" / "db.sqlite"))


def test_293_rejects_permissive_files_and_writable_parents(tmp_path: Path) -> None:
    # spec 8.10 #293 — mode checks are stat-based, so they hold for root too (the JS test skips root).
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    loose = home / "loose.sqlite"
    loose.touch(mode=0o600)
    os.chmod(loose, 0o644)
    with pytest.raises(PersistenceError, match="must be owned by the current user and accessible only by that user"):
        SqliteBackend(str(loose))
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o770)
    with pytest.raises(PersistenceError, match="must be owned by the current user and not group/world-writable"):
        SqliteBackend(str(shared / "db.sqlite"))


def test_294_surfaces_database_creation_failures_after_path_validation(tmp_path: Path) -> None:
    # spec 8.10 #294
    parent = tmp_path / "gone"
    backend = SqliteBackend(str(parent / "db.sqlite"))
    parent.rmdir()
    with pytest.raises(StorageAccessError, match=r"ENOENT|ENOTDIR"):
        backend.list_sessions()
    parent.mkdir(mode=0o700)
    assert backend.list_sessions() == []  # issue 7 defect 16: a failed open is retried, never remembered
    backend.close()


# --- §8.12 ---------------------------------------------------------------------------------------------


def test_313_preserves_ignorable_logical_events_whose_names_match_physical_storage_tags(
    open_backend: Any, db: Path
) -> None:
    # spec 8.12 #313
    backend = open_backend()
    payload = {"turn": 1, "step": 1, "index": 0, "dt": [1, 1], "texts": ["a", "b", "c"]}
    events = [ev(tag, seq, payload, ignorable=True) for seq, tag in enumerate(TAGS)]
    backend.append_batch(meta(), events, False)
    rows = physical(db)
    assert [(row[2], row[7]) for row in rows] == [(tag, 1) for tag in TAGS]
    assert backend.load_stored(SID).events == events


TAGS = ("text-chunks", "reasoning-chunks", "tool-call-chunks")


def differential_log() -> list[dict[str, Any]]:
    """Every packed kind, a scalar fallback, an ignorable event and a closed turn (25 events).

    (An ignorable event *named* like a packed tag is SQLite-only, see #313: JSONL reads such a line as a
    malformed packed row, so it cannot take part in a differential run.)
    """
    return [
        turn_start(0),
        *(chunk(seq, f"r{seq}", kind="reasoning-delta") for seq in range(1, 5)),
        *(chunk(seq, f"t{seq}") for seq in range(5, 10)),
        chunk(10, "lonely", step=2),
        *(tool_chunk(seq, f'"{seq}', "call-1", "bash") for seq in range(11, 15)),
        *(tool_chunk(seq, f'"{seq}', "call-2") for seq in range(15, 19)),
        ev("plugin/note", 19, {"opaque": True}, ignorable=True),
        user(20, "later"),
        ev("step/end", 21, {"turn": 1, "step": 1}),
        chunk(22, "a"),
        chunk(23, "b"),
        turn_end(24),
    ]


def partition(events: list[Any], sizes: list[int]) -> list[list[Any]]:
    """Split ``events`` into consecutive batches whose sizes cycle through ``sizes``."""
    batches, start, index = [], 0, 0
    while start < len(events):
        size = sizes[index % len(sizes)]
        batches.append(events[start : start + size])
        start += size
        index += 1
    return batches


def packed_kinds(db: Path, session_id: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for row in physical(db, session_id):
        if row[7] == 0:
            counts[row[2]] = counts.get(row[2], 0) + 1
    return counts


def jsonl_row_kinds(batches: list[list[Any]]) -> dict[str, int]:
    """The packed rows the session-core (JSONL) codec writes for the same batches."""
    from agentlog.kernel.chunkrows import pack_chunk_runs

    counts: dict[str, int] = {}
    for batch in batches:
        for record in pack_chunk_runs(batch):
            if "seq0" in record:
                counts[record["type"]] = counts.get(record["type"], 0) + 1
    return counts


def jsonl_backend(root: Path, compression: str) -> Any:
    jsonl = pytest.importorskip("agentlog.persistence.jsonl")
    return jsonl.JsonlBackend(str(root), compression=compression)


@pytest.mark.parametrize("compression", ["zstd", "none"])
def test_314_matches_jsonl_for_every_packed_kind_scalar_fallback_suffix_partition_and_reopen(
    open_backend: Any, db: Path, tmp_path: Path, compression: str
) -> None:
    # spec 8.12 #314
    events = differential_log()
    layouts = {"one-batch": [len(events)], "one-at-a-time": [1], "cyclic": [2, 1, 5, 3], "uneven": [5, 6, 2, 5, 7]}
    expected_kinds = {
        "one-batch": {"reasoning-chunks": 1, "text-chunks": 1, "tool-call-chunks": 2},
        "one-at-a-time": {},
        "cyclic": {"text-chunks": 1, "tool-call-chunks": 1},
        "uneven": {"reasoning-chunks": 1, "text-chunks": 1, "tool-call-chunks": 1},
    }
    reference = jsonl_backend(tmp_path / f"jsonl-{compression}", compression)
    backend = open_backend()
    try:
        for layout, sizes in layouts.items():
            session_meta = meta(layout, delegationDepth=0)
            for index, batch in enumerate(partition(events, sizes)):
                backend.append_batch(session_meta, batch, index > 0)
                reference.append_batch(session_meta, batch, index > 0)
            assert packed_kinds(db, layout) == expected_kinds[layout], layout
            assert packed_kinds(db, layout) == jsonl_row_kinds(partition(events, sizes)), layout
            ours, theirs = backend.load_stored(layout), reference.load_stored(layout)
            assert dumps(ours.events) == dumps(theirs.events) == dumps(events)
            assert ours.meta == theirs.meta and ours.torn_marker is None
            for from_seq in range(len(events) + 2):
                assert dumps(backend.load_stored_from(layout, from_seq).events) == dumps(theirs.events[from_seq:])
            revision = backend.read_revision(layout)
            assert ours.revision == revision == backend.read_revision(layout)
        assert [row[1] for row in physical(db, "one-batch") if row[7] == 1] == [19]  # one ignorable row
        reopened = open_backend()
        assert [item.header for item in reopened.list_sessions()] == [item.header for item in reference.list_sessions()]
        for layout in layouts:
            assert reopened.load_stored(layout).events == events
            assert reopened.read_revision(layout) == backend.read_revision(layout)
    finally:
        reference.close()


def _chunk_strategy(seq: int) -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(
        st.builds(
            lambda t, s, k: chunk(seq, t, kind=k, step=s),
            st.text(max_size=3),
            st.sampled_from([1, 2]),
            st.sampled_from(["text-delta", "reasoning-delta"]),
        ),
        st.builds(
            lambda a, c, n: tool_chunk(seq, a, c, n),
            st.text(max_size=3),
            st.sampled_from(["c1", "c2"]),
            st.sampled_from([None, "bash"]),
        ),
        st.just(ev("step/start", seq, {"turn": 1, "step": 1})),
        st.builds(lambda text: user(seq, text), st.text(max_size=8)),
        st.builds(
            lambda seqs: ev("assistant/message", seq, {"text": "m"}, sourceEventSeqs=seqs, surfaceOp="append"),
            st.lists(st.integers(0, 2**40), max_size=4),
        ),
        st.just(ev("text-chunks", seq, {"x": 1}, ignorable=True)),
        st.just(turn_end(seq)),
    )


@st.composite
def logs_and_partitions(draw: st.DrawFn) -> tuple[list[dict[str, Any]], list[int]]:
    length = draw(st.integers(1, 40))
    events = [draw(_chunk_strategy(seq)) for seq in range(length)]
    sizes = draw(st.lists(st.integers(1, 12), min_size=1, max_size=6))
    return events, sizes


@seed(0x5A17E)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=logs_and_partitions())
def test_315_matches_the_reference_across_randomized_logical_logs_and_append_partitions(
    tmp_path_factory: pytest.TempPathFactory, case: tuple[list[dict[str, Any]], list[int]]
) -> None:
    # spec 8.12 #315 — the reference is the memory backend (and JSONL/zstd when it is installed).
    events, sizes = case
    folder = tmp_path_factory.mktemp("prop")
    backend: Any = SqliteBackend(str(folder / "db" / "s.sqlite"))
    memory = MemoryBackend()
    try:
        for index, batch in enumerate(partition(events, sizes)):
            backend.append_batch(meta(), batch, index > 0)
            memory.append_batch(meta(), batch, index > 0)
        stored = backend.load_stored(SID)
        assert stored.torn_marker is None
        assert dumps(stored.events) == b"[" + b",".join(memory.stored_lines(SID)) + b"]"
        for from_seq in {0, len(events) // 2, len(events) - 1, len(events)}:
            assert backend.load_stored_from(SID, from_seq).events == stored.events[from_seq:]
    finally:
        backend.close()


def test_316_keeps_statements_and_query_assembly_out_of_python_files() -> None:
    # spec 8.12 #316 — every statement handed to sqlite3 comes from the resource loader (``SQL[...]``);
    # the one wrapper that forwards a statement (``_fetchall``) is itself only called with ``SQL[...]``.
    def statement_of(call: ast.Call) -> ast.expr | None:
        name = call.func.attr if isinstance(call.func, ast.Attribute) else ""
        if name in {"execute", "executemany", "executescript"}:
            return call.args[0]
        if name == "_fetchall":
            return call.args[1]
        return None

    for path in sorted(SRC.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef))
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        wrapper_args = {
            arg.arg
            for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef) and node.name == "_fetchall"
            for arg in node.args.args
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and (statement := statement_of(node)) is not None:
                source = ast.unparse(statement)
                allowed = source.startswith(("SQL[", "_JOURNAL_STATEMENT[")) or source in {"statement"} | wrapper_args
                assert allowed, f"{path.name}:{node.lineno} passes {source!r} as SQL"
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                text = node.value.upper()
                for keyword in ("SELECT ", "INSERT INTO", "UPDATE SESSIONS", "DELETE FROM", "CREATE TABLE", "PRAGMA "):
                    assert keyword not in text, f"{path.name}:{node.lineno} holds SQL text"


def test_317_keeps_resource_text_static_instead_of_interpolated() -> None:
    # spec 8.12 #317
    resources = sorted((SRC / "sql").glob("*.sql"))
    assert [path.name for path in resources] == ["schema.sql", "statements.sql"]
    for path in resources:
        text = path.read_text(encoding="utf-8")
        for marker in ("${", "{", "%s", "%(", "format("):
            assert marker not in text, (path.name, marker)
    assert set(SQL) >= {"schema", "insert_event", "select_rows", "upsert_session", "journal_mode_wal"}


def test_318_loads_packaged_sql_resources_from_the_published_entry(tmp_path: Path) -> None:
    # spec 8.12 #318 — adapted: a fresh interpreter imports the package entry and lists `:memory:`; the
    # build declares the resources as package data so a wheel ships them.
    script = "from agentlog.persistence.sqlite import SqliteBackend; print(SqliteBackend(':memory:').list_sessions())"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert (done.returncode, done.stdout.strip(), done.stderr) == (0, "[]", "")
    pyproject = (SRC.parents[3] / "pyproject.toml").read_text(encoding="utf-8")
    assert '"persistence/sqlite/sql/*.sql"' in pyproject


# --- beyond the checklist ---------------------------------------------------------------------------------


def test_a_20000_deep_data_value_round_trips(open_backend: Any) -> None:
    backend = open_backend()
    deep: Any = {"leaf": True}
    for _ in range(20_000):
        deep = {"d": [deep]}
    event = ev("custom/deep", 0, deep)
    backend.append_batch(meta(), [event], False)
    restored = backend.load_stored(SID).events[0]
    assert dumps(restored) == dumps(event)


def test_hand_inserted_malformed_rows_are_typed_corruption_wherever_they_sit(open_backend: Any, db: Path) -> None:
    backend = open_backend()
    backend.append_batch(meta(), [turn_start(0), user(1), turn_end(2)], False)
    # Damage after the last turn/end is corruption too (issue 7 defects 8 and 13): never cut, never replaced.
    con = raw(db)
    con.execute(
        "INSERT INTO events (session_id, seq, type, time, data) "
        "VALUES (?, 3, 'turn/start', 1003, CAST(X'FF22' AS TEXT))",
        (SID,),
    )  # not UTF-8: Python's sqlite3 would fail the whole query on it
    con.close()
    with pytest.raises(SessionPersistenceCorruptionError, match="invalid committed physical row at seq 3") as info:
        backend.load_stored(SID)
    assert "not valid UTF-8 text (invalid byte 0xFF at byte offset 0 of the value)" in str(info.value)
    execute(db, "DELETE FROM events WHERE seq = 3")
    # Committed damage (a later turn/end exists): typed corruption naming the database and the seq.
    backend.append_batch(meta(), [turn_start(3), turn_end(4)], True)
    execute(db, "UPDATE events SET source_event_seqs = X'80' WHERE seq = 1")
    with pytest.raises(SessionPersistenceCorruptionError, match="invalid committed physical row at seq 1") as info:
        backend.load_stored(SID)
    err = info.value
    assert (err.code, err.location, err.offset) == ("SESSION_CORRUPT", str(db), 1)
    assert "truncated varint" in str(err) and "agentlog export" in str(err)
    assert backend.load_stored_from(SID, 3).events == [turn_start(3), turn_end(4)]  # the suffix does not span it
    with pytest.raises(SessionPersistenceCorruptionError):
        backend.load_stored_from(SID, 1)
    with pytest.raises(SessionPersistenceCorruptionError):
        backend.commit_repair(meta(), None, [ev("x/y", 5)])  # repair never rewrites a damaged log


def test_a_second_backend_instance_cannot_take_a_held_writer_lock(open_backend: Any, db: Path) -> None:
    first, second = open_backend(), open_backend()
    lock = first.lock_writer(meta())
    with pytest.raises(SessionLockedError) as info:
        second.lock_writer(meta())
    assert info.value.code == "SESSION_LOCKED"
    with pytest.raises(SessionLockedError):
        first.lock_writer(meta())  # the same instance is a second holder too
    other = second.lock_writer(meta("other/../id"))  # ids are encoded into one safe file name
    assert (Path(str(db) + ".locks") / "other~002F..~002Fid.lock").exists()
    lock.release()
    lock.release()  # idempotent
    again = second.lock_writer(meta())
    again.release()
    other.release()
    held = first.lock_writer(meta())
    first.close()  # closing the backend releases what it still holds
    second.lock_writer(meta()).release()
    held.release()


def test_memory_databases_use_an_in_process_lock_set(open_backend: Any) -> None:
    first, second = open_backend(":memory:"), open_backend(":memory:")
    lock = first.lock_writer(meta())
    with pytest.raises(SessionLockedError):
        first.lock_writer(meta())
    second.lock_writer(meta()).release()  # another :memory: database is another store
    lock.release()
    first.lock_writer(meta()).release()


def test_a_competing_process_holding_the_lock_is_refused_at_once(open_backend: Any, db: Path) -> None:
    backend = open_backend()
    lock_path = Path(str(db) + ".locks") / f"{SID}.lock"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                f"""
                import fcntl, os, sys, time
                os.makedirs({str(lock_path.parent)!r}, exist_ok=True)
                fd = os.open({str(lock_path)!r}, os.O_RDWR | os.O_CREAT, 0o600)
                fcntl.flock(fd, fcntl.LOCK_EX)
                print("held", flush=True)
                sys.stdin.read()
                """
            ),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(SessionLockedError):
            backend.lock_writer(meta())
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(10)
    backend.lock_writer(meta()).release()  # the kernel dropped the dead holder's lock


WRITER = textwrap.dedent(
    """
    import sys
    from agentlog.persistence.sqlite.backend import SqliteBackend
    path, sid, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    backend = SqliteBackend(path)  # default busy timeout (5 s)
    meta = {"version": 0, "id": sid, "createdAt": 1}
    for seq in range(count):
        event = {"type": "assistant/chunk" if seq % 3 else "step/start", "seq": seq, "time": seq,
                 "data": {"turn": 1, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": sid}}}
        backend.append_batch(meta, [event], seq > 0)
        if seq % 10 == 0:
            backend.list_sessions()
            backend.load_stored_from(sid, max(0, seq - 5))
    backend.close()
    print("done")
    """
)


def test_two_processes_append_different_sessions_into_one_file_concurrently(tmp_path: Path) -> None:
    # Both processes also race to create and initialise the (absent) database file.
    db = tmp_path / "shared" / "sessions.sqlite"
    db.parent.mkdir(mode=0o700)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(db), name, "200"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("alpha", "beta")
    ]
    outputs = [proc.communicate(timeout=120) for proc in procs]
    for proc, (out, err) in zip(procs, outputs, strict=True):
        assert "database is locked" not in err
        assert proc.returncode == 0 and out.strip() == "done", err
    backend: Any = SqliteBackend(str(db))
    try:
        assert [item.id for item in backend.list_sessions()] == ["alpha", "beta"]
        for name in ("alpha", "beta"):
            assert [e["seq"] for e in backend.load_stored(name).events] == list(range(200))
    finally:
        backend.close()


def test_threads_share_one_backend_safely(open_backend: Any) -> None:
    backend = open_backend()
    errors: list[BaseException] = []

    def writer(name: str) -> None:
        try:
            for seq in range(60):
                backend.append_batch(meta(name), [ev("step/start", seq, {"n": seq})], seq > 0)
                backend.load_stored_from(name, max(0, seq - 2))
                backend.list_sessions()
        except BaseException as err:  # pragma: no cover - reported below
            errors.append(err)

    threads = [threading.Thread(target=writer, args=(f"t{index}",)) for index in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    assert all(len(backend.load_stored(f"t{index}").events) == 60 for index in range(4))


def _counter_of(revision: str) -> str:
    """``<n>`` of a revision's ``:revision:<n>:tail:<digest>`` part."""
    return revision.rsplit(":tail:", 1)[0].rsplit(":revision:", 1)[1]


def test_revisions_name_the_store_the_incarnation_the_change_counter_and_the_tail(open_backend: Any, db: Path) -> None:
    backend = open_backend()
    assert backend.read_revision(SID) is None and backend.load_stored(SID) is None
    backend.append_batch(meta(), [turn_start(0)], False)
    first = backend.read_revision(SID)
    info = db.stat()
    assert first is not None and first.startswith(f"file:{info.st_dev}:{info.st_ino}:")
    assert _counter_of(first) == "1" and ":incarnation:" in first and ":store:" in first and ":tail:" in first
    assert backend.load_stored(SID).revision == first == backend.list_sessions()[0].revision
    assert backend.list_revisions() == {SID: first}
    assert backend.load_stored_from(SID, 0).revision == backend.read_prefix(SID).revision == first
    backend.append_batch(meta(), [user(1)], True)
    second = backend.read_revision(SID)
    assert _counter_of(second) == "2" and second.split(":tail:")[0] == first.split(":tail:")[0][: -len("1")] + "2"
    assert backend.load_stored_from(SID, 5).revision == second  # a seek past the end names the same log
    backend.commit_repair(meta(), None, [ev("x/y", 2)])
    assert _counter_of(backend.read_revision(SID)) == "3"
    execute(db, "PRAGMA foreign_keys = ON", "DELETE FROM sessions")  # cascades to the events
    backend.append_batch(meta(), [turn_start(0)], False)
    recreated = backend.read_revision(SID)
    assert _counter_of(recreated) == "1" and recreated != first  # a new incarnation
    memory = open_backend(":memory:")
    memory.append_batch(meta(), [turn_start(0)], False)
    assert memory.read_revision(SID).startswith("memory:store:")


@pytest.mark.parametrize("restore", ["copy-over", "replace"])
def test_a_database_restored_from_a_backup_never_repeats_a_revision_of_another_log(
    open_backend: Any, db: Path, restore: str
) -> None:
    """A backup restored over the database (in place, or renamed over it) brings back the backup's
    incarnation and change counter; the next batch then reaches a counter already handed out for the
    log the restore threw away. The revision must still differ from every revision that log had."""
    backend = open_backend()
    backend.append_batch(meta(), [turn_start(0)], False)
    backend.close()
    backup = db.read_bytes()
    backend = open_backend()
    backend.append_batch(meta(), [user(1)], True)
    lost = backend.read_revision(SID)
    backend.close()
    if restore == "copy-over":
        with open(db, "r+b") as fh:
            fh.write(backup)
            fh.truncate()
    else:
        staged = db.with_name("staged")
        staged.write_bytes(backup)
        staged.chmod(0o600)
        os.replace(staged, db)
    backend = open_backend()
    backend.append_batch(meta(), [ev("other/event", 1, {"other": True})], True)
    restored = backend.read_revision(SID)
    assert _counter_of(restored) == _counter_of(lost)
    assert restored != lost
    assert backend.list_sessions()[0].revision == backend.load_stored(SID).revision == restored
    assert backend.list_revisions() == {SID: restored}


def test_seek_reads_validate_their_argument_and_absent_sessions(open_backend: Any) -> None:
    backend = open_backend()
    assert backend.load_stored_from(SID, 0) is None
    for bad in (-1, 1.5, True, MAX_SAFE + 1):
        with pytest.raises(PersistenceError, match="non-negative safe integer"):
            backend.load_stored_from(SID, bad)


def test_refused_appends_write_nothing(open_backend: Any, db: Path) -> None:
    backend = open_backend()
    backend.append_batch(meta(), [turn_start(0)], False)
    revision = backend.read_revision(SID)
    bad_batches = [
        [ev("a/b", 1, {}, sourceEventSeqs=[-1])],
        [ev("a/b", 1, {}), ev("a/b", 3, {})],
        [ev("a/b", 1, {}, extra=True)],
        [ev("a/b", 1, {}), {"type": "a/b", "seq": 2, "time": 1.5, "data": {}}],
    ]
    for batch in bad_batches:
        with pytest.raises(PersistenceError):
            backend.append_batch(meta(), batch, True)
    assert backend.read_revision(SID) == revision and len(physical(db)) == 1
