"""Issue 7, defect 3: appends from several threads are serialized per session.

Before: four threads appending to one session produced out-of-order seqs in memory, a misleading
"cannot reenter" error (another thread's append looked like a reentrant one) and a session that was
lost on disk. Now every append takes the session's lock; a listener appending on its own thread is
still refused with REENTRANT_APPEND.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

import agentlog as al
from agentlog.errors import ReentrantAppendError, SessionDisposedError
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend
from agentlog.persistence.sqlite.backend import SqliteBackend

pytestmark = pytest.mark.accel

THREADS = 4
PER_THREAD = 300


def _todo(worker: int, n: int) -> dict[str, Any]:
    return {"todos": [{"content": f"{worker}-{n}", "status": "pending"}]}


def _hammer(session: al.Session, worker: int, errors: list[BaseException], start: threading.Barrier) -> None:
    start.wait()
    try:
        for n in range(PER_THREAD):
            session.append("todo/write", _todo(worker, n))
    except BaseException as err:  # reported by the test thread
        errors.append(err)


def _check_log(events: Any) -> None:
    assert [e["seq"] for e in events] == list(range(len(events)))
    contents = [e["data"]["todos"][0]["content"] for e in events if e["type"] == "todo/write"]
    assert len(contents) == THREADS * PER_THREAD
    for worker in range(THREADS):
        mine = [int(c.split("-")[1]) for c in contents if c.startswith(f"{worker}-")]
        assert mine == list(range(PER_THREAD))  # each thread's appends keep their order


def _yielding_clock() -> int:
    time.sleep(0)  # gives other threads the interpreter in the middle of every append
    return 1000


def test_issue7_d3_threads_appending_to_a_detached_session_get_contiguous_seqs() -> None:
    session = al.Session.create("s", now=_yielding_clock)
    errors: list[BaseException] = []
    start = threading.Barrier(THREADS)
    workers = [threading.Thread(target=_hammer, args=(session, w, errors, start)) for w in range(THREADS)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join(30)
    assert errors == []
    _check_log(session.events)
    assert len(session.derive_messages()) == 0


@pytest.mark.parametrize("backend", ["jsonl", "sqlite"])
def test_issue7_d3_threads_appending_while_a_coordinator_flushes_lose_nothing(tmp_path: Path, backend: str) -> None:
    def make() -> Any:
        if backend == "jsonl":
            return JsonlBackend(str(tmp_path / "jsonl"))
        return SqliteBackend(str(tmp_path / "db.sqlite3"))

    coordinator = PersistenceCoordinator(al.SessionStore(), make(), batch_delay_ms=2)
    store = coordinator.store
    session = store.create("shared", meta={"cwd": "/work"})
    heard: list[int] = []
    store.on_event(lambda s, e: heard.append(e.seq))  # listeners hear every event once, in seq order
    errors: list[BaseException] = []
    start = threading.Barrier(THREADS + 1)
    done = threading.Event()

    def flusher() -> None:
        start.wait()
        try:
            while not done.is_set():
                store.flush(session)
                time.sleep(0.001)
        except BaseException as err:
            errors.append(err)

    workers = [threading.Thread(target=_hammer, args=(session, w, errors, start)) for w in range(THREADS)]
    flushing = threading.Thread(target=flusher)
    for thread in [*workers, flushing]:
        thread.start()
    for thread in workers:
        thread.join(60)
    done.set()
    flushing.join(30)
    assert errors == []
    store.flush(session)
    assert heard == list(range(len(session.events)))
    expected = [e.json_bytes for e in session.events]
    coordinator.close()

    reader = PersistenceCoordinator(al.SessionStore(), make())
    try:
        stored = reader.load("shared").events
        _check_log(stored)
        assert [e.json_bytes for e in stored] == expected
    finally:
        reader.close()


def test_issue7_d3_a_listener_on_another_thread_waits_instead_of_being_called_reentrant() -> None:
    store = al.SessionStore()
    session = store.create("s")
    in_listener = threading.Event()
    release = threading.Event()

    def slow_listener(s: al.Session, event: Any) -> None:
        if event.seq == 0:
            in_listener.set()
            release.wait(5)

    store.on_event(slow_listener)
    first = threading.Thread(target=session.append, args=("todo/write", {"todos": []}))
    first.start()
    assert in_listener.wait(5)
    outcome: list[Any] = []
    second = threading.Thread(target=lambda: outcome.append(session.append("todo/write", {"todos": []}).seq))
    second.start()
    time.sleep(0.05)
    assert outcome == []  # waiting for the first append's publication, not refused
    release.set()
    first.join(5)
    second.join(5)
    assert outcome == [1]


def test_issue7_d3_a_listener_appending_on_its_own_thread_is_still_reentrant() -> None:
    store = al.SessionStore()
    session = store.create("s")
    caught: list[BaseException] = []

    def reenter(s: al.Session, event: Any) -> None:
        if event.seq == 0:
            try:
                s.append("todo/write", {"todos": []})
            except ReentrantAppendError as err:
                caught.append(err)

    store.on_event(reenter)
    session.append("todo/write", {"todos": []})
    assert len(caught) == 1 and caught[0].code == "REENTRANT_APPEND"
    assert session.seq == 1


def test_issue7_d3_d5_dispose_racing_with_appends_stores_every_acknowledged_event(tmp_path: Path) -> None:
    coordinator = PersistenceCoordinator(al.SessionStore(), JsonlBackend(str(tmp_path)), batch_delay_ms=2)
    store = coordinator.store
    session = store.create("racing")
    acknowledged: list[int] = []
    refused: list[BaseException] = []
    started = threading.Event()

    def appender() -> None:
        for n in range(5_000):
            try:
                acknowledged.append(session.append("todo/write", _todo(0, n)).seq)
            except SessionDisposedError as err:
                refused.append(err)
                return
            if n == 50:
                started.set()

    thread = threading.Thread(target=appender)
    thread.start()
    assert started.wait(5)
    store.dispose(session)
    thread.join(10)
    assert len(refused) == 1 and refused[0].code == "SESSION_DISPOSED"
    coordinator.close()
    reader = PersistenceCoordinator(al.SessionStore(), JsonlBackend(str(tmp_path)))
    try:
        assert [e["seq"] for e in reader.inspect("racing").events] == acknowledged
    finally:
        reader.close()
