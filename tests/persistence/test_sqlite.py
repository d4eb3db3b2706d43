"""SQLite session backend, schema 17 (spec ``persistence.md`` §5; checklist §8.10 and §8.12).

Every checklist test is named after its item and carries a ``# spec 8.10 #<n>`` comment. The original's
tests drive the assembled plugin (Cordis config, the built bundle); here the same behaviour is pinned on
``SqliteBackend`` directly, which is what the coordinator calls. Physical facts (rows, rowids, pragmas)
are read with a separate ``sqlite3`` connection, and damage is inserted by hand the way a foreign or
crashed writer would leave it.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
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

import agentlog.persistence.sqlite._codec as sqlite_codec
import agentlog.persistence.sqlite._connection as sqlite_connection
import agentlog.persistence.sqlite.backend as sqlite_module
from _full_disk import fill, remount, small_tmpfs
from agentlog import SessionStore
from agentlog.errors import (
    InvalidSessionIdError,
    PersistenceError,
    SessionFormatUnsupportedError,
    SessionLockedError,
    SessionPersistenceCorruptionError,
    StorageAccessError,
    StoreNotFoundError,
)
from agentlog.kernel.jsoncodec import dumps
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.memory import MemoryBackend
from agentlog.persistence.sqlite.backend import APPLICATION_ID, SQL, SqliteBackend, select_journal_mode
from agentlog.testing import builders

from .conftest import (
    append_closed_turn,
    chunk_event,
    closed_turn,
    header,
    live_meta,
    step_start,
    user_event,
)

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


# Issue 7 ("Trust") regressions of the SQLite backend, one test (or a few) per defect, named after it.
#
# Everything runs under real conditions: real database files damaged by hand (foreign ``sqlite3``
# connections, bytes overwritten after a checkpoint), a small tmpfs for a full disk, a read-only
# remount, an unprivileged child process for permission denied, ``RLIMIT_AS`` in a child process for
# memory pressure. Each fault is cleaned up afterwards; a test skips (saying why) only where the
# machine forbids the condition (not root, no tmpfs).


SRC_ROOT = Path(__file__).resolve().parents[2] / "src"


# --- helpers -------------------------------------------------------------------------------------------




@pytest.fixture
def opened_backends() -> Iterator[list[Any]]:
    created: list[Any] = []
    yield created
    for item in reversed(created):
        with contextlib.suppress(Exception):
            item.close()


def open_sqlite(opened_backends: list[Any], path: Path | str, **options: Any) -> SqliteBackend:
    backend = SqliteBackend(str(path), **options)
    opened_backends.append(backend)
    return backend


def coordinator(opened_backends: list[Any], path: Path | str, **options: Any) -> PersistenceCoordinator:
    backend = open_sqlite(opened_backends, path)
    made = PersistenceCoordinator(SessionStore(), backend, batch_delay_ms=20, **options)
    opened_backends.append(made)
    return made


def open_turn(rows: int) -> list[dict[str, Any]]:
    """A closed first turn, then an open turn of ``rows`` events in total (user message, step, chunks)."""
    log = closed_turn(0)
    seq = len(log)
    log += [builders.turn_start(seq, 2), user_event(seq + 1, "again"), step_start(seq + 2, 2)]
    while len(log) < rows:
        # Alternating texts and kinds keep every chunk its own scalar row (one physical row per event).
        log.append(chunk_event(len(log), f"c{len(log)}", turn=2, step=1 + len(log) % 2))
    return log


def write(opened_backends: list[Any], db: Path, events: list[dict[str, Any]], session_id: str = SID) -> None:
    writer = open_sqlite(opened_backends, db)
    writer.append_batch(header(session_id), events, False)
    writer.close()


def row_count(db: Path, session_id: str = SID) -> int:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return int(con.execute("SELECT COUNT(*) FROM events WHERE session_id = ?", (session_id,)).fetchone()[0])
    finally:
        con.close()


def foreign(db: Path, statement: str, params: tuple[Any, ...] = ()) -> None:
    """Damage the file the way a foreign writer would (then checkpoint, so the bytes are in the file)."""
    con = sqlite3.connect(str(db), isolation_level=None)
    try:
        con.execute(statement, params)
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        con.close()


def digest(*paths: Path) -> list[str | None]:
    return [hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None for path in paths]


def run_child(script: str, *args: str, timeout: float = 60) -> Any:
    """Run ``script`` in a fresh interpreter; its last stdout line is JSON."""
    env = {**os.environ, "PYTHONPATH": str(SRC_ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), *args], capture_output=True, text=True, timeout=timeout, env=env
    )
    assert done.returncode == 0, (done.returncode, done.stdout[-2000:], done.stderr[-4000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_as(user: int, work: Any) -> Any:
    """``work()`` in a forked child running as ``user`` (the interpreter may live where that user cannot
    read, so no new one is started); its JSON result comes back through a pipe."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        status = 1
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(user)
            os.setuid(user)
            os.write(write_end, json.dumps(work()).encode())
            status = 0
        finally:
            os._exit(status)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as fh:
        payload = fh.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0 and payload, (status, payload)
    return json.loads(payload)


