"""Coordinator-specific behaviour: spec ``persistence.md`` §8.5 (items 83–135) and the write-behind rules
of §3.11 / §8.1, as far as they apply to the synchronous, thread-based design.

These run over the memory backend with "controllable" subclasses: a real ``MemoryBackend`` plus one
recorded call, one gate (a ``threading.Event`` the test opens) or one injected fault. Items whose subject
is an asynchronous mechanism with no counterpart here (abort signals, microtask ordering, promise chains,
the plugin/fiber service registration) are not reproduced; see the module's end for the list.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from typing import Any, ClassVar

import pytest

from agentlog import SessionStore
from agentlog.errors import (
    AgentlogError,
    LegacyFormatError,
    PersistenceError,
    SessionCollisionError,
    SessionLockedError,
    SessionNotFoundError,
    SessionPersistenceCorruptionError,
)
from agentlog.persistence.coordinator import InvalidOptionError, PersistenceCoordinator
from agentlog.persistence.memory import MemoryBackend

from .conftest import (
    APPEND_INTENT,
    SID,
    Harness,
    append_closed_turn,
    closed_turn,
    ev,
    event_bytes,
    header,
    live_meta,
    seqs,
    turn_end,
    turn_start,
    types,
    user_data,
    user_event,
)

LIVE_TURN_OPEN = (
    'cannot load session "{id}" while its live turn is open; use the live Session or wait for the turn to close'
)


# --- controllable backends ----------------------------------------------------------------------------------


class Recording:
    """Mixin: records every storage call as ``(name, detail)`` in ``self.calls`` (per instance)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[tuple[str, Any]] = []
        self.batches: list[list[Any]] = []

    def count(self, name: str) -> int:
        return sum(1 for call, _ in self.calls if call == name)

    def load_stored(self, session_id: str) -> Any:
        self.calls.append(("load_stored", session_id))
        return super().load_stored(session_id)  # type: ignore[misc]

    def append_batch(self, meta: Any, events: Any, materialized: bool) -> None:
        if events:
            self.batches.append(list(events))
        self.calls.append(("append_batch", [event["seq"] for event in events]))
        super().append_batch(meta, events, materialized)  # type: ignore[misc]

    def commit_repair(self, meta: Any, torn_marker: Any, closers: Any) -> None:
        self.calls.append(("commit_repair", [event["seq"] for event in closers]))
        super().commit_repair(meta, torn_marker, closers)  # type: ignore[misc]


def lifecycle_mixin(*, fail_first: bool = False, gate: threading.Event | None = None) -> type:
    """A mixin recording ``append-failed`` / ``append-committed`` / ``close`` in ``cls.lifecycle``.

    ``gate``: the first non-empty ``append_batch`` sets ``cls.entered`` and waits for the gate.
    ``fail_first``: the first non-empty ``append_batch`` raises ``OSError`` (after the gate, if any).
    """

    class Lifecycle:
        lifecycle: ClassVar[list[str]] = []
        entered: ClassVar[threading.Event] = threading.Event()
        first: ClassVar[list[bool]] = [True]

        def append_batch(self, meta: Any, events: Any, materialized: bool) -> None:
            if events and self.first:
                self.first.clear()
                if gate is not None:
                    self.entered.set()
                    gate.wait(5)
                if fail_first:
                    self.lifecycle.append("append-failed")
                    raise OSError("injected append fault")
            super().append_batch(meta, events, materialized)  # type: ignore[misc]
            if events:
                self.lifecycle.append("append-committed")

        def close(self) -> None:
            self.lifecycle.append("close")
            super().close()  # type: ignore[misc]

    return Lifecycle


class LieAboutRevisionOnce:
    """Mixin: the first revision check after a read reports a foreign revision (an external change)."""

    lied: ClassVar[list[bool]] = []

    def read_revision(self, session_id: str) -> Any:
        if not self.lied:
            self.lied.append(True)
            return "stale-revision"
        return super().read_revision(session_id)  # type: ignore[misc]


def lie_once() -> type:
    return type("LieOnce", (LieAboutRevisionOnce,), {"lied": []})


def persist(env: Harness, events: list[dict[str, Any]], meta: dict[str, Any] | None = None) -> None:
    meta = meta if meta is not None else header(SID)
    writer = env.coordinator()
    writer.create(meta)
    writer.append(meta["id"], events)


def stored(env: Harness, session_id: str = SID) -> list[Any]:
    return list(env.coordinator().read_from(session_id, 0).events)


