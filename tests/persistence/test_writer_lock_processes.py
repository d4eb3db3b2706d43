"""One live writer per session, across real processes (the advisory writer lock)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import agentlog as al
from agentlog.errors import SessionLockedError
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend
from agentlog.persistence.sqlite.backend import SqliteBackend

HOLDER = textwrap.dedent(
    """
    import sys
    import agentlog as al
    from agentlog.persistence.coordinator import PersistenceCoordinator
    from agentlog.persistence.jsonl.backend import JsonlBackend
    from agentlog.persistence.sqlite.backend import SqliteBackend

    kind, root = sys.argv[1], sys.argv[2]
    backend = JsonlBackend(root) if kind == "jsonl" else SqliteBackend(root + "/sessions.sqlite3")
    store = al.SessionStore()
    coordinator = PersistenceCoordinator(store, backend)
    session = store.create("shared", meta={"cwd": "/work"})
    session.append("turn/start", {"turn": 1})
    session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    store.flush(session)
    print("holding", flush=True)
    sys.stdin.readline()  # hold the session live until the test says so
    store.dispose(session)
    coordinator.close()
    print("released", flush=True)
    """
)


def _backend(kind: str, root: Path) -> JsonlBackend | SqliteBackend:
    return JsonlBackend(str(root)) if kind == "jsonl" else SqliteBackend(str(root / "sessions.sqlite3"))


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
def test_writer_lock__a_second_process_gets_session_locked_at_once(kind: str, tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, kind, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdin is not None
        assert holder.stdout.readline().strip() == "holding"
        store = al.SessionStore()
        coordinator = PersistenceCoordinator(store, _backend(kind, tmp_path))
        try:
            with pytest.raises(SessionLockedError) as info:
                coordinator.resume("shared")
            assert info.value.code == "SESSION_LOCKED"
            assert store.get("shared") is None  # the refused publication left nothing behind
            # Readers never need the lock: the live writer's durable events are readable meanwhile.
            assert [event["type"] for event in coordinator.inspect("shared").events] == ["turn/start", "turn/end"]
            holder.stdin.write("\n")
            holder.stdin.flush()
            assert holder.stdout.readline().strip() == "released"
            assert holder.wait(10) == 0
            resumed = coordinator.resume("shared")  # the lock is free once the other writer is done
            assert resumed.seq == 3
        finally:
            coordinator.close()
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


def test_writer_lock__a_killed_writer_leaves_no_stale_lock(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, "jsonl", str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == "holding"
    holder.kill()
    holder.wait()
    store = al.SessionStore()
    coordinator = PersistenceCoordinator(store, _backend("jsonl", tmp_path))
    try:
        assert coordinator.resume("shared").seq == 3
    finally:
        coordinator.close()


EXIT_WITHOUT_FLUSH = textwrap.dedent(
    """
    import sys
    import agentlog as al
    from agentlog.persistence.coordinator import PersistenceCoordinator
    from agentlog.persistence.jsonl.backend import JsonlBackend

    store = al.SessionStore()
    PersistenceCoordinator(store, JsonlBackend(sys.argv[1]), batch_delay_ms=60_000)
    session = store.create("exiting", meta={"cwd": "/work"})
    session.append("turn/start", {"turn": 1})
    session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    # no flush, no close: a normal interpreter exit must still drain the write-behind buffer
    """
)


def test_write_behind__a_normal_exit_drains_unflushed_events(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-c", EXIT_WITHOUT_FLUSH, str(tmp_path)], check=True, timeout=300)
    store = al.SessionStore()
    coordinator = PersistenceCoordinator(store, _backend("jsonl", tmp_path))
    try:
        assert [event["type"] for event in coordinator.load("exiting").events] == ["turn/start", "turn/end"]
    finally:
        coordinator.close()
