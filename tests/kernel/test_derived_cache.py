"""Derived-message cache: incremental projection, rebuild on replace, snapshots, per-event projection.

Conformance checklist ``shared/spec/core-session.md`` §19.5 (items 135–140); behaviour from §9.
Where the spec returns a "fresh list" per ``deriveMessages()`` call, agentlog returns an immutable
snapshot sequence (``MessageList``): tests pin that an earlier snapshot never changes, that message
objects are shared between calls and frozen, and that ``list(snapshot)`` is an ordinary list.

The hypothesis property at the end checks after every step of random valid operation sequences that
the incremental derivation equals a seeded replay, an independent model, and ``fold_surface``; and that
rejected appends leave everything exactly as before.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentlog import FrozenError, Session, SurfaceError, derive_event_message, fold_surface
from agentlog.kernel.events import event_types
from agentlog.testing.builders import (
    APPEND,
    assistant_msg_data,
    intent,
    replace,
    text_block,
    tool_result_msg_data,
    user_msg,
)

# Plugin-owned types these tests log: appends of unregistered types are refused (issue 7, defect 2).
for _plugin_type in ("test/log-only",):
    event_types.register(_plugin_type)


def scratch(session: Session) -> list[Any]:
    """From-scratch oracle: replay the log into a fresh session and derive."""
    return list(Session.create(f"{session.id}-scratch-{session.seq}", list(session.events)).derive_messages())


def user_text(session: Session, text: str) -> Any:
    return session.append("user/message", user_msg(text), intent(APPEND))


def texts(messages: Any) -> list[str]:
    return [
        m["content"][0]["text"] if m["content"][0]["type"] == "text" else m["content"][0]["type"]
        for m in messages
    ]


# ---------------------------------------------------------------------------------------------------
# derived-message cache


def test_derived_cache__stays_equal_to_scratch_replay_as_log_grows() -> None:
    # spec 19.5 #135
    s = Session.create("cache-grow")
    s.append("turn/start", {"turn": 1})
    user_text(s, "one")
    assert list(s.derive_messages()) == scratch(s)
    assert texts(s.derive_messages()) == ["one"]
    user_text(s, "two")
    s.append("assistant/message", assistant_msg_data("reply"), intent(APPEND))
    assert list(s.derive_messages()) == scratch(s)
    assert texts(s.derive_messages()) == ["one", "two", "reply"]
    s.append(
        "assistant/message",
        assistant_msg_data([], step=2, usage={"inputTokens": 1, "outputTokens": 0}),
        intent(APPEND),
    )
    assert list(s.derive_messages()) == scratch(s)
    assert texts(s.derive_messages()) == ["one", "two", "reply"]
    assert len(s.surface.nodes) == 4


def test_derived_cache__rebuilds_on_replace_and_matches_scratch() -> None:
    # spec 19.5 #136
    s = Session.create("cache-replace")
    s.append("turn/start", {"turn": 1})
    user_text(s, "one")
    user_text(s, "two")
    before = s.derive_messages()
    assert len(before) == 2
    kept = list(before)

    nodes = s.surface.nodes
    s.append(
        "user/message",
        user_msg("summary", source={"kind": "plugin", "plugin": "compact"}),
        intent(replace(nodes[0], nodes[1]), [nodes[0], nodes[1]]),
    )
    after = s.derive_messages()
    assert len(after) == 1
    assert texts(after) == ["summary"]
    assert list(after) == scratch(s)
    # the snapshot returned before the replace still has both messages, unchanged
    assert len(before) == 2
    assert texts(before) == ["one", "two"]
    assert all(a is b for a, b in zip(before, kept, strict=True))


def test_derived_cache__returns_immutable_snapshot_per_call() -> None:
    # spec 19.5 #137 — "fresh array per call" is an immutable MessageList snapshot in agentlog
    s = Session.create("cache-snapshot")
    s.append("turn/start", {"turn": 1})
    user_text(s, "one")
    first = s.derive_messages()
    s.append("tool/result", tool_result_msg_data("c1", "out"), intent(APPEND))
    second = s.derive_messages()
    assert len(first) == 1
    assert len(second) == 2
    # snapshots share their frozen message projections
    assert second[0] is first[0]
    # a replace (full rebuild) still reuses the very same message objects and leaves old snapshots alone
    s.append("assistant/message", assistant_msg_data("summary"), intent(replace(2, 2), [2]))
    third = s.derive_messages()
    assert third[0] is first[0]
    assert len(first) == 1
    assert len(second) == 2
    assert texts(second) == ["one", "tool-result"]
    assert texts(third) == ["one", "summary"]

    # messages are deep-frozen: block, nested tool-result content list, message content list, message
    message = first[0]
    with pytest.raises(FrozenError):
        message["content"][0]["text"] = "mutated"
    with pytest.raises(FrozenError):
        message["content"].append(text_block("x"))
    with pytest.raises(FrozenError):
        message["content"] = []
    with pytest.raises(FrozenError):
        message["id"] = "other"
    tool_message = second[1]
    with pytest.raises(FrozenError):
        tool_message["content"][0]["content"].append(text_block("x"))
    with pytest.raises(FrozenError):
        tool_message["content"][0]["content"][0]["text"] = "mutated"
    assert issubclass(FrozenError, TypeError)

    # the snapshot itself cannot be written to
    with pytest.raises(TypeError):
        second[0] = second[1]  # type: ignore[index]
    assert texts(second) == ["one", "tool-result"]

    # list(snapshot) is an ordinary list: reordering it affects nothing
    copy = list(second)
    copy.reverse()
    copy.append("junk")
    assert texts(second) == ["one", "tool-result"]
    assert texts(s.derive_messages()) == ["one", "summary"]
    assert list(s.derive_messages()) == scratch(s)
    assert s.derive_messages() == list(third)


def test_derived_cache__projects_appended_event_as_full_derivation_does() -> None:
    # spec 19.5 #138
    s = Session.create("per-event")
    s.append("turn/start", {"turn": 1})
    event = user_text(s, "hi")
    projected = s.derive_event_message(event)
    assert projected == s.derive_messages()[-1]
    assert projected is s.derive_messages()[-1]
    assert derive_event_message(event) is projected
    assert projected is event["data"]


def test_derived_cache__reuses_logged_event_frozen_content() -> None:
    # spec 19.5 #139
    s = Session.create("per-event-clone")
    s.append("turn/start", {"turn": 1})
    event = user_text(s, "orig")
    message = s.derive_event_message(event)
    assert message is not None
    assert message["content"] is event["data"]["content"]
    with pytest.raises(FrozenError):
        message["content"][0]["text"] = "mutated"
    with pytest.raises(FrozenError):
        message["content"].append(text_block("more"))
    assert s.derive_messages()[-1]["content"] == [{"type": "text", "text": "orig"}]


def test_derived_cache__projects_none_for_events_without_message() -> None:
    # spec 19.5 #140
    s = Session.create("per-event-null")
    s.append("turn/start", {"turn": 1})
    boundary = s.append("step/start", {"turn": 1, "step": 1})
    assert s.derive_event_message(boundary) is None
    assert derive_event_message(boundary) is None
    empty = s.append("assistant/message", assistant_msg_data([]), intent(APPEND))
    assert s.derive_event_message(empty) is None
    assert derive_event_message(empty) is None
    call = s.append("tool/call", {"turn": 1, "step": 1, "callId": "c", "name": "t", "arguments": "{}"})
    assert s.derive_event_message(call) is None
    # and the non-empty projections are the message objects themselves
    reply = s.append("assistant/message", assistant_msg_data("r"), intent(APPEND))
    assert s.derive_event_message(reply) is reply["data"]["message"]
    result = s.append("tool/result", tool_result_msg_data("c", "ok"), intent(APPEND))
    assert s.derive_event_message(result) is result["data"]["message"]


# ---------------------------------------------------------------------------------------------------
# property: incremental derivation == seeded replay == independent model, after every step

LOG_ONLY: list[tuple[str, Any]] = [
    ("turn/start", {"turn": 1}),
    ("step/start", {"turn": 1, "step": 1}),
    ("assistant/chunk", {"turn": 1, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": "h"}}),
    ("tool/call", {"turn": 1, "step": 1, "callId": "c", "name": "t", "arguments": "{}"}),
    ("todo/write", {"todos": []}),
    ("test/log-only", None),
]

WORDS = st.sampled_from(["a", "b", "c", "summary", "pruned", "ok", "über", ""])


def plain(value: Any) -> Any:
    return json.loads(json.dumps(value))


def project(event_type: str, data: Any) -> Any:
    """Independent model of §9.1."""
    if event_type == "user/message":
        return data
    if event_type == "assistant/message":
        return data["message"] if data["message"]["content"] else None
    if event_type == "tool/result":
        return data["message"]
    return None


class Model:
    """Plain-Python model of the surface (§8.5) and of derived messages (§9.2)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []
        self.nodes: list[int] = []
        self.generation = 0

    @property
    def seq(self) -> int:
        return len(self.events)

    def commit(self, event_type: str, data: Any, opts: dict[str, Any] | None) -> None:
        seq = self.seq
        self.events.append((event_type, plain(data)))
        if opts is None:
            return
        op = opts["surfaceOp"]
        if op == APPEND:
            self.nodes.append(seq)
        else:
            i, j = self.nodes.index(op["start"]), self.nodes.index(op["end"])
            self.nodes[i : j + 1] = [seq]
            self.generation += 1

    def messages(self) -> list[Any]:
        out = [project(*self.events[seq]) for seq in self.nodes]
        return [m for m in out if m is not None]

    def tool_nodes(self) -> list[int]:
        return [seq for seq in self.nodes if self.events[seq][0] == "tool/result"]


