"""Issue 7 regression tests for the JSONL backends (raw and zstd frames), the memory backend and the
coordinator's load path, each named after its defect number.

Real files and real file-system conditions only: a small tmpfs for a full disk, a tmpfs remounted
read-only, a child process that drops root for permission checks (root bypasses them), FIFOs, symlinks,
device nodes and ``RLIMIT_AS`` in a child process for memory pressure; all cleaned up afterwards.
"""

from __future__ import annotations

import json
import os
import random
import string
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentlog.errors import (
    AgentlogError,
    InvalidSessionIdError,
    ResourceExhaustedError,
    SessionPersistenceCorruptionError,
    SessionTailChangedError,
    StorageAccessError,
    StoreNotFoundError,
)
from agentlog.kernel.jsoncodec import dumps
from agentlog.persistence.backend import PartialRead
from agentlog.persistence.jsonl._zstdframes import compress_frame
from agentlog.persistence.jsonl.backend import JsonlBackend, detect_compression

from .conftest import (
    APPEND_INTENT,
    SID,
    BackendFactory,
    Harness,
    append_closed_turn,
    chunk_event,
    closed_turn,
    header,
    live_meta,
    seqs,
    step_start,
    turn_start,
    user_data,
    user_event,
)

JSONL_KINDS = ["jsonl-none", "jsonl-zstd"]


