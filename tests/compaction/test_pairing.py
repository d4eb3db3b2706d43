"""Tool-pairing balance and the compaction seam, against the original's ``packages/compaction/compaction``.

One test per case of ``tests/tool-pairing.spec.ts`` (balanced cuts, surface identity, the incremental
cache and corrupt surfaces) and of ``tests/compaction.spec.ts`` (the engine seam: registration on the
agent, the contract methods, the log-only ``compaction/*`` events and the cancellation signal), named
after the case. Where the original hands the helpers a hand-made session object (to count event reads
or to fake a corrupt surface), so do these tests: :class:`FakeSession` exposes ``events`` and
``surface`` exactly as the helpers read them, with real kernel :class:`~agentlog.kernel.events.Event`
values.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from typing import Any, overload

import pytest

from agentlog.agent.loop import Agent, AgentOptions
from agentlog.compaction import (
    CompactionEngine,
    Summarizer,
    balanced_after,
    balanced_before,
    checkpoint_source,
    is_checkpoint_source,
)
from agentlog.errors import AgentlogError, CompactionRangeError, CompactionStateError, InvalidAgentOptionError
from agentlog.kernel.events import Event
from agentlog.kernel.jsonvalue import thaw
from agentlog.kernel.messages import (
    assistant_message,
    plugin_message,
    tool_call_block,
    tool_result_message,
    user_message,
)
from agentlog.kernel.session import Session
from agentlog.testing.provider import ScriptedProvider

from .test_region import MODEL, RecordingSummarizer, make_agent, routed_header, run

SURFACE = {"surfaceOp": "append"}


def call_message(*call_ids: str) -> dict[str, Any]:
    blocks = [tool_call_block(call_id, f"tool-{call_id}", "{}") for call_id in call_ids]
    return dict(assistant_message(blocks, provider="mock", model="mock"))


def result_data(call_id: str, turn: int = 1) -> dict[str, Any]:
    return {"turn": turn, "step": 1, "message": tool_result_message(call_id, [], is_error=False)}


def seq_of(session: Session, etype: str, nth: int = 0) -> int:
    seq: int = [event for event in session.events if event["type"] == etype][nth].seq
    assert seq in session.surface.nodes, f"seq {seq} is not on the surface"
    return seq


def before(session: Session, etype: str, nth: int = 0) -> bool:
    return balanced_before(session, seq_of(session, etype, nth))


def after(session: Session, etype: str, nth: int = 0) -> bool:
    return balanced_after(session, seq_of(session, etype, nth))


def closed_tool_step() -> Session:
    session = Session.create("closed-tool-step")
    session.append("user/message", user_message("go"), SURFACE)
    session.append("assistant/message", {"turn": 1, "step": 1, "message": call_message("c1")}, SURFACE)
    session.append(
        "tool/result", {"turn": 1, "step": 1, "message": tool_result_message("c1", "done", is_error=False)}, SURFACE
    )
    return session


# --- tool-pairing boundaries -------------------------------------------------------------------------


def test_classifies_closed_and_open_single_call_steps() -> None:
    """A call opens a pair and its result closes it; the cut after a call with no result is unbalanced."""
    closed = closed_tool_step()
    assert before(closed, "user/message") is True
    assert after(closed, "user/message") is True
    assert before(closed, "assistant/message") is True
    assert after(closed, "assistant/message") is False
    assert before(closed, "tool/result") is False
    assert after(closed, "tool/result") is True

    open_step = Session.create("open-tool-step")
    open_step.append("assistant/message", {"turn": 1, "step": 1, "message": call_message("open")}, SURFACE)
    assert balanced_after(open_step, open_step.surface.nodes[0]) is False


def test_requires_every_result_from_a_multiple_call_assistant_message() -> None:
    """Parallel calls stay pending until the last of their results."""
    session = Session.create("multiple-calls")
    session.append("assistant/message", {"turn": 1, "step": 1, "message": call_message("c1", "c2")}, SURFACE)
    session.append("tool/result", result_data("c1"), SURFACE)
    session.append("tool/result", result_data("c2"), SURFACE)

    assert after(session, "tool/result", 0) is False
    assert after(session, "tool/result", 1) is True


def test_keeps_neutral_nodes_inside_an_open_pair_unbalanced_and_free_nodes_balanced() -> None:
    """A message between a call and its result cannot be a cut; the same message outside a pair can."""
    mid_step = Session.create("neutral-mid-step")
    mid_step.append("assistant/message", {"turn": 1, "step": 1, "message": call_message("c1")}, SURFACE)
    mid_step.append("user/message", plugin_message("background update", plugin="test"), SURFACE)
    mid_step.append("tool/result", result_data("c1"), SURFACE)
    assert before(mid_step, "user/message") is False
    assert after(mid_step, "user/message") is False

    free = Session.create("neutral-free")
    free.append("user/message", user_message("idle injection"), SURFACE)
    assert before(free, "user/message") is True
    assert after(free, "user/message") is True


# --- tool-pairing surface identity -------------------------------------------------------------------


def test_rebuilds_after_replace_and_rejects_sequences_removed_from_current_membership() -> None:
    """After a replace the balance is rebuilt; a seq the replace removed is no longer a surface seq."""
    session = closed_tool_step()
    stale_tail = seq_of(session, "tool/result")
    assert balanced_after(session, stale_tail) is True

    nodes = list(session.surface.nodes)
    session.append(
        "user/message",
        plugin_message("checkpoint", plugin="compact"),
        {"surfaceOp": {"op": "replace", "start": nodes[0], "end": nodes[-1]}, "sourceEventSeqs": nodes},
    )

    checkpoint = session.surface.nodes[0]
    assert balanced_before(session, checkpoint) is True
    assert balanced_after(session, checkpoint) is True
    with pytest.raises(CompactionRangeError, match=rf"^tool-pairing balance: surface seq {stale_tail} not found$"):
        balanced_before(session, stale_tail)
    with pytest.raises(CompactionRangeError, match=r"surface seq .* not found"):
        balanced_after(session, stale_tail)


def test_answers_repeated_queries_from_cached_balances() -> None:
    """The same query twice gives the same answer (the second from the cache)."""
    session = closed_tool_step()
    assistant = seq_of(session, "assistant/message")
    assert balanced_after(session, assistant) is False
    assert balanced_after(session, assistant) is False


def test_rejects_missing_seqs_before_and_after_including_an_empty_surface() -> None:
    """A seq that is not on the surface is refused (also on an empty surface, whose cache then grows)."""
    session = Session.create("missing-membership")
    with pytest.raises(CompactionRangeError, match=r"^tool-pairing balance: surface seq 999 not found$"):
        balanced_before(session, 999)
    with pytest.raises(CompactionRangeError, match=r"surface seq 999 not found"):
        balanced_after(session, 999)

    session.append("user/message", user_message("first node after empty cache"), SURFACE)
    assert balanced_after(session, session.surface.nodes[0]) is True


# --- tool-pairing cache refresh ------------------------------------------------------------------------


class TrackedEvents(Sequence[Event]):
    """A log whose indexed reads are counted (the original's ``Proxy`` over the event array)."""

    def __init__(self, events: list[Event]) -> None:
        self.items = events
        self.index_reads = 0

    def __len__(self) -> int:
        return len(self.items)

    @overload
    def __getitem__(self, index: int) -> Event: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Event]: ...
    def __getitem__(self, index: int | slice) -> Event | Sequence[Event]:
        if isinstance(index, int):
            self.index_reads += 1
        return self.items[index]

    def __iter__(self) -> Iterator[Event]:
        raise AssertionError("the balance must index the events it needs, not scan the log")