@pytest.fixture
def small_fs() -> Iterator[Path]:
    """A 1 MiB tmpfs: a disk that can really be filled."""
    with small_tmpfs("1m") as point:
        yield point


@pytest.fixture
def ro_fs() -> Iterator[Path]:
    """A tmpfs that the test remounts read-only with :func:`remount`."""
    with small_tmpfs("8m") as point:
        yield point


# --- defect 8: bytes that are not UTF-8 --------------------------------------------------------------------


def test_non_utf8_bytes_in_a_committed_row_are_typed_corruption_naming_the_row(
    opened_backends: list[Any], db: Path
) -> None:
    write(opened_backends, db, open_turn(12))
    # seq 6 sits inside the open last turn with valid rows after it: the original cut it (and every
    # later row) as a torn tail, the U+FFFD path of other readers "accepted" it. Neither may happen.
    foreign(db, "UPDATE events SET data = CAST(X'7B227475726E223A22FF227D' AS TEXT) WHERE seq = 6")
    before = digest(db)
    backend = open_sqlite(opened_backends, db)
    with pytest.raises(SessionPersistenceCorruptionError) as info:
        backend.load_stored(SID)
    err = info.value
    assert err.code == "SESSION_CORRUPT" and err.offset == 6 and err.location == str(db)
    assert "invalid committed physical row at seq 6" in str(err)
    assert "invalid byte 0xFF at byte offset 9 of the value" in str(err)
    with pytest.raises(SessionPersistenceCorruptionError, match="seq 6"):
        coordinator(opened_backends, db).load(SID)  # resume: typed, nothing repaired
    opened_backends.pop().close()
    backend.close()
    assert digest(db) == before and row_count(db) == 12


def test_a_compressed_value_that_is_not_utf8_is_typed_corruption(opened_backends: list[Any], db: Path) -> None:
    import zstandard

    write(opened_backends, db, open_turn(8))
    blob = zstandard.ZstdCompressor(level=3).compress(b'{"turn":2,"text":"\xc3\x28"}' + b" " * 5000)
    foreign(db, "UPDATE events SET data = ? WHERE seq = 5", (blob,))
    with pytest.raises(SessionPersistenceCorruptionError, match="seq 5") as info:
        open_sqlite(opened_backends, db).load_stored(SID)
    assert "not valid UTF-8 (byte offset 18 of the decompressed value)" in str(info.value)


# --- defect 12: memory pressure ------------------------------------------------------------------------------

