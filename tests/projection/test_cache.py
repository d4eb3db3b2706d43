"""The persisted projection cache (runtime spec §3): write policy, identity binding and the cold read.

One test per case of the original's ``session-projection-cache/tests/cache.spec.ts`` (runtime.md
§10.2, same vectors), then agentlog's additions: "log durable before cache" ordering, the revision a
record is verified against (what lets ``agentlog ls`` skip current logs), the background writer and
the timers under asyncio, the real backends, and hypothesis properties — a record from another log
lifecycle is never served, and cached and cold snapshots always equal a fresh fold of the log.

Time-based policy runs on an injected :class:`ManualTimer`; no test waits for the clock.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agentlog as al
from agentlog.errors import InvalidOptionError, ProjectionCheckpointNotJsonError, SessionNotFoundError
from agentlog.kernel.events import SESSION_FORMAT_VERSION, event_types
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl import JsonlBackend
from agentlog.persistence.memory import MemoryBackend
from agentlog.persistence.sqlite import SqliteBackend
from agentlog.projection.cache import (
    NOT_LOSSLESS_JSON,
    BackgroundWriter,
    InlineWriter,
    ProjectionCache,
    default_timer,
    identity_matches,
    identity_of,
)
from agentlog.projection.cache_storage import CacheRecord, MemoryCacheStorage, open_cache_storage
from agentlog.projection.registry import ProjectionRegistry
from agentlog.projection.units import ProjectionUnit

MARK = "cache-test/mark"
KEY = "cache-test/marks"
if not event_types.is_known(MARK):
    event_types.register(MARK)

LOGGER = "agentlog.projection.cache"


def _parse_marks(value: object) -> Any:
    if value is None:
        return None
    if isinstance(value, dict) and set(value) == {"marks"} and isinstance(value["marks"], list):
        if all(isinstance(m, str) for m in value["marks"]):
            return value
    raise ValueError(f"not a marks state: {value!r}")


def marks_unit(state_version: int = 1) -> ProjectionUnit[Any, Any]:
    """The original's ``cache-test/marks`` unit: last mark event's data wins; view defaults to no marks."""
    return ProjectionUnit(
        key=KEY,
        state_version=state_version,
        initial=lambda: None,
        reduce=lambda state, event: event["data"] if event["type"] == MARK else state,
        view=lambda state: state if state is not None else {"marks": []},
        client_visible=True,
        parse_state=_parse_marks,
    )


class ManualTimer:
    """An injected interval timer: callbacks fire only when the test advances time."""

    def __init__(self) -> None:
        self.now = 0.0
        self._entries: list[list[Any]] = []  # [due, callback, live]

    def __call__(self, delay_ms: float, callback: Callable[[], None]) -> Callable[[], None]:
        entry = [self.now + delay_ms, callback, True]
        self._entries.append(entry)
        return lambda: entry.__setitem__(2, False)

    @property
    def armed(self) -> int:
        return sum(1 for entry in self._entries if entry[2])

    def advance(self, ms: float) -> None:
        self.now += ms
        for entry in sorted(self._entries, key=lambda e: e[0]):
            if entry[2] and entry[0] <= self.now:
                entry[2] = False
                entry[1]()


class FlakyStorage(MemoryCacheStorage):
    """A memory medium whose next ``fail_next_writes`` puts fail (the original's ``failNextWrites``)."""

    fail_next_writes = 0
    log: list[str] | None = None

    def put(self, session_id: str, record: CacheRecord) -> None:
        if self.fail_next_writes > 0:
            self.fail_next_writes -= 1
            raise OSError("injected write failure")
        if self.log is not None:
            self.log.append(f"put {session_id} {max((r['seq'] for r in record.rows.values()), default=None)}")
        super().put(session_id, record)


class SpyCoordinator:
    """A real coordinator, with its ``read_from`` calls and ``flush`` order recorded."""

    def __init__(self, real: PersistenceCoordinator, log: list[str]) -> None:
        self.real = real
        self.store = real.store
        self.backend = real.backend
        self.reads: list[tuple[str, int]] = []
        self.log = log

    def read_from(self, session_id: str, from_seq: int) -> Any:
        self.reads.append((session_id, from_seq))
        return self.real.read_from(session_id, from_seq)

    def flush(self, session: al.Session) -> None:
        self.real.flush(session)
        self.log.append(f"flush {session.id} {session.seq - 1}")


class Harness:
    def __init__(
        self,
        *,
        backend: Any = None,
        storage: FlakyStorage | None = None,
        units: tuple[ProjectionUnit[Any, Any], ...] | None = None,
        write_every_events: int = 100,
        write_interval_ms: int = 60_000,
        writer: Any = None,
    ) -> None:
        self.log: list[str] = []
        self.store = al.SessionStore(now=lambda: 0)
        self.backend = backend if backend is not None else MemoryBackend()
        self.coordinator = PersistenceCoordinator(self.store, self.backend, batch_delay_ms=50)
        self.registry = ProjectionRegistry(self.store)
        for unit in (marks_unit(),) if units is None else units:
            self.registry.register(unit)
        self.storage = storage if storage is not None else FlakyStorage()
        self.storage.log = self.log
        self.spy = SpyCoordinator(self.coordinator, self.log)
        self.timer = ManualTimer()
        self.cache = ProjectionCache(
            self.registry,
            self.spy,
            self.storage,
            write_every_events=write_every_events,
            write_interval_ms=write_interval_ms,
            timer=self.timer,
            writer=writer if writer is not None else InlineWriter(),
        )

    def close(self) -> None:
        self.cache.close()
        self.coordinator.close()

    def rows(self, session_id: str) -> Any:
        record = self.storage.get(session_id)
        return None if record is None else record.rows

    def stored_log(
        self, session_id: str, marks: list[list[str]], *, created_at: int = 0, cwd: str | None = None
    ) -> None:
        """Write a finished log ``turn/start, mark..., turn/end`` without a live session (no cache write)."""
        meta: dict[str, Any] = {"version": SESSION_FORMAT_VERSION, "id": session_id, "createdAt": created_at}
        if cwd is not None:
            meta["cwd"] = cwd
        self.coordinator.create(meta)
        events: list[dict[str, Any]] = [{"type": "turn/start", "seq": 0, "time": 0, "data": {"turn": 1}}]
        for m in marks:
            events.append({"type": MARK, "seq": len(events), "time": len(events), "data": {"marks": m}})
        events.append(
            {
                "type": "turn/end",
                "seq": len(events),
                "time": len(events),
                "data": {"turn": 1, "reason": {"kind": "completed"}},
            }
        )
        self.coordinator.append(session_id, events)

    def seed(self, session_id: str, row: dict[str, Any], identity: dict[str, Any] | None = None) -> None:
        self.storage.put(session_id, CacheRecord(identity or {"createdAt": 0}, {KEY: row}))
        self.log.clear()


@pytest.fixture
def harness() -> Iterator[Callable[..., Harness]]:
    made: list[Harness] = []

    def make(**kwargs: Any) -> Harness:
        h = Harness(**kwargs)
        made.append(h)
        return h

    yield make
    for h in made:
        h.close()


def mark(session: al.Session, marks: list[str]) -> Any:
    return session.append(MARK, {"marks": marks})


def end_turn(session: al.Session) -> Any:
    return session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})