def draw_sources(data: st.DataObject, seq: int, *, allow_empty: bool) -> list[int] | None:
    """Optional provenance for an append: absent, or unique earlier seqs (possibly [] on assistant)."""
    if data.draw(st.booleans(), label="cite"):
        if seq == 0:
            return [] if allow_empty else None
        return data.draw(
            st.lists(st.integers(0, seq - 1), unique=True, min_size=0 if allow_empty else 1, max_size=4),
            label="sources",
        )
    return None


def valid_op(data: st.DataObject, model: Model) -> tuple[str, Any, dict[str, Any] | None]:
    seq = model.seq
    kinds = ["log", "user", "assistant", "tool"]
    if model.nodes:
        kinds.append("replace")
    if model.tool_nodes():
        kinds.append("rewrite")
    kind = data.draw(st.sampled_from(kinds), label="kind")
    if kind == "log":
        event_type, payload = data.draw(st.sampled_from(LOG_ONLY), label="log")
        return event_type, payload, None
    if kind in ("user", "assistant", "tool"):
        text = data.draw(WORDS, label="text")
        sources = draw_sources(data, seq, allow_empty=kind == "assistant")
        opts = intent(APPEND) if sources is None else intent(APPEND, sources)
        if kind == "user":
            return "user/message", user_msg(text), opts
        if kind == "assistant":
            blocks = [] if data.draw(st.booleans(), label="empty") else [text_block(text)]
            return "assistant/message", assistant_msg_data(blocks), opts
        return "tool/result", tool_result_msg_data(f"call-{seq}", text), opts
    if kind == "replace":
        n = len(model.nodes)
        i = data.draw(st.integers(0, n - 1), label="i")
        j = data.draw(st.integers(i, n - 1), label="j")
        shadowed = model.nodes[i : j + 1]
        extra = data.draw(st.lists(st.integers(0, seq - 1), unique=True, max_size=3), label="extra")
        sources = data.draw(st.permutations(sorted(set(shadowed) | set(extra))), label="order")
        text = data.draw(WORDS, label="text")
        op = intent(replace(model.nodes[i], model.nodes[j]), list(sources))
        if data.draw(st.booleans(), label="by-user"):
            return "user/message", user_msg(text, source={"kind": "plugin", "plugin": "compact"}), op
        blocks = [] if data.draw(st.booleans(), label="empty") else [text_block(text)]
        return "assistant/message", assistant_msg_data(blocks), op
    # content-only tool/result rewrite
    target = data.draw(st.sampled_from(model.tool_nodes()), label="target")
    new = plain(model.events[target][1])
    new["message"]["content"][0]["content"] = [text_block(data.draw(WORDS, label="text"))]
    return "tool/result", new, intent(replace(target, target), [target])