_OOM_CHILD = """
import gc, json, os, resource, sys
from agentlog.persistence.sqlite.backend import SqliteBackend
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog import SessionStore

path, sid = sys.argv[1], sys.argv[2]
def vm_bytes():
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
outcomes = []
for extra_mb in (2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 512):
    backend = SqliteBackend(path, read_only=True)
    backend.list_sessions()  # open outside the cap: the cap is for the load
    reader = PersistenceCoordinator(SessionStore(), SqliteBackend(path, read_only=True))
    reader.list()
    gc.collect()
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (vm_bytes() + extra_mb * 2**20, hard))
    try:
        try:
            outcome = ["ok", len(backend.load_stored(sid).events)]
        except BaseException as err:
            outcome = [getattr(err, "code", type(err).__name__), str(err)[:200]]
        try:
            reader_outcome = ["ok", len(reader.inspect(sid).events)]  # what show/export read
        except BaseException as err:
            reader_outcome = [getattr(err, "code", type(err).__name__), str(err)[:200]]
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    outcomes.append([extra_mb, outcome, reader_outcome])
    reader.close()
    backend.close()
print(json.dumps(outcomes))
"""


def test_out_of_memory_while_loading_is_resource_exhausted_and_touches_nothing(
    opened_backends: list[Any], db: Path
) -> None:
    # 43 acknowledged events, 34 of them ~600 KB of JSON each.
    log = open_turn(6)
    for _ in range(34):
        text = os.urandom(300_000).hex()  # hex compresses about 2:1, so these rows are zstd BLOBs
        log.append(chunk_event(len(log), text, turn=2, step=1 + len(log) % 2))
    write(opened_backends, db, log)
    before = digest(db)
    outcomes = run_child(_OOM_CHILD, str(db), SID, timeout=240)
    codes = {code for _, (code, _), _ in outcomes} | {code for _, _, (code, _) in outcomes}
    assert codes <= {"ok", "RESOURCE_EXHAUSTED"}, outcomes  # never SESSION_CORRUPT, never a bare error
    assert "RESOURCE_EXHAUSTED" in codes, outcomes  # the cap really bit somewhere
    assert ["ok", len(log)] in [outcome for _, outcome, _ in outcomes], outcomes  # with room, all of it loads
    assert digest(db) == before and row_count(db) == len(log)  # nothing truncated, nothing repaired


# --- defect 13: repair never deletes committed rows -------------------------------------------------------------


@pytest.mark.parametrize(
    "damage",
    [
        "UPDATE events SET data = '{not json' WHERE seq = 17",
        "UPDATE events SET type = '' WHERE seq = 17",
        "DELETE FROM events WHERE seq = 17",  # a seq gap with valid rows after it
    ],
    ids=["malformed-row", "invalid-column", "seq-gap"],
)
def test_repair_keeps_rows_after_a_damaged_one(opened_backends: list[Any], db: Path, damage: str) -> None:
    write(opened_backends, db, open_turn(38))
    foreign(db, damage)
    count = row_count(db)
    before = digest(db)
    backend = open_sqlite(opened_backends, db)
    found_at = 18 if damage.startswith("DELETE") else 17  # a gap is found at the row after it
    with pytest.raises(SessionPersistenceCorruptionError, match=f"invalid committed physical row at seq {found_at}"):
        backend.load_stored(SID)
    reader = coordinator(opened_backends, db)
    for attempt in (reader.load, reader.resume, reader.inspect):
        with pytest.raises(SessionPersistenceCorruptionError, match=f"seq {found_at}"):
            attempt(SID)
    partial = backend.read_prefix(SID)  # what export --partial writes: the prefix, and where it stops
    assert partial is not None and partial.torn_offset is None and partial.meta == header()
    assert [event["seq"] for event in partial.events] == list(range(17))
    assert partial.damage is not None and partial.damage.code == "SESSION_CORRUPT"
    assert partial.damage.offset == found_at
    reader.close()
    backend.close()
    assert row_count(db) == count and digest(db) == before  # 38 (or 37) rows stay 38 (or 37)


