"""Crash tests for the projection cache with real processes: a writer is SIGKILLed around cache writes.

The child (forked, so a trial costs milliseconds) runs a real store, coordinator, backend, registry and
cache over real files, appending agent-like turns with a small count threshold. It is killed

* right after a flush returned and before the cache record was written (the record must then be
  behind the log),
* right after a cache record landed and before the next flush, while the session went on appending in
  memory (the record must not be ahead of the log: both end at the cut), and
* at a random point after a random number of cache records landed (the writer's own reports decide
  when, never a wall-clock delay).

After each kill a fresh process-equivalent (new backend, new cache storage) checks the invariant —
every stored row is at most the stored log's end and equals the fold of the log up to its ``seq``
("behind, never ahead, never wrong") — and that the next cold read repairs the record to the log end,
before and after the crash repair of the log.
"""

from __future__ import annotations

import os
import random
import select
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import agentlog as al
from agentlog.kernel.events import event_types
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl import JsonlBackend
from agentlog.persistence.sqlite import SqliteBackend
from agentlog.projection.cache import InlineWriter, ProjectionCache
from agentlog.projection.cache_storage import CacheRecord, open_cache_storage
from agentlog.projection.registry import ProjectionRegistry
from agentlog.projection.units import ProjectionUnit

MARK = "cache-test/mark"
KEY = "cache-test/marks"
if not event_types.is_known(MARK):
    event_types.register(MARK)

TRIALS = int(os.environ.get("AGENTLOG_CACHE_CRASH_TRIALS", "12"))

BACKENDS: dict[str, Callable[[str], Any]] = {
    "jsonl-zstd": lambda root: JsonlBackend(root, compression="zstd"),
    "jsonl-none": lambda root: JsonlBackend(root, compression="none"),
    "sqlite": lambda root: SqliteBackend(os.path.join(root, "sessions.sqlite3")),
}


def marks_unit() -> ProjectionUnit[Any, Any]:
    return ProjectionUnit(
        key=KEY,
        state_version=1,
        initial=lambda: {"count": 0, "last": None},
        reduce=lambda s, e: {"count": s["count"] + 1, "last": e["data"]["n"]} if e["type"] == MARK else s,
        view=lambda s: s,
        client_visible=True,
        parse_state=lambda v: v,
    )


def registry_for(store: al.SessionStore | None = None) -> ProjectionRegistry:
    registry = ProjectionRegistry.with_builtin_units(store)
    registry.register(marks_unit())
    return registry


def _turn_events(turn: int, counter: list[int]) -> list[tuple[str, dict[str, Any]]]:
    events: list[tuple[str, dict[str, Any]]] = [("turn/start", {"turn": turn})]
    for _ in range(4):
        counter[0] += 1
        events.append((MARK, {"n": counter[0]}))
    events.append(("turn/end", {"turn": turn, "reason": {"kind": "completed"}}))
    return events


def _writer(kind: str, root: str, fd: int, hook: str, stop_at: int) -> None:
    """Child body: append turns forever; with a hook, report and freeze around the ``stop_at``-th cache write.

    With a hook the write-behind window is a minute, so the cache's own barriers are the only flushes.
    """
    try:
        store = al.SessionStore(now=lambda: 1_000)
        backend = BACKENDS[kind](root)
        coordinator = PersistenceCoordinator(store, backend, batch_delay_ms=5 if hook == "random" else 60_000)
        registry = registry_for(store)
        storage = open_cache_storage(backend)
        writes = [0]
        landed = [False]

        class Coordinator:
            """The real coordinator; with the ``after-flush`` hook, freeze once the barrier returned."""

            def __init__(self) -> None:
                self.store = coordinator.store
                self.backend = coordinator.backend
                self.read_from = coordinator.read_from

            def flush(self, session: al.Session) -> None:
                coordinator.flush(session)
                writes[0] += 1
                if hook == "after-flush" and writes[0] == stop_at:
                    os.write(fd, f"flushed {session.seq - 1}\n".encode())
                    time.sleep(600)

        class Storage:
            """The real medium, reporting every record that landed."""

            def __getattr__(self, name: str) -> Any:
                return getattr(storage, name)

            def put(self, session_id: str, record: CacheRecord) -> None:
                storage.put(session_id, record)
                seq = max(row["seq"] for row in record.rows.values())
                os.write(fd, f"put {seq}\n".encode())
                landed[0] = hook == "after-put" and writes[0] == stop_at

        ProjectionCache(registry, Coordinator(), Storage(), write_every_events=3, writer=InlineWriter())
        session = store.create("victim", meta={"cwd": "/work", "createdAt": 1})
        counter = [0]
        turn = 0
        while True:
            turn += 1
            for etype, data in _turn_events(turn, counter):
                session.append(etype, data)
                if landed[0]:
                    # The record landed; the session goes on in memory (below the count threshold, so
                    # no further cache write and no flush) and is killed before any flush.
                    counter[0] += 1
                    session.append(MARK, {"n": counter[0]})
                    counter[0] += 1
                    session.append(MARK, {"n": counter[0]})
                    os.write(fd, f"appended {session.seq - 1}\n".encode())
                    time.sleep(600)
    except BaseException:
        os._exit(3)


PROGRESS_TIMEOUT_S = 600.0
"""How long the parent waits for the writer's report before failing: only a guard against a hung writer."""