@pytest.fixture(params=JSONL_KINDS)
def jenv(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    harness = Harness(BackendFactory(request.param, tmp_path))
    yield harness
    harness.close()


def _zstd(env: Harness) -> bool:
    return env.kind == "jsonl-zstd"


def log_path(env: Harness, session_id: str = SID) -> Path:
    location = env.backend().locate(header(session_id))
    assert location is not None
    return Path(location)


def write_log(env: Harness, *batches: list[bytes], session_id: str = SID) -> Path:
    """A hand-built artifact at the layout's place: the header, then each batch of lines (one zstd frame
    per batch). Lines are given without their newline; ``None``-free bytes only."""
    path = log_path(env, session_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    head = dumps({"type": "session", **header(session_id)}) + b"\n"
    texts = [b"".join(line + b"\n" for line in batch) for batch in batches]
    if _zstd(env):
        path.write_bytes(compress_frame(head) + b"".join(compress_frame(text) for text in texts))
    else:
        path.write_bytes(head + b"".join(texts))
    return path


def lines(*events: dict[str, Any]) -> list[bytes]:
    return [dumps(event) for event in events]


def snapshot(root: Path) -> dict[str, bytes | str]:
    """Every file below ``root`` with its bytes (symlinks by their target): "nothing was touched"."""
    found: dict[str, bytes | str] = {}
    for path in sorted(root.rglob("*")):
        if path.is_symlink():
            found[str(path)] = "->" + os.readlink(path)
        elif path.is_file():
            found[str(path)] = path.read_bytes()
    return found


def store_root(env: Harness) -> Path:
    return Path(env.factory.root)


def persist_closed_turn(env: Harness, session_id: str = SID, *, turns: int = 1) -> None:
    coordinator = env.coordinator()
    session = coordinator.store.create(session_id, meta=live_meta())
    for turn in range(1, turns + 1):
        append_closed_turn(session, turn)
    coordinator.store.flush(session)
    coordinator.close()


def _mount_tmpfs(target: Path, size: str) -> None:
    target.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(target)], capture_output=True, text=True
    )
    if result.returncode != 0:
        pytest.skip(f"mounting a tmpfs is not permitted here: {result.stderr.strip()}")


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs (a real, tiny file system: full disks and read-only remounts)."""
    mount = tmp_path / "mnt"
    _mount_tmpfs(mount, "64k")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def tmpfs_env(kind: str, mount: Path) -> Harness:
    factory = BackendFactory(kind, mount)
    factory.root = mount / "store"
    factory._args = (str(factory.root),)
    return Harness(factory)


# --- 8: bytes that are not UTF-8 are damage at their offset -------------------------------------------


def test_issue7_d8_non_utf8_bytes_in_a_committed_record_are_corruption_at_their_byte_offset(jenv: Harness) -> None:
    good = closed_turn(0)
    bad = dumps(good[1]).replace(b"question-1", b"quest\xffon-1")
    path = write_log(jenv, [dumps(good[0]), bad, *lines(*good[2:])])
    before = path.read_bytes()
    for read in (jenv.backend().load_stored, jenv.coordinator().load, jenv.coordinator().resume):
        with pytest.raises(SessionPersistenceCorruptionError, match="not UTF-8") as info:
            read(SID)
        assert info.value.code == "SESSION_CORRUPT"
    raw = jenv.backend()
    with pytest.raises(SessionPersistenceCorruptionError) as info:
        raw.load_stored(SID)
    if _zstd(jenv):  # the damaged frame (the second one) is named by its physical offset
        assert info.value.offset == len(compress_frame(dumps({"type": "session", **header()}) + b"\n"))
    else:
        assert info.value.offset == before.index(b"\xff")
    assert path.read_bytes() == before


def test_issue7_d8_non_utf8_bytes_in_the_last_record_or_the_header_are_corruption_too(jenv: Harness) -> None:
    good = closed_turn(0)
    path = write_log(jenv, [*lines(*good[:-1]), dumps(good[-1]).replace(b"completed", b"compl\xc3eted")])
    before = path.read_bytes()
    with pytest.raises(SessionPersistenceCorruptionError, match="not UTF-8"):
        jenv.coordinator().resume(SID)  # the last complete record is committed: never cut as a torn tail
    assert path.read_bytes() == before
    head = dumps({"type": "session", **header()}).replace(b'"s1"', b'"s\xfe1"')
    path.write_bytes(compress_frame(head + b"\n") if _zstd(jenv) else head + b"\n")
    with pytest.raises(SessionPersistenceCorruptionError):
        jenv.backend().load_stored(SID)
    (listing,) = jenv.backend().list_sessions()
    assert listing.error_code == "SESSION_CORRUPT"


# --- 12: memory pressure is never corruption -------------------------------------------------------------

_MEMORY_CHILD = r"""
import json, os, resource, sys
from agentlog import SessionStore
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend
root, compression, extra = sys.argv[1], sys.argv[2], int(sys.argv[3])
backend = JsonlBackend(root, compression=compression)
with open("/proc/self/statm") as handle:
    used = int(handle.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
resource.setrlimit(resource.RLIMIT_AS, (used + extra, used + extra))
try:
    PersistenceCoordinator(SessionStore(), backend).resume("s1")
    out = {"ok": True}
except BaseException as err:
    out = {"ok": False, "type": type(err).__name__, "code": getattr(err, "code", None),
           "repaired": "after its repair was committed" in str(err)}
sys.stdout.write(json.dumps(out) + "\n")
sys.stdout.flush()
os._exit(0)
"""


def _many_events(count: int) -> list[dict[str, Any]]:
    events = [turn_start(0), user_event(1, "q"), step_start(2)]
    events += [chunk_event(seq, f"x{seq}") for seq in range(3, count)]
    return events


def test_issue7_d12_out_of_memory_while_loading_is_resource_exhausted_and_nothing_is_touched(jenv: Harness) -> None:
    backend = jenv.backend()
    backend.pack_chunks = False  # one line per event: the parse needs far more memory than the file
    events = _many_events(120_000)
    for start in range(0, len(events), 8192):
        backend.append_batch(header(), events[start : start + 8192], start > 0)
    path = log_path(jenv)
    with path.open("ab") as handle:  # an open turn and a torn tail: a resume would repair (truncate)
        handle.write(compress_frame(b'{"type":"assistant/chunk"')[:9] if _zstd(jenv) else b'{"type":"assis')
    before = path.read_bytes()
    results = []
    for extra in (24 << 20, 64 << 20):
        child = subprocess.run(
            [sys.executable, "-c", _MEMORY_CHILD, str(store_root(jenv)), jenv.kind.split("-")[1], str(extra)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert child.returncode == 0, child.stderr[-2000:]  # no crash (orjson is not allocation-safe)
        results.append(json.loads(child.stdout.strip().splitlines()[-1]))
        if results[-1]["ok"]:
            break  # the load fitted (a compact load needs far less than the parse): its resume repairs
        if results[-1].pop("repaired") or (results[-1]["code"] == "RESOURCE_EXHAUSTED" and path.read_bytes() != before):
            # The load fitted and committed its repair; reading it back ran out (and says so), or the
            # resume then had no room for its write-behind thread. The repaired log is valid: an
            # unlimited load finds nothing left to repair.
            repaired = path.read_bytes()
            assert repaired != before
            jenv.coordinator().load(SID)
            assert path.read_bytes() == repaired
            break
        assert path.read_bytes() == before, results  # nothing truncated, repaired or written
    assert {"ok": False, "type": "ResourceExhaustedError", "code": "RESOURCE_EXHAUSTED"} in results
    assert all(result["ok"] or result["code"] == "RESOURCE_EXHAUSTED" for result in results)


def test_issue7_d12_a_log_beyond_the_load_budget_is_refused_before_it_is_read(jenv: Harness) -> None:
    persist_closed_turn(jenv, turns=3)
    path = log_path(jenv)
    before = path.read_bytes()
    small = JsonlBackend(store_root(jenv), compression=jenv.factory._kwargs["compression"], max_log_bytes=256)
    with pytest.raises(ResourceExhaustedError, match="max_log_bytes") as info:
        small.load_stored(SID)
    assert info.value.code == "RESOURCE_EXHAUSTED" and isinstance(info.value, MemoryError)
    with pytest.raises(ResourceExhaustedError):
        jenv.coordinator(backend=small).resume(SID)
    assert path.read_bytes() == before
    assert jenv.backend().load_stored(SID) is not None


# --- 13: only an incomplete final record is a torn tail ----------------------------------------------------


def _open_turn_lines(count: int) -> list[dict[str, Any]]:
    return [turn_start(0), user_event(1, "q"), step_start(2), *(chunk_event(s, f"c{s}") for s in range(3, count))]


@pytest.mark.parametrize("damage", ["unparsable", "missing", "not-an-event"])
def test_issue7_d13_repair_keeps_records_after_damage(jenv: Harness, damage: str) -> None:
    events = _open_turn_lines(40)
    encoded = lines(*events)
    if damage == "unparsable":
        encoded[17] = encoded[17][:-9] + b"#garbage}"
    elif damage == "missing":
        del encoded[17]
    else:
        encoded[17] = b"[17]"
    path = write_log(jenv, encoded[:10], encoded[10:])
    before = path.read_bytes()
    with pytest.raises(SessionPersistenceCorruptionError, match="not a torn tail") as info:
        jenv.backend().load_stored(SID)
    assert info.value.offset is not None and info.value.location == str(path)
    for read in (jenv.coordinator().resume, jenv.coordinator().load, jenv.coordinator().inspect):
        with pytest.raises(SessionPersistenceCorruptionError):
            read(SID)
    assert path.read_bytes() == before  # no committed record was cut


def test_issue7_d13_damage_inside_a_torn_zstd_frame_with_records_after_it_is_corruption(tmp_path: Path) -> None:
    env = Harness(BackendFactory("jsonl-zstd", tmp_path))
    try:
        rng = random.Random(13)
        big = ["".join(rng.choice(string.ascii_letters) for _ in range(200_000)) for _ in range(3)]
        tail = [b"{damaged", *(dumps(chunk_event(4 + k, text)) for k, text in enumerate(big))]
        path = write_log(env, lines(*_open_turn_lines(4)))
        torn = compress_frame(b"".join(line + b"\n" for line in tail))
        with path.open("ab") as handle:
            handle.write(torn[: len(torn) * 3 // 4])  # a crash cut the last write short
        before = path.read_bytes()
        with pytest.raises(SessionPersistenceCorruptionError, match="not a torn tail"):
            env.backend().load_stored(SID)
        with pytest.raises(SessionPersistenceCorruptionError):
            env.coordinator().resume(SID)
        assert path.read_bytes() == before
    finally:
        env.close()


def test_issue7_d13_an_incomplete_final_record_is_still_a_torn_tail(jenv: Harness) -> None:
    path = write_log(jenv, lines(*_open_turn_lines(8)))
    with path.open("ab") as handle:
        handle.write(compress_frame(dumps(chunk_event(8, "torn")) + b"\n")[:12] if _zstd(jenv) else b'{"type":"as')
    session = jenv.coordinator().resume(SID)
    assert seqs(session.events)[:8] == list(range(8))
    assert [event["type"] for event in session.events][8:] == ["step/end", "turn/end", "session/end-seed"]


# --- 14: a second writer after the lock file vanished ---------------------------------------------------


def test_issue7_d14_second_writer_after_lock_file_vanished_is_refused_not_interleaved(jenv: Harness) -> None:
    persist_closed_turn(jenv)
    first = jenv.coordinator()
    a = first.resume(SID)
    for lock in (store_root(jenv) / ".locks").iterdir():
        lock.unlink()  # someone "cleaned up" the lock directory while A is live
    second = jenv.coordinator()
    b = second.resume(SID)  # nothing stops B now: it takes a brand-new lock file
    append_closed_turn(b, 2)
    second.store.flush(b)
    path = log_path(jenv)
    after_b = path.read_bytes()
    a.append("turn/start", {"turn": 2})
    with pytest.raises(SessionTailChangedError, match="another writer appended") as info:
        first.store.flush(a)
    assert info.value.code == "SESSION_TAIL_CHANGED"
    assert path.read_bytes() == after_b  # nothing written by the stale writer
    loaded = jenv.coordinator().load(SID)  # B's log, intact and loadable
    assert [dict(event) for event in loaded.events] == [dict(event) for event in b.events]


def test_issue7_d14_a_writer_whose_reader_saw_an_older_tail_is_refused(jenv: Harness) -> None:
    persist_closed_turn(jenv)
    reader = jenv.backend()
    stored = reader.load_stored(SID)
    assert stored is not None
    persist_more = jenv.backend()
    persist_more.load_stored(SID)
    persist_more.append_batch(header(), [turn_start(6, 2)], True)
    with pytest.raises(SessionTailChangedError):
        reader.append_batch(header(), [turn_start(6, 2)], True)
    with pytest.raises(AgentlogError):  # an append that does not continue the stored seq
        persist_more.append_batch(header(), [turn_start(9, 2)], True)
    assert seqs(jenv.backend().load_stored(SID).events) == list(range(7))  # type: ignore[union-attr]


# --- 17: symlinks and special files ------------------------------------------------------------------


def test_issue7_d17_symlinked_session_directory_is_neither_read_nor_written(jenv: Harness, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    outside = Harness(BackendFactory(jenv.kind, elsewhere))
    try:
        persist_closed_turn(outside)
        real_dir = log_path(outside).parent
    finally:
        outside.close()
    outside_before = snapshot(elsewhere)
    link = log_path(jenv).parent
    link.parent.mkdir(parents=True)
    link.symlink_to(real_dir, target_is_directory=True)
    with pytest.raises(StorageAccessError, match="symbolic link") as info:
        jenv.backend().load_stored(SID)
    assert info.value.code == "STORAGE_NOT_A_DIRECTORY" and info.value.path == str(link)
    with pytest.raises(StorageAccessError):
        jenv.coordinator().resume(SID)
    (listing,) = jenv.backend().list_sessions()  # reported, not hidden
    assert listing.id == SID and listing.error_code == "STORAGE_NOT_A_DIRECTORY"
    coordinator = jenv.coordinator()
    with pytest.raises(StorageAccessError):  # at create, or at the latest at the first flush
        session = coordinator.store.create(SID, meta=live_meta())
        append_closed_turn(session, 1)
        coordinator.store.flush(session)
    with pytest.raises(StorageAccessError):
        jenv.backend().append_batch(header(), closed_turn(0), False)
    assert snapshot(elsewhere) == outside_before  # nothing outside the store was read into or written


def _in_thread(target: Any, *args: Any) -> Any:
    """Run ``target`` in a thread that must finish within 10 s (a FIFO open would hang forever)."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = target(*args)
        except BaseException as err:
            outcome["error"] = err

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(10)
    return thread, outcome


@pytest.mark.parametrize("special", ["fifo", "dev-zero-symlink", "char-device", "symlinked-log", "directory"])
def test_issue7_d17_special_file_at_the_log_path_is_refused_without_hanging(jenv: Harness, special: str) -> None:
    persist_closed_turn(jenv)
    path = log_path(jenv)
    real = path.with_name("real-log")
    path.rename(real)
    if special == "fifo":
        os.mkfifo(path)
    elif special == "dev-zero-symlink":
        path.symlink_to("/dev/zero")
    elif special == "char-device":
        try:
            os.mknod(path, 0o600 | 0o020000, os.makedev(1, 5))  # S_IFCHR: what /dev/zero is
        except OSError as err:
            pytest.skip(f"cannot create a device node here: {err}")
    elif special == "symlinked-log":
        path.symlink_to(real)
    else:
        path.mkdir()
    backend = jenv.backend()
    try:
        for operation in (
            lambda: backend.load_stored(SID),
            lambda: backend.read_raw(SID),
            lambda: backend.append_batch(header(), [turn_start(6, 2)], True),
            lambda: jenv.coordinator().resume(SID),
        ):
            thread, outcome = _in_thread(operation)
            assert not thread.is_alive(), f"{special}: the operation hangs"
            error = outcome.get("error")
            assert isinstance(error, StorageAccessError), outcome
            assert error.code == "STORAGE_NOT_A_FILE" and error.path == str(path)
        thread, outcome = _in_thread(backend.list_sessions)
        assert not thread.is_alive()
        (listing,) = outcome["value"]
        assert listing.error_code == "STORAGE_NOT_A_FILE"
    finally:
        if special == "fifo" and path.exists():  # release any reader that did block
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass
    assert real.read_bytes()  # the real log was never touched
    if special == "symlinked-log":
        assert JsonlBackend  # the link's target is the intact log, never read through the link


# --- 18: operating-system refusals are typed -----------------------------------------------------------------


def test_issue7_d18_disk_full_during_flush_is_storage_full_and_the_retry_has_no_gap(tmpfs: Path) -> None:
    for kind in JSONL_KINDS:
        env = tmpfs_env(kind, tmpfs)
        try:
            coordinator = env.coordinator(batch_delay_ms=60_000)
            session = coordinator.store.create(f"full-{kind}", meta=live_meta())
            append_closed_turn(session, 1)
            coordinator.store.flush(session)
            path = log_path(env, f"full-{kind}")
            before = path.read_bytes()
            filler = tmpfs / "filler"
            fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
            try:
                while True:
                    os.write(fd, b"\0" * 1024)
            except OSError:
                pass  # the file system is full
            finally:
                os.close(fd)
            rng = random.Random(18)
            session.append("turn/start", {"turn": 2})
            text = "".join(rng.choice(string.ascii_letters) for _ in range(20_000))
            session.append("user/message", user_data(text, msg_id="big"), APPEND_INTENT)
            with pytest.raises(StorageAccessError) as info:
                coordinator.store.flush(session)
            assert info.value.code == "STORAGE_FULL" and info.value.path == str(path)
            assert "free space" in info.value.message
            assert path.read_bytes() == before  # rolled back
            filler.unlink()
            coordinator.store.flush(session)  # the buffered batch is retried, no seq gap
            coordinator.close()
            assert seqs(env.coordinator().load(f"full-{kind}").events) == list(range(9))
        finally:
            env.close()
            for leftover in tmpfs.iterdir():
                subprocess.run(["rm", "-rf", str(leftover)], check=True)


def test_issue7_d18_read_only_file_system_at_resume_and_create_is_storage_read_only(tmpfs: Path) -> None:
    envs = [tmpfs_env(kind, tmpfs / kind) for kind in JSONL_KINDS]
    try:
        for env in envs:
            persist_closed_turn(env)
            path = log_path(env)
            with path.open("ab") as handle:  # a torn tail: resume would need to repair
                handle.write(b"\x28\xb5\x2f\xfd\x64" if env.kind == "jsonl-zstd" else b'{"type":"tu')
        before = snapshot(tmpfs)
        remount = subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], capture_output=True, text=True)
        if remount.returncode != 0:
            pytest.skip(f"remounting read-only is not permitted here: {remount.stderr.strip()}")
        try:
            for env in envs:
                assert len(env.coordinator().inspect(SID).events) == 6  # reading still works
                with pytest.raises(StorageAccessError) as info:
                    env.coordinator().resume(SID)
                assert info.value.code == "STORAGE_READ_ONLY" and "remount" in info.value.message
                coordinator = env.coordinator()
                with pytest.raises(StorageAccessError) as info:
                    created = coordinator.store.create("fresh", meta=live_meta())
                    append_closed_turn(created, 1)
                    coordinator.store.flush(created)
                assert info.value.code == "STORAGE_READ_ONLY"
                with pytest.raises(StorageAccessError) as info:
                    env.backend().append_batch(header("other"), closed_turn(0), False)
                assert info.value.code == "STORAGE_READ_ONLY"
        finally:
            subprocess.run(["mount", "-o", "remount,rw", str(tmpfs)], capture_output=True)
        assert snapshot(tmpfs) == before
    finally:
        for env in envs:
            env.close()


