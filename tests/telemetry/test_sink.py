"""The telemetry sink contract against a live store (runtime spec §6.11): what ships, when, and that a
slow or failing sink never reaches an append.

Each test drives a real :class:`~agentlog.SessionStore` (and, where named, a real agent or persistence
coordinator); the sinks are small recording implementations of the seam, which is what a user writes.
The worker thread is waited for through ``telemetry.drain()`` (its own report that every queued record
was handled) and, for the blocking sink, through the sink's own "entered emit" event — never by sleeping.
Most cases are the original's ``session-telemetry`` tests (``telemetry.spec.ts``, ``redact.spec.ts``), by
the same names where they carry over.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agentlog as al
from agentlog.agent.loop import Agent, AgentOptions, RetryPolicy
from agentlog.errors import InvalidOptionError, TelemetrySinkError
from agentlog.kernel.events import event_types
from agentlog.kernel.messages import text_block, tool_result_message, user_message
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend
from agentlog.telemetry import SessionTelemetry, TelemetryRecord
from agentlog.testing.provider import ScriptedProvider, failure_reply

OPAQUE = "telemetry-test/opaque"
event_types.register(OPAQUE)  # a plugin's type the telemetry never heard of

WAIT_S = 60.0  # an upper bound for the worker on a loaded machine; tests never measure time


class RecordingSink:
    """A sink that keeps what it was given; ``emit_error`` / ``reject_seq`` make it fail on purpose."""

    def __init__(self) -> None:
        self.records: list[TelemetryRecord] = []
        self.calls: list[str] = []
        self.emit_error: Exception | None = None
        self.reject_seq: int | None = None
        self.shutdown_error: Exception | None = None
        self.flushes = 0

    def emit(self, record: TelemetryRecord) -> None:
        if self.emit_error is not None:
            raise self.emit_error
        if self.reject_seq is not None and record["attributes"].get("event.seq") == self.reject_seq:
            raise RuntimeError(f"sink rejected seq {self.reject_seq}")
        self.records.append(record)
        attributes = record["attributes"]
        self.calls.append(f"emit:{attributes.get('event.seq', attributes.get('telemetry.op'))}")

    def flush(self) -> None:
        self.flushes += 1

    def shutdown(self) -> None:
        self.calls.append("shutdown")
        if self.shutdown_error is not None:
            raise self.shutdown_error

    def ledger(self) -> list[TelemetryRecord]:
        return [r for r in self.records if r["channel"] == "ledger"]

    def ops(self) -> list[TelemetryRecord]:
        return [r for r in self.records if r["channel"] == "ops"]


class BlockingSink:
    """A sink whose ``emit`` never returns until the test releases it (a hung exporter)."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.emitted: list[TelemetryRecord] = []

    def emit(self, record: TelemetryRecord) -> None:
        self.entered.set()
        self.release.wait()
        self.emitted.append(record)

    def shutdown(self) -> None:
        pass


@pytest.fixture
def store() -> al.SessionStore:
    return al.SessionStore()


@pytest.fixture
def sink() -> RecordingSink:
    return RecordingSink()


@pytest.fixture
def open_telemetry(store: al.SessionStore) -> Iterator[Callable[..., SessionTelemetry]]:
    """Open telemetries over ``store``; each is closed at the end of the test."""
    opened: list[SessionTelemetry] = []

    def open_(sink: Any, **options: Any) -> SessionTelemetry:
        telemetry = SessionTelemetry(store, sink, **options)
        opened.append(telemetry)
        return telemetry

    yield open_
    for telemetry in opened:
        telemetry.close()


def settled(telemetry: SessionTelemetry) -> SessionTelemetry:
    assert telemetry.drain(WAIT_S)
    return telemetry


def append_turn(session: al.Session) -> None:
    session.append("turn/start", {"turn": 1})
    session.append("user/message", user_message("hello"), {"surfaceOp": "append"})


def chunk(session: al.Session, turn: int, step: int, text: str) -> None:
    session.append(
        "assistant/chunk", {"turn": turn, "step": step, "chunk": {"type": "text-delta", "index": 0, "text": text}}
    )


def seqs_of(sink: RecordingSink, session_id: str) -> list[Any]:
    return [r["attributes"]["event.seq"] for r in sink.ledger() if r["attributes"]["session.id"] == session_id]


# --- capture --------------------------------------------------------------------------------------------


def test_hands_every_appended_event_over_with_envelope_identity_and_cloned_body(
    store: al.SessionStore, sink: RecordingSink, open_telemetry: Callable[..., SessionTelemetry]
) -> None:
    telemetry = open_telemetry(sink)
    session = store.create("cap")
    append_turn(session)
    settled(telemetry)
    start, message = sink.ledger()
    assert start["attributes"] == {"session.id": "cap", "event.type": "turn/start", "event.seq": 0}
    assert start["time"] == session.events[0]["time"]
    assert isinstance(start["time"], int)
    assert start["severity"] == "info"
    assert start["body"] == {"turn": 1}
    assert message["attributes"]["event.seq"] == 1
    # Deep-copy isolation: the body is plain and mutable, and mutating it never reaches the log.
    message["body"]["content"][0]["text"] = "tampered"
    assert session.events[1]["data"]["content"][0]["text"] == "hello"