def header_of(session_id: str, created_at: int = 0, cwd: str | None = None) -> dict[str, Any]:
    header: dict[str, Any] = {"version": 0, "id": session_id, "createdAt": created_at}
    if cwd is not None:
        header["cwd"] = cwd
    return header


# --- write policy (§10.2 cases 1-7) ------------------------------------------------------------------


def test_cache__writes_a_durable_checkpoint_at_turn_end(harness: Callable[..., Harness]) -> None:
    """§10.2 #1: nothing is written while throttled; turn/end writes the row at the turn/end seq."""
    h = harness()
    session = h.store.create("turn-end")
    mark(session, ["a"])
    assert h.rows("turn-end") is None
    end = end_turn(session)
    assert h.rows("turn-end")[KEY] == {"ver": 1, "seq": end.seq, "val": {"marks": ["a"]}}


def test_cache__writes_at_session_disposal(harness: Callable[..., Harness]) -> None:
    """§10.2 #2: the owner's disposal (detach, the live-to-cold moment) writes the current cut."""
    h = harness()
    owner = h.store.scope()
    session = owner.create("detach")
    mark(session, ["live"])
    owner.dispose()
    assert h.rows("detach")[KEY]["val"] == {"marks": ["live"]}


def test_cache__flushes_when_the_in_turn_event_count_reaches_the_threshold(harness: Callable[..., Harness]) -> None:
    """§10.2 #3: with a threshold of 3, two events write nothing and the third writes."""
    h = harness(write_every_events=3)
    session = h.store.create("count")
    mark(session, ["1"])
    mark(session, ["2"])
    assert h.rows("count") is None
    mark(session, ["3"])
    assert h.rows("count")[KEY]["val"] == {"marks": ["3"]}


def test_cache__flushes_on_the_interval_when_the_count_is_not_reached(harness: Callable[..., Harness]) -> None:
    """§10.2 #4: interval 250 ms: nothing at 249 ms, the checkpoint at 250 ms."""
    h = harness(write_interval_ms=250)
    session = h.store.create("interval")
    mark(session, ["slow"])
    h.timer.advance(249)
    assert h.rows("interval") is None
    h.timer.advance(1)
    assert h.rows("interval")[KEY]["val"] == {"marks": ["slow"]}


def test_cache__write_on_a_never_dirty_session_and_a_non_json_state(harness: Callable[..., Harness]) -> None:
    """§10.2 #5: write() lands the init-derived cut (seq -1, val null); a non-JSON state is refused loud."""
    h = harness()
    clean = h.store.create("clean-write")
    h.cache.write(clean)
    assert h.rows("clean-write")[KEY] == {"ver": 1, "seq": -1, "val": None}
    h.registry.register(
        ProjectionUnit(
            key="cache-test/marks2",
            state_version=1,
            initial=lambda: {"a": {1, 2}},  # a set: the original's Map
            reduce=lambda state, event: state,
            view=lambda state: None,
            client_visible=False,
            parse_state=lambda value: value,
        )
    )
    with pytest.raises(ProjectionCheckpointNotJsonError, match=r"^projection checkpoint is not losslessly JSON"):
        h.cache.write(clean)
    assert NOT_LOSSLESS_JSON.startswith("projection checkpoint is not losslessly JSON-serializable")
    assert h.rows("clean-write")[KEY] == {"ver": 1, "seq": -1, "val": None}  # the old record stays


def test_cache__close_clears_armed_timers_and_leaves_cleaned_sessions_alone(harness: Callable[..., Harness]) -> None:
    """§10.2 #6: after close (plugin disposal) an armed interval writes nothing, ever."""
    h = harness(write_interval_ms=5000)
    armed = h.store.create("armed")
    cleaned = h.store.create("cleaned")
    mark(armed, ["pending"])
    mark(cleaned, ["done"])
    end_turn(cleaned)  # mandatory write; the session's dirty state stays, clean
    assert h.timer.armed == 1
    h.cache.close()
    assert h.timer.armed == 0
    h.timer.advance(10_000)
    assert h.rows("armed") is None
    assert h.rows("cleaned")[KEY]["val"] == {"marks": ["done"]}


def test_cache__a_failed_write_warns_and_the_next_write_self_heals(
    harness: Callable[..., Harness], caplog: pytest.LogCaptureFixture
) -> None:
    """§10.2 #7: the event path is unharmed, the warning names the trigger and the session."""
    h = harness()
    session = h.store.create("fail-soft")
    mark(session, ["x"])
    h.storage.fail_next_writes = 1
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        end_turn(session)
    assert h.rows("fail-soft") is None
    assert (
        'session projection cache: turn/end write for "fail-soft" failed (cache stays stale): '
        "OSError: injected write failure" in caplog.text
    )
    mark(session, ["y"])
    end_turn(session)
    assert h.rows("fail-soft")[KEY]["val"] == {"marks": ["y"]}


# --- cold read (§10.2 cases 8-19) ---------------------------------------------------------------------


def test_cold__serves_from_the_row_plus_a_bounded_tail_and_writes_the_refresh_back(
    harness: Callable[..., Harness],
) -> None:
    """§10.2 #8: a row at watermark 1 reads from seq 1 (anchored), serves ['a','b'] at 3, advances the row."""
    h = harness()
    h.stored_log("cold", [["a"], ["a", "b"]])
    h.seed("cold", {"ver": 1, "seq": 1, "val": {"marks": ["a"]}})
    snapshot = h.cache.cold_snapshot("cold")
    assert snapshot == {"asOfSeq": 3, "values": {KEY: {"marks": ["a", "b"]}}}
    assert h.spy.reads == [("cold", 1)]
    assert h.rows("cold")[KEY] == {"ver": 1, "seq": 3, "val": {"marks": ["a", "b"]}}