def test_issue7_d18_store_root_or_locks_that_is_a_file_is_not_a_directory(jenv: Harness, tmp_path: Path) -> None:
    root_file = tmp_path / "root-file"
    root_file.write_text("not a store")
    with pytest.raises(StorageAccessError) as info:
        JsonlBackend(root_file)
    assert info.value.code == "STORAGE_NOT_A_DIRECTORY" and info.value.path == str(root_file)
    persist_closed_turn(jenv)
    locks = store_root(jenv) / ".locks"
    subprocess.run(["rm", "-rf", str(locks)], check=True)
    locks.write_text("not a directory")
    before = log_path(jenv).read_bytes()
    with pytest.raises(StorageAccessError) as info:
        jenv.coordinator().resume(SID)
    assert info.value.code == "STORAGE_NOT_A_DIRECTORY" and info.value.path == str(locks)
    with pytest.raises(StorageAccessError):
        jenv.coordinator().store.create("s2", meta=live_meta())
    assert log_path(jenv).read_bytes() == before
    assert len(jenv.coordinator().inspect(SID).events) == 6  # reads need no lock


_UNPRIVILEGED_CHILD = r"""
import json, os, sys
from agentlog import SessionStore
from agentlog.errors import AgentlogError
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend
"".encode("utf-16-le")  # codecs load lazily: load them while the interpreter's files are readable
os.setgid(65534)  # imports above ran as root (the interpreter's own files may be private to root)
os.setuid(65534)
backend = JsonlBackend(sys.argv[1], compression=sys.argv[2])
out = {}
for name, call in (
    ("load", lambda: backend.load_stored("s1")),
    ("resume", lambda: PersistenceCoordinator(SessionStore(), backend).resume("s1")),
    ("list", lambda: [(l.error_code, l.location) for l in backend.list_sessions()]),
):
    try:
        out[name] = {"ok": call()}
    except AgentlogError as err:
        out[name] = {"code": err.code, "path": getattr(err, "path", None)}
    except BaseException as err:
        out[name] = {"untyped": repr(err)}
print(json.dumps(out, default=str))
"""