def wait_until(predicate: Any, timeout: float = 60.0) -> bool:  # a hang guard: returns once it holds
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.005)
    return bool(predicate())


def open_turn() -> list[dict[str, Any]]:
    return [turn_start(0), user_event(1, "q")]


# === §8.5 ===================================================================================================


def test_83_memory_backend_rejects_raw_reads_distinctly_from_absence(memory_env: Harness) -> None:  # spec 8.5 #83
    backend = memory_env.backend()
    assert backend.supports_raw_artifacts is False
    with pytest.raises(
        PersistenceError, match=re.escape("this session persistence backend does not expose raw artifacts")
    ):
        backend.read_raw("missing")


def test_84_retains_the_immutable_session_seed_without_cloning(memory_env: Harness) -> None:  # spec 8.5 #84
    coordinator = memory_env.coordinator(wrap=Recording)
    store = coordinator.store
    session = store.create(SID, seed=closed_turn(), meta=live_meta())
    session.append("turn/start", {"turn": 2})
    store.flush(session)
    handed = [event for batch in coordinator.backend.batches for event in batch]
    assert len(handed) == len(session.events) == 8
    assert all(a is b for a, b in zip(handed, session.events, strict=True))


def test_85_cancels_the_batching_deadline_when_initialization_fails(
    memory_env: Harness, caplog: pytest.LogCaptureFixture
) -> None:  # spec 8.5 #85
    persist(memory_env, closed_turn())
    coordinator = memory_env.coordinator(wrap=Recording)
    store = coordinator.store
    collider = store.create(SID, seed=[turn_start(0)], meta=live_meta())  # a seed that does not cover the log
    with caplog.at_level(logging.WARNING, logger="agentlog"):
        collider.append("turn/start", {"turn": 1})
        with pytest.raises(SessionCollisionError):
            store.flush(collider)
        time.sleep(0.12)  # several windows
        assert coordinator.backend.count("append_batch") == 0
        assert not [r for r in caplog.records if "background write" in r.getMessage()]
        store.dispose(collider)
        time.sleep(0.06)
        assert coordinator.backend.count("append_batch") == 0
        with pytest.raises(PersistenceError, match=re.escape("session-persistence-memory dispose failed")):
            coordinator.close()
    assert coordinator.backend.count("append_batch") == 0


def test_86_starts_a_follow_up_batch_for_events_admitted_during_a_write(memory_env: Harness) -> None:  # spec 8.5 #86
    gate = threading.Event()
    mixin = lifecycle_mixin(gate=gate)
    coordinator = memory_env.coordinator(wrap=type("Both", (mixin, Recording), {}))
    store = coordinator.store
    session = store.create(SID, meta=live_meta())
    session.append("turn/start", {"turn": 1})
    assert mixin.entered.wait(3)  # the background write of [0] is in flight
    session.append("user/message", user_data("late"), APPEND_INTENT)
    gate.set()
    assert wait_until(lambda: mixin.lifecycle.count("append-committed") == 2)
    assert [seq for name, seq in coordinator.backend.calls if name == "append_batch"] == [[0], [1]]
    assert seqs(stored(memory_env)) == [0, 1]


def test_87_retries_a_failed_overlapping_background_write_at_the_flush_barrier(
    memory_env: Harness, caplog: pytest.LogCaptureFixture
) -> None:  # spec 8.5 #87
    gate = threading.Event()
    mixin = lifecycle_mixin(gate=gate, fail_first=True)
    coordinator = memory_env.coordinator(wrap=mixin)
    store = coordinator.store
    session = store.create(SID, meta=live_meta())
    results: list[Any] = []

    def flush() -> None:
        try:
            results.append(store.flush(session))
        except BaseException as err:
            results.append(err)

    with caplog.at_level(logging.WARNING, logger="agentlog"):
        session.append("turn/start", {"turn": 1})
        assert mixin.entered.wait(3)
        flushers = [threading.Thread(target=flush) for _ in range(2)]
        for thread in flushers:
            thread.start()
        time.sleep(0.05)
        gate.set()
        for thread in flushers:
            thread.join(5)
    assert results == [True, True]
    assert mixin.lifecycle == ["append-failed", "append-committed"]
    assert len([r for r in caplog.records if "background write" in r.getMessage()]) == 1
    assert seqs(stored(memory_env)) == [0]