def test_cold__a_version_mismatched_row_refolds_the_full_log_in_one_read(harness: Callable[..., Harness]) -> None:
    """§10.2 #9: a version bump pulls the floor to 0: exactly one read, from 0."""
    h = harness(units=(marks_unit(2),))
    h.stored_log("bumped", [["a"]])
    h.seed("bumped", {"ver": 1, "seq": 2, "val": {"marks": ["stale"]}})
    assert h.cache.cold_snapshot("bumped")["values"][KEY] == {"marks": ["a"]}
    assert h.spy.reads == [("bumped", 0)]


def test_cold__a_log_shrunk_below_the_row_degrades_to_one_full_re_read(harness: Callable[..., Harness]) -> None:
    """§10.2 #10: a row at 9 over a log ending at 2: the anchored read (9) is empty, then one read from 0."""
    h = harness()
    h.stored_log("shrunk", [["a"]])
    h.seed("shrunk", {"ver": 1, "seq": 9, "val": {"marks": ["ghost"]}})
    snapshot = h.cache.cold_snapshot("shrunk")
    assert snapshot == {"asOfSeq": 2, "values": {KEY: {"marks": ["a"]}}}
    assert h.spy.reads == [("shrunk", 9), ("shrunk", 0)]


def test_cold__malformed_persisted_state_degrades_to_one_full_re_read(harness: Callable[..., Harness]) -> None:
    """§10.2 #11: a row whose state the unit's schema rejects: read at 1, then one read from 0."""
    h = harness()
    h.stored_log("malformed", [["real"]])
    h.seed("malformed", {"ver": 1, "seq": 1, "val": {"marks": "not-an-array"}})
    assert h.cache.cold_snapshot("malformed")["values"][KEY] == {"marks": ["real"]}
    assert h.spy.reads == [("malformed", 1), ("malformed", 0)]


def test_cold__a_failed_write_back_still_serves_the_snapshot(
    harness: Callable[..., Harness], caplog: pytest.LogCaptureFixture
) -> None:
    """§10.2 #12: the write-back is fail-soft; its warning says ``cold-read write-back``."""
    h = harness()
    h.stored_log("soft", [["a"]])
    h.storage.fail_next_writes = 1
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert h.cache.cold_snapshot("soft")["values"][KEY] == {"marks": ["a"]}
    assert 'session projection cache: cold-read write-back for "soft" failed (cache stays stale)' in caplog.text
    assert h.rows("soft") is None


def test_cold__rejects_a_session_with_no_persisted_log(harness: Callable[..., Harness]) -> None:
    """§10.2 #13: an absent log is "not found" (typed)."""
    h = harness()
    with pytest.raises(SessionNotFoundError, match="not found"):
        h.cache.cold_snapshot("absent")


def test_cold__a_record_of_another_lifecycle_is_discarded_and_rebound(harness: Callable[..., Harness]) -> None:
    """§10.2 #14: a prior lifecycle's row passes every watermark check, but its identity does not match."""
    h = harness()
    h.stored_log("reborn", [["real"]])
    h.seed("reborn", {"ver": 1, "seq": 2, "val": {"marks": ["phantom"]}}, {"createdAt": 999})
    assert h.cache.cold_snapshot("reborn")["values"][KEY] == {"marks": ["real"]}
    record = h.storage.get("reborn")
    assert record is not None and record.identity == {"createdAt": 0}
    assert h.spy.reads == [("reborn", 2), ("reborn", 0)]  # floor first, then the refold


def test_cached__none_when_every_stored_row_is_version_mismatched(harness: Callable[..., Harness]) -> None:
    """§10.2 #15."""
    h = harness()
    h.seed("all-stale", {"ver": 99, "seq": 4, "val": {"marks": ["old"]}})
    assert h.cache.cached_snapshot(header_of("all-stale")) is None


def test_cached__identity_binds_cwd_too(harness: Callable[..., Harness]) -> None:
    """§10.2 #16: the same cwd serves; another or an absent cwd does not."""
    h = harness()
    h.seed("homed", {"ver": 1, "seq": 2, "val": {"marks": ["w"]}}, {"createdAt": 0, "cwd": "/work"})
    served = h.cache.cached_snapshot(header_of("homed", 0, "/work"))
    assert served is not None and served["values"][KEY] == {"marks": ["w"]}
    assert h.cache.cached_snapshot(header_of("homed", 0, "/elsewhere")) is None
    assert h.cache.cached_snapshot(header_of("homed", 0)) is None


def test_cold__dates_an_empty_stored_log_at_minus_one_with_zero_units(harness: Callable[..., Harness]) -> None:
    """§10.2 #17: no unit registered and a stored log without events: ``{asOfSeq: -1, values: {}}``.

    agentlog's backends materialize a log with its first event, so the empty stored log comes from a
    reader double (the original's test uses a fake persistence too)."""
    h = harness(units=())

    class EmptyLog:
        def __init__(self, session_id: str) -> None:
            self.meta = {"version": 0, "id": session_id, "createdAt": 0}
            self.events: tuple[Any, ...] = ()

    h.spy.read_from = lambda session_id, from_seq: EmptyLog(session_id)  # type: ignore[method-assign]
    assert h.cache.cold_snapshot("empty") == {"asOfSeq": -1, "values": {}}


def test_cached__serves_matching_rows_with_the_cut_watermark_and_refuses_unrelated_ones(
    harness: Callable[..., Harness],
) -> None:
    """§10.2 #18: ``{asOfSeq: 4, values}`` for the matching header; another createdAt or id: None."""
    h = harness()
    h.seed("listed", {"ver": 1, "seq": 4, "val": {"marks": ["t"]}})
    assert h.cache.cached_snapshot(header_of("listed")) == {"asOfSeq": 4, "values": {KEY: {"marks": ["t"]}}}
    assert h.cache.cached_snapshot(header_of("listed", 777)) is None
    assert h.cache.cached_snapshot(header_of("never-cached")) is None