def test_issue7_d18_permission_denied_file_is_storage_permission_denied(jenv: Harness) -> None:
    base = Path(tempfile.mkdtemp(prefix="agentlog-perm-"))
    try:
        base.chmod(0o755)
        env = Harness(BackendFactory(jenv.kind, base))
        try:
            persist_closed_turn(env)
            path = log_path(env)
        finally:
            env.close()
        for directory in (base / "jsonl-root", path.parent.parent, path.parent):
            directory.chmod(0o755)  # nobody can traverse to the file ...
        path.chmod(0o000)  # ... but not read it
        before = path.read_bytes()
        child = subprocess.run(
            [sys.executable, "-c", _UNPRIVILEGED_CHILD, str(base / "jsonl-root"), jenv.kind.split("-")[1]],
            capture_output=True,
            text=True,
            timeout=300,
            cwd="/",
        )
        if child.returncode != 0 and "Operation not permitted" in child.stderr:
            pytest.skip("cannot drop privileges to uid 65534 here (root bypasses permission checks)")
        assert child.returncode == 0, child.stderr[-2000:]
        out = json.loads(child.stdout)
        assert out["load"] == {"code": "STORAGE_PERMISSION_DENIED", "path": str(path)}
        assert out["resume"]["code"] == "STORAGE_PERMISSION_DENIED"
        assert out["list"] == {"ok": [["STORAGE_PERMISSION_DENIED", str(path)]]}
        assert path.read_bytes() == before
    finally:
        subprocess.run(["rm", "-rf", str(base)], check=True)