class FakeSurface:
    def __init__(self, nodes: list[int], generation: int = 0) -> None:
        self.nodes = nodes
        self.replace_generation = generation


class FakeSession:
    """What the pairing helpers read of a session: ``events`` (accesses counted) and ``surface``."""

    def __init__(self, events: Sequence[Event], nodes: list[int], generation: int = 0) -> None:
        self._events = events
        self.surface = FakeSurface(nodes, generation)
        self.event_collection_reads = 0

    @property
    def events(self) -> Sequence[Event]:
        self.event_collection_reads += 1
        return self._events


def cache_refresh_log() -> list[Event]:
    """The original's eight events, committed by a real session (the last replaces 0..6)."""
    real = Session.create("cache-refresh", now=lambda: 0)
    real.append("user/message", user_message("user"), SURFACE)
    real.append("assistant/message", {"turn": 1, "step": 1, "message": call_message("c1")}, SURFACE)
    real.append("tool/result", result_data("c1"), SURFACE)
    real.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    real.append("user/message", user_message("tail"), SURFACE)
    real.append("assistant/message", {"turn": 2, "step": 1, "message": call_message("c2")}, SURFACE)
    real.append("tool/result", result_data("c2", 2), SURFACE)
    real.append(
        "user/message",
        user_message("replacement"),
        {"surfaceOp": {"op": "replace", "start": 0, "end": 6}, "sourceEventSeqs": [0, 1, 2, 4, 5, 6]},
    )
    return list(real.events)