def test_88_rejects_a_mismatched_header_before_repair_or_state(memory_env: Harness) -> None:  # spec 8.5 #88
    persist(memory_env, open_turn())

    class WrongHeader(Recording):
        def load_stored(self, session_id: str) -> Any:
            prefix = super().load_stored(session_id)
            if prefix is not None:
                prefix.meta["id"] = "other"
            return prefix

    coordinator = memory_env.coordinator(wrap=WrongHeader)
    message = re.escape(f'stored session identity mismatch: requested "{SID}", header contains "other"')
    with pytest.raises(SessionPersistenceCorruptionError, match=message):
        coordinator.load(SID)
    with pytest.raises(SessionPersistenceCorruptionError, match=message):
        coordinator.prepare(SID)
    with pytest.raises(SessionPersistenceCorruptionError, match=message):
        coordinator.append(SID, [ev("turn/end", 2, {"turn": 1, "reason": {"kind": "completed"}})])
    assert coordinator.backend.count("commit_repair") == 0
    assert [e["type"] for e in stored(memory_env)] == ["turn/start", "user/message"]


def test_89_a_cold_id_is_not_published_across_a_storage_repair(memory_env: Harness) -> None:  # spec 8.5 #89
    # Adapted: the original vetoes the publication at once ("persisted state already owns this identity");
    # here the publication may instead wait for the repair. Either way the intruder must never become a
    # writer of the id, and the repaired session must then resume.
    persist(memory_env, open_turn())
    gate = threading.Event()
    entered = threading.Event()

    class SlowRepair:
        def commit_repair(self, meta: Any, torn_marker: Any, closers: Any) -> None:
            entered.set()
            gate.wait(5)
            super().commit_repair(meta, torn_marker, closers)  # type: ignore[misc]

    coordinator = memory_env.coordinator(wrap=SlowRepair)
    store = coordinator.store
    loaded: list[Any] = []

    def load() -> None:
        try:
            loaded.append(coordinator.load(SID))
        except BaseException as err:
            loaded.append(err)

    loader = threading.Thread(target=load)
    loader.start()
    assert entered.wait(3)
    threading.Timer(0.2, gate.set).start()
    intruder = None
    try:
        intruder = store.create(SID, meta=live_meta())
    except AgentlogError as err:
        # issue 7: or refused at once because the id has a stored log (SESSION_ALREADY_EXISTS)
        expected = "persisted state already owns this identity|id collision|already has a stored log"
        assert re.search(expected, str(err)), err
    loader.join(5)
    assert not isinstance(loaded[0], BaseException), f"the repairing load failed: {loaded[0]!r}"
    assert types(loaded[0].events) == ["turn/start", "user/message", "turn/end"]
    if intruder is not None:
        intruder.append("turn/start", {"turn": 9})
        with pytest.raises(SessionCollisionError):
            store.flush(intruder)
        store.dispose(intruder)
    assert types(stored(memory_env)) == ["turn/start", "user/message", "turn/end"]
    resumed = coordinator.resume(SID)
    assert types(resumed.events) == ["turn/start", "user/message", "turn/end", "session/end-seed"]


def test_a_disposed_session_whose_initialization_failed_releases_the_writer_lock(memory_env: Harness) -> None:
    # Lock contract (docs/persistence-api.md): the writer lock is held while a session is live for writing.
    # A collided session that was disposed is not live; the stored session must then be resumable.
    persist(memory_env, closed_turn())
    coordinator = memory_env.coordinator()
    store = coordinator.store
    collider = store.create(SID, seed=[turn_start(0)], meta=live_meta())  # a seed that does not cover the log
    collider.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    with pytest.raises(SessionCollisionError):
        store.flush(collider)
    store.dispose(collider)
    try:
        resumed = coordinator.resume(SID)
    except SessionLockedError as err:
        pytest.fail(f"the disposed, never-initialized session still holds the writer lock: {err}")
    assert len(resumed.events) == 7


@pytest.mark.parametrize("size", [0, 1.5, -1, True])
def test_90_rejects_invalid_preparation_cache_capacity(size: Any) -> None:  # spec 8.5 #90
    with pytest.raises(InvalidOptionError, match=re.escape("preparedSessionCacheSize must be a positive safe integer")):
        PersistenceCoordinator(SessionStore(), MemoryBackend(), prepared_cache_size=size)