def test_stamps_header_facts_on_every_record_when_present(
    store: al.SessionStore, sink: RecordingSink, open_telemetry: Callable[..., SessionTelemetry]
) -> None:
    telemetry = open_telemetry(sink)
    session = store.create("child", meta={"cwd": "/tmp/proj", "parentSession": "parent"})
    append_turn(session)
    settled(telemetry)
    assert sink.ledger()
    for record in sink.ledger():
        assert record["attributes"]["session.cwd"] == "/tmp/proj"
        assert record["attributes"]["session.parent_id"] == "parent"
        assert "session.seed_length" not in record["attributes"]


def test_maps_outcome_flags_to_severity_unknown_types_falling_through_as_info(
    store: al.SessionStore, sink: RecordingSink, open_telemetry: Callable[..., SessionTelemetry]
) -> None:
    telemetry = open_telemetry(sink)
    session = store.create()
    session.append("turn/start", {"turn": 1})
    session.append("step/start", {"turn": 1, "step": 1})
    session.append(
        "assistant/message",
        {
            "turn": 1,
            "step": 1,
            "message": al.assistant_message(
                [al.tool_call_block("c1", "t", "{}"), al.tool_call_block("c2", "t", "{}")], provider="p", model="m"
            ),
        },
        {"surfaceOp": "append"},
    )
    failed = tool_result_message("c1", [text_block("no")], is_error=True)
    session.append("tool/result", {"turn": 1, "step": 1, "message": failed}, {"surfaceOp": "append"})
    passed = tool_result_message("c2", [text_block("ok")], is_error=False)
    session.append("tool/result", {"turn": 1, "step": 1, "message": passed}, {"surfaceOp": "append"})
    session.append_custom(OPAQUE, {"payload": {"nested": []}})
    session.append("step/end", {"turn": 1, "step": 1})
    session.append(
        "turn/end", {"turn": 1, "reason": {"kind": "error", "error": {"message": "boom", "code": "UNKNOWN"}}}
    )
    settled(telemetry)
    severities = [
        (r["attributes"]["event.type"], r["severity"])
        for r in sink.ledger()
        if r["attributes"]["event.type"] in ("turn/start", "tool/result", OPAQUE, "turn/end")
    ]
    assert severities == [
        ("turn/start", "info"),
        ("tool/result", "error"),
        ("tool/result", "info"),
        (OPAQUE, "info"),
        ("turn/end", "error"),
    ]


def test_passes_unknown_merged_event_types_through_unchanged(
    store: al.SessionStore, sink: RecordingSink, open_telemetry: Callable[..., SessionTelemetry]
) -> None:
    telemetry = open_telemetry(sink)
    session = store.create()
    session.append_custom(OPAQUE, {"payload": {"nested": ["a", "b"]}})
    settled(telemetry)
    (record,) = sink.ledger()
    assert record["attributes"]["event.type"] == OPAQUE
    assert record["severity"] == "info"
    assert record["body"] == {"payload": {"nested": ["a", "b"]}}


def test_ships_only_the_first_chunk_of_each_turn_step_per_session(
    store: al.SessionStore, sink: RecordingSink, open_telemetry: Callable[..., SessionTelemetry]
) -> None:
    telemetry = open_telemetry(sink)
    a = store.create("a")
    b = store.create("b")
    chunk(a, 1, 1, "a11-first")
    chunk(a, 1, 1, "a11-second")
    chunk(a, 1, 2, "a12-first")
    chunk(b, 1, 1, "b11-first")
    chunk(b, 1, 1, "b11-second")
    settled(telemetry)
    shipped = [(r["attributes"]["session.id"], r["body"]["chunk"]["text"]) for r in sink.ledger()]
    assert shipped == [("a", "a11-first"), ("a", "a12-first"), ("b", "b11-first")]
    assert telemetry.stats().dropped == 0  # elided by the projection, not lost


# --- on-demand capture ----------------------------------------------------------------------------------


def test_captures_one_canonical_log_prefix_at_a_time_without_following_later_events(
    store: al.SessionStore, sink: RecordingSink, open_telemetry: Callable[..., SessionTelemetry]
) -> None:
    telemetry = open_telemetry(sink, capture="on-demand")
    session = store.create("on-demand-prefix")
    append_turn(session)
    session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    settled(telemetry)
    assert sink.records == []
    telemetry.capture_session(session, 1)
    settled(telemetry)
    assert [r["attributes"]["event.type"] for r in sink.ledger()] == ["turn/start", "user/message"]
    telemetry.capture_session(session)
    telemetry.capture_session(session)
    settled(telemetry)
    assert [r["attributes"]["event.type"] for r in sink.ledger()] == ["turn/start", "user/message", "turn/end"]