def test_cold__zero_units_hold_the_not_found_contract_and_date_a_present_log(harness: Callable[..., Harness]) -> None:
    """§10.2 #19: absent rejects; a present log of seqs 0..2 gives ``{asOfSeq: 2, values: {}}``."""
    h = harness(units=())
    h.stored_log("bare", [["a"]])
    with pytest.raises(SessionNotFoundError, match="not found"):
        h.cache.cold_snapshot("absent")
    assert h.cache.cold_snapshot("bare") == {"asOfSeq": 2, "values": {}}


# --- agentlog additions -------------------------------------------------------------------------------


def test_cache__the_log_is_flushed_before_the_record_lands(harness: Callable[..., Harness]) -> None:
    """ "Log durable before cache": every write flushes the session's log first, then puts the record."""
    h = harness(write_every_events=2)
    session = h.store.create("order")
    mark(session, ["1"])
    mark(session, ["2"])  # count threshold
    end_turn(session)  # turn/end
    h.cache.write(session)  # explicit
    assert h.log == ["flush order 1", "put order 1", "flush order 2", "put order 2", "flush order 2", "put order 2"]


def test_cache__a_failed_flush_leaves_the_record_untouched(
    harness: Callable[..., Harness], caplog: pytest.LogCaptureFixture
) -> None:
    """When the log cannot be made durable, the cache is not written (it would be ahead of the log)."""
    h = harness()
    session = h.store.create("no-flush")

    def refuse(session: al.Session) -> None:
        raise OSError("disk gone")

    h.spy.flush = refuse  # type: ignore[method-assign]
    mark(session, ["a"])
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        end_turn(session)
    assert h.rows("no-flush") is None
    assert 'turn/end write for "no-flush" failed (cache stays stale): OSError: disk gone' in caplog.text
    with pytest.raises(OSError, match="disk gone"):
        h.cache.write(session)  # the public write is not fail-soft


def test_cache__the_interval_is_armed_at_the_first_dirty_event_not_sliding(harness: Callable[..., Harness]) -> None:
    """Events at 0, 100 and 200 ms with a 250 ms interval: one write at 250 ms, none re-armed until dirty."""
    h = harness(write_interval_ms=250)
    session = h.store.create("steady")
    mark(session, ["0"])
    h.timer.advance(100)
    mark(session, ["1"])
    h.timer.advance(100)
    mark(session, ["2"])
    assert h.timer.armed == 1
    h.timer.advance(50)
    assert h.rows("steady")[KEY]["val"] == {"marks": ["2"]}
    assert h.timer.armed == 0
    mark(session, ["3"])
    assert h.timer.armed == 1


def test_cache__turn_end_does_not_count_and_a_write_resets_the_counter(harness: Callable[..., Harness]) -> None:
    """The count restarts after any write; turn/end is a mandatory point, never a counted event."""
    h = harness(write_every_events=3)
    session = h.store.create("counter")
    mark(session, ["1"])
    mark(session, ["2"])
    end_turn(session)  # written at seq 2; counter back to 0
    mark(session, ["3"])
    mark(session, ["4"])
    assert h.rows("counter")[KEY]["seq"] == 2
    mark(session, ["5"])
    assert h.rows("counter")[KEY] == {"ver": 1, "seq": 5, "val": {"marks": ["5"]}}


def test_cache__refuses_non_natural_throttles(harness: Callable[..., Harness]) -> None:
    """Both throttles are naturals >= 1 (the original's ``z.natural().min(1)``)."""
    h = harness()
    for kwargs in ({"write_every_events": 0}, {"write_interval_ms": 0}, {"write_every_events": 1.5}):
        with pytest.raises(InvalidOptionError):
            ProjectionCache(h.registry, h.spy, MemoryCacheStorage(), writer=InlineWriter(), **kwargs)


def test_identity__absent_cwd_equals_absent_and_differs_from_present() -> None:
    """The identity binding's equality (§3.1)."""
    assert identity_of({"id": "x", "createdAt": 5, "cwd": "/w", "origin": "y"}) == {"createdAt": 5, "cwd": "/w"}
    assert identity_of({"id": "x", "createdAt": 5}) == {"createdAt": 5}
    assert identity_matches({"createdAt": 5}, {"createdAt": 5})
    assert not identity_matches({"createdAt": 5}, {"createdAt": 5, "cwd": "/w"})
    assert not identity_matches({"createdAt": 5, "cwd": "/a"}, {"createdAt": 5, "cwd": "/b"})
    assert not identity_matches({"createdAt": 4}, {"createdAt": 5})


def _backends(tmp_path: Path) -> dict[str, Callable[[], Any]]:
    return {
        "memory": MemoryBackend,
        "jsonl": lambda: JsonlBackend(str(tmp_path / "jsonl")),
        "sqlite": lambda: SqliteBackend(str(tmp_path / "store.db")),
    }


@pytest.mark.parametrize("kind", ["memory", "jsonl", "sqlite"])
def test_cache__a_current_row_is_served_by_revision_without_reading_the_log(
    harness: Callable[..., Harness], tmp_path: Path, kind: str
) -> None:
    """What ``agentlog ls`` relies on: a record verified against the listing's revision is current;
    any later append changes the revision, and the row stops being served as current."""
    h = harness(backend=_backends(tmp_path)[kind]())
    h.cache.close()
    h.cache = ProjectionCache(h.registry, h.spy, h.storage, timer=h.timer, writer=InlineWriter())
    session = h.store.create("listed", meta={"cwd": "/work"})
    mark(session, ["a"])
    end_turn(session)
    h.store.dispose(session)
    listings = h.coordinator.list()
    assert [listing.id for listing in listings] == ["listed"]
    served = h.cache.cached_snapshots(listings, current_only=True)
    assert served == {"listed": {"asOfSeq": 1, "values": {KEY: {"marks": ["a"]}}}}
    assert h.spy.reads == []
    # Another writer appends: the listing revision moves on, the row is no longer current.
    h.coordinator.append("listed", [{"type": MARK, "seq": 2, "time": 2, "data": {"marks": ["b"]}}])
    listings = h.coordinator.list()
    assert h.cache.cached_snapshots(listings, current_only=True) == {"listed": None}
    assert h.cache.cached_snapshots(listings)["listed"] == {"asOfSeq": 1, "values": {KEY: {"marks": ["a"]}}}
    # The cold read repairs it, and the refreshed row is current again.
    assert h.cache.cold_snapshot("listed") == {"asOfSeq": 2, "values": {KEY: {"marks": ["b"]}}}
    assert h.cache.cached_snapshots(h.coordinator.list(), current_only=True)["listed"] == {
        "asOfSeq": 2,
        "values": {KEY: {"marks": ["b"]}},
    }