@pytest.mark.parametrize("delay", [0, 1.5, 2147483648, -5])
def test_91_rejects_invalid_write_batch_delay(delay: Any) -> None:  # spec 8.5 #91
    with pytest.raises(
        InvalidOptionError, match=re.escape("writeBatchMaxDelayMs must be an integer between 1 and 2147483647")
    ):
        PersistenceCoordinator(SessionStore(), MemoryBackend(), batch_delay_ms=delay)


def test_91_accepts_the_boundary_batch_delays() -> None:  # spec 8.5 #91
    for delay in (1, 2147483647):
        PersistenceCoordinator(SessionStore(), MemoryBackend(), batch_delay_ms=delay).close()


def test_92_retries_an_invalidated_load_reservation(memory_env: Harness) -> None:  # spec 8.5 #92
    persist(memory_env, open_turn())
    coordinator = memory_env.coordinator(wrap=type("Lying", (lie_once(), Recording), {}))
    loaded = coordinator.load(SID)
    assert types(loaded.events) == ["turn/start", "user/message", "turn/end"]
    assert coordinator.backend.count("commit_repair") == 1
    assert types(stored(memory_env)) == ["turn/start", "user/message", "turn/end"]


def test_93_prefers_a_live_session_over_preparation_reads(memory_env: Harness) -> None:  # spec 8.5 #93
    coordinator = memory_env.coordinator()
    store = coordinator.store
    session = store.create(SID, meta=live_meta())
    append_closed_turn(session)
    with pytest.raises(PersistenceError, match=re.escape(f'cannot prepare session "{SID}" while it is live')):
        coordinator.prepare(SID)
    inspected = coordinator.inspect(SID)
    assert inspected.events == session.events
    loaded = coordinator.load(SID)
    assert event_bytes(loaded.events) == event_bytes(session.events)


def test_96_observes_a_restored_suffix_write_failure(memory_env: Harness) -> None:  # spec 8.5 #96
    persist(memory_env, closed_turn())
    mixin = lifecycle_mixin(fail_first=True)
    coordinator = memory_env.coordinator(wrap=mixin, batch_delay_ms=60_000)
    session = coordinator.resume(SID)
    with pytest.raises(OSError, match="injected append fault"):
        coordinator.store.flush(session)
    coordinator.store.flush(session)
    assert mixin.lifecycle == ["append-failed", "append-committed"]
    assert types(stored(memory_env))[6] == "session/end-seed"


def test_97_writes_new_events_after_publishing_a_preparation_without_suffix(
    memory_env: Harness,
) -> None:  # spec 8.5 #97
    persist(memory_env, [*closed_turn(), ev("session/end-seed", 6, {})])
    coordinator = memory_env.coordinator(wrap=Recording)
    session = coordinator.resume(SID)
    assert len(session.events) == 7
    session.append("turn/start", {"turn": 2})
    session.append("turn/end", {"turn": 2, "reason": {"kind": "completed"}})
    coordinator.store.flush(session)
    assert [seq for name, seq in coordinator.backend.calls if name == "append_batch"] == [[7, 8]]
    assert seqs(stored(memory_env)) == list(range(9))


def test_98_reuses_the_exact_session_from_inspect_through_repeated_prepares(
    memory_env: Harness,
) -> None:  # spec 8.5 #98
    persist(memory_env, closed_turn())
    coordinator = memory_env.coordinator(wrap=Recording)
    inspected = coordinator.inspect(SID)
    first = coordinator.prepare(SID)
    assert all(a is b for a, b in zip(inspected.events, first.session.events, strict=False))
    first.dispose()
    second = coordinator.prepare(SID)
    assert second.session is first.session
    second.dispose()
    assert coordinator.backend.count("load_stored") == 1


def test_99_reloads_a_cached_inspection_after_the_revision_changes(memory_env: Harness) -> None:  # spec 8.5 #99
    persist(memory_env, closed_turn())
    coordinator = memory_env.coordinator(wrap=Recording)
    first = coordinator.inspect(SID)
    assert coordinator.inspect(SID).events[0] is first.events[0]  # unchanged revision: reused
    memory_env.coordinator().append(SID, [turn_start(6, 2), turn_end(7, 2)])
    second = coordinator.inspect(SID)
    assert len(second.events) == 8
    assert second.events[0] is not first.events[0]
    assert coordinator.backend.count("load_stored") == 2


