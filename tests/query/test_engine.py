"""The query engine (runtime spec §4.1) against the original's ``session-query/tests/session-query.spec.ts``.

One test per case of the original, named after it. Every test runs over a real
:class:`~agentlog.PersistenceCoordinator` on a real JSONL store and a real SQLite store in ``tmp_path``.
The original's ``TestPersistence`` plugin becomes :class:`Binding`: it forwards to the real coordinator
and misbehaves only when a test asks it to (a failing or stalling ``list``/``inspect``, a header that
changes between listing and reading, a log served raw) — the interleavings the original's cases are
about, which a healthy coordinator cannot produce on demand.

What the port changes, and why:

* The original's ``AbortSignal`` is forwarded into the backend call; the Python coordinator is
  synchronous and takes no signal. A "cooperative" backend here is a :class:`Binding` hook that watches
  the same ``threading.Event`` the caller sets; the engine's part — wait for the started call to settle,
  then surface the abort (``SESSION_QUERY_ABORTED``) instead of the backend's own failure, and start
  nothing more — is what the tests check. The original's "exact abort reason" is the ABORTED code.
* Results are plain JSON copies, not frozen objects: where the original expects a mutation of a result
  to throw, the tests check that mutating a result leaves the live session and the next read untouched.
* A corrupt stored log is already refused by the coordinator's ``inspect`` (it validates every event),
  so such cases are checked both ways: the real store's log → ``SESSION_QUERY_CORRUPT_SESSION``; the same
  events served raw by the binding → the engine's own check (replay, surface fold).
* Cordis plugin lifecycle cases (fiber disposal quiescence) have no equivalent: the engine is a plain
  object; ``bind_persistence`` / ``close`` stand in for mounting and disposing the optional service.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentlog.errors import SessionPersistenceCorruptionError, SessionQueryError
from agentlog.kernel.events import EventTypes, event_types
from agentlog.kernel.jsonvalue import thaw
from agentlog.kernel.store import SessionStore
from agentlog.persistence.backend import SessionListing
from agentlog.persistence.coordinator import PersistenceCoordinator, SessionSnapshot
from agentlog.persistence.jsonl import JsonlBackend
from agentlog.persistence.memory import MemoryBackend
from agentlog.persistence.sqlite import SqliteBackend
from agentlog.query.engine import (
    DEFAULT_PERSISTED_INSPECT_CONCURRENCY,
    SessionQuery,
    assert_headers_compatible,
    session_order_key,
)

APPEND = {"surfaceOp": "append"}
WAIT = 10.0  # seconds a test waits for another thread to reach a point (a hang guard, not an assertion)


# --- builders ------------------------------------------------------------------------------------------


def meta(session_id: str, created_at: int = 1, **extra: Any) -> dict[str, Any]:
    return {"version": 0, "id": session_id, "createdAt": created_at, "delegationDepth": 0, **extra}


def user(text: str, *, kind: str = "user", plugin: str | None = None, msg_id: str | None = None) -> dict[str, Any]:
    source: dict[str, Any] = {"kind": kind}
    if plugin is not None:
        source["plugin"] = plugin
    return {
        "id": msg_id or f"user-{text}",
        "role": "user",
        "content": [{"type": "text", "text": text}],
        "source": source,
    }


def assistant(text: str, *, turn: int = 1, step: int = 1, msg_id: str | None = None) -> dict[str, Any]:
    return {
        "turn": turn,
        "step": step,
        "message": {
            "id": msg_id or f"assistant-{text}",
            "role": "assistant",
            "content": [{"type": "text", "text": text}],
            "source": {"kind": "model", "provider": "mock", "model": "mock"},
        },
    }


def user_event(seq: int, text: str = "hello", **extra: Any) -> dict[str, Any]:
    event = {"type": "user/message", "seq": seq, "time": 10 + seq, "data": user(text, msg_id=f"u{seq}")}
    event["surfaceOp"] = "append"
    event.update(extra)
    return event


def title_event(seq: int, title: str, time_ms: int, message_seqs: list[int] | None = None) -> dict[str, Any]:
    data = {"title": title, "messageSeqs": message_seqs or [], "source": {"kind": "fallback"}}
    return {"type": "session/title", "seq": seq, "time": time_ms, "data": data}


def chunk(text: str) -> dict[str, Any]:
    return {"turn": 1, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": text}}


def replace(start: int, end: int, sources: list[int]) -> dict[str, Any]:
    return {"surfaceOp": {"op": "replace", "start": start, "end": end}, "sourceEventSeqs": sources}


# --- the misbehaving-on-request binding --------------------------------------------------------------------


class Binding:
    """A persistence binding for the engine: the real coordinator, plus hooks a test sets to misbehave."""

    def __init__(self, coordinator: PersistenceCoordinator) -> None:
        self.real = coordinator
        self.store = coordinator.store
        self.backend = coordinator.backend
        self.lock = threading.Lock()
        self.list_calls = 0
        self.inspect_calls: list[str] = []
        self.list_hook: Callable[[], list[SessionListing] | None] | None = None
        self.after_list: Callable[[], None] | None = None
        self.inspect_hook: Callable[[str], SessionSnapshot | None] | None = None
        self.after_inspect: Callable[[str], None] | None = None
        self.patches: dict[str, dict[str, Any]] = {}  # header fields listing reports differently
        self.raw: dict[str, tuple[dict[str, Any], list[Any]]] = {}  # logs served as stored, unvalidated

    def reset_counts(self) -> None:
        self.list_calls = 0
        self.inspect_calls = []

    def list(self) -> list[SessionListing]:
        with self.lock:
            self.list_calls += 1
        if self.list_hook is not None:
            hooked = self.list_hook()
            if hooked is not None:
                return hooked
        listings = [copy.copy(listing) for listing in self.real.list()]
        listings += [SessionListing(id=key, header=thaw(header)) for key, (header, _) in self.raw.items()]
        for listing in listings:
            if listing.id in self.patches and listing.header is not None:
                listing.header = {**listing.header, **self.patches[listing.id]}
        if self.after_list is not None:
            self.after_list()
        return listings

    def inspect(self, session_id: str) -> SessionSnapshot:
        with self.lock:
            self.inspect_calls.append(session_id)
        if self.inspect_hook is not None:
            hooked = self.inspect_hook(session_id)
            if hooked is not None:
                return hooked
        if session_id in self.raw:
            header, events = self.raw[session_id]
            snapshot = SessionSnapshot(copy.deepcopy(header), copy.deepcopy(events))  # type: ignore[arg-type]
        else:
            snapshot = self.real.inspect(session_id)
        if self.after_inspect is not None:
            self.after_inspect(session_id)
        return snapshot


class World:
    """A store, a real backend in ``tmp_path``, its coordinator and the binding the engine reads."""

    def __init__(self, kind: str, root: Path) -> None:
        self.kind = kind
        self.store = SessionStore()
        self.backend: Any = JsonlBackend(root / "jsonl") if kind == "jsonl" else SqliteBackend(root / "store.sqlite3")
        self.coordinator = PersistenceCoordinator(self.store, self.backend, batch_delay_ms=1)
        self.binding = Binding(self.coordinator)

    def query(self, *, bound: bool = True, **options: Any) -> SessionQuery:
        query = SessionQuery(store=self.store, **options)
        if bound:
            query.bind_persistence(self.binding)  # type: ignore[arg-type]
        return query

    def persist(self, header: Mapping[str, Any], events: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Write a stored (not live) session through the coordinator's ownerless path."""
        self.coordinator.create(header)
        self.coordinator.append(header["id"], events)
        return dict(header)

    def persist_unloadable(self, header: Mapping[str, Any], events: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Write a log no load accepts straight through the backend (the coordinator refuses to write one)."""
        self.coordinator.backend.append_batch(dict(header), [dict(event) for event in events], False)
        return dict(header)

    def close(self) -> None:
        self.coordinator.close()  # closes the backend too


@pytest.fixture(params=["jsonl", "sqlite"])
def world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[World]:
    made = World(request.param, tmp_path)
    yield made
    made.close()


def code_of(call: Callable[[], Any]) -> str:
    with pytest.raises(SessionQueryError) as caught:
        call()
    return caught.value.code


class Background:
    """Run one call on a thread; ``result()`` joins it and returns or raises its outcome."""

    def __init__(self, call: Callable[[], Any]) -> None:
        self.value: Any = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(call,), daemon=True)
        self.thread.start()

    def _run(self, call: Callable[[], Any]) -> None:
        try:
            self.value = call()
        except BaseException as err:  # handed to the test thread
            self.error = err

    @property
    def settled(self) -> bool:
        return not self.thread.is_alive()

    def result(self) -> Any:
        self.thread.join(WAIT)
        assert not self.thread.is_alive(), "the background call did not settle"
        if self.error is not None:
            raise self.error
        return self.value


def wait_until(predicate: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.001)


# --- cancellation of corpus listings -------------------------------------------------------------------

LISTINGS: dict[str, Callable[[SessionQuery, threading.Event], Any]] = {
    "list_sessions": lambda query, signal: query.list_sessions(signal=signal),
    "filter_sessions": lambda query, signal: query.filter_sessions([], signal=signal),
}


@pytest.mark.parametrize("operation", sorted(LISTINGS))
def test_listing_cancellation_preserves_an_exact_pre_abort_reason_without_entering_persistence(
    world: World, operation: str
) -> None:
    query = world.query()
    signal = threading.Event()
    signal.set()
    assert code_of(lambda: LISTINGS[operation](query, signal)) == "SESSION_QUERY_ABORTED"
    assert world.binding.list_calls == 0


@pytest.mark.parametrize("operation", sorted(LISTINGS))
def test_listing_cancellation_forwards_in_flight_cancellation_and_waits_for_persistence_cleanup_before_rejecting(
    world: World, operation: str
) -> None:
    query = world.query()
    signal = threading.Event()
    started, cleanup = threading.Event(), threading.Event()
    state = {"active": False}

    def cooperative() -> list[SessionListing]:
        state["active"] = True
        started.set()
        signal.wait(WAIT)  # the backend observes the caller's signal ...
        cleanup.wait(WAIT)  # ... and cleans up before it fails with its own error
        state["active"] = False
        raise RuntimeError("listing interrupted by its caller")

    world.binding.list_hook = cooperative
    pending = Background(lambda: LISTINGS[operation](query, signal))
    assert started.wait(WAIT)
    signal.set()
    assert not pending.settled and state["active"]
    cleanup.set()
    with pytest.raises(SessionQueryError) as caught:
        pending.result()
    assert caught.value.code == "SESSION_QUERY_ABORTED"  # not the backend's failure: the caller aborted
    assert state["active"] is False
    assert world.binding.list_calls == 1


@pytest.mark.parametrize("operation", sorted(LISTINGS))
def test_listing_cancellation_preserves_cancellation_after_a_persistence_implementation_ignores_the_signal(
    world: World, operation: str
) -> None:
    query = world.query()
    signal = threading.Event()

    def ignoring() -> list[SessionListing]:
        signal.set()  # aborted while the call runs; the backend returns normally anyway
        return []

    world.binding.list_hook = ignoring
    assert code_of(lambda: LISTINGS[operation](query, signal)) == "SESSION_QUERY_ABORTED"
    assert world.binding.list_calls == 1


# --- cancellation of exact reads ------------------------------------------------------------------------

EXACT_READS: dict[str, tuple[bool, Callable[[SessionQuery, str, threading.Event], Any]]] = {
    "trace_session": (False, lambda query, sid, signal: query.trace_session(sid, signal=signal)),
    "trace_event": (True, lambda query, sid, signal: query.trace_event(sid, 0, signal=signal)),
    "read_event": (True, lambda query, sid, signal: query.read_event(sid, 0, signal=signal)),
}


@pytest.mark.parametrize("operation", sorted(EXACT_READS))
def test_exact_read_cancellation_preserves_an_exact_pre_abort_reason_without_entering_persistence(
    world: World, operation: str
) -> None:
    stored = world.persist(meta("pre-aborted-exact-read"), [user_event(0)])
    query = world.query()
    signal = threading.Event()
    signal.set()
    _, run = EXACT_READS[operation]
    assert code_of(lambda: run(query, stored["id"], signal)) == "SESSION_QUERY_ABORTED"
    assert world.binding.list_calls == 0
    assert world.binding.inspect_calls == []


@pytest.mark.parametrize("operation", sorted(EXACT_READS))
def test_exact_read_cancellation_forwards_in_flight_list_cancellation_and_waits_for_cleanup_before_rejecting(
    world: World, operation: str
) -> None:
    stored = world.persist(meta("cancelled-exact-list"), [user_event(0)])
    query = world.query()
    signal = threading.Event()
    started, cleanup = threading.Event(), threading.Event()
    state = {"active": False}

    def cooperative() -> list[SessionListing]:
        state["active"] = True
        started.set()
        signal.wait(WAIT)
        cleanup.wait(WAIT)
        state["active"] = False
        raise RuntimeError("listing interrupted by its caller")

    world.binding.list_hook = cooperative
    _, run = EXACT_READS[operation]
    pending = Background(lambda: run(query, stored["id"], signal))
    assert started.wait(WAIT)
    signal.set()
    assert not pending.settled and state["active"]
    assert world.binding.inspect_calls == []
    cleanup.set()
    with pytest.raises(SessionQueryError) as caught:
        pending.result()
    assert caught.value.code == "SESSION_QUERY_ABORTED"
    assert state["active"] is False
    assert world.binding.inspect_calls == []


@pytest.mark.parametrize("operation", sorted(EXACT_READS))
def test_exact_read_cancellation_waits_for_an_ignoring_backend_to_return_before_preserving_the_abort_reason(
    world: World, operation: str
) -> None:
    stored = world.persist(meta("ignored-exact-signal"), [user_event(0)])
    query = world.query()
    signal = threading.Event()
    started, release = threading.Event(), threading.Event()
    state = {"active": False}
    inspects, run = EXACT_READS[operation]

    def stall() -> None:
        state["active"] = True
        started.set()
        release.wait(WAIT)  # ignores the signal entirely
        state["active"] = False

    if inspects:
        world.binding.after_inspect = lambda _sid: stall()
    else:
        world.binding.after_list = stall
    pending = Background(lambda: run(query, stored["id"], signal))
    assert started.wait(WAIT)
    signal.set()
    assert not pending.settled and state["active"]
    assert world.binding.list_calls == 1
    assert world.binding.inspect_calls == ([stored["id"]] if inspects else [])
    release.set()
    with pytest.raises(SessionQueryError) as caught:
        pending.result()
    assert caught.value.code == "SESSION_QUERY_ABORTED"
    assert state["active"] is False


@pytest.mark.parametrize("operation", sorted(name for name, (inspects, _) in EXACT_READS.items() if inspects))
def test_persisted_inspection_cancellation_forwards_cancellation_and_waits_for_inspection_cleanup_before_rejecting(
    world: World, operation: str
) -> None:
    stored = world.persist(meta("cancelled-exact-inspect"), [user_event(0)])
    query = world.query()
    signal = threading.Event()
    started, cleanup = threading.Event(), threading.Event()
    state = {"active": False}

    def cooperative(_sid: str) -> SessionSnapshot:
        state["active"] = True
        started.set()
        signal.wait(WAIT)
        cleanup.wait(WAIT)
        state["active"] = False
        raise RuntimeError("unreachable after exact-read cancellation")

    world.binding.inspect_hook = cooperative
    _, run = EXACT_READS[operation]
    pending = Background(lambda: run(query, stored["id"], signal))
    assert started.wait(WAIT)
    signal.set()
    assert not pending.settled and state["active"]
    assert world.binding.list_calls == 1
    assert world.binding.inspect_calls == [stored["id"]]
    cleanup.set()
    with pytest.raises(SessionQueryError) as caught:
        pending.result()
    assert caught.value.code == "SESSION_QUERY_ABORTED"
    assert state["active"] is False


# --- exact reads ------------------------------------------------------------------------------------------


def test_returns_a_detached_replay_valid_full_log_and_rejects_a_corrupt_persisted_seed(world: World) -> None:
    valid = world.persist(meta("valid-log", 2), [user_event(0, "valid")])
    query = world.query()

    snapshot = query.read_session(valid["id"])
    assert snapshot["session"] == valid
    assert [event["data"]["content"][0]["text"] for event in snapshot["events"]] == ["valid"]
    assert [(event["seq"], event["type"]) for event in snapshot["events"]] == [(0, "user/message")]
    snapshot["events"][0]["time"] = 999
    snapshot["session"]["cwd"] = "/mutated"
    again = query.read_session(valid["id"])
    assert again["events"][0]["time"] == 10 and "cwd" not in again["session"]

    # A seed that starts at seq 1: served raw by the binding, the engine's own replay refuses it ...
    world.binding.raw["corrupt-log"] = (meta("corrupt-log", 1), [user_event(1, "bad")])
    with pytest.raises(SessionQueryError) as caught:
        query.read_session("corrupt-log")
    assert caught.value.code == "SESSION_QUERY_CORRUPT_SESSION"
    assert "seed event at index 0 has seq 1" in caught.value.message


def test_returns_a_corrupt_stored_log_of_the_real_store_as_corrupt(world: World) -> None:
    """The same refusal when the real store holds a log that does not replay (the coordinator's
    validating ``inspect`` refuses it first)."""
    world.persist_unloadable(meta("bad-surface"), [{**user_event(0), "surfaceOp": None}])
    query = world.query()
    assert code_of(lambda: query.read_session("bad-surface")) == "SESSION_QUERY_CORRUPT_SESSION"


def test_prefers_a_live_owner_that_attaches_while_its_persisted_prefix_is_inspected(world: World) -> None:
    shared = world.persist(meta("attach-during-inspect", 2), [user_event(0, "persisted")])
    query = world.query()

    def attach(_sid: str) -> None:
        world.binding.after_inspect = None
        session = world.coordinator.resume(shared["id"])
        session.append("user/message", user("live"), APPEND)

    world.binding.after_inspect = attach
    documents = query.filter_events(shared["id"], [])
    assert [(doc["sessionId"], doc["text"]) for doc in documents] == [
        (shared["id"], "persisted"),
        (shared["id"], "live"),  # only the live log has it: the live owner won
    ]


def test_reads_the_latest_title_from_one_live_preferred_or_persisted_log_without_widening_list_sessions(
    world: World,
) -> None:
    persisted = world.persist(meta("persisted-title", 2), [title_event(0, "Persisted title", 20, [4])])
    shared = world.persist(meta("shared-title", 3), [title_event(0, "Stale durable title", 30, [1])])
    live = world.coordinator.resume(shared["id"])
    appended = live.append(
        "session/title",
        {"title": "Live title", "messageSeqs": [7], "source": {"kind": "provider", "provider": "query-test"}},
    )
    query = world.query()

    title = query.read_title(persisted["id"])
    assert title is not None
    assert (title["title"], title["eventSeq"], title["updatedAt"]) == ("Persisted title", 0, 20)
    title = query.read_title(shared["id"])
    assert title is not None
    assert (title["title"], title["eventSeq"]) == ("Live title", appended["seq"])
    assert list(query.list_sessions()[0]) == ["header", "live", "persisted"]


def test_batches_unique_persisted_title_observations_through_one_cancellable_corpus_scan(world: World) -> None:
    first = world.persist(meta("batch-title-first", 1), [title_event(0, "First title", 10)])
    second = world.persist(meta("batch-title-second", 2), [title_event(0, "Second title", 20)])
    query = world.query()
    signal = threading.Event()

    results = query.read_title_snapshots(
        [second["id"], first["id"], second["id"], "batch-title-missing"], signal=signal
    )

    assert [(result["sessionId"], result["status"]) for result in results] == [
        (second["id"], "fulfilled"),
        (first["id"], "fulfilled"),
        ("batch-title-missing", "rejected"),
    ]
    assert results[0]["value"]["session"] == second
    assert results[0]["value"]["title"]["title"] == "Second title"
    assert results[1]["value"]["session"] == first
    assert results[1]["value"]["title"]["title"] == "First title"
    assert results[2]["reason"].code == "SESSION_QUERY_SESSION_NOT_FOUND"
    assert world.binding.list_calls == 1
    assert sorted(world.binding.inspect_calls) == sorted([second["id"], first["id"]])


def test_bounds_persisted_title_inspection_concurrency_while_preserving_ordered_results(world: World) -> None:
    entries = [world.persist(meta(f"bounded-title-{i}", i), [user_event(0, f"title-{i}")]) for i in range(12)]
    query = world.query()
    lock = threading.Lock()
    state = {"active": 0, "maximum": 0}
    full = threading.Event()

    def counted(session_id: str) -> SessionSnapshot | None:
        with lock:
            state["active"] += 1
            state["maximum"] = max(state["maximum"], state["active"])
            if state["active"] >= DEFAULT_PERSISTED_INSPECT_CONCURRENCY:
                full.set()
        full.wait(WAIT)  # hold every inspection until the bound is reached once
        try:
            return world.coordinator.inspect(session_id)
        finally:
            with lock:
                state["active"] -= 1

    world.binding.inspect_hook = counted
    ids = [entry["id"] for entry in entries]
    results = query.read_title_snapshots(ids)

    assert state["maximum"] == DEFAULT_PERSISTED_INSPECT_CONCURRENCY
    assert world.binding.list_calls == 1
    assert sorted(world.binding.inspect_calls) == sorted(ids)
    assert [result["sessionId"] for result in results] == ids
    assert all(result["status"] == "fulfilled" for result in results)


class _Watched(dict[str, Any]):
    """A title event's data whose ``messageSeqs`` read is recorded (the fold touching this log)."""

    def __init__(self, data: dict[str, Any], on_read: Callable[[], None]) -> None:
        super().__init__(data)
        self._on_read = on_read

    def __getitem__(self, key: str) -> Any:
        if key == "messageSeqs":
            self._on_read()
        return super().__getitem__(key)


def test_folds_and_discards_each_completed_log_before_its_worker_dequeues_another_inspection(world: World) -> None:
    entries = [world.persist(meta(f"project-title-{i}", i), [user_event(0, "x")]) for i in range(5)]
    ids = [entry["id"] for entry in entries]
    query = world.query()
    timeline: list[str] = []
    releases = {session_id: threading.Event() for session_id in ids}

    def staged(session_id: str) -> SessionSnapshot:
        timeline.append(f"inspect:{session_id}")
        releases[session_id].wait(WAIT)
        data = _Watched(
            {"title": f"Projected {session_id}", "messageSeqs": [], "source": {"kind": "fallback"}},
            lambda: timeline.append(f"project:{session_id}"),
        )
        marker = user_event(0, f"full-log-marker:{session_id}")
        events = [marker, {"type": "session/title", "seq": 1, "time": 20, "data": data}]
        return SessionSnapshot(entries[ids.index(session_id)], events)  # type: ignore[arg-type]

    world.binding.inspect_hook = staged
    pending = Background(lambda: query.read_title_snapshots(ids))
    wait_until(lambda: len(world.binding.inspect_calls) == 4)
    first_claimed = world.binding.inspect_calls[0]
    releases[first_claimed].set()
    wait_until(lambda: len(world.binding.inspect_calls) == 5)
    last_claimed = world.binding.inspect_calls[4]
    # The deterministic guard against retaining every log: the first log was folded before its worker
    # claimed the fifth id.
    assert timeline.index(f"project:{first_claimed}") < timeline.index(f"inspect:{last_claimed}")
    for event in releases.values():
        event.set()
    results = pending.result()

    assert [result["sessionId"] for result in results] == ids
    assert "full-log-marker:" not in repr(results)
    assert all(result["status"] == "fulfilled" for result in results)


def test_passes_cancellation_into_a_stalled_persisted_title_batch_and_rejects_with_its_reason(world: World) -> None:
    stored = world.persist(meta("stalled-title", 1), [user_event(0)])
    query = world.query()
    signal = threading.Event()
    started = threading.Event()

    def stalled(_sid: str) -> SessionSnapshot:
        started.set()
        signal.wait(WAIT)
        raise RuntimeError("title deadline")

    world.binding.inspect_hook = stalled
    pending = Background(lambda: query.read_title_snapshots([stored["id"]], signal=signal))
    assert started.wait(WAIT)
    signal.set()
    with pytest.raises(SessionQueryError) as caught:
        pending.result()
    assert caught.value.code == "SESSION_QUERY_ABORTED"
    assert world.binding.list_calls == 1
    assert world.binding.inspect_calls == [stored["id"]]


def test_drains_started_title_inspections_after_cancellation_without_starting_queued_ids(world: World) -> None:
    entries = [world.persist(meta(f"cancel-queued-title-{i}", i), [user_event(0, f"q{i}")]) for i in range(8)]
    concurrency = 2
    query = world.query(persisted_inspect_concurrency=concurrency)
    signal = threading.Event()
    release = threading.Event()
    lock = threading.Lock()
    state = {"observed": 0, "settled": 0}

    def blocked(_sid: str) -> SessionSnapshot:
        signal.wait(WAIT)
        with lock:
            state["observed"] += 1
        release.wait(WAIT)
        with lock:
            state["settled"] += 1
        raise RuntimeError("cancel queued title batch")

    world.binding.inspect_hook = blocked
    pending = Background(lambda: query.read_title_snapshots([e["id"] for e in entries], signal=signal))
    wait_until(lambda: len(world.binding.inspect_calls) == concurrency)
    signal.set()
    wait_until(lambda: state["observed"] == concurrency)
    assert not pending.settled
    assert sorted(world.binding.inspect_calls) == sorted(e["id"] for e in entries[:concurrency])
    release.set()
    with pytest.raises(SessionQueryError) as caught:
        pending.result()
    assert caught.value.code == "SESSION_QUERY_ABORTED"
    assert state["settled"] == concurrency
    assert len(world.binding.inspect_calls) == concurrency


def test_passes_cancellation_into_a_stalled_persisted_title_listing_and_rejects_with_its_reason(world: World) -> None:
    stored = world.persist(meta("stalled-title-list", 1), [user_event(0)])
    query = world.query()
    signal = threading.Event()
    started = threading.Event()

    def stalled() -> list[SessionListing]:
        started.set()
        signal.wait(WAIT)
        raise RuntimeError("title listing deadline")

    world.binding.list_hook = stalled
    pending = Background(lambda: query.read_title_snapshots([stored["id"]], signal=signal))
    assert started.wait(WAIT)
    signal.set()
    with pytest.raises(SessionQueryError) as caught:
        pending.result()
    assert caught.value.code == "SESSION_QUERY_ABORTED"
    assert world.binding.list_calls == 1
    assert world.binding.inspect_calls == []


def test_isolates_title_read_and_fold_failures_while_preferring_a_live_owner_attached_during_inspection(
    world: World,
) -> None:
    attached = world.persist(meta("batch-title-attached", 1), [user_event(0, "stale persisted")])
    failed = world.persist(meta("batch-title-failed", 2), [user_event(0)])
    # Title data without messageSeqs: the store accepts it, the fold cannot read it.
    malformed = world.persist(
        meta("batch-title-malformed", 3),
        [
            {
                "type": "session/title",
                "seq": 0,
                "time": 30,
                "data": {"title": "malformed", "source": {"kind": "fallback"}},
            }
        ],
    )
    query = world.query()
    inspect_failure = RuntimeError("one title inspect failed")

    def hook(session_id: str) -> SessionSnapshot | None:
        if session_id == failed["id"]:
            raise inspect_failure
        return None

    def attach(session_id: str) -> None:
        if session_id == attached["id"]:
            session = world.coordinator.resume(attached["id"])
            session.append(
                "session/title", {"title": "Attached live title", "messageSeqs": [], "source": {"kind": "fallback"}}
            )

    world.binding.inspect_hook = hook
    world.binding.after_inspect = attach
    results = query.read_title_snapshots([attached["id"], failed["id"], malformed["id"]])

    assert results[0]["status"] == "fulfilled"
    assert results[0]["value"]["session"] == attached
    assert results[0]["value"]["title"]["title"] == "Attached live title"
    assert results[1]["sessionId"] == failed["id"] and results[1]["status"] == "rejected"
    assert results[1]["reason"].code == "SESSION_QUERY_PERSISTENCE_FAILED"
    assert results[1]["reason"].__cause__ is inspect_failure
    assert results[2]["sessionId"] == malformed["id"] and results[2]["status"] == "rejected"
    assert isinstance(results[2]["reason"], SessionQueryError)
    assert isinstance(results[2]["reason"].__cause__, KeyError)  # the fold's own failure, kept as the cause


def test_preserves_live_batch_results_across_missing_persistence_listing_failure_and_late_attachment(
    world: World,
) -> None:
    live_only = world.query(bound=False)
    live = world.store.create("batch-title-live")
    missing = "batch-title-no-persistence"

    assert live_only.read_title_snapshots([live.id, live.id]) == [
        {"sessionId": live.id, "status": "fulfilled", "value": {"session": thaw(live.header)}}
    ]
    mixed_results = live_only.read_title_snapshots([live.id, missing])
    assert [(r["sessionId"], r["status"]) for r in mixed_results] == [(live.id, "fulfilled"), (missing, "rejected")]
    assert code_of(lambda: live_only.read_title_snapshot(missing)) == "SESSION_QUERY_SESSION_NOT_FOUND"

    persisted = world.persist(meta("batch-title-persisted", 1), [user_event(0)])
    mixed = world.query()
    mixed_live = world.store.create("batch-title-mixed-live")

    def late() -> None:
        world.binding.after_list = None
        world.store.create("batch-title-late", meta={"createdAt": 2})

    world.binding.after_list = late
    results = mixed.read_title_snapshots([mixed_live.id, persisted["id"], "batch-title-late"])
    assert [(r["sessionId"], r["status"]) for r in results] == [
        (mixed_live.id, "fulfilled"),
        (persisted["id"], "fulfilled"),
        ("batch-title-late", "fulfilled"),
    ]

    def failing() -> list[SessionListing]:
        raise RuntimeError("title listing failed")

    world.binding.list_hook = failing
    surviving = world.store.create("batch-title-list-live")
    results = mixed.read_title_snapshots([surviving.id, missing])
    assert [(r["sessionId"], r["status"]) for r in results] == [(surviving.id, "fulfilled"), (missing, "rejected")]
    assert results[1]["reason"].code == "SESSION_QUERY_PERSISTENCE_FAILED"


def test_lists_live_sessions_deterministically_and_returns_detached_headers(world: World) -> None:
    query = world.query()
    older = world.store.create("older", meta={"createdAt": 1})
    world.store.create("z", meta={"createdAt": 2})
    world.store.create("a", meta={"createdAt": 2})

    records = query.list_sessions()
    assert [record["header"]["id"] for record in records] == ["a", "z", "older"]
    assert all(record["live"] and not record["persisted"] for record in records)
    records[2]["header"]["createdAt"] = 99
    assert older.header["createdAt"] == 1
    assert query.list_sessions()[2]["header"]["createdAt"] == 1


def test_filters_sessions_symmetrically_and_owns_mutable_filter_values_immediately(world: World) -> None:
    durable = world.persist(meta("durable-filter", 1), [user_event(0, "durable")])
    live = world.store.create("live-filter", meta={"createdAt": 2})
    live.append("user/message", user("live"), APPEND)
    query = world.query()

    ids = [durable["id"]]
    world.binding.after_list = lambda: ids.__setitem__(0, live.id)  # the caller mutates while we list
    assert query.filter_sessions([{"kind": "id", "values": ids}]) == [
        {"header": durable, "live": False, "persisted": True}
    ]
    assert ids == [live.id]
    world.binding.after_list = None

    surfaces = ["current"]
    clause = {"kind": "surface", "values": surfaces}
    documents = query.filter_events(live.id, [clause])
    surfaces[0] = "shadowed"
    assert [(doc["sessionId"], doc["surface"], doc["text"]) for doc in documents] == [(live.id, "current", "live")]
    assert code_of(lambda: query.filter_sessions([{"kind": "future"}])) == "SESSION_QUERY_INVALID_FILTER"
    assert code_of(lambda: query.filter_events(live.id, [{"kind": "future"}])) == "SESSION_QUERY_INVALID_FILTER"


def test_classifies_current_shadowed_and_raw_log_only_events_through_fold_surface(world: World) -> None:
    query = world.query()
    session = world.store.create("surface")
    session.append("turn/start", {"turn": 1})
    session.append("step/start", {"turn": 1, "step": 1})
    first = session.append("user/message", user("first"), APPEND)
    session.append("assistant/chunk", chunk("draft"))
    session.append("assistant/message", assistant("replacement"), replace(first["seq"], first["seq"], [first["seq"]]))

    assert [record["surface"] for record in query.list_events(session.id)[2:]] == ["shadowed", "log-only", "current"]


def test_reads_a_detached_current_surface_with_its_raw_log_capture_boundary(world: World) -> None:
    query = world.query()
    session = world.store.create("surface-snapshot", meta={"cwd": "/work"})
    first = session.append("user/message", user("old"), APPEND)
    session.append("assistant/chunk", chunk("draft"))
    session.append(
        "user/message", user("checkpoint", kind="plugin", plugin="compact"), replace(first["seq"], first["seq"], [0])
    )
    retained = session.append("user/message", user("retained tail"), APPEND)
    session.append(
        "user/message",
        user("latest checkpoint", kind="plugin", plugin="compact"),
        replace(2, retained["seq"], [2, retained["seq"]]),
    )
    session.append("assistant/message", assistant("latest answer", turn=2), APPEND)

    snapshot = query.read_surface(session.id)
    assert snapshot["session"] == thaw(session.header)
    assert snapshot["capturedThroughSeq"] == 5
    assert [(event["seq"], event["type"]) for event in snapshot["events"]] == [
        (4, "user/message"),
        (5, "assistant/message"),
    ]
    snapshot["events"][0]["data"]["content"] = []
    snapshot["session"]["cwd"] = "/mutated"
    assert len(session.events[4]["data"]["content"]) == 1
    assert session.header["cwd"] == "/work"


def test_returns_an_empty_current_surface_with_a_null_capture_boundary(world: World) -> None:
    query = world.query()
    session = world.store.create("empty-surface")
    snapshot = query.read_surface(session.id)
    assert snapshot["capturedThroughSeq"] is None
    assert snapshot["events"] == []


def test_returns_a_bounded_detached_raw_event_window_and_validates_the_request(world: World) -> None:
    query = world.query(read_window_max=1)
    session = world.store.create("window", meta={"cwd": "/work"})
    session.append("turn/start", {"turn": 1})
    for text in ("one", "two", "three"):
        session.append("user/message", user(text), APPEND)

    result = query.read_event(session.id, 2, before=1, after=1)
    assert [result["startSeq"], result["endSeq"], result["target"]["seq"]] == [1, 3, 2]
    assert [event["seq"] for event in result["events"]] == [1, 2, 3]
    assert result["session"] == thaw(session.header)
    result["session"]["createdAt"] = -1
    result["events"][0]["data"]["content"] = []
    assert session.header["createdAt"] != -1
    assert len(session.events[1]["data"]["content"]) == 1

    assert code_of(lambda: query.read_event(session.id, 9)) == "SESSION_QUERY_EVENT_NOT_FOUND"
    for window in ({"before": -1}, {"before": 2}, {"after": 0.5}, {"after": True}):
        assert code_of(lambda w=window: query.read_event(session.id, 0, **w)) == "SESSION_QUERY_INVALID_WINDOW"  # type: ignore[misc]
    with pytest.raises(SessionQueryError, match=r"^before must be an integer between 0 and 1$"):
        query.read_event(session.id, 0, before=2)
    # The window is clipped to the log.
    edge = query.read_event(session.id, 0, before=1, after=1)
    assert (edge["startSeq"], edge["endSeq"]) == (0, 1)


def test_merges_authoritative_persistence_with_live_precedence_and_detects_conflicts(world: World) -> None:
    shared = world.persist(meta("shared", 3, cwd="/same"), [user_event(0, "persisted")])
    durable = world.persist(meta("durable", 2), [user_event(0, "durable")])
    live = world.coordinator.resume(shared["id"])
    live.append("turn/start", {"turn": 1})
    live_message = live.append("user/message", user("live"), APPEND)
    query = world.query()

    assert [(r["header"]["id"], r["live"], r["persisted"]) for r in query.list_sessions()] == [
        ("shared", True, True),
        ("durable", False, True),
    ]
    live_read = query.read_event(shared["id"], live_message["seq"])
    assert live_read["target"]["data"]["content"][0]["text"] == "live"
    surface = query.read_surface(shared["id"])
    assert [event["data"]["content"][0]["text"] for event in surface["events"]] == ["persisted", "live"]
    assert query.read_event(durable["id"], 0)["session"] == durable
    durable_surface = query.read_surface(durable["id"])
    assert durable_surface["session"] == durable
    assert [event["data"]["content"][0]["text"] for event in durable_surface["events"]] == ["durable"]

    world.binding.patches[shared["id"]] = {"cwd": "/conflict"}
    assert code_of(query.list_sessions) == "SESSION_QUERY_SOURCE_CONFLICT"
    world.binding.patches[shared["id"]] = {"cwd": "/same", "delegationDepth": 1}
    assert code_of(query.list_sessions) == "SESSION_QUERY_SOURCE_CONFLICT"
    query.bind_persistence(None)
    assert query.list_sessions() == [{"header": thaw(live.header), "live": True, "persisted": False}]


def test_keeps_known_live_reads_independent_from_persistence_health(world: World) -> None:
    live = world.store.create("live")
    live.append("turn/start", {"turn": 1})
    live.append("user/message", user("available"), APPEND)
    query = world.query()

    def failing_list() -> list[SessionListing]:
        raise RuntimeError("list unavailable")

    def failing_inspect(_sid: str) -> SessionSnapshot:
        raise RuntimeError("inspect unavailable")

    world.binding.list_hook = failing_list
    world.binding.inspect_hook = failing_inspect
    signal = threading.Event()

    assert len(query.list_events(live.id)) == 2
    traced = query.trace_event(live.id, 1, signal=signal)
    assert traced["session"]["id"] == live.id and traced["target"]["seq"] == 1
    assert query.read_event(live.id, 1, signal=signal)["target"]["seq"] == 1
    assert query.read_session(live.id)["events"][1]["type"] == "user/message"
    assert query.read_title(live.id) is None
    assert world.binding.list_calls == 0 and world.binding.inspect_calls == []
    assert code_of(query.list_sessions) == "SESSION_QUERY_PERSISTENCE_FAILED"
    assert code_of(lambda: query.list_events("durable")) == "SESSION_QUERY_PERSISTENCE_FAILED"
    with pytest.raises(SessionQueryError, match=r"^session persistence listing failed: list unavailable$"):
        query.list_sessions()


def test_wraps_persisted_corruption_as_session_query_corrupt_session_with_its_cause_preserved(world: World) -> None:
    # A stored user/message without its surface marker: the real store holds it, its validation refuses it.
    durable = world.persist_unloadable(meta("durable-corrupt"), [{**user_event(0), "surfaceOp": None}])
    query = world.query()

    with pytest.raises(SessionQueryError) as caught:
        query.read_session(durable["id"])
    assert caught.value.code == "SESSION_QUERY_CORRUPT_SESSION"
    cause = caught.value.__cause__
    assert isinstance(cause, SessionPersistenceCorruptionError)
    assert caught.value.message == f'stored session "{durable["id"]}" is corrupt: {cause.message}'


def test_reports_absent_sessions_persisted_load_failures_and_persisted_header_conflicts(world: World) -> None:
    durable = world.persist(meta("durable"), [user_event(0)])
    unbound = world.query(bound=False)
    assert code_of(lambda: unbound.list_events("absent")) == "SESSION_QUERY_SESSION_NOT_FOUND"
    query = world.query()
    with pytest.raises(SessionQueryError, match=r'^session "absent" not found$') as caught:
        query.list_events("absent")
    assert caught.value.code == "SESSION_QUERY_SESSION_NOT_FOUND"

    def raw_failure(_sid: str) -> SessionSnapshot:
        raise ValueError("raw failure")

    world.binding.inspect_hook = raw_failure
    with pytest.raises(SessionQueryError, match=r'^failed to inspect session "durable": raw failure$') as caught:
        query.list_events(durable["id"])
    assert caught.value.code == "SESSION_QUERY_PERSISTENCE_FAILED"
    world.binding.inspect_hook = None
    world.binding.patches[durable["id"]] = {"cwd": "/changed-during-read"}  # listing and log disagree
    with pytest.raises(SessionQueryError, match=r'^session source headers conflict for session "durable"$') as caught:
        query.list_events(durable["id"])
    assert caught.value.code == "SESSION_QUERY_SOURCE_CONFLICT"


def test_turns_persisted_malformed_surfaces_and_direct_invalid_config_into_typed_errors(world: World) -> None:
    events = [{"type": "user/message", "seq": 0, "time": 1, "data": user("hidden")}]  # no surfaceOp
    world.binding.raw["bad-persisted-surface"] = (meta("bad-persisted-surface"), events)
    query = world.query()
    assert code_of(lambda: query.list_events("bad-persisted-surface")) == "SESSION_QUERY_INVALID_SURFACE"
    assert code_of(lambda: query.filter_events("bad-persisted-surface", [])) == "SESSION_QUERY_INVALID_SURFACE"
    assert code_of(lambda: query.read_surface("bad-persisted-surface")) == "SESSION_QUERY_INVALID_SURFACE"
    # In the real store the coordinator refuses the same log before the engine folds it.
    world.persist_unloadable(meta("stored-bad-surface"), events)
    assert code_of(lambda: query.list_events("stored-bad-surface")) == "SESSION_QUERY_CORRUPT_SESSION"

    assert isinstance(SessionQuery(store=world.store), SessionQuery)
    for options in (
        {"read_window_max": -1},
        {"read_window_max": 1.5},
        {"persisted_inspect_concurrency": 0},
        {"persisted_inspect_concurrency": 2**53},
        {"persisted_inspect_concurrency": True},
    ):
        assert code_of(lambda o=options: SessionQuery(store=world.store, **o)) == "SESSION_QUERY_INVALID_CONFIG"  # type: ignore[misc]
    with pytest.raises(SessionQueryError, match="readWindowMax must be a non-negative integer"):
        SessionQuery(store=world.store, read_window_max=-1)
    with pytest.raises(SessionQueryError, match="persistedInspectConcurrency must be a positive safe integer"):
        SessionQuery(store=world.store, persisted_inspect_concurrency=0)
    assert code_of(SessionQuery) == "SESSION_QUERY_INVALID_CONFIG"  # neither a store nor a coordinator


def test_leaves_the_optional_persistence_dependency_optional(world: World) -> None:
    """The Cordis mount/dispose of the optional ``sessionPersistence`` service is ``bind_persistence``."""
    stored = world.persist(meta("stored"), [user_event(0)])
    live = world.store.create("live-only", meta={"createdAt": 5})
    query = SessionQuery(store=world.store)
    assert query.persistence is None and query.binding_epoch == 0
    assert [r["header"]["id"] for r in query.list_sessions()] == [live.id]

    query.bind_persistence(world.coordinator)
    assert query.persistence is world.coordinator and query.binding_epoch == 1
    assert [r["header"]["id"] for r in query.list_sessions()] == [live.id, stored["id"]]
    query.bind_persistence(world.coordinator)  # the same binding again is no change
    assert query.binding_epoch == 1

    other = PersistenceCoordinator(SessionStore(), MemoryBackend())
    try:
        assert code_of(lambda: query.bind_persistence(other)) == "SESSION_QUERY_INVALID_CONFIG"
    finally:
        other.close()
    assert query.binding_epoch == 1

    query.close()
    query.close()  # idempotent
    assert query.persistence is None and query.binding_epoch == 2
    assert [r["header"]["id"] for r in query.list_sessions()] == [live.id]
    assert code_of(lambda: query.read_session(stored["id"])) == "SESSION_QUERY_SESSION_NOT_FOUND"

    with SessionQuery(world.coordinator) as direct:  # the coordinator form binds its store
        assert direct.store is world.store and direct.persistence is world.coordinator
        assert direct.read_session(stored["id"])["session"] == stored
    assert direct.persistence is None


def test_excludes_damaged_stored_listings_from_the_corpus(world: World) -> None:
    """A stored entry whose header cannot be read is not part of the corpus (documented deviation)."""
    stored = world.persist(meta("readable"), [user_event(0)])
    real_list = world.coordinator.list

    def with_damage() -> list[SessionListing]:
        damaged = SessionListing(id="damaged", header=None, error_code="SESSION_CORRUPT", error_message="bad header")
        return [*real_list(), damaged]

    world.binding.list_hook = with_damage
    query = world.query()
    assert [r["header"]["id"] for r in query.list_sessions()] == [stored["id"]]
    assert code_of(lambda: query.read_session("damaged")) == "SESSION_QUERY_SESSION_NOT_FOUND"


# --- properties ---------------------------------------------------------------------------------------------

_ids = st.text(alphabet="abcAB-_09é", min_size=1, max_size=6)


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.dictionaries(_ids, st.integers(min_value=0, max_value=5), min_size=1, max_size=8))
def test_list_sessions_order_is_total_newest_first_and_independent_of_creation_order(
    created: dict[str, int],
) -> None:
    forward, backward = SessionStore(), SessionStore()
    for session_id, at in created.items():
        forward.create(session_id, meta={"createdAt": at})
    for session_id, at in reversed(list(created.items())):
        backward.create(session_id, meta={"createdAt": at})
    records = SessionQuery(store=forward).list_sessions()
    assert records == SessionQuery(store=backward).list_sessions()
    times = [record["header"]["createdAt"] for record in records]
    assert times == sorted(times, reverse=True)
    keys = [session_order_key(record) for record in records]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)


