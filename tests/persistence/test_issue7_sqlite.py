"""Issue 7 ("Trust") regressions of the SQLite backend, one test (or a few) per defect, named after it.

Everything runs under real conditions: real database files damaged by hand (foreign ``sqlite3``
connections, bytes overwritten after a checkpoint), a small tmpfs for a full disk, a read-only
remount, an unprivileged child process for permission denied, ``RLIMIT_AS`` in a child process for
memory pressure. Each fault is cleaned up afterwards; a test skips (saying why) only where the
machine forbids the condition (not root, no tmpfs).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentlog import SessionStore
from agentlog.errors import (
    InvalidSessionIdError,
    PersistenceError,
    SessionPersistenceCorruptionError,
    StorageAccessError,
    StoreNotFoundError,
)
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.sqlite.backend import SqliteBackend

from .conftest import (
    SID,
    append_closed_turn,
    chunk_event,
    closed_turn,
    header,
    live_meta,
    step_start,
    turn_start,
    user_event,
)

SRC = Path(__file__).resolve().parents[2] / "src"


# --- helpers -------------------------------------------------------------------------------------------


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "db" / "sessions.sqlite"


@pytest.fixture
def backends() -> Iterator[list[Any]]:
    created: list[Any] = []
    yield created
    for item in reversed(created):
        with contextlib.suppress(Exception):
            item.close()


def open_backend(backends: list[Any], path: Path | str, **options: Any) -> SqliteBackend:
    backend = SqliteBackend(str(path), **options)
    backends.append(backend)
    return backend


def coordinator(backends: list[Any], path: Path | str, **options: Any) -> PersistenceCoordinator:
    backend = open_backend(backends, path)
    made = PersistenceCoordinator(SessionStore(), backend, batch_delay_ms=20, **options)
    backends.append(made)
    return made


def open_turn(rows: int) -> list[dict[str, Any]]:
    """A closed first turn, then an open turn of ``rows`` events in total (user message, step, chunks)."""
    log = closed_turn(0)
    seq = len(log)
    log += [turn_start(seq, 2), user_event(seq + 1, "again"), step_start(seq + 2, 2)]
    while len(log) < rows:
        # Alternating texts and kinds keep every chunk its own scalar row (one physical row per event).
        log.append(chunk_event(len(log), f"c{len(log)}", turn=2, step=1 + len(log) % 2))
    return log


def write(backends: list[Any], db: Path, events: list[dict[str, Any]], session_id: str = SID) -> None:
    writer = open_backend(backends, db)
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
    env = {**os.environ, "PYTHONPATH": str(SRC), "PYTHONDONTWRITEBYTECODE": "1"}
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


def _tmpfs(size: str) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs (full disk / read-only file system) needs root")
    point = Path(tempfile.mkdtemp(prefix="agentlog-issue7-"))
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(point)], capture_output=True
    )
    if done.returncode != 0:
        point.rmdir()
        pytest.skip(f"this machine forbids mounting a tmpfs: {done.stderr.decode(errors='replace').strip()}")
    try:
        yield point
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(point)], capture_output=True)
        subprocess.run(["umount", "-l", str(point)], capture_output=True)
        point.rmdir()


@pytest.fixture
def small_fs() -> Iterator[Path]:
    """A 1 MiB tmpfs: a disk that can really be filled."""
    yield from _tmpfs("1m")


@pytest.fixture
def ro_fs() -> Iterator[Path]:
    """A tmpfs that the test remounts read-only with :func:`remount`."""
    yield from _tmpfs("8m")


def remount(point: Path, mode: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{mode}", str(point)], check=True, capture_output=True)


def fill(point: Path) -> Path:
    """Fill the file system at ``point`` until ENOSPC; the returned file frees the space when removed."""
    filler = point / "filler"
    with open(filler, "wb", buffering=0) as fh:
        try:
            while True:
                fh.write(b"\0" * 65536)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            while True:
                fh.write(b"\0" * 512)
    return filler


# --- defect 8: bytes that are not UTF-8 --------------------------------------------------------------------


def test_issue7_d8_non_utf8_bytes_in_a_committed_row_are_typed_corruption_naming_the_row(
    backends: list[Any], db: Path
) -> None:
    write(backends, db, open_turn(12))
    # seq 6 sits inside the open last turn with valid rows after it: the original cut it (and every
    # later row) as a torn tail, the U+FFFD path of other readers "accepted" it. Neither may happen.
    foreign(db, "UPDATE events SET data = CAST(X'7B227475726E223A22FF227D' AS TEXT) WHERE seq = 6")
    before = digest(db)
    backend = open_backend(backends, db)
    with pytest.raises(SessionPersistenceCorruptionError) as info:
        backend.load_stored(SID)
    err = info.value
    assert err.code == "SESSION_CORRUPT" and err.offset == 6 and err.location == str(db)
    assert "invalid committed physical row at seq 6" in str(err)
    assert "invalid byte 0xFF at byte offset 9 of the value" in str(err)
    with pytest.raises(SessionPersistenceCorruptionError, match="seq 6"):
        coordinator(backends, db).load(SID)  # resume: typed, nothing repaired
    backends.pop().close()
    backend.close()
    assert digest(db) == before and row_count(db) == 12


def test_issue7_d8_a_compressed_value_that_is_not_utf8_is_typed_corruption(backends: list[Any], db: Path) -> None:
    import zstandard

    write(backends, db, open_turn(8))
    blob = zstandard.ZstdCompressor(level=3).compress(b'{"turn":2,"text":"\xc3\x28"}' + b" " * 5000)
    foreign(db, "UPDATE events SET data = ? WHERE seq = 5", (blob,))
    with pytest.raises(SessionPersistenceCorruptionError, match="seq 5") as info:
        open_backend(backends, db).load_stored(SID)
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


def test_issue7_d12_out_of_memory_while_loading_is_resource_exhausted_and_touches_nothing(
    backends: list[Any], db: Path
) -> None:
    # 43 acknowledged events, 34 of them ~600 KB of JSON each.
    log = open_turn(6)
    for _ in range(34):
        text = os.urandom(300_000).hex()  # hex compresses about 2:1, so these rows are zstd BLOBs
        log.append(chunk_event(len(log), text, turn=2, step=1 + len(log) % 2))
    write(backends, db, log)
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
def test_issue7_d13_repair_keeps_rows_after_a_damaged_one(backends: list[Any], db: Path, damage: str) -> None:
    write(backends, db, open_turn(38))
    foreign(db, damage)
    count = row_count(db)
    before = digest(db)
    backend = open_backend(backends, db)
    found_at = 18 if damage.startswith("DELETE") else 17  # a gap is found at the row after it
    with pytest.raises(SessionPersistenceCorruptionError, match=f"invalid committed physical row at seq {found_at}"):
        backend.load_stored(SID)
    reader = coordinator(backends, db)
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


def test_issue7_d13_a_damaged_last_row_is_corruption_not_a_torn_tail(backends: list[Any], db: Path) -> None:
    # "A SQLite row cannot tear": even the very last row is a complete committed row if it exists.
    write(backends, db, open_turn(10))
    foreign(
        db, "INSERT INTO events (session_id, seq, type, time, data) VALUES (?, 10, 'assistant/chunk', 1, '{x')", (SID,)
    )
    backend = open_backend(backends, db)
    with pytest.raises(SessionPersistenceCorruptionError, match="seq 10"):
        backend.load_stored(SID)
    with pytest.raises(SessionPersistenceCorruptionError, match="seq 10"):
        coordinator(backends, db).load(SID)
    with pytest.raises(PersistenceError, match="SQLite rows cannot tear"):
        backend.commit_repair(header(), 10, [])
    assert row_count(db) == 11
    # An intact log never carries a torn marker (the coordinator's truncation never applies to SQLite).
    write(backends, db, open_turn(6), "intact")
    assert backend.load_stored("intact").torn_marker is None
    intact = backend.read_prefix("intact")
    assert intact is not None and intact.damage is None and len(intact.events) == len(open_turn(6))


# --- defect 16: never acknowledge what is not in the store -----------------------------------------------------


@pytest.mark.parametrize("journal_mode", ["wal", "delete"])
def test_issue7_d16_flush_after_the_database_file_was_deleted_is_refused(
    backends: list[Any], db: Path, journal_mode: str
) -> None:
    backend = open_backend(backends, db, journal_mode=journal_mode)
    backend.append_batch(header(), closed_turn(0), False)
    for path in db.parent.iterdir():
        if path.name.startswith(db.name) and path.is_file():
            path.unlink()  # the database (and its -wal/-shm) is gone while the backend holds it open
    with pytest.raises(StorageAccessError, match="deleted or replaced while this process had it open") as info:
        backend.append_batch(header(), [turn_start(len(closed_turn(0)), 2)], True)
    assert info.value.code == "STORAGE_IO" and info.value.path == str(db)
    # The next operation reopens the path: a new, empty database — the old session is not there.
    assert backend.load_stored(SID) is None


@pytest.mark.parametrize("journal_mode", ["wal", "delete"])
def test_issue7_d16_a_replaced_database_file_is_detected_before_commit(
    backends: list[Any], db: Path, journal_mode: str
) -> None:
    backend = open_backend(backends, db, journal_mode=journal_mode)
    backend.append_batch(header(), closed_turn(0), False)
    other = db.parent / "other.sqlite"
    write(backends, other, closed_turn(0), "elsewhere")
    os.replace(other, db)  # e.g. a backup restored over the live file
    with pytest.raises(StorageAccessError, match="deleted or replaced"):
        backend.append_batch(header(), [turn_start(len(closed_turn(0)), 2)], True)
    if journal_mode == "delete":  # (in WAL mode the old -wal file beside it is SQLite's own hazard)
        assert [item.id for item in backend.list_sessions()] == ["elsewhere"]  # reopened: the file at the path


def test_issue7_d16_a_failed_first_open_is_retried_and_buffered_events_are_kept(
    backends: list[Any], small_fs: Path
) -> None:
    db = small_fs / "store" / "sessions.sqlite"
    db.parent.mkdir(mode=0o700)
    filler = fill(small_fs)  # the disk is full before the database is ever opened
    reader = coordinator(backends, db)
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
    stored = open_backend(backends, db).load_stored(SID)
    assert stored is not None and [e["seq"] for e in stored.events] == [e["seq"] for e in session.events]


# --- defect 18: typed OS errors ------------------------------------------------------------------------------------


def test_issue7_d18_a_directory_at_the_database_path_is_storage_not_a_file(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "db.sqlite").mkdir(parents=True, mode=0o700)
    with pytest.raises(StorageAccessError, match="must be a regular file") as info:
        SqliteBackend(str(home / "db.sqlite"))
    assert info.value.code == "STORAGE_NOT_A_FILE" and info.value.path == str(home / "db.sqlite")


def test_issue7_d18_a_file_where_a_directory_belongs_is_storage_not_a_directory(
    backends: list[Any], tmp_path: Path
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
    backend = open_backend(backends, db)
    backend.append_batch(header(), closed_turn(0), False)
    Path(str(db) + ".locks").write_text("in the way")
    with pytest.raises(StorageAccessError) as info:
        backend.lock_writer(header())
    assert info.value.code == "STORAGE_NOT_A_DIRECTORY" and info.value.path == str(db) + ".locks"


def test_issue7_d18_disk_full_during_flush_is_storage_full_and_the_retry_has_no_gap(
    backends: list[Any], small_fs: Path
) -> None:
    db = small_fs / "store" / "sessions.sqlite"
    backend = open_backend(backends, db)
    log = closed_turn(0)
    backend.append_batch(header(), log, False)
    filler = fill(small_fs)
    big = [chunk_event(len(log) + 1 + i, "x" * 4000 + str(i), turn=2, step=1 + i % 2) for i in range(200)]
    batch = [turn_start(len(log), 2), *big]
    with pytest.raises(StorageAccessError) as info:
        backend.append_batch(header(), batch, True)
    assert info.value.code == "STORAGE_FULL" and info.value.path == str(db), info.value
    assert "free space" in str(info.value)
    filler.unlink()
    backend.append_batch(header(), batch, True)  # the rolled-back batch, retried: no gap
    assert [e["seq"] for e in backend.load_stored(SID).events] == list(range(len(log) + len(batch)))


def test_issue7_d18_read_only_file_system_at_create_and_resume_is_storage_read_only(
    backends: list[Any], ro_fs: Path
) -> None:
    store = ro_fs / "store"
    db = store / "sessions.sqlite"
    write(backends, db, closed_turn(0))
    remount(ro_fs, "ro")
    before = digest(db)
    for target in (db, store / "fresh.sqlite"):  # resume an existing store; create a new one
        backend = open_backend(backends, target)
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


def test_issue7_d18_permission_denied_is_storage_permission_denied(backends: list[Any]) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to hand the store to an unprivileged user (root itself bypasses chmod)")
    nobody = 65534
    top = Path(tempfile.mkdtemp(prefix="agentlog-denied-"))
    try:
        store = top / "store"
        db = store / "sessions.sqlite"
        write(backends, db, closed_turn(0))
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


def test_issue7_d20_page_damage_is_session_corrupt(backends: list[Any], db: Path) -> None:
    for index in range(6):
        write(backends, db, open_turn(60), f"s{index}")
    size = _page_size(db)
    data = bytearray(db.read_bytes())
    pages = len(data) // size
    assert pages > 6
    for page in range(2, pages):  # every page but the first two (header + schema): b-tree headers garbage
        data[page * size : page * size + 12] = b"\xfe" * 12
    db.write_bytes(bytes(data))
    before = digest(db)
    backend = open_backend(backends, db)
    with pytest.raises(SessionPersistenceCorruptionError, match="malformed") as info:
        backend.load_stored("s3")
    assert info.value.code == "SESSION_CORRUPT" and info.value.location == str(db)
    with pytest.raises(SessionPersistenceCorruptionError):
        open_backend(backends, db, read_only=True).list_sessions()
    backend.close()
    assert digest(db) == before


def test_issue7_d20_a_damaged_file_header_is_session_corrupt(backends: list[Any], db: Path) -> None:
    write(backends, db, closed_turn(0))
    data = bytearray(db.read_bytes())
    data[0:16] = b"definitely not!\0"
    db.write_bytes(bytes(data))
    for read_only in (False, True):
        with pytest.raises(SessionPersistenceCorruptionError) as info:
            open_backend(backends, db, read_only=read_only).list_sessions()
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


def test_issue7_d20_read_only_commands_never_checkpoint_or_delete_wal_files(backends: list[Any], db: Path) -> None:
    write(backends, db, closed_turn(0))
    run_child(_CRASHED_WRITER, str(db))
    wal, shm = Path(f"{db}-wal"), Path(f"{db}-shm")
    assert wal.exists() and wal.stat().st_size > 0
    before = digest(db, wal)
    reader = open_backend(backends, db, read_only=True)
    assert sorted(item.id for item in reader.list_sessions()) == ["late", SID]  # sees the WAL's commit
    assert reader.load_stored("late") is not None
    reader.close()
    assert digest(db, wal) == before and shm.exists()  # nothing checkpointed, nothing deleted
    for refused in (
        lambda: reader.append_batch(header(), [turn_start(5, 2)], True),
        lambda: open_backend(backends, db, read_only=True).lock_writer(header()),
        lambda: open_backend(backends, db, read_only=True).commit_repair(header(), None, [turn_start(5, 2)]),
    ):
        with pytest.raises(PersistenceError, match="read-only"):
            refused()
    assert digest(db, wal) == before


def test_issue7_d20_read_only_opens_of_a_closed_store_create_no_files_and_still_see_new_writers(
    backends: list[Any], db: Path
) -> None:
    write(backends, db, closed_turn(0))
    files = sorted(path.name for path in db.parent.iterdir())
    before = digest(db)
    reader = open_backend(backends, db, read_only=True)
    assert [item.id for item in reader.list_sessions()] == [SID]
    assert reader.load_stored(SID) is not None and reader.read_revision(SID) is not None
    assert sorted(path.name for path in db.parent.iterdir()) == files and digest(db) == before  # no -wal/-shm
    writer = open_backend(backends, db)
    writer.append_batch(header("newer"), closed_turn(0), False)  # a writer starts while the reader is open
    assert [item.id for item in reader.list_sessions()] == ["newer", SID]  # the immutable read is redone
    assert reader.load_stored("newer") is not None
    writer.close()
    reader.close()


def test_issue7_d20_a_missing_store_is_store_not_found_and_nothing_is_created(tmp_path: Path) -> None:
    for path in (tmp_path / "sessions.sqlite", tmp_path / "typo" / "deeper" / "sessions.sqlite"):
        backend = SqliteBackend(str(path), read_only=True)
        for attempt in (backend.list_sessions, lambda b=backend: b.load_stored(SID)):
            with pytest.raises(StoreNotFoundError, match="does not exist") as info:
                attempt()
            assert info.value.code == "STORE_NOT_FOUND"
        backend.close()
    assert list(tmp_path.iterdir()) == []  # no database, no directory, no lock folder


def test_issue7_d20_a_store_on_a_read_only_file_system_can_be_read(backends: list[Any], ro_fs: Path) -> None:
    db = ro_fs / "store" / "sessions.sqlite"
    write(backends, db, closed_turn(0))
    write(backends, db, open_turn(12), "second")
    assert not Path(f"{db}-wal").exists()  # a clean close checkpointed: nothing but the database file
    remount(ro_fs, "ro")
    reader = open_backend(backends, db, read_only=True)
    assert [item.id for item in reader.list_sessions()] == ["s1", "second"]
    assert len(reader.load_stored("second").events) == 12
    partial = reader.read_prefix(SID)
    assert partial is not None and len(partial.events) == len(closed_turn(0)) and partial.damage is None
    viewer = PersistenceCoordinator(SessionStore(), reader)
    assert len(viewer.read_from("second", 0).events) == 12
    reader.close()


def test_issue7_d20_a_crashed_writers_wal_on_a_read_only_file_system_is_read(backends: list[Any], ro_fs: Path) -> None:
    db = ro_fs / "store" / "sessions.sqlite"
    write(backends, db, closed_turn(0))
    run_child(_CRASHED_WRITER, str(db))  # leaves -wal (with a committed session) and -shm behind
    remount(ro_fs, "ro")
    reader = open_backend(backends, db, read_only=True)
    assert sorted(item.id for item in reader.list_sessions()) == ["late", SID]
    assert reader.load_stored("late") is not None
    reader.close()


def test_issue7_d20_a_never_initialised_database_reads_as_an_empty_store(tmp_path: Path) -> None:
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


def test_issue7_d4_session_ids_the_store_cannot_hold_are_invalid_session_id(backends: list[Any], db: Path) -> None:
    backend = open_backend(backends, db)
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
    memory = open_backend(backends, ":memory:")
    memory.validate_session_id("m" * 5000)  # no lock files: only the text rule applies
    with pytest.raises(InvalidSessionIdError):
        memory.validate_session_id("\udfff")