def test_100_does_not_restore_from_a_stale_cached_inspection(memory_env: Harness) -> None:  # spec 8.5 #100
    persist(memory_env, closed_turn())
    coordinator = memory_env.coordinator()
    coordinator.inspect(SID)
    memory_env.coordinator().append(SID, [turn_start(6, 2), turn_end(7, 2)])
    preparation = coordinator.prepare(SID)
    assert len(preparation.session.events) == 9
    assert preparation.session.events[8]["type"] == "session/end-seed"
    preparation.dispose()


def test_101_retains_a_reserved_preparation_when_inspection_sees_a_newer_revision(
    memory_env: Harness,
) -> None:  # spec 8.5 #101
    persist(memory_env, closed_turn())
    coordinator = memory_env.coordinator()
    preparation = coordinator.prepare(SID)
    memory_env.coordinator().append(SID, [turn_start(6, 2), turn_end(7, 2)])
    inspected = coordinator.inspect(SID)
    assert len(inspected.events) == 6  # the reserved (older) inspection
    store = coordinator.store
    store.enter(preparation.session)
    store.announce(preparation.session)  # the reservation survived and can still be published
    assert store.get(SID) is preparation.session


def test_104_retries_cold_append_adoption_when_the_revision_becomes_stale(memory_env: Harness) -> None:  # spec 8.5 #104
    persist(memory_env, open_turn())
    coordinator = memory_env.coordinator(wrap=type("Lying", (lie_once(), Recording), {}))
    coordinator.append(SID, [turn_start(3, 2)])
    assert coordinator.backend.count("commit_repair") == 1
    assert [seq for name, seq in coordinator.backend.calls if name == "append_batch" and seq == [3]] == [[3]]
    assert seqs(stored(memory_env)) == [0, 1, 2, 3]


def test_105_inspects_an_open_live_turn_without_balancing_it(memory_env: Harness) -> None:  # spec 8.5 #105
    coordinator = memory_env.coordinator()
    session = coordinator.store.create(SID, meta=live_meta())
    session.append("turn/start", {"turn": 1})
    session.append("user/message", user_data("q"), APPEND_INTENT)
    inspected = coordinator.inspect(SID)
    assert inspected.events is session.events
    assert types(inspected.events) == ["turn/start", "user/message"]
    with pytest.raises(PersistenceError, match=re.escape(LIVE_TURN_OPEN.format(id=SID))):
        coordinator.load(SID)


def test_106_inspect_keeps_recovery_in_memory_and_prepare_commits_it_once(memory_env: Harness) -> None:  # spec 8.5 #106
    persist(memory_env, open_turn())
    coordinator = memory_env.coordinator(wrap=Recording)
    inspected = coordinator.inspect(SID)
    assert types(inspected.events) == ["turn/start", "user/message", "turn/end"]
    assert coordinator.backend.count("commit_repair") == 0
    first = coordinator.prepare(SID)
    assert coordinator.backend.count("commit_repair") == 1
    first.dispose()
    second = coordinator.prepare(SID)
    assert second.session is first.session
    second.dispose()
    assert coordinator.backend.count("commit_repair") == 1
    assert coordinator.backend.count("load_stored") == 2


def test_107_reloads_the_committed_graph_when_another_writer_appends_after_repair(
    memory_env: Harness,
) -> None:  # spec 8.5 #107
    persist(memory_env, [turn_start(0)])

    class AnotherWriter:
        def commit_repair(self, meta: Any, torn_marker: Any, closers: Any) -> None:
            super().commit_repair(meta, torn_marker, closers)  # type: ignore[misc]
            super().append_batch(meta, [turn_start(2, 2), turn_end(3, 2)], True)  # type: ignore[misc]

    coordinator = memory_env.coordinator(wrap=AnotherWriter)
    preparation = coordinator.prepare(SID)
    assert types(preparation.session.events) == ["turn/start", "turn/end", "turn/start", "turn/end", "session/end-seed"]
    preparation.dispose()


def test_108_rejects_preparation_when_storage_disappears_after_repair(memory_env: Harness) -> None:  # spec 8.5 #108
    persist(memory_env, open_turn())

    class Vanishing(Recording):
        def commit_repair(self, meta: Any, torn_marker: Any, closers: Any) -> None:
            super().commit_repair(meta, torn_marker, closers)
            self._records.pop(meta["id"])  # the artifact disappears

    coordinator = memory_env.coordinator(wrap=Vanishing)
    with pytest.raises(SessionNotFoundError, match=re.escape(f'session "{SID}" not found')):
        coordinator.prepare(SID)
    assert coordinator.backend.count("commit_repair") == 1
    assert coordinator.backend.count("load_stored") == 2