# --- 19: a malformed event inside the open turn is a typed refusal on every backend ----------------------


def _stored_fingerprint(env: Harness) -> Any:
    if env.kind.startswith("jsonl"):
        return snapshot(store_root(env))
    if env.kind == "sqlite":
        import sqlite3

        con = sqlite3.connect(env.factory.db_path)
        try:
            return con.execute("SELECT * FROM events ORDER BY 1, 2").fetchall()
        finally:
            con.close()
    return env.backend().stored_lines(SID)


@pytest.mark.parametrize(
    "bad",
    [
        {"type": "step/start", "seq": 3, "time": 1003, "data": {}},  # repair would read data["step"]
        {"type": "turn/start", "seq": 3, "time": 1003, "data": "x"},  # repair would index a string
        {"type": "tool/call", "seq": 3, "data": {"callId": "c"}},  # no time: repair reads last["time"]
    ],
    ids=["step-without-step", "data-not-an-object", "no-time"],
)
def test_issue7_d19_malformed_envelope_in_the_open_turn_is_typed_and_untouched(env: Harness, bad: Any) -> None:
    backend = env.backend()
    try:
        backend.append_batch(header(), [turn_start(0), user_event(1, "q"), step_start(2), bad], False)
    except (AgentlogError, KeyError):
        pytest.skip(f"{env.kind} cannot store this malformed event at all")
    before = _stored_fingerprint(env)
    coordinator = env.coordinator()
    for read in (coordinator.load, coordinator.inspect, coordinator.resume, coordinator.view):
        with pytest.raises(SessionPersistenceCorruptionError, match="failed validation"):
            read(SID)
    assert _stored_fingerprint(env) == before