@pytest.mark.parametrize("kind", ["memory", "jsonl", "sqlite"])
def test_cold__a_record_verified_for_the_current_log_is_served_without_reading_it(
    harness: Callable[..., Harness], tmp_path: Path, kind: str
) -> None:
    """The cold read's shortcut: same revision as the stored log, every unit's row at one cut and at its
    stateVersion ⇒ the rows are the log's complete fold; anything less falls back to the ordinary read
    (here: the anchored tail, then one refold)."""
    h = harness(backend=_backends(tmp_path)[kind]())
    session = h.store.create("current")
    mark(session, ["a"])
    end_turn(session)
    h.store.dispose(session)
    assert h.cache.cold_snapshot("current") == {"asOfSeq": 1, "values": {KEY: {"marks": ["a"]}}}
    assert h.spy.reads == []
    # Same revision, but a row the unit's schema now rejects: not served, one full refold instead.
    record = h.storage.get("current")
    assert record is not None and record.revision is not None
    bad = {KEY: {"ver": 1, "seq": 1, "val": {"marks": 7}}}
    h.storage.put("current", CacheRecord(record.identity, bad, record.revision))
    assert h.cache.cold_snapshot("current") == {"asOfSeq": 1, "values": {KEY: {"marks": ["a"]}}}
    assert h.spy.reads == [("current", 1), ("current", 0)]


def test_cached__current_is_all_or_nothing_when_a_unit_was_added_since(harness: Callable[..., Harness]) -> None:
    """A verified record that lacks a row for a unit registered since is no longer "current" (the listing
    would miss that value); the plain listing read still serves the rows it has."""
    h = harness()
    session = h.store.create("grown")
    mark(session, ["a"])
    end_turn(session)
    h.store.dispose(session)
    assert h.cache.cached_snapshots(h.coordinator.list(), current_only=True)["grown"] is not None
    h.registry.register(
        ProjectionUnit(
            key="cache-test/count",
            state_version=1,
            initial=lambda: 0,
            reduce=lambda state, event: state + 1,
            view=lambda state: state,
            client_visible=True,
            parse_state=lambda value: value,
        )
    )
    listings = h.coordinator.list()
    assert h.cache.cached_snapshots(listings, current_only=True) == {"grown": None}
    assert h.cache.cached_snapshots(listings)["grown"] == {"asOfSeq": 1, "values": {KEY: {"marks": ["a"]}}}
    assert h.cache.cold_snapshot("grown") == {
        "asOfSeq": 1,
        "values": {KEY: {"marks": ["a"]}, "cache-test/count": 2},
    }


def test_cache__a_session_disposed_before_its_queued_write_is_verified_against_the_log(
    harness: Callable[..., Harness],
) -> None:
    """turn/end then an immediate disposal (a CLI run ending): the queued write finds the session gone,
    proves the stored log ends at its cut with one suffix read, and records it as current."""
    writer = _DeferredWriter()
    h = harness(writer=writer)
    session = h.store.create("quick")
    mark(session, ["a"])
    end_turn(session)
    h.store.dispose(session)
    writer.drain()
    assert h.spy.reads == [("quick", 1)]  # one verification read; the detach write then kept it
    assert h.cache.cached_snapshots(h.coordinator.list(), current_only=True)["quick"] == {
        "asOfSeq": 1,
        "values": {KEY: {"marks": ["a"]}},
    }


class _RefusingBackend(MemoryBackend):
    """A memory backend whose appends fail while ``refuse`` is set (a disk that filled up)."""

    refuse = False

    def append_batch(self, meta: Any, events: Any, materialized: bool) -> None:
        if self.refuse:
            raise OSError("no space left")
        super().append_batch(meta, events, materialized)


def test_cache__a_detach_whose_log_retirement_failed_is_never_claimed_current(
    harness: Callable[..., Harness], caplog: pytest.LogCaptureFixture
) -> None:
    """The record of a disposed session may be ahead of a log whose final drain failed; it is then
    never claimed current, and the cold read's anchor refolds the log that is actually stored."""
    backend = _RefusingBackend()
    h = harness(backend=backend)
    session = h.store.create("full-disk")
    mark(session, ["durable"])
    h.cache.write(session)  # seq 0 durable
    backend.refuse = True
    mark(session, ["lost"])
    mark(session, ["lost-too"])
    with caplog.at_level(logging.WARNING):
        h.store.dispose(session)  # retirement fails (logged); the detach write still lands its cut
    record = h.storage.get("full-disk")
    assert record is not None and record.rows[KEY]["seq"] == 2 and record.revision is None
    backend.refuse = False
    assert h.cache.cached_snapshots(h.coordinator.list(), current_only=True)["full-disk"] is None
    assert h.cache.cold_snapshot("full-disk") == {"asOfSeq": 0, "values": {KEY: {"marks": ["durable"]}}}


def test_cache__a_cut_followed_by_more_events_is_not_claimed_current(harness: Callable[..., Harness]) -> None:
    """A write whose cut is not the log end records no revision (the row is behind, not current)."""
    h = harness(writer=_DeferredWriter())
    session = h.store.create("racing")
    mark(session, ["a"])
    end_turn(session)  # cut at 1, queued
    mark(session, ["b"])  # lands before the queued write runs
    h.cache._writer.drain()
    record = h.storage.get("racing")
    assert record is not None and record.rows[KEY]["seq"] == 1 and record.revision is None


class _DeferredWriter:
    """A writer that runs jobs only on drain (a background thread, made deterministic)."""

    def __init__(self) -> None:
        self.jobs: list[Callable[[], None]] = []

    def submit(self, job: Callable[[], None]) -> None:
        self.jobs.append(job)

    def drain(self) -> None:
        jobs, self.jobs = self.jobs, []
        for job in jobs:
            job()

    def close(self) -> None:
        self.drain()


def test_cache__an_older_cut_never_replaces_a_newer_one(harness: Callable[..., Harness]) -> None:
    """Writes queued out of order: the newer cut (generation) wins whatever lands last."""
    writer = _DeferredWriter()
    h = harness(writer=writer)
    session = h.store.create("ordered")
    mark(session, ["old"])
    end_turn(session)  # queued cut at seq 1
    mark(session, ["new"])
    h.cache.write(session)  # newer cut lands now, in this thread
    writer.drain()  # the older queued cut runs last
    assert h.rows("ordered")[KEY] == {"ver": 1, "seq": 2, "val": {"marks": ["new"]}}