def test_109_waits_for_an_existing_reservation_and_reuses_it(memory_env: Harness) -> None:  # spec 8.5 #109
    persist(memory_env, closed_turn())
    coordinator = memory_env.coordinator()
    first = coordinator.prepare(SID)
    second: list[Any] = []
    waiter = threading.Thread(target=lambda: second.append(coordinator.prepare(SID)))
    waiter.start()
    time.sleep(0.15)
    still_waiting = waiter.is_alive()
    first.dispose()
    waiter.join(5)
    assert still_waiting, "a second prepare must wait while the first reservation is held"
    assert second and second[0].session is first.session
    second[0].dispose()


def test_110_evicts_only_ready_preparations_by_lru_capacity(memory_env: Harness) -> None:  # spec 8.5 #110
    persist(memory_env, closed_turn(), header("a"))
    persist(memory_env, closed_turn(), header("b"))
    coordinator = memory_env.coordinator(wrap=Recording, prepared_cache_size=1)
    coordinator.inspect("a")
    coordinator.inspect("b")
    coordinator.inspect("a")
    assert coordinator.backend.count("load_stored") == 3


def test_111_rejects_append_while_a_preparation_is_reserved(memory_env: Harness) -> None:  # spec 8.5 #111
    persist(memory_env, closed_turn())
    coordinator = memory_env.coordinator()
    preparation = coordinator.prepare(SID)
    with pytest.raises(
        PersistenceError, match=re.escape(f'cannot append session "{SID}" while its persisted preparation is reserved')
    ):
        coordinator.append(SID, [turn_start(6, 2)])
    preparation.dispose()
    coordinator.append(SID, [turn_start(6, 2)])
    assert seqs(stored(memory_env)) == list(range(7))


def test_117_a_retiring_unmaterialized_owner_releases_its_id(memory_env: Harness) -> None:  # spec 8.5 #117
    coordinator = memory_env.coordinator()
    store = coordinator.store
    store.dispose(store.create(SID, meta=live_meta()))
    reuse = store.create(SID, meta=live_meta())
    assert store.flush(reuse) is True
    reuse.append("turn/start", {"turn": 1})
    assert store.flush(reuse) is True
    assert seqs(stored(memory_env)) == [0]


def test_122_teardown_retries_a_failed_retirement_before_close(
    memory_env: Harness, caplog: pytest.LogCaptureFixture
) -> None:  # spec 8.5 #122
    mixin = lifecycle_mixin(fail_first=True)
    coordinator = memory_env.coordinator(wrap=mixin, batch_delay_ms=60_000)
    store = coordinator.store
    session = store.create(SID, meta=live_meta())
    session.append("turn/start", {"turn": 1})
    with caplog.at_level(logging.WARNING, logger="agentlog"):
        store.dispose(session)
    retirement = [r.getMessage() for r in caplog.records if "retirement failed" in r.getMessage()]
    assert len(retirement) == 1
    assert retirement[0].startswith(f'session-persistence-memory: session "{SID}" retirement failed: ')
    coordinator.close()
    assert mixin.lifecycle == ["append-failed", "append-committed", "close"]


def test_123_teardown_waits_for_an_in_flight_retirement(memory_env: Harness) -> None:  # spec 8.5 #123
    gate = threading.Event()
    mixin = lifecycle_mixin(gate=gate)
    coordinator = memory_env.coordinator(wrap=mixin, batch_delay_ms=60_000)
    store = coordinator.store
    session = store.create(SID, meta=live_meta())
    session.append("turn/start", {"turn": 1})
    retiring = threading.Thread(target=store.dispose, args=(session,))
    retiring.start()
    assert mixin.entered.wait(3)
    threading.Timer(0.1, gate.set).start()
    coordinator.close()
    retiring.join(5)
    assert mixin.lifecycle == ["append-committed", "close"]


def test_124_teardown_waits_for_a_detached_public_append(memory_env: Harness) -> None:  # spec 8.5 #124
    gate = threading.Event()
    mixin = lifecycle_mixin(gate=gate)
    coordinator = memory_env.coordinator(wrap=mixin)
    coordinator.create(header(SID))
    appending = threading.Thread(target=coordinator.append, args=(SID, [turn_start(0)]))
    appending.start()
    assert mixin.entered.wait(3)
    threading.Timer(0.1, gate.set).start()
    coordinator.close()
    appending.join(5)
    assert mixin.lifecycle == ["append-committed", "close"]