def test_a_damaged_last_row_is_corruption_not_a_torn_tail(opened_backends: list[Any], db: Path) -> None:
    # "A SQLite row cannot tear": even the very last row is a complete committed row if it exists.
    write(opened_backends, db, open_turn(10))
    foreign(
        db, "INSERT INTO events (session_id, seq, type, time, data) VALUES (?, 10, 'assistant/chunk', 1, '{x')", (SID,)
    )
    backend = open_sqlite(opened_backends, db)
    with pytest.raises(SessionPersistenceCorruptionError, match="seq 10"):
        backend.load_stored(SID)
    with pytest.raises(SessionPersistenceCorruptionError, match="seq 10"):
        coordinator(opened_backends, db).load(SID)
    with pytest.raises(PersistenceError, match="SQLite rows cannot tear"):
        backend.commit_repair(header(), 10, [])
    assert row_count(db) == 11
    # An intact log never carries a torn marker (the coordinator's truncation never applies to SQLite).
    write(opened_backends, db, open_turn(6), "intact")
    assert backend.load_stored("intact").torn_marker is None
    intact = backend.read_prefix("intact")
    assert intact is not None and intact.damage is None and len(intact.events) == len(open_turn(6))


# --- defect 16: never acknowledge what is not in the store -----------------------------------------------------


@pytest.mark.parametrize("journal_mode", ["wal", "delete"])
def test_flush_after_the_database_file_was_deleted_is_refused(
    opened_backends: list[Any], db: Path, journal_mode: str
) -> None:
    backend = open_sqlite(opened_backends, db, journal_mode=journal_mode)
    backend.append_batch(header(), closed_turn(0), False)
    for path in db.parent.iterdir():
        if path.name.startswith(db.name) and path.is_file():
            path.unlink()  # the database (and its -wal/-shm) is gone while the backend holds it open
    with pytest.raises(StorageAccessError, match="deleted or replaced while this process had it open") as info:
        backend.append_batch(header(), [builders.turn_start(len(closed_turn(0)), 2)], True)
    assert info.value.code == "STORAGE_IO" and info.value.path == str(db)
    # The next operation reopens the path: a new, empty database — the old session is not there.
    assert backend.load_stored(SID) is None


@pytest.mark.parametrize("journal_mode", ["wal", "delete"])
def test_a_replaced_database_file_is_detected_before_commit(
    opened_backends: list[Any], db: Path, journal_mode: str
) -> None:
    backend = open_sqlite(opened_backends, db, journal_mode=journal_mode)
    backend.append_batch(header(), closed_turn(0), False)
    other = db.parent / "other.sqlite"
    write(opened_backends, other, closed_turn(0), "elsewhere")
    os.replace(other, db)  # e.g. a backup restored over the live file
    with pytest.raises(StorageAccessError, match="deleted or replaced"):
        backend.append_batch(header(), [builders.turn_start(len(closed_turn(0)), 2)], True)
    if journal_mode == "delete":  # (in WAL mode the old -wal file beside it is SQLite's own hazard)
        assert [item.id for item in backend.list_sessions()] == ["elsewhere"]  # reopened: the file at the path


def test_a_failed_first_open_is_retried_and_buffered_events_are_kept(
    opened_backends: list[Any], small_fs: Path
) -> None:
    db = small_fs / "store" / "sessions.sqlite"
    db.parent.mkdir(mode=0o700)
    filler = fill(small_fs)  # the disk is full before the database is ever opened
    reader = coordinator(opened_backends, db)
    with pytest.raises(StorageAccessError) as info:
        reader.store.create(SID, meta=live_meta())  # create reads the store: its first open fails
    assert info.value.code == "STORAGE_FULL", info.value
    filler.unlink()
    session = reader.store.create(SID, meta=live_meta())  # the same backend opens now: nothing remembered
    filler = fill(small_fs)
    append_closed_turn(session)
    with pytest.raises(StorageAccessError) as info:
        reader.store.flush(session)
    assert info.value.code == "STORAGE_FULL", info.value
    filler.unlink()
    reader.close()  # the buffered events are written at close, not dropped
    stored = open_sqlite(opened_backends, db).load_stored(SID)
    assert stored is not None and [e["seq"] for e in stored.events] == [e["seq"] for e in session.events]