def test_runs_the_currently_mounted_redaction_policy_during_canonical_log_capture(
    store: al.SessionStore, sink: RecordingSink, open_telemetry: Callable[..., SessionTelemetry]
) -> None:
    telemetry = open_telemetry(sink, capture="on-demand")
    session = store.create("on-demand-redacted")
    session.append("turn/start", {"turn": 1})
    remove = telemetry.add_rule(lambda record, next: {**next(), "body": {"scrubbed": True}})
    telemetry.capture_session(session)
    settled(telemetry)
    assert sink.ledger()[0]["body"] == {"scrubbed": True}
    remove()
    session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    telemetry.capture_session(session)
    settled(telemetry)
    assert sink.ledger()[1]["body"] == {"turn": 1, "reason": {"kind": "completed"}}


def test_contains_each_sink_failure_independently_while_replaying_a_prefix(
    store: al.SessionStore, sink: RecordingSink, open_telemetry: Callable[..., SessionTelemetry]
) -> None:
    sink.reject_seq = 1
    telemetry = open_telemetry(sink, capture="on-demand")
    session = store.create("on-demand-failure")
    append_turn(session)
    session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    telemetry.capture_session(session)
    settled(telemetry)
    assert seqs_of(sink, "on-demand-failure") == [0, 2]
    assert telemetry.stats().failed == 1
    assert isinstance(telemetry.error, TelemetrySinkError)


def test_captures_a_pending_prefix_after_a_reload_without_retained_records(
    store: al.SessionStore, open_telemetry: Callable[..., SessionTelemetry]
) -> None:
    first = RecordingSink()
    telemetry = open_telemetry(first, capture="on-demand")
    session = store.create("on-demand-reload")
    session.append("turn/start", {"turn": 1})
    telemetry.close()
    assert first.records == []
    second = RecordingSink()
    replacement = open_telemetry(second, capture="on-demand")
    replacement.capture_session(session)
    settled(replacement)
    assert seqs_of(second, "on-demand-reload") == [0]


def test_on_demand_registers_no_continuous_capture_flush_or_ops_listeners(
    store: al.SessionStore, sink: RecordingSink, open_telemetry: Callable[..., SessionTelemetry]
) -> None:
    calls: list[int] = []

    def counting(record: TelemetryRecord, next: Callable[[], TelemetryRecord]) -> TelemetryRecord:
        calls.append(1)
        return next()

    telemetry = open_telemetry(sink, capture="on-demand", rules=[counting])
    session = store.create("on-demand-ledger-only")
    session.append("turn/start", {"turn": 1})
    store.flush(session)
    settled(telemetry)
    assert sink.flushes == 0
    assert sink.records == []
    assert calls == []
    telemetry.capture_session(session)
    settled(telemetry)
    assert calls == [1]
    store.dispose(session)
    telemetry.close()
    assert [r["channel"] for r in sink.records] == ["ledger"]


def test_a_replay_longer_than_the_queue_is_handed_over_whole(
    store: al.SessionStore, sink: RecordingSink, open_telemetry: Callable[..., SessionTelemetry]
) -> None:
    session = store.create("long")
    for turn in range(1, 26):
        session.append("turn/start", {"turn": turn})
        session.append("turn/end", {"turn": turn, "reason": {"kind": "completed"}})
    swept = RecordingSink()
    telemetry = open_telemetry(swept, max_queue=2, name="swept")  # adoption replays the 50 events
    on_demand = open_telemetry(sink, max_queue=2, capture="on-demand")
    on_demand.capture_session(session)
    settled(telemetry)
    settled(on_demand)
    assert seqs_of(swept, "long") == seqs_of(sink, "long") == list(range(50))
    assert telemetry.stats().dropped == on_demand.stats().dropped == 0


# --- adoption and the handoff cursor ---------------------------------------------------------------------


def test_exports_an_unpublished_suffix_without_re_exporting_constructor_history(
    store: al.SessionStore, sink: RecordingSink, open_telemetry: Callable[..., SessionTelemetry]
) -> None:
    parent = store.create("seed-parent")
    append_turn(parent)
    parent.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    telemetry = open_telemetry(sink)
    child = store.prepare("seeded", seed=list(parent.events))
    child.append("turn/start", {"turn": 2})
    store.enter(child)
    store.announce(child)
    settled(telemetry)
    assert seqs_of(sink, "seed-parent") == [0, 1, 2]
    # 3 is the end-seed and 4 the turn/start: this lifecycle's own writes; 0-2 stay with the parent stream.
    assert seqs_of(sink, "seeded") == [3, 4]