def test_teardown_closes_the_backend_even_when_the_drain_fails(memory_env: Harness) -> None:  # spec §3.10.6
    persist(memory_env, closed_turn())
    mixin = lifecycle_mixin()
    coordinator = memory_env.coordinator(wrap=mixin)
    collider = coordinator.store.create(SID, seed=[turn_start(0)], meta=live_meta())  # does not cover the log
    collider.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    with pytest.raises(PersistenceError, match=re.escape("session-persistence-memory dispose failed")):
        coordinator.close()
    assert mixin.lifecycle == ["close"]


def test_129_rejects_non_json_metadata_before_registering_state(memory_env: Harness) -> None:  # spec 8.5 #129
    coordinator = memory_env.coordinator()
    with pytest.raises(InvalidOptionError, match=re.escape("session metadata must be losslessly JSON-serializable")):
        coordinator.create({**header(SID), "extra": float("nan")})
    coordinator.create(header(SID))
    coordinator.append(SID, [turn_start(0)])
    assert seqs(stored(memory_env)) == [0]


def test_130_rejects_a_legacy_header_delta_from_a_live_producer(memory_env: Harness) -> None:  # spec 8.5 #130
    coordinator = memory_env.coordinator()
    session = coordinator.store.create(SID, meta=live_meta())
    with pytest.raises(LegacyFormatError, match="request/header-delta"):
        session.append("request/header-delta", {"changes": {}})
    coordinator.store.flush(session)
    assert len(session.events) == 0
    assert coordinator.list() == []


def test_131_rejects_a_legacy_fallback_header_from_a_live_producer(memory_env: Harness) -> None:  # spec 8.5 #131
    coordinator = memory_env.coordinator()
    session = coordinator.store.create(SID, meta=live_meta())
    data = {"header": {"config": {"provider": "p", "model": "m"}}, "reason": "fallback"}
    with pytest.raises(LegacyFormatError, match='reason "fallback"'):
        session.append("request/header", data)
    coordinator.store.flush(session)
    assert coordinator.list() == []


def _write_raw(env: Harness, events: list[dict[str, Any]]) -> None:
    """Write a log the public append would refuse (legacy shapes), straight through the backend."""
    env.backend().append_batch(header(SID), events, False)


def test_132_rejects_a_legacy_stored_prefix_during_live_adoption(memory_env: Harness) -> None:  # spec 8.5 #132
    _write_raw(memory_env, [ev("request/header-delta", 0, {"changes": {}})])
    coordinator = memory_env.coordinator()
    # seeded, so the stored prefix is adopted (an unseeded create is refused at once: issue 7, ids)
    session = coordinator.store.create(SID, seed=[turn_start(0)], meta=live_meta())
    with pytest.raises(AgentlogError, match=re.escape("unsupported legacy request/header-delta event at seq 0")):
        coordinator.store.flush(session)


def test_133_rejects_a_stored_legacy_fallback_header_on_load(memory_env: Harness) -> None:  # spec 8.5 #133
    data = {"header": {"config": {"provider": "p", "model": "m"}}, "reason": "fallback"}
    _write_raw(memory_env, [ev("request/header", 0, data)])
    coordinator = memory_env.coordinator()
    text = re.escape(f'session "{SID}" contains unsupported legacy request/header reason "fallback" at seq 0')
    with pytest.raises(SessionPersistenceCorruptionError, match=text):
        coordinator.load(SID)


def test_134_rejects_a_stored_legacy_mode_event_on_load(memory_env: Harness) -> None:  # spec 8.5 #134
    _write_raw(memory_env, [ev("mode/set", 0, {"mode": "plan"})])
    coordinator = memory_env.coordinator()
    text = re.escape(f'session "{SID}" contains unsupported legacy mode/set event at seq 0')
    with pytest.raises(SessionPersistenceCorruptionError, match=text):
        coordinator.load(SID)


def test_135_retires_all_bookkeeping_for_disposed_sessions(memory_env: Harness) -> None:  # spec 8.5 #135
    coordinator = memory_env.coordinator()
    store = coordinator.store
    for session_id in ("a", "b"):
        session = store.create(session_id, meta=live_meta())
        append_closed_turn(session)
        store.dispose(session)
    assert coordinator._states == {}
    assert coordinator._live == {}
    assert coordinator._reserved == {}