# --- defect 18: typed OS errors ------------------------------------------------------------------------------------


def test_a_directory_at_the_database_path_is_storage_not_a_file(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "db.sqlite").mkdir(parents=True, mode=0o700)
    with pytest.raises(StorageAccessError, match="must be a regular file") as info:
        SqliteBackend(str(home / "db.sqlite"))
    assert info.value.code == "STORAGE_NOT_A_FILE" and info.value.path == str(home / "db.sqlite")


def test_a_file_where_a_directory_belongs_is_storage_not_a_directory(
    opened_backends: list[Any], tmp_path: Path
) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("not a directory")
    for path in (blocker / "db.sqlite", blocker / "deeper" / "db.sqlite"):
        with pytest.raises(StorageAccessError) as info:
            SqliteBackend(str(path))
        assert info.value.code == "STORAGE_NOT_A_DIRECTORY", info.value
        assert str(blocker) in str(info.value)
    # The writer lock folder is a file.
    db = tmp_path / "db" / "sessions.sqlite"
    backend = open_sqlite(opened_backends, db)
    backend.append_batch(header(), closed_turn(0), False)
    Path(str(db) + ".locks").write_text("in the way")
    with pytest.raises(StorageAccessError) as info:
        backend.lock_writer(header())
    assert info.value.code == "STORAGE_NOT_A_DIRECTORY" and info.value.path == str(db) + ".locks"


def test_disk_full_during_flush_is_storage_full_and_the_retry_has_no_gap(
    opened_backends: list[Any], small_fs: Path
) -> None:
    db = small_fs / "store" / "sessions.sqlite"
    backend = open_sqlite(opened_backends, db)
    log = closed_turn(0)
    backend.append_batch(header(), log, False)
    filler = fill(small_fs)
    big = [chunk_event(len(log) + 1 + i, "x" * 4000 + str(i), turn=2, step=1 + i % 2) for i in range(200)]
    batch = [builders.turn_start(len(log), 2), *big]
    with pytest.raises(StorageAccessError) as info:
        backend.append_batch(header(), batch, True)
    assert info.value.code == "STORAGE_FULL" and info.value.path == str(db), info.value
    assert "free space" in str(info.value)
    filler.unlink()
    backend.append_batch(header(), batch, True)  # the rolled-back batch, retried: no gap
    assert [e["seq"] for e in backend.load_stored(SID).events] == list(range(len(log) + len(batch)))


def test_read_only_file_system_at_create_and_resume_is_storage_read_only(
    opened_backends: list[Any], ro_fs: Path
) -> None:
    store = ro_fs / "store"
    db = store / "sessions.sqlite"
    write(opened_backends, db, closed_turn(0))
    remount(ro_fs, "ro")
    before = digest(db)
    for target in (db, store / "fresh.sqlite"):  # resume an existing store; create a new one
        backend = open_sqlite(opened_backends, target)
        with pytest.raises(StorageAccessError) as info:
            backend.load_stored(SID)
        assert info.value.code == "STORAGE_READ_ONLY" and info.value.path == str(target), info.value
        assert "read-only" in str(info.value)
    with pytest.raises(StorageAccessError) as info:
        SqliteBackend(str(ro_fs / "new-dir" / "sessions.sqlite"))  # the directory cannot be created
    assert info.value.code == "STORAGE_READ_ONLY"
    assert digest(db) == before