def test_a_seeded_fork_exports_only_its_own_writes_and_stamps_the_stitch_facts(
    store: al.SessionStore, sink: RecordingSink, open_telemetry: Callable[..., SessionTelemetry]
) -> None:
    telemetry = open_telemetry(sink)
    parent = store.create("stitch-parent", meta={"cwd": "/work"})
    append_turn(parent)
    parent.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    child = store.fork(parent, child_id="stitch-child")
    child.append("turn/start", {"turn": 2})
    settled(telemetry)
    assert child.first_live_seq == 3
    assert seqs_of(sink, "stitch-child") == [3, 4]  # the end-seed, then its own turn: never the seed
    for record in sink.ledger():
        if record["attributes"]["session.id"] == "stitch-child":
            assert record["attributes"]["session.parent_id"] == "stitch-parent"
            assert record["attributes"]["session.seed_length"] == 3
            assert record["attributes"]["session.cwd"] == "/work"
    assert seqs_of(sink, "stitch-parent") == [0, 1, 2]


def test_resume_shape_a_full_log_seed_exports_only_its_own_end_seed_and_rebuilds_the_chunk_projection(
    store: al.SessionStore, sink: RecordingSink, open_telemetry: Callable[..., SessionTelemetry]
) -> None:
    donor = store.create("donor")
    donor.append("turn/start", {"turn": 1})
    donor.append("step/start", {"turn": 1, "step": 1})
    chunk(donor, 1, 1, "first")
    resumed = store.create("resumed", seed=list(donor.events))
    telemetry = open_telemetry(sink)
    settled(telemetry)
    assert seqs_of(sink, "resumed") == [3]  # its own end-seed
    chunk(resumed, 1, 1, "continuation")  # the step's first chunk shipped from the earlier process
    settled(telemetry)
    assert seqs_of(sink, "resumed") == [3]
    chunk(resumed, 1, 2, "next step")
    settled(telemetry)
    assert seqs_of(sink, "resumed") == [3, 5]


def test_a_session_resumed_from_disk_never_re_exports_its_stored_history(tmp_path: Path, sink: RecordingSink) -> None:
    backend = JsonlBackend(tmp_path)
    first = al.SessionStore()
    with PersistenceCoordinator(first, backend):
        session = first.create("on-disk")
        append_turn(session)
        session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
        first.flush(session)
    second = al.SessionStore()
    telemetry = SessionTelemetry(second, sink)
    try:
        with PersistenceCoordinator(second, JsonlBackend(tmp_path)) as coordinator:
            resumed = coordinator.resume("on-disk")
            resumed.append("turn/start", {"turn": 2})
            settled(telemetry)
            assert seqs_of(sink, "on-disk") == [3, 4]
            assert [r["attributes"]["event.type"] for r in sink.ledger()] == ["session/end-seed", "turn/start"]
    finally:
        telemetry.close()


def test_adopts_exactly_once_when_created_fires_after_the_sweep(
    store: al.SessionStore, sink: RecordingSink, open_telemetry: Callable[..., SessionTelemetry]
) -> None:
    session = store.prepare("overlap")
    append_turn(session)
    store.enter(session)
    telemetry = open_telemetry(sink)  # the sweep adopts the entered session
    settled(telemetry)
    assert len(sink.ledger()) == 2
    store.announce(session)
    settled(telemetry)
    assert len(sink.ledger()) == 2


def test_resumes_from_the_handoff_cursor_across_a_reload_re_dropping_mid_step_chunks(
    store: al.SessionStore, open_telemetry: Callable[..., SessionTelemetry]
) -> None:
    first = RecordingSink()
    telemetry = open_telemetry(first)
    session = store.create("hmr")
    session.append("turn/start", {"turn": 1})
    chunk(session, 1, 1, "first")
    settled(telemetry)
    assert len(first.ledger()) == 2
    telemetry.close()
    # The reload window: appends while no telemetry listens.
    chunk(session, 1, 1, "mid-step continuation")
    session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    second = RecordingSink()
    replacement = open_telemetry(second)
    settled(replacement)
    assert [r["attributes"]["event.type"] for r in second.ledger()] == ["turn/end"]


def test_replays_past_a_record_the_sink_rejects_one_event_withheld_the_rest_adopted(
    store: al.SessionStore, sink: RecordingSink, open_telemetry: Callable[..., SessionTelemetry]
) -> None:
    session = store.create("partial")
    append_turn(session)
    session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    sink.reject_seq = 1
    telemetry = open_telemetry(sink)
    settled(telemetry)
    assert seqs_of(sink, "partial") == [0, 2]


def test_re_hands_the_full_log_when_no_cursor_survived(
    store: al.SessionStore, sink: RecordingSink, open_telemetry: Callable[..., SessionTelemetry]
) -> None:
    session = store.create("fresh")
    append_turn(session)
    telemetry = open_telemetry(sink)
    settled(telemetry)
    assert seqs_of(sink, "fresh") == [0, 1]


# --- lifecycle and containment ----------------------------------------------------------------------------