def test_135_per_id_locks_do_not_accumulate(memory_env: Harness) -> None:  # spec 8.5 #135 (chains drain)
    coordinator = memory_env.coordinator()
    store = coordinator.store
    for n in range(20):
        session = store.create(f"s-{n}", meta=live_meta())
        session.append("turn/start", {"turn": 1})
        store.dispose(session)
    assert len(coordinator._id_locks) == 0, "per-id ordering state must not outlive its operations"


# === §3.11 / §8.1 write-behind, through the coordinator =============================================================


def test_write_behind_uses_one_fixed_window_from_the_first_event(memory_env: Harness) -> None:  # spec 8.1 #1-2
    # A window long enough that a loaded machine still appends twice inside it.
    coordinator = memory_env.coordinator(wrap=Recording, batch_delay_ms=3000)
    session = coordinator.store.create(SID, meta=live_meta())
    session.append("turn/start", {"turn": 1})
    time.sleep(0.1)
    session.append("user/message", user_data("q"), APPEND_INTENT)  # joins without resetting the deadline
    time.sleep(0.05)
    assert coordinator.backend.count("append_batch") == 0
    assert wait_until(lambda: coordinator.backend.count("append_batch") == 1)
    assert [seq for name, seq in coordinator.backend.calls if name == "append_batch"] == [[0, 1]]


def test_write_behind_flush_on_an_idle_session_writes_nothing(memory_env: Harness) -> None:  # spec 8.1 #4
    coordinator = memory_env.coordinator(wrap=Recording)
    session = coordinator.store.create(SID, meta=live_meta())
    assert coordinator.store.flush(session) is True
    assert coordinator.backend.count("append_batch") == 0


def test_write_behind_barrier_failure_is_not_logged_and_the_batch_is_retained(
    memory_env: Harness, caplog: pytest.LogCaptureFixture
) -> None:  # spec 8.1 #9
    mixin = lifecycle_mixin(fail_first=True)
    coordinator = memory_env.coordinator(wrap=mixin, batch_delay_ms=20)
    store = coordinator.store
    session = store.create(SID, meta=live_meta())
    with caplog.at_level(logging.WARNING, logger="agentlog"):
        session.append("turn/start", {"turn": 1})
        with pytest.raises(OSError, match="injected append fault"):
            store.flush(session)
        time.sleep(0.1)
        assert mixin.lifecycle == ["append-failed"]  # automatic retries are paused
        session.append("user/message", user_data("q"), APPEND_INTENT)
        assert wait_until(lambda: mixin.lifecycle == ["append-failed", "append-committed"])
    assert not [r for r in caplog.records if "background write" in r.getMessage()]
    assert seqs(stored(memory_env)) == [0, 1]


# Not reproduced (no counterpart in the synchronous, thread-based design):
#   94 (a live owner appearing between a cold read and its commit needs the original's interleaving of
#       two promise chains), 95 (needs the preparation state to be mutated behind the coordinator's back),
#   102–103 (same-tick ordering of microtasks), 112–116 (abort signals; the seek hook loadStoredFrom is
#   not part of the Python backend protocol), 118–121 (retirement/chain promise bookkeeping; retirement
#   is synchronous here), 125–128 (plugin/fiber service registration and its default preparation).


def test_concurrent_inspections_share_the_read_cache_safely(memory_env: Harness) -> None:
    """Inspections of different sessions run at once (the search reads stored sessions from several
    threads): one whose cached entry is evicted while it checks the entry's revision still answers."""
    persist(memory_env, closed_turn(), header("a"))
    persist(memory_env, closed_turn(), header("b"))
    coordinator = memory_env.coordinator(prepared_cache_size=1)
    expected = list(coordinator.inspect("a").events)  # cached
    backend = coordinator.backend
    original = backend.read_revision
    evicted = threading.Event()

    def read_revision(session_id: str) -> Any:
        revision = original(session_id)
        if session_id == "a" and not evicted.is_set():
            # While this thread checks a's revision, another inspects b: a is evicted meanwhile.
            other = threading.Thread(target=coordinator.inspect, args=("b",))
            other.start()
            other.join()
            evicted.set()
        return revision

    backend.read_revision = read_revision  # type: ignore[method-assign]
    snapshot = coordinator.inspect("a")
    assert evicted.is_set()
    assert list(snapshot.events) == expected and len(expected) > 3