def test_cache__the_background_writer_keeps_the_event_path_off_the_disk(harness: Callable[..., Harness]) -> None:
    """The default writer runs flush + put on its own thread, in order; drain waits for them."""
    threads: list[int] = []
    h = harness(writer=BackgroundWriter())
    original = h.spy.flush

    def flush(session: al.Session) -> None:
        threads.append(threading.get_ident())
        original(session)

    h.spy.flush = flush  # type: ignore[method-assign]
    session = h.store.create("bg")
    for turn in range(5):
        mark(session, [str(turn)])
        end_turn(session)
    h.cache.drain()
    assert threads and threading.get_ident() not in threads and len(set(threads)) == 1
    assert h.rows("bg")[KEY] == {"ver": 1, "seq": 9, "val": {"marks": ["4"]}}


def test_default_timer__uses_the_running_loop_or_a_thread() -> None:
    """Inside asyncio the interval fires on the loop's thread (loop.call_later); outside, on a timer thread."""
    fired: list[int] = []

    async def main() -> None:
        done = asyncio.Event()

        def fire() -> None:
            fired.append(threading.get_ident())
            done.set()

        default_timer(1, fire)
        cancelled = default_timer(1, lambda: fired.append(-1))
        cancelled()
        await done.wait()

    asyncio.run(main())
    assert fired == [threading.get_ident()]
    event = threading.Event()

    def fire_in_thread() -> None:
        fired.append(threading.get_ident())
        event.set()

    default_timer(1, fire_in_thread)
    assert event.wait(30)
    assert fired[-1] != threading.get_ident()


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
def test_cache_open__a_second_process_serves_the_first_ones_rows_from_the_store_medium(
    tmp_path: Path, kind: str
) -> None:
    """ProjectionCache.open keeps the cache beside the store: a later process (fresh backend, fresh
    cache) lists the session from its row, verified current, without reading its log."""
    make = _backends(tmp_path)[kind]
    store = al.SessionStore()
    coordinator = PersistenceCoordinator(store, make())
    registry = ProjectionRegistry(store)
    registry.register(marks_unit())
    cache = ProjectionCache.open(registry, coordinator)
    session = store.create("kept", meta={"cwd": "/work"})
    mark(session, ["a"])
    end_turn(session)
    store.dispose(session)
    cache.close()
    coordinator.close()
    later = PersistenceCoordinator(al.SessionStore(), make())
    spy = SpyCoordinator(later, [])
    registry = ProjectionRegistry()
    registry.register(marks_unit())
    cache = ProjectionCache.open(registry, spy, writer=InlineWriter())
    try:
        served = cache.cached_snapshots(later.list(), current_only=True)
        assert served == {"kept": {"asOfSeq": 1, "values": {KEY: {"marks": ["a"]}}}}
        assert cache.cold_snapshot("kept") == served["kept"]
        assert spy.reads == []
    finally:
        cache.close()
        later.close()


def test_cache__works_inside_asyncio_with_awrite_and_adrain(tmp_path: Path) -> None:
    """An agent-style session on an event loop: awrite flushes off the loop; the default timer is the loop's."""
    store = al.SessionStore()
    coordinator = PersistenceCoordinator(store, JsonlBackend(str(tmp_path / "j")))
    registry = ProjectionRegistry(store)
    registry.register(marks_unit())
    storage = open_cache_storage(coordinator.backend)
    cache = ProjectionCache(registry, coordinator, storage, write_interval_ms=1, owns_storage=True)

    async def main() -> None:
        session = store.create("async", meta={"cwd": "/work"})
        mark(session, ["a"])
        await cache.awrite(session)
        mark(session, ["b"])  # arms the loop timer (1 ms)
        end_turn(session)
        await cache.adrain()

    try:
        asyncio.run(main())
        record = storage.get("async")
        assert record is not None and record.rows[KEY] == {"ver": 1, "seq": 2, "val": {"marks": ["b"]}}
    finally:
        cache.close()
        coordinator.close()


# --- properties ---------------------------------------------------------------------------------------

_ops = st.lists(
    st.one_of(
        st.tuples(st.just("mark"), st.lists(st.sampled_from("abc"), max_size=3)),
        st.tuples(st.just("end"), st.none()),
        st.tuples(st.just("write"), st.none()),
        st.tuples(st.just("tick"), st.none()),
    ),
    max_size=25,
)


def _fresh_fold(events: Any) -> dict[str, Any]:
    state = marks_unit().fold(events)
    return {KEY: state if state is not None else {"marks": []}}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=_ops, every=st.integers(1, 5))
def test_property__cached_and_cold_snapshots_equal_a_fresh_fold(ops: list[Any], every: int) -> None:
    """Random live histories, write points and throttles: whatever the cache holds, the listing read
    serves a prefix fold (never a value the log does not contain at asOfSeq), and the cold read equals
    the fold of the whole stored log."""
    h = Harness(write_every_events=every, write_interval_ms=10)
    try:
        session = h.store.create("prop", meta={"cwd": "/p"})
        session.append("turn/start", {"turn": 1})  # a stored log exists from the first event on
        for op, arg in ops:
            if op == "mark":
                mark(session, arg)
            elif op == "end":
                end_turn(session)
            elif op == "write":
                h.cache.write(session)
            else:
                h.timer.advance(10)
        events = list(session.events)
        h.store.dispose(session)
        cached = h.cache.cached_snapshot(session.header)
        if cached is not None:
            assert cached["values"] == _fresh_fold(events[: cached["asOfSeq"] + 1])
        cold = h.cache.cold_snapshot("prop")
        assert cold == {"asOfSeq": len(events) - 1, "values": _fresh_fold(events)}
        assert h.cache.cached_snapshot(session.header) == cold
    finally:
        h.close()