# --- 21 (ls): header reading is linear and capped --------------------------------------------------------


def test_issue7_d21_ls_reads_a_huge_header_line_in_linear_time_with_a_typed_cap(jenv: Harness) -> None:
    path = write_log(jenv, lines(*closed_turn(0)))
    huge = dumps({"type": "session", **header(), "agentPreset": "p" * (8 << 20)}) + b"\n"
    path.write_bytes(compress_frame(huge) if _zstd(jenv) else huge)
    (listing,) = jenv.backend().list_sessions()  # 8 MiB: one linear pass, then the typed cap
    assert listing.error_code == "SESSION_CORRUPT" and "max_header_bytes" in (listing.error_message or "")
    with pytest.raises(SessionPersistenceCorruptionError, match="max_header_bytes"):
        jenv.backend().load_stored(SID)
    roomy = JsonlBackend(store_root(jenv), compression=jenv.factory._kwargs["compression"], max_header_bytes=16 << 20)
    (listing,) = roomy.list_sessions()
    assert listing.ok and listing.header is not None and len(listing.header["agentPreset"]) == 8 << 20


# --- 4 (JSONL and memory): ids a store cannot hold -------------------------------------------------------------


@pytest.mark.parametrize("kind", ["memory", *JSONL_KINDS])
@pytest.mark.parametrize(
    "bad_id", ["x" * 5000, "é" * 60, "lone-\ud800-surrogate"], ids=["5000", "escaped", "surrogate"]
)
def test_issue7_d4_an_id_the_store_cannot_hold_is_invalid_session_id_at_create_and_read(
    kind: str, bad_id: str, tmp_path: Path
) -> None:
    env = Harness(BackendFactory(kind, tmp_path))
    try:
        if kind == "memory" and bad_id != "lone-\ud800-surrogate":
            env.coordinator().store.create(bad_id, meta=live_meta())  # memory holds any valid text
            return
        coordinator = env.coordinator()
        # A lone surrogate is not JSON text at all: the kernel's JSON gate refuses it first (typed too).
        refusal = AgentlogError if "\ud800" in bad_id else InvalidSessionIdError
        with pytest.raises(refusal) as info:
            coordinator.create(header(bad_id))
        if refusal is InvalidSessionIdError:
            assert info.value.code == "INVALID_SESSION_ID" and "250-byte limit" in info.value.message
        with pytest.raises(refusal):
            coordinator.store.create(bad_id, meta=live_meta())
        for read in (coordinator.load, coordinator.inspect, coordinator.resume, coordinator.view):
            with pytest.raises(InvalidSessionIdError):
                read(bad_id)
        with pytest.raises(InvalidSessionIdError):
            coordinator.read_from(bad_id, 0)
        if kind != "memory":
            assert not store_root(env).exists() or not any(store_root(env).rglob("session.jsonl*"))
    finally:
        env.close()


