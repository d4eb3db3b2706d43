"""Relational invariant companion (spec §14; checklist §19.11, items 195–211)."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from agentlog import (
    TOOL_NOT_STARTED,
    InvariantError,
    Session,
    SessionInvariants,
    SessionStore,
    interrupted_turn_closers,
)
from agentlog.kernel.events import event_types
from agentlog.kernel.messages import (
    assistant_message,
    text_block,
    tool_call_block,
    tool_result_message,
    user_message,
)
from agentlog.kernel.surface import replace_op

# Plugin-owned types these tests log: appends of unregistered types are refused (issue 7, defect 2).
for _plugin_type in ("plugin/marker",):
    event_types.register(_plugin_type)

APPEND = {"surfaceOp": "append"}
PREFIX = 'invariant violated by "@deepseek-ai/dsh-session": '


@pytest.fixture
def store() -> Iterator[SessionStore]:
    store = SessionStore()
    invariants = SessionInvariants(store)
    invariants.install()
    yield store
    invariants.dispose()


def expect_violation(session: Session, text: str, action: Callable[[], Any]) -> None:
    """``action`` must be vetoed with the exact invariant text, committing nothing."""
    before = list(session.events)
    nodes = list(session.surface.nodes)
    with pytest.raises(InvariantError, match=re.escape(PREFIX + text)) as excinfo:
        action()
    err = excinfo.value
    assert err.code == "INVARIANT"
    assert err.package_name == "@deepseek-ai/dsh-session"
    assert str(err).startswith(PREFIX + text)
    assert list(session.events) == before
    assert list(session.surface.nodes) == nodes


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if (record.name == "agentlog" or record.name.startswith("agentlog.")) and record.levelno == logging.WARNING
    ]


def assistant_data(turn: int, step: int, blocks: Any) -> dict[str, Any]:
    return {"turn": turn, "step": step, "message": assistant_message(blocks, provider="mock", model="mock")}


def tool_call_data(turn: int, step: int, call_id: str) -> dict[str, Any]:
    return {"turn": turn, "step": step, "callId": call_id, "name": "echo", "arguments": "{}"}


def result_data(turn: int, step: int, call_id: str, content: Any = (), *, is_error: bool = False) -> dict[str, Any]:
    return {
        "turn": turn,
        "step": step,
        "message": tool_result_message(call_id, list(content), is_error=is_error),
    }


def completed(turn: int) -> dict[str, Any]:
    return {"turn": turn, "reason": {"kind": "completed"}}


def header_data() -> dict[str, Any]:
    return {"header": {"config": {"provider": "mock", "model": "m"}}, "reason": "initial"}


# spec 19.11 #195 (host-model: registration is global — sessions of any scope are checked)
def test_invariant__registration_is_global_for_sessions_created_through_a_scope() -> None:
    store = SessionStore()
    scope = store.scope()
    invariants = SessionInvariants(store)
    invariants.install()
    try:
        session = scope.create("global-under-scoped-invariants")
        session.append("turn/start", {"turn": 1})
        session.append("turn/end", completed(1))
        expect_violation(
            session, "turn/start expected turn 2, got 3", lambda: session.append("turn/start", {"turn": 3})
        )
        scope.dispose()
        other = store.create("after-scope-disposed")
        other.append("turn/start", {"turn": 1})
        expect_violation(
            other, "turn/start 2 while turn 1 is still open", lambda: other.append("turn/start", {"turn": 2})
        )
    finally:
        invariants.dispose()


# spec 19.11 #196
def test_invariant__accepts_well_formed_turn_step_and_tool_sequence(store: SessionStore) -> None:
    session = store.create()
    session.append("turn/start", {"turn": 1})
    session.append("user/message", user_message("hi"), APPEND)
    session.append("step/start", {"turn": 1, "step": 1})
    session.append("request/header", header_data())
    session.append("assistant/chunk", {"turn": 1, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": "h"}})
    session.append("assistant/message", assistant_data(1, 1, [tool_call_block("c1", "echo", "{}")]), APPEND)
    session.append("tool/call", tool_call_data(1, 1, "c1"))
    session.append("tool/result", result_data(1, 1, "c1"), APPEND)
    session.append("step/end", {"turn": 1, "step": 1})
    session.append("step/start", {"turn": 1, "step": 2})
    session.append("assistant/message", assistant_data(1, 2, [text_block("done")]), APPEND)
    session.append("step/end", {"turn": 1, "step": 2})
    session.append("turn/end", completed(1))
    session.append("turn/start", {"turn": 2})
    session.append("step/start", {"turn": 2, "step": 1})
    session.append("step/end", {"turn": 2, "step": 1})
    session.append("turn/end", completed(2))
    assert len(session.events) == 17


# spec 19.11 #197
def test_invariant__later_veto_does_not_advance_committed_trace(store: SessionStore) -> None:
    session = store.create("dispatch-veto-rollback")
    veto = {"next": True}

    def later(s: Session, candidate: Any) -> None:
        if veto["next"]:
            veto["next"] = False
            raise RuntimeError("later dispatch veto")

    store.before_event(later)
    with pytest.raises(RuntimeError, match="later dispatch veto"):
        session.append("turn/start", {"turn": 1})
    assert session.events == []

    session.append("turn/start", {"turn": 1})
    session.append("turn/end", completed(1))
    assert [e.type for e in session.events] == ["turn/start", "turn/end"]


# spec 19.11 #198
def test_invariant__applies_committed_transition_after_another_observer_throws(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="agentlog")
    store = SessionStore()

    def hostile(s: Session, e: Any) -> None:
        raise RuntimeError("hostile observer")

    store.on_event(hostile)  # registered before the companion: runs before its post-commit listener
    invariants = SessionInvariants(store)
    invariants.install()
    try:
        session = store.create("postcommit-peer")
        session.append("turn/start", {"turn": 1})
        session.append("turn/end", completed(1))
        assert [e.type for e in session.events] == ["turn/start", "turn/end"]
        # The transitions were applied: turn 2 is next.
        expect_violation(
            session, "turn/start expected turn 2, got 1", lambda: session.append("turn/start", {"turn": 1})
        )
    finally:
        invariants.dispose()
    assert _warnings(caplog) == [
        'session "postcommit-peer": session/event listener threw: RuntimeError: hostile observer',
        'session "postcommit-peer": session/event listener threw: RuntimeError: hostile observer',
    ]


# spec 19.11 #199 — a committed log's seqs are contiguous by construction and the Python store has no raw
# `session/event` emit (the original forges one), so the rule is exercised through the companion's pure
# transition function `agentlog.invariants.advance` (module-level; not re-exported by `agentlog`).
def test_invariant__rejects_non_monotonic_event_sequence_numbers() -> None:
    from agentlog.kernel.invariants import Trace, advance

    trace = advance(Trace(), {"type": "turn/start", "seq": 0, "time": 1, "data": {"turn": 1}})
    with pytest.raises(InvariantError, match=re.escape(PREFIX + "seq must strictly increase: saw 0 after 0")) as exc:
        advance(trace, {"type": "turn/end", "seq": 0, "time": 2, "data": completed(1)})
    assert exc.value.code == "INVARIANT"
    with pytest.raises(InvariantError, match=re.escape(PREFIX + "seq must strictly increase: saw -1 after 0")):
        advance(trace, {"type": "plugin/marker", "seq": -1, "time": 2, "data": {}})
    # The next seq is accepted.
    advance(trace, {"type": "turn/end", "seq": 1, "time": 2, "data": completed(1)})


# spec 19.11 #200
def test_invariant__enforces_turn_numbering_and_core_execution_enclosure(store: SessionStore) -> None:
    opened = store.create()
    opened.append("turn/start", {"turn": 1})
    expect_violation(
        opened, "turn/start 2 while turn 1 is still open", lambda: opened.append("turn/start", {"turn": 2})
    )
    expect_violation(opened, "turn/end 2 does not match open turn 1", lambda: opened.append("turn/end", completed(2)))
    # Core execution state inside a turn is fine, with or without an open step.
    opened.append("todo/write", {"todos": [{"content": "a", "status": "pending"}]})
    opened.append("request/header", header_data())
    opened.append("request/context", {"provider": "mock", "model": "m", "contextWindow": 128_000})

    second = store.create()
    second.append("turn/start", {"turn": 1})
    second.append("turn/end", completed(1))
    expect_violation(second, "turn/start expected turn 2, got 3", lambda: second.append("turn/start", {"turn": 3}))
    expect_violation(
        second, "turn/end 2 does not match open turn null", lambda: second.append("turn/end", completed(2))
    )

    outside = store.create()
    outside.append("user/message", user_message("idle context", source={"kind": "plugin", "plugin": "test"}), APPEND)
    expect_violation(
        outside,
        "request/context appended outside any open turn (core execution events must be turn-enclosed)",
        lambda: outside.append("request/context", {"provider": "mock", "model": "m", "contextWindow": 128_000}),
    )
    expect_violation(
        outside,
        "todo/write appended outside any open turn (core execution events must be turn-enclosed)",
        lambda: outside.append("todo/write", {"todos": []}),
    )
    expect_violation(
        outside,
        "request/header appended outside any open turn (core execution events must be turn-enclosed)",
        lambda: outside.append("request/header", header_data()),
    )
    outside.append("plugin/marker", {})
    outside.append("turn/start", {"turn": 1})
    assert [e.type for e in outside.events] == ["user/message", "plugin/marker", "turn/start"]


# spec 19.11 #201
def test_invariant__enforces_open_step_identity_and_numbering(store: SessionStore) -> None:
    wrong_turn = store.create()
    wrong_turn.append("turn/start", {"turn": 1})
    expect_violation(
        wrong_turn,
        "step/start in turn 2 but open turn is 1",
        lambda: wrong_turn.append("step/start", {"turn": 2, "step": 1}),
    )

    nested = store.create()
    nested.append("turn/start", {"turn": 1})
    nested.append("step/start", {"turn": 1, "step": 1})
    expect_violation(
        nested,
        "step/start 2 while step 1 is still open",
        lambda: nested.append("step/start", {"turn": 1, "step": 2}),
    )
    expect_violation(nested, "turn/end 1 while step 1 is still open", lambda: nested.append("turn/end", completed(1)))
    expect_violation(
        nested,
        "step/end names turn 1/step 2 but open is turn 1/step 1",
        lambda: nested.append("step/end", {"turn": 1, "step": 2}),
    )
    expect_violation(
        nested,
        "assistant/message names turn 1/step 2 but open is turn 1/step 1",
        lambda: nested.append("assistant/message", assistant_data(1, 2, []), APPEND),
    )

    skipped = store.create()
    skipped.append("turn/start", {"turn": 1})
    skipped.append("step/start", {"turn": 1, "step": 1})
    skipped.append("step/end", {"turn": 1, "step": 1})
    expect_violation(
        skipped,
        "step/start expected step 2 in turn 1, got 3",
        lambda: skipped.append("step/start", {"turn": 1, "step": 3}),
    )
    # Step numbering restarts at 1 in the next turn.
    skipped.append("turn/end", completed(1))
    skipped.append("turn/start", {"turn": 2})
    skipped.append("step/start", {"turn": 2, "step": 1})


# spec 19.11 #202
def test_invariant__step_scoped_stream_and_tool_events_name_the_open_step(store: SessionStore) -> None:
    chunk = store.create()
    chunk.append("turn/start", {"turn": 1})
    expect_violation(
        chunk,
        "assistant/chunk names turn 1/step 1 but open is turn 1/step null",
        lambda: chunk.append(
            "assistant/chunk",
            {"turn": 1, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": "x"}},
        ),
    )

    tool = store.create()
    tool.append("turn/start", {"turn": 1})
    tool.append("step/start", {"turn": 1, "step": 1})
    expect_violation(
        tool,
        "tool/result for ghost with no prior tool/call in this step",
        lambda: tool.append("tool/result", result_data(1, 1, "ghost"), APPEND),
    )
    expect_violation(
        tool,
        "tool/call names turn 1/step 2 but open is turn 1/step 1",
        lambda: tool.append("tool/call", tool_call_data(1, 2, "c1")),
    )


# spec 19.11 #203
def test_invariant__fresh_tool_result_appends_are_open_step_checked(store: SessionStore) -> None:
    session = store.create()
    session.append("turn/start", {"turn": 1})
    expect_violation(
        session,
        "tool/result names turn 1/step 1 but open is turn 1/step null",
        lambda: session.append("tool/result", result_data(1, 1, "closed"), APPEND),
    )


def _turn_with_result(session: Session) -> Any:
    session.append("turn/start", {"turn": 1})
    session.append("step/start", {"turn": 1, "step": 1})
    session.append("tool/call", tool_call_data(1, 1, "rewrite"))
    original = session.append("tool/result", result_data(1, 1, "rewrite", [text_block("original")]), APPEND)
    session.append("step/end", {"turn": 1, "step": 1})
    session.append("turn/end", completed(1))
    return original


def _pruned(original: Any) -> dict[str, Any]:
    return {
        "turn": 1,
        "step": 1,
        "message": tool_result_message(
            "rewrite", [text_block("pruned")], is_error=False, id=original.data["message"]["id"]
        ),
    }


# spec 19.11 #204
def test_invariant__validated_tool_result_replacement_is_a_turn_enclosed_rewrite(store: SessionStore) -> None:
    session = store.create()
    original = _turn_with_result(session)
    session.append("turn/start", {"turn": 2})
    rewrite = session.append(
        "tool/result",
        _pruned(original),
        {"surfaceOp": replace_op(original.seq, original.seq), "sourceEventSeqs": [original.seq]},
    )
    assert session.events[-1] is rewrite
    assert session.surface.nodes == [rewrite.seq]
    assert session.surface.replace_generation == 1


# spec 19.11 #205
def test_invariant__rejects_tool_result_replacement_outside_a_turn(store: SessionStore) -> None:
    session = store.create()
    original = _turn_with_result(session)
    expect_violation(
        session,
        "tool/result surface replacement appended outside any open turn",
        lambda: session.append(
            "tool/result",
            _pruned(original),
            {"surfaceOp": replace_op(original.seq, original.seq), "sourceEventSeqs": [original.seq]},
        ),
    )


# spec 19.11 #206
def test_invariant__allows_not_started_repair_results_and_unresolved_calls_at_step_end(
    store: SessionStore,
) -> None:
    repaired = store.create()
    repaired.append("turn/start", {"turn": 1})
    repaired.append("step/start", {"turn": 1, "step": 1})
    data = result_data(1, 1, "crashed", is_error=True)
    data["error"] = {"name": "ToolNotStartedError", "code": TOOL_NOT_STARTED}
    repaired.append("tool/result", data, APPEND)
    repaired.append("step/end", {"turn": 1, "step": 1})
    repaired.append("turn/end", {"turn": 1, "reason": {"kind": "interrupted"}})

    # An unresolved call is allowed at step end, but (issue 7, defect 1) not at turn end: see
    # test_invariant_flags_an_unanswered_call_at_turn_end.
    unresolved = store.create()
    unresolved.append("turn/start", {"turn": 1})
    unresolved.append("step/start", {"turn": 1, "step": 1})
    unresolved.append("tool/call", tool_call_data(1, 1, "c1"))
    unresolved.append("step/end", {"turn": 1, "step": 1})

    # A not-started result needs both markers: without TOOL_NOT_STARTED it is an unpaired result.
    strict = store.create()
    strict.append("turn/start", {"turn": 1})
    strict.append("step/start", {"turn": 1, "step": 1})
    expect_violation(
        strict,
        "tool/result for crashed with no prior tool/call in this step",
        lambda: strict.append("tool/result", result_data(1, 1, "crashed", is_error=True), APPEND),
    )

    # A crashed log closed by repair replays cleanly through the companion (seeded create).
    crashed = [
        {"type": "turn/start", "seq": 0, "time": 1, "data": {"turn": 1}},
        {"type": "step/start", "seq": 1, "time": 2, "data": {"turn": 1, "step": 1}},
        {
            "type": "assistant/message",
            "seq": 2,
            "time": 3,
            "data": assistant_data(1, 1, [tool_call_block("a", "echo", "{}"), tool_call_block("b", "echo", "{}")]),
            "surfaceOp": "append",
        },
        {"type": "tool/call", "seq": 3, "time": 4, "data": tool_call_data(1, 1, "a")},
    ]
    closers = interrupted_turn_closers(crashed)
    restored = store.create("repaired-seed", seed=[*crashed, *closers])
    restored.append("turn/start", {"turn": 2})
    assert store.get("repaired-seed") is restored


# spec 19.11 #207
def test_invariant__result_in_later_step_does_not_satisfy_earlier_call(store: SessionStore) -> None:
    session = store.create()
    session.append("turn/start", {"turn": 1})
    session.append("step/start", {"turn": 1, "step": 1})
    session.append("tool/call", tool_call_data(1, 1, "c1"))
    session.append("step/end", {"turn": 1, "step": 1})
    session.append("step/start", {"turn": 1, "step": 2})
    expect_violation(
        session,
        "tool/result for c1 with no prior tool/call in this step",
        lambda: session.append("tool/result", result_data(1, 2, "c1"), APPEND),
    )


# spec 19.11 #208
def test_invariant__replays_seeded_sessions_and_tracks_each_independently(store: SessionStore) -> None:
    bad_seed = [
        {"type": "turn/start", "seq": 0, "time": 0, "data": {"turn": 1}},
        {"type": "turn/start", "seq": 1, "time": 0, "data": {"turn": 2}},
    ]
    with pytest.raises(InvariantError, match=re.escape(PREFIX + "turn/start 2 while turn 1 is still open")) as exc:
        store.create(None, seed=bad_seed)
    assert exc.value.code == "INVARIANT"
    assert store.list() == []  # the create rolled back

    a = store.create("a")
    b = store.create("b")
    a.append("turn/start", {"turn": 1})
    b.append("turn/start", {"turn": 1})
    a.append("turn/end", completed(1))
    expect_violation(b, "turn/start 2 while turn 1 is still open", lambda: b.append("turn/start", {"turn": 2}))
    a.append("turn/start", {"turn": 2})


# spec 19.11 #209
def test_invariant__rebuilds_trace_state_for_live_sessions_when_companion_reloads() -> None:
    store = SessionStore()
    first = SessionInvariants(store)
    first.install()
    session = store.create()
    session.append("turn/start", {"turn": 1})
    session.append("step/start", {"turn": 1, "step": 1})
    first.dispose()

    second = SessionInvariants(store)
    second.install()
    try:
        session.append(
            "assistant/chunk",
            {"turn": 1, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": "h"}},
        )
        expect_violation(
            session,
            "turn/start 2 while turn 1 is still open",
            lambda: session.append("turn/start", {"turn": 2}),
        )
    finally:
        second.dispose()


# spec 19.11 #210
def test_invariant__accepts_end_seed_whether_or_not_a_turn_is_open(store: SessionStore) -> None:
    balanced = store.create(
        "inherited-between-turns",
        seed=[
            {"type": "turn/start", "seq": 0, "time": 1, "data": {"turn": 1}},
            {"type": "turn/end", "seq": 1, "time": 2, "data": completed(1)},
        ],
    )
    assert [e.type for e in balanced.events] == ["turn/start", "turn/end", "session/end-seed"]
    balanced.append("turn/start", {"turn": 2})

    opened = store.create(
        "inherited-inside-open-turn",
        seed=[{"type": "turn/start", "seq": 0, "time": 1, "data": {"turn": 1}}],
    )
    assert [e.type for e in opened.events] == ["turn/start", "session/end-seed"]
    expect_violation(
        opened, "turn/start 2 while turn 1 is still open", lambda: opened.append("turn/start", {"turn": 2})
    )
    opened.append("turn/end", completed(1))


# spec 19.11 #211
def test_invariant__dispose_removes_all_listeners() -> None:
    store = SessionStore()
    invariants = SessionInvariants(store)
    invariants.install()
    session = store.create()
    session.append("turn/start", {"turn": 1})
    invariants.dispose()

    session.append("turn/start", {"turn": 2})  # no longer checked
    fresh = store.create(seed=[{"type": "turn/start", "seq": 0, "time": 0, "data": {"turn": 5}}])
    fresh.append("request/context", {"provider": "mock", "model": "m"})
    assert [e.type for e in session.events] == ["turn/start", "turn/start"]


# issue 7, defect 1: a closed turn with an unanswered call poisons every later request
def test_invariant_flags_an_unanswered_call_at_turn_end(store: SessionStore) -> None:
    error_end = {"turn": 1, "reason": {"kind": "error", "error": {"message": "boom", "code": "UNKNOWN"}}}
    started = store.create()
    started.append("turn/start", {"turn": 1})
    started.append("step/start", {"turn": 1, "step": 1})
    started.append("tool/call", tool_call_data(1, 1, "c1"))
    started.append("step/end", {"turn": 1, "step": 1})
    expect_violation(
        started, "turn/end 1 while tool call c1 has no tool/result", lambda: started.append("turn/end", error_end)
    )

    # A tool-call block the loop never started is unanswered too (the endpoint needs its result).
    requested = store.create()
    requested.append("turn/start", {"turn": 1})
    requested.append("step/start", {"turn": 1, "step": 1})
    requested.append(
        "assistant/message",
        assistant_data(1, 1, [tool_call_block("a", "echo", "{}"), tool_call_block("b", "echo", "{}")]),
        APPEND,
    )
    requested.append("tool/call", tool_call_data(1, 1, "a"))
    requested.append("tool/result", result_data(1, 1, "a", [text_block("ok")]), APPEND)
    requested.append("step/end", {"turn": 1, "step": 1})
    expect_violation(
        requested,
        "turn/end 1 while tool call b has no tool/result",
        lambda: requested.append("turn/end", {"turn": 1, "reason": {"kind": "aborted", "reason": {"kind": "user"}}}),
    )

    # Answered calls close cleanly, and the next turn starts with nothing outstanding.
    answered = store.create()
    answered.append("turn/start", {"turn": 1})
    answered.append("step/start", {"turn": 1, "step": 1})
    answered.append("assistant/message", assistant_data(1, 1, [tool_call_block("a", "echo", "{}")]), APPEND)
    answered.append("tool/call", tool_call_data(1, 1, "a"))
    answered.append("tool/result", result_data(1, 1, "a", [text_block("ok")]), APPEND)
    answered.append("step/end", {"turn": 1, "step": 1})
    answered.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    answered.append("turn/start", {"turn": 2})

    # A seeded log written by an older build with such a turn is refused at create (nothing is kept).
    with pytest.raises(InvariantError, match="has no tool/result"):
        store.create(
            "poisoned",
            seed=[{**e, "data": e["data"]} for e in started.events]
            + [{"type": "turn/end", "seq": len(started.events), "time": 9, "data": error_end}],
        )
    assert store.get("poisoned") is None


def test_tool_pairing_problems_of_derived_messages() -> None:
    from agentlog.errors import ToolPairingError
    from agentlog.kernel.invariants import check_tool_pairing, tool_pairing_problems

    call = assistant_message(
        [tool_call_block("a", "echo", "{}"), tool_call_block("b", "echo", "{}")], provider="m", model="m"
    )
    paired = [
        user_message("go"),
        call,
        tool_result_message("a", "1"),
        tool_result_message("b", "2"),
        user_message("next"),
    ]
    assert tool_pairing_problems(paired) == []
    check_tool_pairing(paired)

    missing = [user_message("go"), call, tool_result_message("a", "1"), user_message("next")]
    assert [(p.kind, p.call_id, p.index) for p in tool_pairing_problems(missing)] == [("call-without-result", "b", 1)]
    orphan = [user_message("go"), tool_result_message("zz", "x")]
    assert [(p.kind, p.call_id) for p in tool_pairing_problems(orphan)] == [("result-without-call", "zz")]
    # A result after the next assistant message does not count for the earlier call.
    late = [
        call,
        tool_result_message("a", "1"),
        assistant_message([text_block("hm")], provider="m", model="m"),
        tool_result_message("b", "2"),
    ]
    assert [(p.kind, p.call_id) for p in tool_pairing_problems(late)] == [
        ("call-without-result", "b"),
        ("result-without-call", "b"),
    ]
    with pytest.raises(ToolPairingError) as excinfo:
        check_tool_pairing(missing, "s1")
    assert excinfo.value.code == "UNPAIRED_TOOL_CALL"
    assert 'session "s1"' in str(excinfo.value) and "tool call b" in str(excinfo.value)
