"""One live writer per session, across real processes (the advisory writer lock)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import agentlog as al
from agentlog.errors import InvalidOptionError, SessionLockedError
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


@pytest.mark.crash
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


# --- who holds the lock, and waiting for it ---------------------------------------------------------------


class _Holder:
    """The HOLDER script in a child process: holds the session live until ``release()``."""

    def __init__(self, kind: str, root: Path) -> None:
        self.started_ms = time.time_ns() // 1_000_000
        self.process = subprocess.Popen(
            [sys.executable, "-c", HOLDER, kind, str(root)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert self.process.stdout is not None
        assert self.process.stdout.readline().strip() == "holding"
        self.locked_ms = time.time_ns() // 1_000_000

    def release(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write("\n")
        self.process.stdin.flush()

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


class _OnWaiting(logging.Handler):
    """Releases the holder when the waiting writer reports (on the ``agentlog`` logger) that it waits."""

    def __init__(self, holder: _Holder) -> None:
        super().__init__(logging.INFO)
        self.holder = holder
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "waiting for it" in message:
            self.messages.append(message)
            self.holder.release()


@contextlib.contextmanager
def _release_when_waiting(holder: _Holder) -> Iterator[_OnWaiting]:
    handler = _OnWaiting(holder)
    log = logging.getLogger("agentlog")
    level = log.level
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        log.removeHandler(handler)
        log.setLevel(level)


def _assert_names(holder: _Holder, err: SessionLockedError) -> None:
    assert err.code == "SESSION_LOCKED"
    assert err.holder is not None
    assert err.holder["pid"] == holder.process.pid
    assert err.holder["hostname"] == socket.gethostname()
    assert holder.started_ms <= err.holder["acquiredAt"] <= holder.locked_ms
    message = str(err)
    assert f'pid {holder.process.pid} on host "{socket.gethostname()}" since ' in message
    assert "wait=True" in message and "timeout=" in message  # how to wait instead of failing


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
def test_session_locked_names_the_holder_pid_host_and_since_when(kind: str, tmp_path: Path) -> None:
    holder = _Holder(kind, tmp_path)
    try:
        coordinator = PersistenceCoordinator(al.SessionStore(), _backend(kind, tmp_path))
        try:
            with pytest.raises(SessionLockedError) as info:
                coordinator.resume("shared")
            _assert_names(holder, info.value)
            with pytest.raises(SessionLockedError) as direct:  # the backend's own refusal says the same
                _backend(kind, tmp_path).lock_writer({"id": "shared"})
            _assert_names(holder, direct.value)
        finally:
            coordinator.close()
    finally:
        holder.close()


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
def test_the_lock_file_holds_its_holder_record_while_held_and_is_emptied_on_release(kind: str, tmp_path: Path) -> None:
    backend = _backend(kind, tmp_path)
    before = time.time_ns() // 1_000_000
    lock = backend.lock_writer({"id": "s1"})
    lock_file = tmp_path / (".locks" if kind == "jsonl" else "sessions.sqlite3.locks") / "s1.lock"
    record = json.loads(lock_file.read_bytes())
    assert list(record) == ["pid", "hostname", "acquiredAt"]
    assert record["pid"] == os.getpid() and record["hostname"] == socket.gethostname()
    assert before <= record["acquiredAt"] <= time.time_ns() // 1_000_000
    with pytest.raises(SessionLockedError, match="this very process") as info:
        _backend(kind, tmp_path).lock_writer({"id": "s1"})
    assert info.value.holder == record
    lock.release()
    assert lock_file.read_bytes() == b""  # no later refusal names a writer that has left


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
def test_resume_with_wait_succeeds_once_the_holder_releases(kind: str, tmp_path: Path) -> None:
    holder = _Holder(kind, tmp_path)
    try:
        store = al.SessionStore()
        coordinator = PersistenceCoordinator(store, _backend(kind, tmp_path))
        try:
            with _release_when_waiting(holder) as waiting:
                resumed = coordinator.resume("shared", wait=True, timeout=600)
            assert resumed.seq == 3 and store.get("shared") is resumed
            (message,) = waiting.messages  # it did wait: the holder was released only then
            assert f"pid {holder.process.pid}" in message
            assert holder.process.stdout is not None
            assert holder.process.stdout.readline().strip() == "released"
        finally:
            coordinator.close()
        assert holder.process.wait(60) == 0
    finally:
        holder.close()


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
def test_resume_past_its_timeout_is_session_locked_naming_the_holder(kind: str, tmp_path: Path) -> None:
    holder = _Holder(kind, tmp_path)
    try:
        store = al.SessionStore()
        coordinator = PersistenceCoordinator(store, _backend(kind, tmp_path))
        try:
            with pytest.raises(SessionLockedError, match=r"gave up after waiting 0\.2 s") as info:
                coordinator.resume("shared", timeout=0.2)  # the holder never releases during the wait
            _assert_names(holder, info.value)
            assert store.get("shared") is None  # the refused publication left nothing behind
            with pytest.raises(SessionLockedError):
                coordinator.resume("shared")  # default: today's behaviour, refused at once
        finally:
            coordinator.close()
    finally:
        holder.close()


@pytest.mark.parametrize("wait, timeout", [("yes", None), (True, -1), (True, float("nan")), (False, True)])
def test_resume_refuses_a_wait_option_that_is_not_one(tmp_path: Path, wait: Any, timeout: Any) -> None:
    coordinator = PersistenceCoordinator(al.SessionStore(), _backend("jsonl", tmp_path))
    try:
        with pytest.raises(InvalidOptionError):
            coordinator.resume("shared", wait=wait, timeout=timeout)
    finally:
        coordinator.close()


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
def test_a_cli_write_on_a_held_session_reports_the_holder_as_json_data(kind: str, tmp_path: Path) -> None:
    """``SESSION_LOCKED`` under ``--json`` carries the holder (pid, host, since when) as data, so a script
    can decide to wait or to find the holder without parsing the message."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, kind, str(tmp_path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdin is not None
        assert holder.stdout.readline().strip() == "holding"
        store_args = ["--store", str(tmp_path), "--backend", kind]
        logs = ("*.jsonl*", "*.sqlite3")
        before = sorted((p.name, p.read_bytes()) for pattern in logs for p in tmp_path.rglob(pattern))
        refused = subprocess.run(
            [sys.executable, "-m", "agentlog.cli", "title", "shared", "a new title", *store_args, "--json"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert refused.returncode == 1, refused.stderr
        error = json.loads(refused.stderr)["error"]
        assert error["code"] == "SESSION_LOCKED"
        assert error["holder"]["pid"] == holder.pid
        assert error["holder"]["hostname"] == socket.gethostname()
        assert type(error["holder"]["acquiredAt"]) is int
        assert f"pid {holder.pid}" in error["message"]
        assert sorted((p.name, p.read_bytes()) for pattern in logs for p in tmp_path.rglob(pattern)) == before
        holder.stdin.write("\n")
        holder.stdin.flush()
        assert holder.stdout.readline().strip() == "released"
    finally:
        if holder.poll() is None:
            holder.kill()
        holder.wait()