@settings(max_examples=60, deadline=None)
@given(
    first=st.lists(st.lists(st.sampled_from("xyz"), max_size=2), min_size=1, max_size=4),
    second=st.lists(st.lists(st.sampled_from("xyz"), max_size=2), max_size=4),
    change=st.sampled_from(["createdAt", "cwd", "no-cwd", "both"]),
)
def test_property__a_record_from_another_lifecycle_is_never_served(
    first: list[list[str]], second: list[list[str]], change: str
) -> None:
    """An id recreated in a swapped store (other createdAt, other or no cwd) over the same cache: the
    listing read refuses the old record, and the cold read serves the new log's fold and rebinds."""
    storage = FlakyStorage()
    old = Harness(storage=storage)
    try:
        old.stored_log("slot", first, created_at=10, cwd="/a")
        old.cache.cold_snapshot("slot")  # the cache now holds lifecycle A's record
    finally:
        old.close()
    created_at = 11 if change in ("createdAt", "both") else 10
    cwd = {"createdAt": "/a", "cwd": "/b", "no-cwd": None, "both": "/b"}[change]
    new = Harness(storage=storage)
    try:
        new.stored_log("slot", second, created_at=created_at, cwd=cwd)
        header = header_of("slot", created_at, cwd)
        assert new.cache.cached_snapshot(header) is None
        events = new.coordinator.read_from("slot", 0).events
        assert new.cache.cold_snapshot("slot") == {"asOfSeq": len(events) - 1, "values": _fresh_fold(events)}
        record = storage.get("slot")
        assert record is not None and record.identity == identity_of(header)
        assert new.cache.cached_snapshot(header_of("slot", 10, "/a")) is None
    finally:
        new.close()


def _apply(session: al.Session, ops: list[Any], cache: ProjectionCache | None = None) -> None:
    for op, arg in ops:
        if op == "mark":
            mark(session, arg)
        elif op == "end":
            end_turn(session)
        elif op == "write" and cache is not None:
            cache.write(session)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(["jsonl", "sqlite"]), before=_ops, lost=_ops, after=_ops)
def test_property__a_store_restored_from_a_backup_and_written_on_is_folded_afresh(
    tmp_path_factory: pytest.TempPathFactory, kind: str, before: list[Any], lost: list[Any], after: list[Any]
) -> None:
    """A log backed up at a random point, written on with the cache attached (its record lands past
    the backup), restored over the store in place and continued by a host without the cache (time
    moves on, as it does): the cache file outlives the restore, yet the listing read never serves the
    discarded log's record as current and the cold read equals a fresh fold of the stored log."""
    root = tmp_path_factory.mktemp("restore")
    clock = itertools.count(1_000)

    def backend() -> Any:
        return JsonlBackend(str(root)) if kind == "jsonl" else SqliteBackend(str(root / "s.db"))

    storage = MemoryCacheStorage()  # the medium beside the store: a restore of the log leaves it as it is
    store = al.SessionStore(now=lambda: next(clock))
    coordinator = PersistenceCoordinator(store, backend())
    registry = ProjectionRegistry(store)
    registry.register(marks_unit())
    cache = ProjectionCache(registry, coordinator, storage, writer=InlineWriter(), timer=ManualTimer())
    session = store.create("prop", meta={"cwd": "/p"})
    session.append("turn/start", {"turn": 1})
    _apply(session, before, cache)
    store.flush(session)
    if kind == "sqlite":
        log = root / "s.db"
        copy = root / "backup.db"
        with sqlite3.connect(log) as source, sqlite3.connect(copy) as target:
            source.backup(target)
        backup = copy.read_bytes()
    else:
        (log,) = root.glob("**/prop/session.jsonl*")
        backup = log.read_bytes()
    _apply(session, lost, cache)
    cache.write(session)  # the record of the log the restore will throw away
    store.dispose(session)
    cache.close()
    coordinator.close()
    with open(log, "r+b") as fh:  # the restore, in place (a SQLite file closed cleanly has no -wal)
        fh.write(backup)
        fh.truncate()
    host = al.SessionStore(now=lambda: next(clock))
    writer = PersistenceCoordinator(host, backend())
    continued = writer.resume("prop")
    _apply(continued, after)
    host.flush(continued)
    host.dispose(continued)
    writer.close()
    reader = PersistenceCoordinator(al.SessionStore(), backend())
    fresh = ProjectionRegistry()
    fresh.register(marks_unit())
    cold_cache = ProjectionCache(fresh, reader, storage, writer=InlineWriter(), store=al.SessionStore())
    try:
        events = reader.read_from("prop", 0).events
        expected = {"asOfSeq": len(events) - 1, "values": _fresh_fold(events)}
        served = cold_cache.cached_snapshots(reader.backend.list_sessions(), current_only=True)["prop"]
        assert served is None or served == expected
        assert cold_cache.cold_snapshot("prop") == expected
    finally:
        cold_cache.close()
        reader.close()


# --- stored views: the listing read without parsing states -------------------------------------------

HOST_KEY = "cache-test/host-count"


def _host_only_unit() -> ProjectionUnit[Any, Any]:
    return ProjectionUnit(
        key=HOST_KEY,
        state_version=1,
        initial=lambda: 0,
        reduce=lambda state, event: state + 1,
        view=lambda state: {"count": state},
        client_visible=False,
        parse_state=lambda value: value,
    )


def _without_views(storage: Any, session_id: str) -> None:
    """Rewrite a record as one written before views were stored (rows only)."""
    record = storage.get(session_id)
    assert record is not None and record.views is not None
    storage.put(session_id, CacheRecord(record.identity, record.rows, record.revision))


def _listing_reads(h: Harness) -> tuple[Any, Any]:
    listings = h.coordinator.list()
    return h.cache.cached_snapshots(listings, current_only=True), h.cache.cached_snapshots(listings)


@settings(max_examples=60, deadline=None)
@given(ops=_ops, every=st.integers(1, 5), bump=st.booleans())
def test_property__the_listing_served_from_views_equals_the_listing_parsed_from_rows(
    ops: list[Any], every: int, bump: bool
) -> None:
    """Random histories and write points, a host-only unit beside the visible one, and optionally a
    reader whose unit has a bumped stateVersion: ``cached_snapshots`` served from the stored views is
    exactly what parsing the same records' rows serves (current-only and plain), the host-only row
    is never served, and whatever is served is a prefix fold of the log."""
    h = Harness(units=(marks_unit(), _host_only_unit()), write_every_events=every, write_interval_ms=10)
    try:
        session = h.store.create("prop", meta={"cwd": "/p"})
        session.append("turn/start", {"turn": 1})
        for op, arg in ops:
            if op == "mark":
                mark(session, arg)
            elif op == "end":
                end_turn(session)
            elif op == "write":
                h.cache.write(session)
            else:
                h.timer.advance(10)
        events = list(session.events)
        h.store.dispose(session)
        if h.storage.get("prop") is None:
            return
        if bump:  # the reader's unit changed its state schema: no row of it may be served
            h.registry = ProjectionRegistry()
            h.registry.register(marks_unit(state_version=2))
            h.registry.register(_host_only_unit())
            h.cache.close()
            h.cache = ProjectionCache(h.registry, h.spy, h.storage, writer=InlineWriter(), store=al.SessionStore())
        from_views = _listing_reads(h)
        _without_views(h.storage, "prop")
        assert _listing_reads(h) == from_views
        for served in from_views:
            snapshot = served["prop"]
            if snapshot is not None:
                assert not bump and HOST_KEY not in snapshot["values"]
                assert snapshot["values"] == _fresh_fold(events[: snapshot["asOfSeq"] + 1])
    finally:
        h.close()


