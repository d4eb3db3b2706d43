"""`Session.at(seq)`: a read-only view of the session as it was right after event ``seq``.

Beyond-the-original feature (``docs/kernel-api.md``): the view's surface, derived messages, request
header/context and events equal those of ``Session.create(id, events[:seq + 1])`` — a from-scratch
replay of the prefix (whose extra trailing end-seed marker is log-only and changes none of them).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from agentlog import AgentlogError, FrozenError, Session, thaw
from agentlog.testing.builders import (
    APPEND,
    assistant_msg_data,
    intent,
    replace,
    text_block,
    tool_result_msg_data,
    user_msg,
)


def now() -> int:
    return 1000


def _rewrite_tool_result(session: Session, seq: int, text: str) -> Any:
    data = thaw(session.events[seq].data)
    data["message"]["content"][0]["content"] = [text_block(text)]
    return data


#: One step per event; applied in order they produce the 20-event reference log described below.
_STEPS: list[Callable[[Session], Any]] = [
    # 0
    lambda s: s.append("request/context", {"provider": "mock", "model": "m1", "contextWindow": 1000}),
    lambda s: s.append("turn/start", {"turn": 1}),
    lambda s: s.append("step/start", {"turn": 1, "step": 1}),
    lambda s: s.append(
        "request/header",
        {
            "header": {"config": {"provider": "mock", "model": "m1"}, "system": "sys", "tools": []},
            "reason": "initial",
        },
    ),
    lambda s: s.append("user/message", user_msg("question"), intent(APPEND)),
    # 5
    lambda s: s.append(
        "assistant/chunk", {"turn": 1, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": "let"}}
    ),
    lambda s: s.append(
        "assistant/message",
        assistant_msg_data(
            [text_block("let me check"), {"type": "tool-call", "id": "c1", "name": "echo", "arguments": "{}"}]
        ),
        intent(APPEND, [5]),
    ),
    lambda s: s.append("tool/call", {"turn": 1, "step": 1, "callId": "c1", "name": "echo", "arguments": "{}"}),
    lambda s: s.append("tool/result", tool_result_msg_data("c1", "long tool output"), intent(APPEND, [7])),
    lambda s: s.append("step/end", {"turn": 1, "step": 1}),
    # 10
    lambda s: s.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}}),
    lambda s: s.append("turn/start", {"turn": 2}),
    lambda s: s.append("request/context", {"provider": "mock", "model": "m2"}),
    lambda s: s.append("user/message", user_msg("follow-up"), intent(APPEND)),
    lambda s: s.append(
        "assistant/message",
        assistant_msg_data([], turn=2, usage={"inputTokens": 1, "outputTokens": 0}),
        intent(APPEND),
    ),
    # 15: content-only rewrite of the tool result at seq 8
    lambda s: s.append("tool/result", _rewrite_tool_result(s, 8, "pruned"), intent(replace(8, 8), [8])),
    lambda s: s.append(
        "request/header", {"header": {"config": {"provider": "mock", "model": "m2"}}, "reason": "change"}
    ),
    # 17: summary replacing surface nodes 4..13 (= [4, 6, 15, 13])
    lambda s: s.append("user/message", user_msg("summary"), intent(replace(4, 13), [4, 6, 13, 15])),
    lambda s: s.append("turn/end", {"turn": 2, "reason": {"kind": "completed"}}),
    lambda s: s.append("todo/write", {"todos": [{"content": "done", "status": "completed"}]}),
]


def build(steps: int = len(_STEPS), session: Session | None = None, start: int = 0) -> Session:
    session = session if session is not None else Session.create("live", now=now)
    for step in _STEPS[start:steps]:
        step(session)
    return session


def scratch(events: Any, seq: int) -> Session:
    return Session.create("x", list(events)[: seq + 1], now=now)


def assert_view_matches(view: Any, events: Any, seq: int) -> None:
    reference = scratch(events, seq)
    assert list(view.events) == list(events)[: seq + 1]
    assert len(view.events) == seq + 1
    assert list(view.surface.nodes) == list(reference.surface.nodes)
    assert view.surface.replace_generation == reference.surface.replace_generation
    assert view.derive_messages() == reference.derive_messages()
    assert view.request_header() == reference.request_header()
    assert view.request_context() == reference.request_context()


def test_session_at__reference_log_has_the_expected_shape() -> None:
    # guards the fixture the other tests rely on (replacements at 15 and 17)
    session = build()
    assert session.seq == 20
    assert list(session.surface.nodes) == [17, 14]
    assert session.surface.replace_generation == 2


def test_session_at__every_view_equals_a_from_scratch_replay_of_its_prefix() -> None:
    session = build()
    events = session.events
    for seq in range(len(events)):
        assert_view_matches(session.at(seq), events, seq)


def test_session_at__view_values_at_known_points() -> None:
    session = build()
    assert session.at(0).request_header() is None
    assert session.at(0).request_context() == {"provider": "mock", "model": "m1", "contextWindow": 1000}
    assert list(session.at(0).surface.nodes) == []
    assert session.at(0).derive_messages() == []

    assert list(session.at(14).surface.nodes) == [4, 6, 8, 13, 14]
    assert session.at(14).surface.replace_generation == 0
    assert session.at(14).request_context() == {"provider": "mock", "model": "m2"}
    assert session.at(14).request_header() == {"config": {"provider": "mock", "model": "m1"}, "system": "sys"}
    assert [m["content"] for m in session.at(14).derive_messages()][2] == [
        {"type": "tool-result", "toolCallId": "c1", "content": [text_block("long tool output")]}
    ]

    assert list(session.at(15).surface.nodes) == [4, 6, 15, 13, 14]
    assert session.at(15).surface.replace_generation == 1
    assert list(session.at(17).surface.nodes) == [17, 14]
    assert session.at(17).surface.replace_generation == 2
    assert session.at(17).request_header() == {"config": {"provider": "mock", "model": "m2"}}
    assert [m["content"] for m in session.at(17).derive_messages()] == [[text_block("summary")]]


def test_session_at__view_of_the_last_event_equals_the_session_itself() -> None:
    session = build()
    view = session.at(session.seq - 1)
    assert list(view.events) == list(session.events)
    assert list(view.surface.nodes) == list(session.surface.nodes)
    assert view.surface.replace_generation == session.surface.replace_generation
    assert view.derive_messages() == session.derive_messages()
    assert view.request_header() == session.request_header()
    assert view.request_context() == session.request_context()


def test_session_at__queried_views_taken_before_a_later_replace_stay_correct() -> None:
    session = build(15)  # up to the empty assistant message, before any replacement
    early = [session.at(seq) for seq in range(15)]
    recorded = [
        (list(v.surface.nodes), v.surface.replace_generation, v.derive_messages(), v.request_header()) for v in early
    ]
    events_before = list(session.events)

    build(session=session, start=15)
    assert session.surface.replace_generation == 2

    for seq, view in enumerate(early):
        nodes, generation, messages, request_header = recorded[seq]
        assert list(view.surface.nodes) == nodes
        assert view.surface.replace_generation == generation
        assert view.derive_messages() == messages
        assert view.request_header() == request_header
        assert list(view.events) == events_before[: seq + 1]
        assert_view_matches(view, session.events, seq)


def test_session_at__unqueried_views_taken_before_a_later_replace_stay_correct() -> None:
    session = build(15)
    early = {seq: session.at(seq) for seq in (4, 8, 13, 14)}
    build(session=session, start=15)
    for seq, view in early.items():
        assert_view_matches(view, session.events, seq)
    assert list(early[14].surface.nodes) == [4, 6, 8, 13, 14]


def test_session_at__taking_and_reading_views_does_not_disturb_the_session() -> None:
    session = build(14)
    for seq in range(14):
        view = session.at(seq)
        view.derive_messages()
        view.request_header()
        view.request_context()
        list(view.surface.nodes)
    build(session=session, start=14)
    reference = scratch(session.events, session.seq - 1)
    assert session.derive_messages() == reference.derive_messages()
    assert list(session.surface.nodes) == list(reference.surface.nodes)
    assert session.surface.replace_generation == reference.surface.replace_generation
    assert session.request_header() == reference.request_header()
    assert session.request_context() == reference.request_context()
    assert session.seq == 20


def test_session_at__works_on_a_seeded_session() -> None:
    original = build()
    seeded = Session.create("seeded", list(original.events), now=now)
    assert seeded.seq == 21
    for seq in range(seeded.seq):
        assert_view_matches(seeded.at(seq), seeded.events, seq)
    assert list(seeded.at(20).events)[-1].type == "session/end-seed"


def test_session_at__out_of_range_seq_raises_an_agentlog_error() -> None:
    session = build(5)
    for bad in (-1, -5, 5, 6, 10**6):
        with pytest.raises(AgentlogError):
            session.at(bad)
    empty = Session.create("empty", now=now)
    with pytest.raises(AgentlogError):
        empty.at(0)


def test_session_at__a_seq_that_is_not_an_int_is_a_type_error_that_says_so() -> None:
    """``at("3")`` is not a seq past the end: the refusal names the type and how to pass it."""
    from agentlog import ArgumentTypeError

    session = build(5)
    for bad, shown in (("3", "'3' (str)"), (3.0, "3.0 (float)"), (True, "True (bool)"), (None, "None (NoneType)")):
        with pytest.raises(ArgumentTypeError) as caught:
            session.at(bad)  # type: ignore[arg-type]
        assert isinstance(caught.value, TypeError) and caught.value.code == "INVALID_ARGUMENT_TYPE"
        assert str(caught.value) == f"seq must be an int, got {shown}: pass the event's seq as an int (event.seq)"
        with pytest.raises(ArgumentTypeError):
            session.at(4).at(bad)  # type: ignore[arg-type]


def test_session_at__mutation_attempts_on_a_view_raise() -> None:
    session = build()
    view = session.at(14)
    event = view.events[0]
    with pytest.raises(FrozenError):
        view.events.append(event)
    with pytest.raises(FrozenError):
        view.events[0] = event
    with pytest.raises(FrozenError):
        view.events[0].data["model"] = "hacked"
    with pytest.raises((TypeError, AttributeError)):
        view.surface.nodes.append(99)
    with pytest.raises(TypeError):
        view.surface.nodes[0] = 99
    messages = view.derive_messages()
    with pytest.raises(FrozenError):
        messages[0]["content"].append(text_block("injected"))
    with pytest.raises(FrozenError):
        messages[0]["role"] = "assistant"
    request_header = view.request_header()
    assert request_header is not None
    with pytest.raises(FrozenError):
        request_header["system"] = "hacked"
    request_context = view.request_context()
    assert request_context is not None
    with pytest.raises(FrozenError):
        request_context["model"] = "hacked"
    with pytest.raises((AttributeError, TypeError)):
        view.events = []
    assert not callable(getattr(view, "append", None))

    # nothing leaked into the view or the session
    assert_view_matches(view, session.events, 14)
    assert session.seq == 20
    assert list(session.surface.nodes) == [17, 14]