def test_does_no_event_reads_for_unchanged_or_log_only_growth_folds_only_appended_nodes_and_rebuilds_on_replace() -> (
    None
):
    """The balance cache reads the log only for surface nodes it has not folded: none for repeated
    queries or log-only growth, one read per appended node, and a full rebuild after a replace."""
    log = cache_refresh_log()
    events = TrackedEvents(log[:3])
    nodes = [0, 1, 2]
    session = FakeSession(events, nodes)

    assert balanced_after(session, nodes[2]) is True
    assert (session.event_collection_reads, events.index_reads) == (1, 3)

    assert balanced_before(session, nodes[0]) is True
    assert balanced_after(session, nodes[1]) is False
    assert (session.event_collection_reads, events.index_reads) == (1, 3)

    events.items.append(log[3])  # turn/end: log-only
    assert balanced_after(session, nodes[2]) is True
    assert (session.event_collection_reads, events.index_reads) == (1, 3)

    events.items.append(log[4])
    nodes.append(4)
    assert balanced_after(session, nodes[3]) is True
    assert (session.event_collection_reads, events.index_reads) == (2, 4)

    events.items.extend(log[5:7])
    nodes.extend([5, 6])
    assert balanced_after(session, nodes[5]) is True
    assert (session.event_collection_reads, events.index_reads) == (3, 6)

    events.items.append(log[7])
    nodes[:] = [7]
    session.surface.replace_generation += 1
    assert balanced_after(session, nodes[0]) is True
    assert (session.event_collection_reads, events.index_reads) == (4, 7)


def test_rebuilds_defensively_when_a_same_generation_surface_entry_count_regresses() -> None:
    """A surface that shrank without a new generation is folded again rather than read out of range."""
    real = Session.create("regress")
    real.append("user/message", user_message([]), SURFACE)
    real.append("user/message", user_message([]), SURFACE)
    nodes = [0, 1]
    session = FakeSession(list(real.events), nodes)
    assert balanced_after(session, nodes[1]) is True
    nodes.pop()
    assert balanced_after(session, nodes[0]) is True
    with pytest.raises(CompactionRangeError, match="surface seq 1 not found"):
        balanced_after(session, 1)


# --- tool-pairing corrupt surfaces ---------------------------------------------------------------------