def test_issue7_d4_the_longest_storable_id_round_trips(jenv: Harness) -> None:
    longest = "i" * 250
    persist_closed_turn(jenv, longest)
    assert len(jenv.coordinator().load(longest).events) == 6
    with pytest.raises(InvalidSessionIdError, match="250-byte limit"):
        jenv.coordinator().load(longest + "i")


# --- for the command line: read-only stores, encoding detection, partial reads --------------------------------


def test_issue7_read_only_backend_creates_nothing_and_names_a_missing_store(jenv: Harness, tmp_path: Path) -> None:
    missing = tmp_path / "typo"
    with pytest.raises(StoreNotFoundError, match="does not exist") as info:
        JsonlBackend(missing, read_only=True)
    assert info.value.code == "STORE_NOT_FOUND" and not missing.exists()
    persist_closed_turn(jenv)
    path = log_path(jenv)
    with path.open("ab") as handle:
        handle.write(b"\x28\xb5\x2f" if _zstd(jenv) else b'{"ty')  # a torn tail a writer would repair
    before = snapshot(store_root(jenv))
    reader = JsonlBackend(store_root(jenv), compression="auto", read_only=True)
    coordinator = jenv.coordinator(backend=reader)
    assert [listing.id for listing in coordinator.list()] == [SID]
    assert len(coordinator.inspect(SID).events) == 6
    with pytest.raises(StorageAccessError) as info:
        coordinator.resume(SID)
    assert info.value.code == "STORAGE_READ_ONLY"
    with pytest.raises(StorageAccessError):
        reader.append_batch(header("new"), closed_turn(0), False)
    assert snapshot(store_root(jenv)) == before  # not even a lock file