def test_forwards_a_flush_barrier_as_a_hint_without_waiting_for_the_sink(
    store: al.SessionStore, open_telemetry: Callable[..., SessionTelemetry]
) -> None:
    class FlushBlocking(RecordingSink):
        def __init__(self) -> None:
            super().__init__()
            self.release = threading.Event()

        def flush(self) -> None:
            self.release.wait()
            super().flush()

    sink = FlushBlocking()
    telemetry = open_telemetry(sink)
    session = store.create()
    store.flush(session)  # returns although the sink's flush has not (and cannot yet)
    assert sink.flushes == 0
    sink.release.set()
    settled(telemetry)
    assert sink.flushes == 1


def test_ignores_flush_hints_for_sessions_it_never_adopted(
    store: al.SessionStore, sink: RecordingSink, open_telemetry: Callable[..., SessionTelemetry]
) -> None:
    telemetry = open_telemetry(sink)
    stranger = store.prepare("stranger")
    store.enter(stranger)  # live but never announced: no on_created, so never adopted
    store.flush(stranger)
    settled(telemetry)
    assert sink.flushes == 0


def test_emits_no_marker_for_a_session_whose_announcement_was_vetoed_before_adoption(
    store: al.SessionStore, sink: RecordingSink, open_telemetry: Callable[..., SessionTelemetry]
) -> None:
    def veto(session: al.Session) -> None:
        raise RuntimeError("vetoed by an earlier listener")

    store.on_created(veto)
    telemetry = open_telemetry(sink)
    with pytest.raises(RuntimeError, match="vetoed"):
        store.create("vetoed")
    telemetry.close()
    assert sink.ops() == []


def test_emits_each_adopted_sessions_shutdown_record_before_the_sink_shuts_down(
    store: al.SessionStore, sink: RecordingSink, open_telemetry: Callable[..., SessionTelemetry]
) -> None:
    telemetry = open_telemetry(sink)
    store.create("s1")
    store.create("s2")
    telemetry.close()
    assert sink.calls == ["emit:shutdown", "emit:shutdown", "shutdown"]
    ops = sink.ops()
    assert sorted(r["attributes"]["session.id"] for r in ops) == ["s1", "s2"]
    for record in ops:
        assert record["severity"] == "info"
        assert record["body"] == {"op": "shutdown"}
        assert record["attributes"] == {"telemetry.op": "shutdown", "session.id": record["attributes"]["session.id"]}
        assert "event.seq" not in record["attributes"] and "event.type" not in record["attributes"]


def test_emits_the_shutdown_marker_at_the_sessions_own_disposal_edge_then_retires_it(
    store: al.SessionStore, sink: RecordingSink, open_telemetry: Callable[..., SessionTelemetry]
) -> None:
    telemetry = open_telemetry(sink, now=lambda: 1234)
    store.create("survivor")
    with store.scope() as owner:
        owner.create("ephemeral")
    settled(telemetry)
    assert [r["attributes"]["session.id"] for r in sink.ops()] == ["ephemeral"]
    assert sink.ops()[0]["time"] == 1234
    telemetry.close()
    assert [r["attributes"]["session.id"] for r in sink.ops()] == ["ephemeral", "survivor"]


def test_reports_a_failing_sink_shutdown_instead_of_raising(
    store: al.SessionStore, sink: RecordingSink, caplog: pytest.LogCaptureFixture
) -> None:
    sink.shutdown_error = RuntimeError("exporter unreachable")
    telemetry = SessionTelemetry(store, sink)
    store.create()
    with caplog.at_level(logging.WARNING, logger="agentlog"):
        telemetry.close()  # does not raise
    assert telemetry.error is not None and telemetry.error.code == "TELEMETRY_SINK_FAILED"
    assert "shutdown raised RuntimeError: exporter unreachable" in str(telemetry.error)
    assert isinstance(telemetry.error.__cause__, RuntimeError)
    assert any("shutdown raised" in r.getMessage() for r in caplog.records)


def test_contains_emit_failures_the_append_succeeds_and_capture_heals(
    store: al.SessionStore, sink: RecordingSink, open_telemetry: Callable[..., SessionTelemetry]
) -> None:
    telemetry = open_telemetry(sink)
    session = store.create()
    sink.emit_error = RuntimeError("sink broke")
    session.append("turn/start", {"turn": 1})
    settled(telemetry)
    sink.emit_error = None
    session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    settled(telemetry)
    assert [r["attributes"]["event.type"] for r in sink.ledger()] == ["turn/end"]
    assert len(session.events) == 2


