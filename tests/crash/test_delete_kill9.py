"""Crash tests of ``delete``: a deleting process is SIGKILLed just before each step of its backend's delete.

The child (forked, a real coordinator over a real store) reports each step's name through a pipe right
before running it and, at the trial's step, waits to be killed; the parent kills it on that report (never
after a delay). Afterwards a fresh coordinator must find the session either whole (every event, byte for
byte) or absent — which one is fixed by the step: before the commit point (JSONL: the rename to the
tombstone; SQLite and PostgreSQL: ``COMMIT``) it is whole, after it absent. The neighbour session is never
touched, and a second delete leaves no leftover of the first (no tombstone, no empty session directory).
"""

from __future__ import annotations

import os
import select
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest

import agentlog as al
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend
from agentlog.persistence.sqlite.backend import SqliteBackend
from agentlog.testing.builders import closed_turn, event_bytes, header

PROGRESS_TIMEOUT_S = 600.0

# The steps of each backend's delete_session, and whether the session is still whole when killed there.
STEPS: dict[str, dict[str, bool]] = {
    "jsonl": {"tombstone": True, "unlink": False, "rmdir": False},
    "sqlite": {"begin": True, "events": True, "session": True, "commit": True},
    "postgres": {"begin": True, "events": True, "session": True, "commit": True},
}


def _idle() -> NoReturn:
    while True:
        signal.pause()  # until the parent's SIGKILL


def _deleter(make_backend: Callable[[], Any], fd: int, kill_at: str) -> None:
    try:
        coordinator = PersistenceCoordinator(al.SessionStore(), make_backend())

        def step(name: str) -> None:
            os.write(fd, f"{name}\n".encode())
            if name == kill_at:
                _idle()

        coordinator.delete("victim", step=step)
        os.write(fd, b"done\n")
    except BaseException:
        os._exit(3)
    os._exit(0)


def _kill_at_step(make_backend: Callable[[], Any], kill_at: str) -> list[str]:
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        os.close(read_fd)
        _deleter(make_backend, write_fd, kill_at)
    os.close(write_fd)
    buffer = b""
    while kill_at.encode() not in buffer.split(b"\n"):
        ready, _, _ = select.select([read_fd], [], [], PROGRESS_TIMEOUT_S)
        chunk = os.read(read_fd, 4096) if ready else b""
        if not chunk:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail(f"the deleter never reported {kill_at!r}: {buffer!r}")
        buffer += chunk
    os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    os.close(read_fd)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    return [line.decode() for line in buffer.split(b"\n") if line]


def _store(make_backend: Callable[[], Any]) -> list[bytes]:
    coordinator = PersistenceCoordinator(al.SessionStore(), make_backend())
    try:
        for sid in ("victim", "neighbour"):
            coordinator.create(header(sid))
            coordinator.append(sid, closed_turn())
        return event_bytes(coordinator.load("victim").events)
    finally:
        coordinator.close()


def _check_whole_or_nothing(make_backend: Callable[[], Any], whole: bool, expected: list[bytes]) -> None:
    coordinator = PersistenceCoordinator(al.SessionStore(), make_backend())
    try:
        listed = [listing.id for listing in coordinator.list()]
        assert list(coordinator.list_revisions()) == listed
        assert event_bytes(coordinator.load("neighbour").events) == expected
        if whole:
            assert listed == ["neighbour", "victim"]
            assert event_bytes(coordinator.load("victim").events) == expected
            assert coordinator.delete("victim").deleted == ("victim",)
        else:
            assert listed == ["neighbour"]
            with pytest.raises(al.SessionNotFoundError):
                coordinator.load("victim")
            with pytest.raises(al.SessionNotFoundError):
                coordinator.delete("victim")  # and sweeps what the killed delete left
        assert [listing.id for listing in coordinator.list()] == ["neighbour"]
    finally:
        coordinator.close()


@pytest.fixture(params=["jsonl-none", "jsonl-zstd", "sqlite", "postgres"])
def store_kind(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Callable[[], Any]]]:
    kind = request.param
    if kind.startswith("jsonl"):
        compression = kind.split("-")[1]
        yield "jsonl", lambda: JsonlBackend(str(tmp_path / "store"), compression=compression)
    elif kind == "sqlite":
        yield "sqlite", lambda: SqliteBackend(str(tmp_path / "sessions.sqlite3"))
    else:
        from agentlog.persistence.postgres import PostgresBackend

        dsn = request.getfixturevalue("pg_dsn")
        schema = request.getfixturevalue("pg_schema")
        yield "postgres", lambda: PostgresBackend(dsn, schema=schema)


def test_crash__a_delete_killed_at_any_step_leaves_the_whole_session_or_nothing(
    store_kind: tuple[str, Callable[[], Any]], tmp_path: Path
) -> None:
    kind, make_backend = store_kind
    for kill_at, whole in STEPS[kind].items():
        expected = _store(make_backend)
        reports = _kill_at_step(make_backend, kill_at)
        assert reports[-1] == kill_at and "done" not in reports
        _check_whole_or_nothing(make_backend, whole, expected)
        if kind == "jsonl":
            leftovers = [  # the (empty) lock file stays: unlinking a lock file others may hold open is unsafe
                str(path)
                for path in (tmp_path / "store").rglob("*")
                if "victim" in str(path) and ".locks" not in str(path)
            ]
            assert leftovers == [], f"killed at {kill_at}: {leftovers}"
        # The next trial stores "victim" (and "neighbour", deleted here) afresh.
        cleanup = PersistenceCoordinator(al.SessionStore(), make_backend())
        cleanup.delete("neighbour")
        cleanup.close()