def invalid_op(data: st.DataObject, model: Model) -> tuple[str, Any, dict[str, Any] | None]:
    """An append every surface rule set must refuse (§8.3)."""
    seq = model.seq
    nodes = model.nodes
    kinds = ["start-not-found", "self-reference", "marker-on-log-only", "missing-marker"]
    if nodes:
        kinds.append("missing-coverage")
    if len(nodes) >= 2:
        kinds += ["reversed", "tool-spans-two"]
    if model.tool_nodes():
        kinds.append("tool-changes-call-id")
    kind = data.draw(st.sampled_from(kinds), label="invalid")
    if kind == "start-not-found":
        start = seq + data.draw(st.integers(0, 5), label="offset")
        op = replace(start, nodes[0] if nodes else 0)
        return "user/message", user_msg("x"), intent(op, [0]) if seq else intent(op)
    if kind == "self-reference":
        return "user/message", user_msg("x"), intent(APPEND, [seq])
    if kind == "marker-on-log-only":
        return "turn/start", {"turn": 1}, intent(APPEND)
    if kind == "missing-marker":
        return "user/message", user_msg("x"), None
    if kind == "missing-coverage":
        i = data.draw(st.integers(0, len(nodes) - 1), label="i")
        j = data.draw(st.integers(i, len(nodes) - 1), label="j")
        shadowed = nodes[i : j + 1]
        drop = data.draw(st.sampled_from(shadowed), label="drop")
        sources = [s for s in shadowed if s != drop]
        op = intent(replace(nodes[i], nodes[j]), sources) if sources else intent(replace(nodes[i], nodes[j]))
        return "assistant/message", assistant_msg_data("x"), op
    if kind == "reversed":
        i = data.draw(st.integers(0, len(nodes) - 2), label="i")
        j = data.draw(st.integers(i + 1, len(nodes) - 1), label="j")
        return "user/message", user_msg("x"), intent(replace(nodes[j], nodes[i]), nodes[i : j + 1])
    if kind == "tool-spans-two":
        i = data.draw(st.integers(0, len(nodes) - 2), label="i")
        return (
            "tool/result",
            tool_result_msg_data("x", "x"),
            intent(replace(nodes[i], nodes[i + 1]), nodes[i : i + 2]),
        )
    target = data.draw(st.sampled_from(model.tool_nodes()), label="target")
    new = plain(model.events[target][1])
    new["message"]["content"][0]["toolCallId"] = "other"
    new["message"]["source"]["callId"] = "other"  # a well-formed result for another call (issue 7)
    return "tool/result", new, intent(replace(target, target), [target])