def test_issue7_auto_compression_reads_a_store_whatever_its_encoding(jenv: Harness, tmp_path: Path) -> None:
    persist_closed_turn(jenv)
    expected = "zstd" if _zstd(jenv) else "none"
    assert detect_compression(store_root(jenv)) == expected
    auto = JsonlBackend(store_root(jenv), compression="auto", read_only=True)
    assert auto.compression == expected
    assert [listing.id for listing in auto.list_sessions()] == [SID]
    assert detect_compression(tmp_path / "nowhere") is None
    assert JsonlBackend(tmp_path / "empty", compression="auto").compression == "zstd"


def test_issue7_read_prefix_returns_the_valid_prefix_and_names_the_damage(jenv: Harness) -> None:
    events = _open_turn_lines(30)
    encoded = lines(*events)
    encoded[20] = b"{damaged"
    path = write_log(jenv, encoded[:12], encoded[12:])
    before = path.read_bytes()
    partial = jenv.backend().read_prefix(SID)
    assert isinstance(partial, PartialRead)
    assert partial.meta["id"] == SID and seqs(partial.events) == list(range(20))
    assert isinstance(partial.damage, SessionPersistenceCorruptionError)
    assert partial.damage.location == str(path)
    if _zstd(jenv):  # the damaged frame starts after the header frame and the first batch frame
        assert partial.damage.offset is not None and partial.damage.offset > 0
    else:
        assert partial.damage.offset == before.index(b"{damaged")
    via = jenv.coordinator().read_prefix(SID)
    assert seqs(via.events) == seqs(partial.events) and via.damage is not None
    intact = jenv.coordinator()
    persist_closed_turn(jenv, "s2")
    clean = intact.read_prefix("s2")
    assert clean.damage is None and clean.torn_offset is None and len(clean.events) == 6
    assert path.read_bytes() == before
    assert jenv.backend().read_prefix("absent") is None