def test_cached__views_are_stored_with_each_write_and_serve_without_parsing_a_state(
    harness: Callable[..., Harness],
) -> None:
    """A write stores the served views beside the rows; the listing read then never calls a unit's
    ``parse_state`` or ``view`` (the writer computed them from the same rows)."""
    calls: list[str] = []
    base = marks_unit()

    def parse(value: object) -> Any:
        calls.append("parse")
        return _parse_marks(value)

    def view(state: Any) -> Any:
        calls.append("view")
        return base.view(state)

    unit = ProjectionUnit(
        key=KEY,
        state_version=1,
        initial=base.initial,
        reduce=base.reduce,
        view=view,
        client_visible=True,
        parse_state=parse,
    )
    h = harness(units=(unit, _host_only_unit()))
    session = h.store.create("viewed", meta={"cwd": "/v"})
    mark(session, ["a"])
    end_turn(session)
    h.store.dispose(session)
    record = h.storage.get("viewed")
    assert record is not None and record.views is not None
    assert record.views["views"] == {KEY: {"marks": ["a"]}}  # the host-only unit has no view stored
    assert record.views["rows"] == {KEY: [1, 1], HOST_KEY: [1, 1]}
    calls.clear()
    served = h.cache.cached_snapshots(h.coordinator.list(), current_only=True)
    assert served == {"viewed": {"asOfSeq": 1, "values": {KEY: {"marks": ["a"]}}}}
    assert h.cache.cached_snapshot(header_of("viewed", 0, "/v")) == served["viewed"]
    assert calls == []
    assert h.spy.reads == []


def test_cached__a_stored_view_of_a_host_only_unit_is_never_served(harness: Callable[..., Harness]) -> None:
    """Host-only rows stay host-only even if a record's views carried one (the reader's registry
    decides what is client-visible, not the record)."""
    h = harness(units=(marks_unit(), _host_only_unit()))
    session = h.store.create("host")
    mark(session, ["a"])
    end_turn(session)
    h.store.dispose(session)
    record = h.storage.get("host")
    assert record is not None and record.views is not None
    views = {**record.views, "views": {**record.views["views"], HOST_KEY: {"count": 99}}}
    h.storage.put("host", CacheRecord(record.identity, record.rows, record.revision, views))
    for served in _listing_reads(h):
        assert served["host"] == {"asOfSeq": 1, "values": {KEY: {"marks": ["a"]}}}


def test_cached__views_written_by_another_release_are_recomputed_from_the_rows(
    harness: Callable[..., Harness], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A unit's ``view`` may change between releases without a stateVersion bump: views stamped by
    other code are not served; the rows are parsed and viewed by this code instead."""
    h = harness()
    session = h.store.create("older")
    mark(session, ["a"])
    end_turn(session)
    h.store.dispose(session)
    record = h.storage.get("older")
    assert record is not None and record.views is not None
    stale = {**record.views, "views": {KEY: {"marks": ["as the old release viewed it"]}}}
    h.storage.put("older", CacheRecord(record.identity, record.rows, record.revision, stale))
    same_release = h.cache.cached_snapshots(h.coordinator.list(), current_only=True)["older"]
    assert same_release is not None  # the same release: the stored views are what is served
    assert same_release["values"] == {KEY: {"marks": ["as the old release viewed it"]}}
    monkeypatch.setattr("agentlog.projection.cache.code_stamp", lambda: "agentlog 99.0")
    expected = {"asOfSeq": 1, "values": {KEY: {"marks": ["a"]}}}
    assert h.cache.cached_snapshots(h.coordinator.list(), current_only=True)["older"] == expected
    assert h.cache.cached_snapshot(header_of("older")) == expected


def test_cached__a_views_listing_read_that_fails_is_an_absent_cache(
    harness: Callable[..., Harness], caplog: pytest.LogCaptureFixture
) -> None:
    """The cache is never required: a medium whose listing read raises serves nothing (and warns)."""
    h = harness()
    session = h.store.create("unlucky")
    end_turn(session)
    h.store.dispose(session)

    def broken(_ids: Any = None) -> Any:
        raise OSError("disk went away")

    h.storage.get_views = broken  # type: ignore[method-assign, assignment]
    h.storage.get_many = broken  # type: ignore[method-assign, assignment]
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert h.cache.cached_snapshots(h.coordinator.list()) == {"unlucky": None}
    assert "listing read failed" in caplog.text


def test_cache__a_turn_end_write_landing_mid_disposal_still_ends_current(tmp_path: Path) -> None:
    """The race a CLI run ends in: the background writer lands the ``turn/end`` cut after the store
    dropped the session but before persistence drained its log (the cut cannot be proven then and
    gets no revision); the detach write that follows proves it against the drained log, so the next
    ``ls`` serves the session as current without reading it."""
    writer = _DeferredWriter()
    store = al.SessionStore(now=lambda: 0)
    store.on_disposed(lambda _session: writer.drain())  # runs before persistence's retirement drain
    coordinator = PersistenceCoordinator(store, JsonlBackend(str(tmp_path / "store")), batch_delay_ms=60_000)
    registry = ProjectionRegistry(store)
    registry.register(marks_unit())
    storage = MemoryCacheStorage()
    cache = ProjectionCache(registry, coordinator, storage, writer=writer)
    try:
        session = store.create("racing-exit")
        mark(session, ["a"])
        end_turn(session)
        store.dispose(session)
        raced = storage.get("racing-exit")
        assert raced is not None and raced.revision is None  # landed before the log was durable
        writer.drain()  # the detach write
        listings = coordinator.list()
        assert cache.cached_snapshots(listings, current_only=True)["racing-exit"] == {
            "asOfSeq": 1,
            "values": {KEY: {"marks": ["a"]}},
        }
    finally:
        cache.close()
        coordinator.close()