_scalars = st.one_of(st.none(), st.booleans(), st.integers(-2, 2), st.text(max_size=2))


@given(
    st.dictionaries(st.sampled_from(["version", "id", "createdAt", "cwd", "parentSession", "seedLength"]), _scalars),
    st.sampled_from(["version", "id", "createdAt", "cwd", "parentSession", "seedLength", "delegationDepth"]),
    _scalars,
)
def test_header_compatibility_is_reflexive_and_detects_any_identity_field_change(
    header: dict[str, Any], field: str, value: Any
) -> None:
    assert_headers_compatible(header, dict(header))
    changed = {**header, field: value}
    old = header.get(field, 0 if field == "delegationDepth" else "<absent>")
    new = 0 if field == "delegationDepth" and value is None else value
    same = type(old) is type(new) and old == new
    if same:
        assert_headers_compatible(header, changed)
    else:
        with pytest.raises(SessionQueryError) as caught:
            assert_headers_compatible(header, changed)
        assert caught.value.code == "SESSION_QUERY_SOURCE_CONFLICT"


# --- the query path never writes the store (Python-specific guarantees) -------------------------------------


def test_reads_a_stored_open_turn_balanced_in_memory_without_repairing_or_writing_the_store(world: World) -> None:
    """An interrupted stored turn is read with the repair closers balanced in memory only: the stored
    revision is the same after every read (``inspect`` never commits a repair)."""
    open_turn = [
        {"type": "turn/start", "seq": 0, "time": 1, "data": {"turn": 1}},
        user_event(1, "interrupted"),
    ]
    stored = world.persist(meta("open-turn"), open_turn)
    before = world.backend.read_revision(stored["id"])
    query = world.query()

    log = query.read_session(stored["id"])
    assert [event["type"] for event in log["events"]][:2] == ["turn/start", "user/message"]
    assert log["events"][-1]["type"] == "turn/end"  # the in-memory closer
    assert query.list_events(stored["id"])[-1]["type"] == "turn/end"
    assert query.trace_event(stored["id"], 1)["target"]["surface"] == "current"
    assert query.read_title(stored["id"]) is None
    assert world.backend.read_revision(stored["id"]) == before
    stored_again = world.backend.load_stored(stored["id"])
    assert [event["type"] for event in stored_again.events] == ["turn/start", "user/message"]