def test_a_sink_that_always_raises_is_reported_once_and_counted_after_that(
    store: al.SessionStore, caplog: pytest.LogCaptureFixture, open_telemetry: Callable[..., SessionTelemetry]
) -> None:
    sink = RecordingSink()
    sink.emit_error = ConnectionError("collector down")
    reported: list[TelemetrySinkError] = []
    with caplog.at_level(logging.WARNING, logger="agentlog"):
        telemetry = open_telemetry(sink, on_error=reported.append)
        session = store.create()
        for turn in range(1, 6):
            session.append("turn/start", {"turn": turn})
            session.append("turn/end", {"turn": turn, "reason": {"kind": "completed"}})
        settled(telemetry)
    assert len(session.events) == 10  # every append completed
    assert telemetry.stats().failed == 10
    assert telemetry.stats().delivered == 0
    assert len(reported) == 1 and reported[0] is telemetry.error
    assert reported[0].code == "TELEMETRY_SINK_FAILED"
    assert isinstance(reported[0].__cause__, ConnectionError)
    assert sum("emit raised" in r.getMessage() for r in caplog.records) == 1


def test_a_sink_that_blocks_forever_never_blocks_appends_drops_are_counted_and_close_reports_the_stall(
    store: al.SessionStore, caplog: pytest.LogCaptureFixture
) -> None:
    sink = BlockingSink()
    reported: list[TelemetrySinkError] = []
    telemetry = SessionTelemetry(store, sink, max_queue=4, on_error=reported.append)
    try:
        session = store.create("hung")
        session.append("turn/start", {"turn": 1})  # the worker takes it and hangs in emit
        assert sink.entered.wait(WAIT_S)
        for step in range(1, 11):
            session.append("step/start", {"turn": 1, "step": step})
            session.append("step/end", {"turn": 1, "step": step})
        assert len(session.events) == 21  # all appends completed while the sink hung
        stats = telemetry.stats()
        assert stats.queued == 4
        assert stats.dropped == 16
        assert not telemetry.drain(0.01)
        with caplog.at_level(logging.WARNING, logger="agentlog"):
            telemetry.close(timeout=0.05)  # the shutdown marker is dropped too: the queue is still full
        assert telemetry.stats().dropped == 17
        assert len(reported) == 1 and reported[0].code == "TELEMETRY_SINK_STALLED"
        assert telemetry.error is reported[0]
        assert sum("still busy" in r.getMessage() for r in caplog.records) == 1
        telemetry.close()  # idempotent: nothing more is reported
        assert len(reported) == 1
    finally:
        sink.release.set()
    # Released, the worker finishes what it had queued (the first record and the four that fitted).
    assert telemetry.drain(WAIT_S)
    assert [r["attributes"]["event.seq"] for r in sink.emitted] == [0, 1, 2, 3, 4]


def test_an_async_sink_shutdown_is_awaited_on_the_worker(store: al.SessionStore) -> None:
    done: list[str] = []

    class AsyncSink(RecordingSink):
        async def shutdown(self) -> None:  # type: ignore[override]
            await asyncio.sleep(0)
            done.append("shut")

    telemetry = SessionTelemetry(store, AsyncSink())

    async def main() -> None:
        store.create()
        await telemetry.aclose()

    asyncio.run(main())
    assert done == ["shut"]


# --- agent errors -------------------------------------------------------------------------------------------


def test_relays_a_failed_agent_turn_as_an_agent_error_ops_record_before_its_turn_end(
    store: al.SessionStore, sink: RecordingSink, open_telemetry: Callable[..., SessionTelemetry]
) -> None:
    telemetry = open_telemetry(sink, now=lambda: 99)
    session = store.create("erring")
    agent = Agent(
        session,
        ScriptedProvider([failure_reply("AUTH", "bad key")]),
        AgentOptions(provider="p", model="m", retry=RetryPolicy(max_retries=0)),
        store=store,
    )
    unwatch = telemetry.watch(agent)

    async def main() -> Any:
        agent.followup("go")
        return await agent.run()

    (outcome,) = asyncio.run(main())
    settled(telemetry)
    assert outcome.reason["kind"] == "error"
    (record,) = sink.ops()
    assert record["severity"] == "error"
    assert record["time"] == 99
    assert record["attributes"] == {
        "telemetry.op": "agent-error",
        "session.id": "erring",
        "agent.id": "erring",
        "error.name": "LlmError",
        "turn": 1,
        "step": 1,
    }
    assert record["body"] == {"name": "LlmError", "message": str(outcome.error)}
    calls = [c for c in sink.calls if c in ("emit:agent-error",) or c == f"emit:{len(session.events) - 1}"]
    assert calls == ["emit:agent-error", f"emit:{len(session.events) - 1}"]  # before the turn/end
    turn_end = sink.ledger()[-1]
    assert turn_end["attributes"]["event.type"] == "turn/end" and turn_end["severity"] == "error"
    unwatch()
    assert agent.error_hooks == []


# --- the redact waterfall -------------------------------------------------------------------------------------

FIXTURE_SECRET = "sk-fixture1234567890"