def test_throws_for_an_orphan_result_during_a_rebuild() -> None:
    """A result with no pending call on the surface is a corrupt surface, not a balance answer."""
    session = Session.create("orphan-rebuild")
    session.append("tool/result", result_data("orphan"), SURFACE)
    with pytest.raises(
        CompactionStateError,
        match=rf"^tool-pairing balance: tool/result at surface seq {session.surface.nodes[0]} has no matching "
        r"tool-call \(corrupt surface\)$",
    ):
        balanced_after(session, session.surface.nodes[0])


def test_retries_an_orphan_result_in_an_appended_tail_without_committing_partial_cache_state() -> None:
    """A corrupt appended tail leaves the cache as it was: asking again fails the same way."""
    session = Session.create("orphan-tail")
    session.append("user/message", user_message("safe head"), SURFACE)
    assert balanced_after(session, session.surface.nodes[0]) is True
    session.append("tool/result", result_data("orphan"), SURFACE)
    for _ in range(2):
        with pytest.raises(CompactionStateError, match="no matching tool-call"):
            balanced_after(session, session.surface.nodes[1])
    # every query folds the unseen tail first, so the corrupt tail is reported for any node
    with pytest.raises(CompactionStateError, match="no matching tool-call"):
        balanced_before(session, session.surface.nodes[0])


def test_throws_when_a_current_surface_seq_has_no_matching_event_or_indexes_the_wrong_event() -> None:
    """A surface seq beyond the log, or one whose log entry has another seq, is a corrupt surface."""
    first = Event({"type": "user/message", "seq": 0, "time": 0, "data": user_message([]), "surfaceOp": "append"})
    missing = FakeSession([first], [1])
    with pytest.raises(
        CompactionStateError,
        match=r"^tool-pairing balance: surface seq 1 has no matching session event \(corrupt surface\)$",
    ):
        balanced_before(missing, 1)

    wrong = Event({"type": "user/message", "seq": 99, "time": 0, "data": user_message([]), "surfaceOp": "append"})
    mismatched = FakeSession([wrong], [0])
    with pytest.raises(CompactionStateError, match=r"no matching session event"):
        balanced_before(mismatched, 0)


# --- the CompactionEngine seam (compaction.spec.ts) ------------------------------------------------------


def seam_agent(session: Session, engine: CompactionEngine | None, model: str = MODEL) -> Agent:
    options = AgentOptions(provider=model, model=model, context_window=1000)
    return Agent(session, ScriptedProvider([]), options, durable=False, compaction=engine)


def test_registers_as_ctx_compaction() -> None:
    """``Agent(compaction=engine)`` is where an engine registers: the agent holds it and its automatic
    hooks (pre-step pressure, request-error overflow, idle reset) are installed."""
    engine = CompactionEngine(summarizer=RecordingSummarizer())
    agent = seam_agent(Session.create("s"), engine)
    assert agent.compaction is engine
    assert len(agent.pre_step_hooks) == 1
    assert len(agent.request_error_hooks) == 1
    assert len(agent.idle_hooks) == 1


def test_disposing_the_fiber_unregisters_ctx_compaction_hmr_safety() -> None:
    """There is no plugin fiber here; the nearest fact: an agent built without an engine has no
    compaction and no hooks, and ``compact_now`` refuses with a typed error instead of doing anything."""
    session = Session.create("s")
    agent = seam_agent(session, None)
    assert agent.compaction is None
    assert (agent.pre_step_hooks, agent.request_error_hooks, agent.idle_hooks) == ([], [], [])
    with pytest.raises(InvalidAgentOptionError, match="this agent has no compaction engine"):
        run(agent.compact_now())
    assert len(session.events) == 0


def test_exposes_the_abstract_contract_methods() -> None:
    """``compact_if_needed`` and ``compact_now`` answer ``None`` for a session with nothing to compact,
    writing nothing; a summarizer is anything with ``async summarize(input)`` (the protocol)."""
    engine = CompactionEngine(summarizer=RecordingSummarizer())
    session = Session.create("s")
    agent = seam_agent(session, engine)
    assert run(engine.compact_if_needed(agent, "pressure")) is None
    assert run(engine.compact_if_needed(agent, "context-overflow")) is None
    assert run(agent.compact_now()) is None
    assert len(session.events) == 0
    assert isinstance(RecordingSummarizer(), Summarizer)
    assert not isinstance(object(), Summarizer)