def _run(kind: str, root: str, hook: str, stop_at: int) -> tuple[list[str], int]:
    """Fork the writer; kill it at its own report; return its reports and status.

    With a hook, the report is the hook's (the writer froze there); ``random`` kills the writer, which
    goes on appending, right after its ``stop_at``-th cache record landed: at whatever point of its
    appends, flushes or cache writes it then is, never after a wall-clock delay.
    """
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        os.close(read_fd)
        _writer(kind, root, write_fd, hook, stop_at)
        os._exit(4)
    os.close(write_fd)
    buffer = b""
    deadline = time.monotonic() + PROGRESS_TIMEOUT_S
    want, count = {"after-flush": (b"flushed", 1), "after-put": (b"appended", 1), "random": (b"put", stop_at)}[hook]
    while _reports(buffer).count(want) < count:
        ready, _, _ = select.select([read_fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail(f"the writer did not report {count} x {want!r} in {PROGRESS_TIMEOUT_S} s: {buffer[-400:]!r}")
        chunk = os.read(read_fd, 4096)
        if not chunk:  # the writer died before its report: the status says how
            break
        buffer += chunk
    os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    while select.select([read_fd], [], [], 0)[0]:
        chunk = os.read(read_fd, 4096)
        if not chunk:
            break
        buffer += chunk
    os.close(read_fd)
    return [line.decode() for line in buffer.split(b"\n") if line], status


def _reports(buffer: bytes) -> list[bytes]:
    return [line.split(b" ")[0] for line in buffer.split(b"\n") if line]


def _check_and_repair(kind: str, root: str) -> tuple[CacheRecord | None, int]:
    """The crash invariant on the survivor's files, then the repairing cold reads; returns the record."""
    store = al.SessionStore()
    backend = BACKENDS[kind](root)
    coordinator = PersistenceCoordinator(store, backend)
    storage = open_cache_storage(backend)
    registry = registry_for()
    try:
        try:
            events = list(coordinator.read_from("victim", 0).events)
        except al.AgentlogError as err:
            assert err.code == "SESSION_NOT_FOUND"
            assert storage.get("victim") is None  # no log, so no cache record may exist either
            return None, -1
        end = len(events) - 1
        record = storage.get("victim")
        if record is not None:
            assert record.identity == {"createdAt": 1, "cwd": "/work"}
            for key, row in record.rows.items():
                assert row["seq"] <= end, f"cache ahead of the log: {key} at {row['seq']} > {end}"
                unit = next(u for u in registry.units if u.key == key)
                assert row["val"] == al.thaw(unit.fold(events[: row["seq"] + 1])), key
        cache = ProjectionCache(registry, coordinator, storage, writer=InlineWriter())
        fresh = registry.restore({}, events, 0)["snapshot"]
        assert cache.cold_snapshot("victim") == fresh
        repaired = storage.get("victim")
        assert repaired is not None and {row["seq"] for row in repaired.rows.values()} == {end}
        # The log's own crash repair (closers for an open turn) is a longer log: the next read folds it.
        coordinator.load("victim")
        events = list(coordinator.read_from("victim", 0).events)
        assert cache.cold_snapshot("victim") == registry.restore({}, events, 0)["snapshot"]
        cache.close()
        return record, end
    finally:
        coordinator.close()
        storage.close()


@pytest.mark.parametrize("kind", list(BACKENDS))
def test_crash__killed_between_a_flush_and_the_cache_write_leaves_the_cache_behind(kind: str, tmp_path: Path) -> None:
    """kill -9 after the barrier and before the record: the record is the previous cut (or absent)."""
    rng = random.Random(f"after-flush-{kind}")
    behind = 0
    for trial in range(TRIALS):
        root = str(tmp_path / f"t{trial}")
        os.makedirs(root)
        stop_at = rng.randint(1, 8)
        reports, status = _run(kind, root, "after-flush", stop_at)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, (status, reports)
        flushed = [int(r.split()[1]) for r in reports if r.startswith("flushed")]
        assert flushed, reports
        puts = [int(r.split()[1]) for r in reports if r.startswith("put")]
        record, end = _check_and_repair(kind, root)
        assert end >= flushed[-1]  # the flush did make that cut durable
        if record is None:
            assert puts == []
        else:
            assert max(row["seq"] for row in record.rows.values()) == puts[-1] < flushed[-1]
            behind += 1
    assert behind > 0  # some trials were killed with an older record in place


@pytest.mark.parametrize("kind", list(BACKENDS))
def test_crash__killed_between_the_cache_write_and_the_next_flush_is_never_ahead(kind: str, tmp_path: Path) -> None:
    """kill -9 after the record landed while the session kept appending unflushed: record == log end."""
    rng = random.Random(f"after-put-{kind}")
    for trial in range(TRIALS):
        root = str(tmp_path / f"t{trial}")
        os.makedirs(root)
        stop_at = rng.randint(1, 8)
        reports, status = _run(kind, root, "after-put", stop_at)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, (status, reports)
        puts = [int(r.split()[1]) for r in reports if r.startswith("put")]
        appended = [int(r.split()[1]) for r in reports if r.startswith("appended")]
        assert len(puts) == stop_at and len(appended) == 1, reports
        record, end = _check_and_repair(kind, root)
        assert record is not None
        # The live session was two events further; the log and the cache both end at the last cut.
        assert max(row["seq"] for row in record.rows.values()) == puts[-1] == end == appended[0] - 2


@pytest.mark.parametrize("kind", list(BACKENDS))
def test_crash__killed_at_random_moments_the_cache_is_never_ahead_and_the_next_read_repairs_it(
    kind: str, tmp_path: Path
) -> None:
    """Kills of a writer checkpointing every 3 events and at every turn/end, at a random point after its
    ``n``-th cache record landed (a committed record survives the kill: each trial has one to check)."""
    rng = random.Random(f"random-{kind}")
    for trial in range(TRIALS):
        root = str(tmp_path / f"t{trial}")
        os.makedirs(root)
        reports, status = _run(kind, root, "random", rng.randint(1, 12))
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, (status, reports)
        record, _ = _check_and_repair(kind, root)
        assert record is not None, (trial, reports)