def test_passes_records_through_unchanged_when_no_rule_is_mounted(
    store: al.SessionStore, sink: RecordingSink, open_telemetry: Callable[..., SessionTelemetry]
) -> None:
    telemetry = open_telemetry(sink)
    session = store.create("w")
    session.append("user/message", user_message(f"key {FIXTURE_SECRET}"), {"surfaceOp": "append"})
    settled(telemetry)
    assert sink.records[0]["body"]["content"][0]["text"] == f"key {FIXTURE_SECRET}"


def test_applies_a_mounted_rule_to_every_outbound_record_ops_records_included(
    store: al.SessionStore, sink: RecordingSink
) -> None:
    telemetry = SessionTelemetry(store, sink, rules=[lambda record, next: {**next(), "body": {"scrubbed": True}}])
    session = store.create("rule")
    session.append("user/message", user_message(FIXTURE_SECRET), {"surfaceOp": "append"})
    settled(telemetry)
    assert sink.records[0]["body"] == {"scrubbed": True}
    telemetry.close()
    (shutdown,) = sink.ops()
    assert shutdown["body"] == {"scrubbed": True}


def test_keeps_the_canonical_log_untouched_by_a_mounted_rule(
    store: al.SessionStore, sink: RecordingSink, open_telemetry: Callable[..., SessionTelemetry]
) -> None:
    def vandal(record: TelemetryRecord, next: Callable[[], TelemetryRecord]) -> TelemetryRecord:
        inner = next()
        inner["body"]["content"][0]["text"] = "overwritten"
        return inner

    telemetry = open_telemetry(sink, rules=[vandal])
    session = store.create("log")
    session.append("user/message", user_message(FIXTURE_SECRET), {"surfaceOp": "append"})
    settled(telemetry)
    assert sink.records[0]["body"]["content"][0]["text"] == "overwritten"
    assert session.events[0]["data"]["content"][0]["text"] == FIXTURE_SECRET


def test_stacks_rules_outermost_first_around_next(
    store: al.SessionStore, sink: RecordingSink, open_telemetry: Callable[..., SessionTelemetry]
) -> None:
    order: list[str] = []

    def outer(record: TelemetryRecord, next: Callable[[], TelemetryRecord]) -> TelemetryRecord:
        order.append("outer-before")
        inner = next()
        order.append("outer-after")
        return {**inner, "attributes": {**inner["attributes"], "outer": 1}}

    def inner_rule(record: TelemetryRecord, next: Callable[[], TelemetryRecord]) -> TelemetryRecord:
        order.append("inner")
        inner = next()
        return {**inner, "attributes": {**inner["attributes"], "inner": 1}}

    telemetry = open_telemetry(sink, rules=[outer, inner_rule])
    session = store.create("stack")
    session.append("user/message", user_message("hi"), {"surfaceOp": "append"})
    settled(telemetry)
    assert order == ["outer-before", "inner", "outer-after"]
    assert sink.records[0]["attributes"]["outer"] == 1 and sink.records[0]["attributes"]["inner"] == 1


def test_a_rule_that_skips_next_replaces_everything_beneath_it(
    store: al.SessionStore, sink: RecordingSink, open_telemetry: Callable[..., SessionTelemetry]
) -> None:
    inner_called: list[bool] = []
    replaced: TelemetryRecord = {"channel": "ops", "time": 0, "severity": "info", "attributes": {}, "body": "replaced"}

    def inner_rule(record: TelemetryRecord, next: Callable[[], TelemetryRecord]) -> TelemetryRecord:
        inner_called.append(True)
        return next()

    telemetry = open_telemetry(sink, rules=[lambda record, next: replaced, inner_rule])
    session = store.create("veto")
    session.append("user/message", user_message("hi"), {"surfaceOp": "append"})
    settled(telemetry)
    assert sink.records[0]["body"] == "replaced"
    assert inner_called == []


def test_a_throwing_rule_withholds_the_record_fail_closed_without_disturbing_the_log(
    store: al.SessionStore, sink: RecordingSink, open_telemetry: Callable[..., SessionTelemetry]
) -> None:
    def exploding(record: TelemetryRecord, next: Callable[[], TelemetryRecord]) -> TelemetryRecord:
        raise RuntimeError("rule exploded")

    telemetry = open_telemetry(sink, rules=[exploding])
    session = store.create("closed")
    session.append("user/message", user_message("hi"), {"surfaceOp": "append"})
    settled(telemetry)
    assert sink.records == []
    assert len(session.events) == 1
    assert telemetry.stats().withheld == 1
    assert telemetry.error is None  # a rule's failure is no sink failure