def append(session: Session, event_type: str, payload: Any, opts: dict[str, Any] | None) -> Any:
    if opts is None:
        return session.append(event_type, payload)
    return session.append(event_type, payload, opts)


def check_state(session: Session, model: Model) -> None:
    derived = session.derive_messages()
    assert list(derived) == model.messages()
    assert list(derived) == list(Session.create("x", list(session.events)).derive_messages())
    assert list(session.surface.nodes) == model.nodes
    assert list(session.surface.nodes) == fold_surface(session.events).nodes
    assert session.surface.replace_generation == model.generation
    assert session.seq == model.seq == len(session.events)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_derived_cache__property_incremental_equals_replay_after_every_step(data: st.DataObject) -> None:
    # spec 9.2 (always deep-equal to a from-scratch replay), 6.4 (rejected appends change nothing), 8.6
    session = Session.create("prop")
    lazy = Session.create("prop-lazy")  # same appends, read only at random points: multi-event deltas
    model = Model()
    held: list[tuple[Any, list[Any]]] = []  # earlier snapshots with their contents at the time
    for _ in range(data.draw(st.integers(1, 24), label="steps")):
        if data.draw(st.integers(0, 4), label="reject?") == 0:
            event_type, payload, opts = invalid_op(data, model)
            events_before = session.events
            nodes_obj = session.surface.nodes
            nodes_before = list(nodes_obj)
            generation_before = session.surface.replace_generation
            derived_before = list(session.derive_messages())
            with pytest.raises(SurfaceError):
                append(session, event_type, payload, opts)
            with pytest.raises(SurfaceError):
                append(lazy, event_type, payload, opts)
            assert session.events == events_before
            assert len(session.events) == model.seq
            assert session.surface.nodes is nodes_obj
            assert list(session.surface.nodes) == nodes_before
            assert session.surface.replace_generation == generation_before
            after = list(session.derive_messages())
            assert after == derived_before
            assert all(a is b for a, b in zip(after, derived_before, strict=True))
        else:
            event_type, payload, opts = valid_op(data, model)
            committed = append(session, event_type, payload, opts)
            append(lazy, event_type, payload, opts)
            model.commit(event_type, payload, opts)
            assert committed is session.events[-1]
        check_state(session, model)
        snapshot = session.derive_messages()
        held.append((snapshot, list(snapshot)))
        if data.draw(st.booleans(), label="read-lazy"):
            if data.draw(st.booleans(), label="generation-first"):
                assert lazy.surface.replace_generation == model.generation
            assert list(lazy.derive_messages()) == model.messages()
    assert list(lazy.derive_messages()) == list(session.derive_messages())
    assert list(lazy.surface.nodes) == model.nodes
    # snapshots returned earlier never changed, whatever came after
    for snapshot, contents in held:
        assert len(snapshot) == len(contents)
        assert all(a is b for a, b in zip(snapshot, contents, strict=True))