def _open_as_this_user(path: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for mode in ("rw", "ro"):
        try:
            SqliteBackend(path, read_only=mode == "ro").load_stored(SID)
            out[mode] = ["ok", "", None]
        except Exception as err:
            out[mode] = [getattr(err, "code", type(err).__name__), str(err), getattr(err, "path", None)]
    return out


def test_permission_denied_is_storage_permission_denied(opened_backends: list[Any]) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to hand the store to an unprivileged user (root itself bypasses chmod)")
    nobody = 65534
    top = Path(tempfile.mkdtemp(prefix="agentlog-denied-"))
    try:
        store = top / "store"
        db = store / "sessions.sqlite"
        write(opened_backends, db, closed_turn(0))
        for path in (top, store, db):
            os.chown(path, nobody, nobody)
        os.chmod(db, 0o000)  # private to its owner (the path checks pass) but unreadable even to it
        before = digest(db)
        out = run_as(nobody, lambda: _open_as_this_user(str(db)))
        for mode in ("rw", "ro"):
            code, message, path = out[mode]
            assert code == "STORAGE_PERMISSION_DENIED" and path == str(db), out
            assert "EACCES" in message and "readable and writable by this user" in message
        assert digest(db) == before
    finally:
        subprocess.run(["rm", "-rf", str(top)], check=False)


# --- defect 20: page damage and read-only opens ------------------------------------------------------------------


def _page_size(db: Path) -> int:
    return int.from_bytes(db.read_bytes()[16:18], "big") or 65536


def test_page_damage_is_session_corrupt(opened_backends: list[Any], db: Path) -> None:
    for index in range(6):
        write(opened_backends, db, open_turn(60), f"s{index}")
    size = _page_size(db)
    data = bytearray(db.read_bytes())
    pages = len(data) // size
    assert pages > 6
    for page in range(2, pages):  # every page but the first two (header + schema): b-tree headers garbage
        data[page * size : page * size + 12] = b"\xfe" * 12
    db.write_bytes(bytes(data))
    before = digest(db)
    backend = open_sqlite(opened_backends, db)
    with pytest.raises(SessionPersistenceCorruptionError, match="malformed") as info:
        backend.load_stored("s3")
    assert info.value.code == "SESSION_CORRUPT" and info.value.location == str(db)
    with pytest.raises(SessionPersistenceCorruptionError):
        open_sqlite(opened_backends, db, read_only=True).list_sessions()
    backend.close()
    assert digest(db) == before


def test_a_damaged_file_header_is_session_corrupt(opened_backends: list[Any], db: Path) -> None:
    write(opened_backends, db, closed_turn(0))
    data = bytearray(db.read_bytes())
    data[0:16] = b"definitely not!\0"
    db.write_bytes(bytes(data))
    for read_only in (False, True):
        with pytest.raises(SessionPersistenceCorruptionError) as info:
            open_sqlite(opened_backends, db, read_only=read_only).list_sessions()
        assert info.value.code == "SESSION_CORRUPT"
    assert db.read_bytes()[:16] == b"definitely not!\0"


_CRASHED_WRITER = """
import os, sys
from agentlog.persistence.sqlite.backend import SqliteBackend
backend = SqliteBackend(sys.argv[1])
backend.append_batch({"version": 0, "id": "late", "createdAt": 1000, "cwd": "/w"},
                     [{"type": "turn/start", "seq": 0, "time": 1, "data": {"turn": 1}}], False)
print("{}")
sys.stdout.flush()
os._exit(0)  # no close: the committed transaction lives in the -wal file, not yet checkpointed
"""


def test_read_only_commands_never_checkpoint_or_delete_wal_files(opened_backends: list[Any], db: Path) -> None:
    write(opened_backends, db, closed_turn(0))
    run_child(_CRASHED_WRITER, str(db))
    wal, shm = Path(f"{db}-wal"), Path(f"{db}-shm")
    assert wal.exists() and wal.stat().st_size > 0
    before = digest(db, wal)
    reader = open_sqlite(opened_backends, db, read_only=True)
    assert sorted(item.id for item in reader.list_sessions()) == ["late", SID]  # sees the WAL's commit
    assert reader.load_stored("late") is not None
    reader.close()
    assert digest(db, wal) == before and shm.exists()  # nothing checkpointed, nothing deleted
    for refused in (
        lambda: reader.append_batch(header(), [builders.turn_start(5, 2)], True),
        lambda: open_sqlite(opened_backends, db, read_only=True).lock_writer(header()),
        lambda: open_sqlite(opened_backends, db, read_only=True).commit_repair(
            header(), None, [builders.turn_start(5, 2)]
        ),
    ):
        with pytest.raises(PersistenceError, match="read-only"):
            refused()
    assert digest(db, wal) == before


def test_read_only_opens_of_a_closed_store_create_no_files_and_still_see_new_writers(
    opened_backends: list[Any], db: Path
) -> None:
    write(opened_backends, db, closed_turn(0))
    files = sorted(path.name for path in db.parent.iterdir())
    before = digest(db)
    reader = open_sqlite(opened_backends, db, read_only=True)
    assert [item.id for item in reader.list_sessions()] == [SID]
    assert reader.load_stored(SID) is not None and reader.read_revision(SID) is not None
    assert sorted(path.name for path in db.parent.iterdir()) == files and digest(db) == before  # no -wal/-shm
    writer = open_sqlite(opened_backends, db)
    writer.append_batch(header("newer"), closed_turn(0), False)  # a writer starts while the reader is open
    assert [item.id for item in reader.list_sessions()] == ["newer", SID]  # the immutable read is redone
    assert reader.load_stored("newer") is not None
    writer.close()
    reader.close()


def test_a_missing_store_is_store_not_found_and_nothing_is_created(tmp_path: Path) -> None:
    for path in (tmp_path / "sessions.sqlite", tmp_path / "typo" / "deeper" / "sessions.sqlite"):
        backend = SqliteBackend(str(path), read_only=True)
        for attempt in (backend.list_sessions, lambda b=backend: b.load_stored(SID)):
            with pytest.raises(StoreNotFoundError, match="does not exist") as info:
                attempt()
            assert info.value.code == "STORE_NOT_FOUND"
        backend.close()
    assert list(tmp_path.iterdir()) == []  # no database, no directory, no lock folder


def test_a_store_on_a_read_only_file_system_can_be_read(opened_backends: list[Any], ro_fs: Path) -> None:
    db = ro_fs / "store" / "sessions.sqlite"
    write(opened_backends, db, closed_turn(0))
    write(opened_backends, db, open_turn(12), "second")
    assert not Path(f"{db}-wal").exists()  # a clean close checkpointed: nothing but the database file
    remount(ro_fs, "ro")
    reader = open_sqlite(opened_backends, db, read_only=True)
    assert [item.id for item in reader.list_sessions()] == ["s1", "second"]
    assert len(reader.load_stored("second").events) == 12
    partial = reader.read_prefix(SID)
    assert partial is not None and len(partial.events) == len(closed_turn(0)) and partial.damage is None
    viewer = PersistenceCoordinator(SessionStore(), reader)
    assert len(viewer.read_from("second", 0).events) == 12
    reader.close()


def test_a_crashed_writers_wal_on_a_read_only_file_system_is_read(opened_backends: list[Any], ro_fs: Path) -> None:
    db = ro_fs / "store" / "sessions.sqlite"
    write(opened_backends, db, closed_turn(0))
    run_child(_CRASHED_WRITER, str(db))  # leaves -wal (with a committed session) and -shm behind
    remount(ro_fs, "ro")
    reader = open_sqlite(opened_backends, db, read_only=True)
    assert sorted(item.id for item in reader.list_sessions()) == ["late", SID]
    assert reader.load_stored("late") is not None
    reader.close()


def test_a_never_initialised_database_reads_as_an_empty_store(tmp_path: Path) -> None:
    db = tmp_path / "db" / "sessions.sqlite"
    db.parent.mkdir(mode=0o700)
    db.touch(mode=0o600)  # what a first open interrupted before initialisation leaves
    reader = SqliteBackend(str(db), read_only=True)
    assert reader.list_sessions() == [] and reader.load_stored(SID) is None and reader.read_revision(SID) is None
    assert db.stat().st_size == 0
    writer = SqliteBackend(str(db))
    writer.append_batch(header(), closed_turn(0), False)
    assert [item.id for item in reader.list_sessions()] == [SID]  # the same reader sees it once initialised
    writer.close()
    reader.close()


# --- defect 4: ids the store cannot hold -----------------------------------------------------------------------


def test_session_ids_the_store_cannot_hold_are_invalid_session_id(opened_backends: list[Any], db: Path) -> None:
    backend = open_sqlite(opened_backends, db)
    longest = "a" * 250
    backend.validate_session_id(longest)
    backend.append_batch(header(longest), closed_turn(0), False)
    backend.lock_writer(header(longest)).release()
    assert backend.load_stored(longest) is not None
    for bad, limit in (
        ("a" * 251, "at most 250"),
        ("é" * 51, "at most 250"),
        ("x" * 5000, "255"),
        ("a\ud800", "lone surrogate"),
    ):
        with pytest.raises(InvalidSessionIdError, match=limit) as info:
            backend.validate_session_id(bad)
        assert info.value.code == "INVALID_SESSION_ID"
        with pytest.raises(InvalidSessionIdError):
            backend.lock_writer(header(bad))
        with pytest.raises(InvalidSessionIdError):
            backend.append_batch(header(bad), closed_turn(0), False)
    with pytest.raises(InvalidSessionIdError, match="lone surrogate"):
        backend.load_stored("a\ud800")  # a read of an id SQLite cannot even bind: typed, not a crash
    assert backend.load_stored("x" * 5000) is None  # a long id can be looked up; it is simply absent
    backend.validate_session_id("nul\0inside")  # SQLite TEXT holds NUL; the lock file escapes it
    memory = open_sqlite(opened_backends, ":memory:")
    memory.validate_session_id("m" * 5000)  # no lock files: only the text rule applies
    with pytest.raises(InvalidSessionIdError):
        memory.validate_session_id("\udfff")


# --- the tail digest of a revision -------------------------------------------------------------------------

_SQLITE_VALUES = st.one_of(
    st.none(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False),
    st.text(),
    st.binary(),
    st.binary().map(lambda raw: sqlite_codec.InvalidText(raw)),
)


def _row_key(values: tuple[Any, ...]) -> tuple[Any, ...]:
    """What makes two stored rows the same: each column's type and exact value (-0.0 is not 0.0)."""

    def key(value: Any) -> Any:
        if isinstance(value, sqlite_codec.InvalidText):
            return ("invalid-text", value.raw)
        if type(value) is float:
            return ("float", value.hex())
        return (type(value).__name__, value)

    return tuple(key(value) for value in values)


_ROWS = st.tuples(_SQLITE_VALUES, _SQLITE_VALUES, _SQLITE_VALUES)


@given(_ROWS, st.one_of(_ROWS, _ROWS.map(lambda row: tuple(reversed(row)))))
def test_the_tail_digest_encodes_two_different_rows_differently(a: tuple[Any, ...], b: tuple[Any, ...]) -> None:
    """The digest hashes an injective encoding of the row's columns: equal encodings only for equal rows
    (same types and values: 1, 1.0 and '1' differ), so a restored log's different newest row changes it."""
    encode = sqlite_connection._tail_encoding
    assert (b"".join(encode(a)) == b"".join(encode(b))) == (_row_key(a) == _row_key(b))
    assert b"".join(encode(a)) == b"".join(encode(a))


def test_the_tail_digest_of_a_large_row_takes_no_copy_of_it() -> None:
    """A revision is read under whatever memory the caller has left (``ulimit -v``): the digest streams the
    tail row's values into the hash instead of building their ``repr`` (four times a 600 KB blob)."""
    import tracemalloc

    blob = os.urandom(8 << 20)
    text = "x" * (1 << 20)
    tracemalloc.start()
    try:
        digest = sqlite_connection._tail_digest(("s1", 7, 1.5, None, blob, text))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(digest) == 24 and digest != "none"
    assert peak < 2 << 20, peak  # the 1 MiB text is encoded once; the 8 MiB blob is never copied