def test_reads_a_session_another_process_is_writing_without_taking_its_writer_lock(
    world: World, tmp_path: Path
) -> None:
    """A second store over the same files owns a live session (it holds the writer lock); this engine
    reads the stored prefix all the same and never reports it live."""
    other_store = SessionStore()
    other_backend: Any = (
        JsonlBackend(tmp_path / "jsonl") if world.kind == "jsonl" else SqliteBackend(tmp_path / "store.sqlite3")
    )
    writer = PersistenceCoordinator(other_store, other_backend, batch_delay_ms=1)
    try:
        session = other_store.create("elsewhere", meta={"createdAt": 7, "delegationDepth": 0})
        session.append("user/message", user("written elsewhere"), APPEND)
        other_store.flush(session)
        query = world.query()
        records = query.list_sessions()
        assert [(r["header"]["id"], r["live"], r["persisted"]) for r in records] == [("elsewhere", False, True)]
        documents = query.filter_events("elsewhere", [{"kind": "text", "text": "WRITTEN   elsewhere"}])
        assert [doc["text"] for doc in documents] == ["written elsewhere"]
        session.append("user/message", user("and more"), APPEND)
        other_store.flush(session)
        assert [doc["text"] for doc in query.filter_events("elsewhere", [])] == ["written elsewhere", "and more"]
    finally:
        writer.close()


def test_reads_a_stored_log_with_an_event_type_only_its_coordinator_knows(world: World, tmp_path: Path) -> None:
    """``read_session`` does not re-replay a coordinator's log with the default registry (which would
    refuse an event type the coordinator's own registry admits)."""
    registry = EventTypes()
    registry.register("query-test/private")
    assert not event_types.is_known("query-test/private")
    root = tmp_path / "private"
    root.mkdir()
    backend: Any = JsonlBackend(root) if world.kind == "jsonl" else SqliteBackend(root / "store.sqlite3")
    coordinator = PersistenceCoordinator(SessionStore(), backend, batch_delay_ms=1, registry=registry)
    try:
        coordinator.create(meta("private"))
        coordinator.append("private", [{"type": "query-test/private", "seq": 0, "time": 1, "data": {"n": 1}}])
        log = SessionQuery(coordinator).read_session("private")
        assert [event["type"] for event in log["events"]] == ["query-test/private"]
    finally:
        coordinator.close()