def test_a_plain_string_redactor_scrubs_every_body_string_before_the_rules_see_it(
    store: al.SessionStore, sink: RecordingSink, open_telemetry: Callable[..., SessionTelemetry]
) -> None:
    seen: list[str] = []

    def observer(record: TelemetryRecord, next: Callable[[], TelemetryRecord]) -> TelemetryRecord:
        inner = next()
        seen.append(inner["body"]["content"][0]["text"])
        return inner

    telemetry = open_telemetry(sink, rules=[observer], redact=lambda text: text.replace(FIXTURE_SECRET, "[redacted]"))
    session = store.create("scrub", meta={"cwd": "/home/" + FIXTURE_SECRET})
    session.append("user/message", user_message(f"key {FIXTURE_SECRET}"), {"surfaceOp": "append"})
    settled(telemetry)
    assert seen == ["key [redacted]"]
    assert sink.records[0]["body"]["content"][0]["text"] == "key [redacted]"
    assert sink.records[0]["attributes"]["session.cwd"] == "/home/" + FIXTURE_SECRET  # identity is left alone


# --- options ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sink", "options", "message"),
    [
        (object(), {}, "must have emit"),
        (RecordingSink(), {"capture": "sometimes"}, "capture"),
        (RecordingSink(), {"max_queue": 0}, "max_queue"),
        (RecordingSink(), {"max_queue": True}, "max_queue"),
        (RecordingSink(), {"rules": ["not callable"]}, "rule"),
        (RecordingSink(), {"redact": "not callable"}, "redact"),
    ],
)
def test_bad_options_are_refused_with_a_typed_error(
    store: al.SessionStore, sink: Any, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidOptionError, match=message) as refused:
        SessionTelemetry(store, sink, **options)
    assert refused.value.code == "INVALID_OPTION"


# --- several telemetries on one store ----------------------------------------------------------------------------


def test_two_open_telemetries_of_one_store_each_see_every_event_under_their_own_cursor(
    store: al.SessionStore, open_telemetry: Callable[..., SessionTelemetry]
) -> None:
    first, second = RecordingSink(), RecordingSink()
    telemetry = open_telemetry(first)
    other = open_telemetry(second, name="audit")
    session = store.create("both")
    append_turn(session)
    settled(telemetry)
    settled(other)
    assert seqs_of(first, "both") == seqs_of(second, "both") == [0, 1]


def test_a_second_open_telemetry_of_the_same_name_is_refused_until_the_first_closes(
    store: al.SessionStore, sink: RecordingSink, open_telemetry: Callable[..., SessionTelemetry]
) -> None:
    telemetry = open_telemetry(sink)
    with pytest.raises(InvalidOptionError, match='named "default" is already open'):
        SessionTelemetry(store, RecordingSink())
    SessionTelemetry(al.SessionStore(), RecordingSink()).close()  # another store: its own names
    telemetry.close()
    open_telemetry(RecordingSink())  # the name is free again


def test_a_sink_may_close_its_telemetry_from_inside_emit(store: al.SessionStore) -> None:
    class ClosingSink(RecordingSink):
        telemetry: SessionTelemetry
        shut = threading.Event()

        def emit(self, record: TelemetryRecord) -> None:
            super().emit(record)
            self.telemetry.close()

        def shutdown(self) -> None:
            super().shutdown()
            self.shut.set()

    sink = ClosingSink()
    sink.telemetry = SessionTelemetry(store, sink)
    store.create("closing").append("turn/start", {"turn": 1})
    assert sink.shut.wait(WAIT_S)  # the worker ran on to the sink's shutdown instead of joining itself
    assert sink.telemetry.closed
    assert sink.calls == ["emit:0", "emit:shutdown", "shutdown"]


# --- the projection and the cursor as an invariant ---------------------------------------------------------------

_ops = st.lists(
    st.one_of(
        st.tuples(st.just("chunk"), st.integers(1, 2), st.integers(1, 3)),
        st.tuples(st.just("todo"), st.just(0), st.just(0)),
    ),
    max_size=30,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=_ops, data=st.data())
def test_a_reload_anywhere_ships_exactly_what_one_telemetry_would_once_each(ops: list[Any], data: Any) -> None:
    """Close a telemetry and open a replacement anywhere (appends in between go unobserved): together they
    ship the first chunk of each (turn, step) and every other event, each exactly once, in order."""
    closed_at = data.draw(st.integers(0, len(ops)))
    reopened_at = data.draw(st.integers(closed_at, len(ops)))
    store = al.SessionStore()
    first, second = RecordingSink(), RecordingSink()
    telemetry = SessionTelemetry(store, first)
    session = store.create("prop")
    replacement = None
    for index in range(len(ops) + 1):
        if index == closed_at:
            telemetry.close()
        if index == reopened_at:
            replacement = SessionTelemetry(store, second)
        if index == len(ops):
            break
        kind, turn, step = ops[index]
        if kind == "chunk":
            chunk(session, turn, step, f"{index}")
        else:
            session.append("todo/write", {"todos": []})
    assert replacement is not None
    replacement.close()
    shipped = seqs_of(first, "prop") + seqs_of(second, "prop")
    expected, seen = [], set()
    for event in session.events:
        if event["type"] == "assistant/chunk":
            key = (event["data"]["turn"], event["data"]["step"])
            if key in seen:
                continue
            seen.add(key)
        expected.append(event["seq"])
    assert shipped == expected
