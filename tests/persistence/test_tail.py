"""``PersistenceCoordinator.tail``: every committed event exactly once and in seq order, while a writer
in another process appends (JSONL raw and zstd, SQLite); ``from_seq``; ``follow=False``; bad input."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentlog.errors import InvalidOptionError, SessionNotFoundError
from agentlog.kernel.jsonvalue import thaw
from agentlog.kernel.store import SessionStore
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend
from agentlog.persistence.sqlite.backend import SqliteBackend
from agentlog.testing.builders import closed_turn, header

KINDS = ("jsonl-none", "jsonl-zstd", "sqlite")
TURNS = 40
HANG_GUARD_S = 60.0  # only ends a broken test; nothing here asserts on time

WRITER = textwrap.dedent(
    """
    import sys
    from agentlog.persistence.jsonl.backend import JsonlBackend
    from agentlog.persistence.sqlite.backend import SqliteBackend
    from agentlog.testing.builders import closed_turn, header

    kind, location, session_id, turns = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    if kind == "sqlite":
        backend = SqliteBackend(location)
    else:
        backend = JsonlBackend(location, compression=kind.removeprefix("jsonl-"))
    meta = header(session_id)
    backend.append_batch(meta, closed_turn(0, 1), False)
    print("ready", flush=True)
    sys.stdin.readline()  # the tailer is following: write the rest while it runs
    events = [event for turn in range(2, turns + 1) for event in closed_turn((turn - 1) * 6, turn)]
    sizes = [1, 2, 3, 5, 7, 11]
    position = index = 0
    while position < len(events):
        size = sizes[index % len(sizes)]
        backend.append_batch(meta, events[position : position + size], True)
        position += size
        index += 1
    backend.close()
    print("done", flush=True)
    """
)


class Store:
    """One storage location of ``kind``: fresh backend instances over it, and a writer process."""

    def __init__(self, kind: str, root: Path) -> None:
        self.kind = kind
        self.location = str(root / "sessions.sqlite3") if kind == "sqlite" else str(root / "store")

    def backend(self) -> Any:
        if self.kind == "sqlite":
            return SqliteBackend(self.location)
        return JsonlBackend(self.location, compression="zstd" if self.kind == "jsonl-zstd" else "none")

    def writer(self, session_id: str, turns: int = TURNS) -> subprocess.Popen[str]:
        args = [sys.executable, "-c", WRITER, self.kind, self.location, session_id, str(turns)]
        return subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def stored(self, session_id: str) -> list[dict[str, Any]]:
        backend = self.backend()
        try:
            found = backend.load_stored(session_id)
            assert found is not None
            return [thaw(event) for event in found.events]
        finally:
            backend.close()


@pytest.fixture(params=KINDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    return Store(request.param, tmp_path)


@pytest.fixture
def reader(store: Store) -> Iterator[PersistenceCoordinator]:
    coordinator = PersistenceCoordinator(SessionStore(), store.backend())
    yield coordinator
    coordinator.close()


def _write(store: Store, session_id: str, turns: int) -> list[dict[str, Any]]:
    backend = store.backend()
    try:
        events = [event for turn in range(1, turns + 1) for event in closed_turn((turn - 1) * 6, turn)]
        backend.append_batch(header(session_id), events, False)
    finally:
        backend.close()
    return store.stored(session_id)


def _collect(coordinator: PersistenceCoordinator, session_id: str, **options: Any) -> list[dict[str, Any]]:
    async def run() -> list[dict[str, Any]]:
        return [thaw(event) async for event in coordinator.tail(session_id, **options)]

    return asyncio.run(asyncio.wait_for(run(), HANG_GUARD_S))


def test_tail__a_writer_process_appending_while_tailed_every_event_once_in_order(
    store: Store, reader: PersistenceCoordinator
) -> None:
    writer = store.writer("live")
    assert writer.stdout is not None and writer.stdin is not None
    assert writer.stdout.readline().strip() == "ready"
    total = TURNS * 6
    seen: list[dict[str, Any]] = []

    async def follow() -> None:
        started = False
        async for event in reader.tail("live", poll_interval=0.01):
            seen.append(thaw(event))
            if not started and len(seen) == 6:  # the first batch is tailed: now let the writer run
                started = True
                assert writer.stdin is not None
                writer.stdin.write("go\n")
                writer.stdin.flush()
            if len(seen) == total:
                break

    try:
        asyncio.run(asyncio.wait_for(follow(), HANG_GUARD_S))
        assert writer.stdout.readline().strip() == "done"
        assert writer.wait() == 0
    finally:
        writer.kill()
        writer.wait()
    assert [event["seq"] for event in seen] == list(range(total))
    assert seen == store.stored("live")


def test_tail__follow_false_ends_at_the_stored_end(store: Store, reader: PersistenceCoordinator) -> None:
    stored = _write(store, "done", 3)
    assert _collect(reader, "done", follow=False) == stored
    assert len(stored) == 18


def test_tail__from_seq_starts_there(store: Store, reader: PersistenceCoordinator) -> None:
    stored = _write(store, "part", 2)
    assert _collect(reader, "part", from_seq=7, follow=False) == stored[7:]
    assert _collect(reader, "part", from_seq=0, follow=False) == stored
    assert _collect(reader, "part", from_seq=len(stored), follow=False) == []
    assert _collect(reader, "part", from_seq=len(stored) + 5, follow=False) == []


def test_tail__from_seq_past_the_end_waits_for_that_seq(store: Store, reader: PersistenceCoordinator) -> None:
    writer = store.writer("later", turns=3)
    assert writer.stdout is not None and writer.stdin is not None
    assert writer.stdout.readline().strip() == "ready"

    async def follow() -> list[dict[str, Any]]:
        got: list[dict[str, Any]] = []
        tail = reader.tail("later", from_seq=10, poll_interval=0.01)
        assert writer.stdin is not None
        writer.stdin.write("go\n")
        writer.stdin.flush()
        async for event in tail:
            got.append(thaw(event))
            if event["seq"] == 17:
                break
        return got

    try:
        got = asyncio.run(asyncio.wait_for(follow(), HANG_GUARD_S))
        assert writer.wait() == 0
    finally:
        writer.kill()
        writer.wait()
    assert got == store.stored("later")[10:]


def test_tail__a_session_that_does_not_exist(store: Store, reader: PersistenceCoordinator) -> None:
    _write(store, "other", 1)
    for follow in (False, True):
        with pytest.raises(SessionNotFoundError, match='"missing"'):
            _collect(reader, "missing", follow=follow)


@pytest.mark.parametrize(
    "options",
    [{"from_seq": -1}, {"from_seq": 1.5}, {"from_seq": True}, {"poll_interval": 0}, {"poll_interval": float("nan")}],
    ids=str,
)
def test_tail__bad_options_are_invalid_option(
    store: Store, reader: PersistenceCoordinator, options: dict[str, Any]
) -> None:
    _write(store, "s", 1)
    with pytest.raises(InvalidOptionError):
        _collect(reader, "s", follow=False, **options)


def test_tail__a_wait_for_change_hint_is_used_and_a_lost_one_only_delays(store: Store, tmp_path: Path) -> None:
    """A backend's ``wait_for_change`` is waited on between checks; a hint that never fires (every
    notification lost) still lets every event through, by the bounded re-check."""
    calls: list[tuple[str, float]] = []

    class Silent:
        def __init__(self, inner: Any) -> None:
            self._inner = inner

        def __getattr__(self, name: str) -> Any:
            return getattr(self._inner, name)

        def wait_for_change(self, session_id: str, timeout_s: float) -> bool:
            calls.append((session_id, timeout_s))
            return False  # lost: nothing ever arrives

    coordinator = PersistenceCoordinator(SessionStore(), Silent(store.backend()))
    writer = store.writer("hinted", turns=2)
    assert writer.stdout is not None and writer.stdin is not None
    assert writer.stdout.readline().strip() == "ready"

    async def follow() -> list[dict[str, Any]]:
        got: list[dict[str, Any]] = []
        async for event in coordinator.tail("hinted"):
            got.append(thaw(event))
            if len(got) == 6:
                assert writer.stdin is not None
                writer.stdin.write("go\n")
                writer.stdin.flush()
            if len(got) == 12:
                break
        return got

    try:
        got = asyncio.run(asyncio.wait_for(follow(), HANG_GUARD_S))
        assert writer.wait() == 0
    finally:
        writer.kill()
        writer.wait()
        coordinator.close()
    assert got == store.stored("hinted")
    assert calls[0] == ("hinted", 0.0)
    assert len(calls) > 1 and all(call == ("hinted", 1.0) for call in calls[1:])