def test_compaction_events_merge_into_session_event_map_and_are_log_only() -> None:
    """The four ``compaction/*`` types are known to the kernel and log-only (a surface marker is
    refused); a region compaction writes start, summary and end around one checkpoint whose source
    names its transaction."""
    engine = CompactionEngine(pruner=None, summarizer=RecordingSummarizer(), config={"auto": False})
    session = Session.create("s")
    session.append("turn/start", {"turn": 1})
    original = session.append("user/message", user_message("original " * 100), SURFACE)

    result = run(engine.compact_region(session, original.seq, original.seq, agent=make_agent(session)))

    start_event = next(event for event in session.events if event["type"] == "compaction/start")
    assert start_event.surface_op is None
    assert "surfaceOp" not in start_event
    assert [thaw(block) for block in result.summary] == [{"type": "text", "text": "small checkpoint"}]
    assert result.start_seq < result.summary_seq < result.end_seq
    assert result.shadowed_range.to_json() == {"start": original.seq, "end": original.seq}
    assert list(result.shadowed_seqs) == [original.seq]
    checkpoint = next(
        event
        for event in session.events
        if event["type"] == "user/message" and is_checkpoint_source(event["data"]["source"])
    )
    assert thaw(checkpoint["data"]["source"]) == checkpoint_source(result.compaction_id)
    assert checkpoint_source("c", "cmd") == {
        "kind": "plugin",
        "plugin": "compact",
        "compactionId": "c",
        "sourceCommandId": "cmd",
    }
    assert is_checkpoint_source({"kind": "plugin", "plugin": "other"}) is False
    assert is_checkpoint_source({"kind": "user"}) is False
    assert [e["type"] for e in session.events if e["type"].startswith("compaction/")] == [
        "compaction/start",
        "compaction/summary",
        "compaction/end",
    ]
    assert result.to_json() == {
        "compactionId": result.compaction_id,
        "startSeq": result.start_seq,
        "summarySeq": result.summary_seq,
        "summary": [{"type": "text", "text": "small checkpoint"}],
        "shadowedRange": {"start": original.seq, "end": original.seq},
        "shadowedSeqs": [original.seq],
        "shadowedTokenCount": result.shadowed_token_count,
        "endSeq": result.end_seq,
    }
    for etype in ("compaction/start", "compaction/summary", "compaction/end", "compaction/prune"):
        with pytest.raises(AgentlogError):
            session.append(etype, {"compactionId": "x", "turn": 1}, SURFACE)


def test_threads_the_cancellation_signal_through_to_the_backend() -> None:
    """The agent's cancellation signal reaches the summarizer from ``compact_region`` and from an
    overflow-triggered ``compact_if_needed``."""
    recorder = RecordingSummarizer()
    engine = CompactionEngine(pruner=None, summarizer=recorder, config={"auto": False})
    session = Session.create("s")
    session.append("turn/start", {"turn": 1})
    session.append("request/header", {"header": routed_header(), "reason": "initial"})
    first = session.append("user/message", user_message("original " * 100), SURFACE)
    session.append("user/message", user_message("more " * 100), SURFACE)
    agent = make_agent(session)
    signal = agent.abort_signal
    assert isinstance(signal, asyncio.Event)

    run(engine.compact_region(session, first.seq, first.seq, agent=agent))
    assert recorder.calls[-1].signal is signal

    session.append("user/message", user_message("newest " * 100), SURFACE)
    assert run(engine.compact_if_needed(agent, "context-overflow")) is not None
    assert recorder.calls[-1].signal is signal
    assert len(recorder.calls) == 2
