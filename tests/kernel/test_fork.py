"""SessionStore.fork (spec §12; checklist §19.6, items 141–154) plus a fork/replay property."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentlog import Session, SessionForkError, SessionStore
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
for _plugin_type in ("test/log-only", "test/bracket-open"):
    event_types.register(_plugin_type)

APPEND = {"surfaceOp": "append"}
MAX_SAFE_INTEGER = 2**53 - 1


def append_closed_turn(
    session: Session, turn: int, text: str | None = None, reason: dict[str, Any] | None = None
) -> None:
    session.append("turn/start", {"turn": turn})
    session.append("user/message", user_message(text if text is not None else f"hello {turn}"), APPEND)
    session.append(
        "turn/end", {"turn": turn, "reason": reason if reason is not None else {"kind": "completed"}}
    )


def append_open_turn(session: Session, turn: int) -> None:
    session.append("turn/start", {"turn": turn})
    session.append("user/message", user_message(f"open {turn}"), APPEND)


def last_seq(session: Session) -> int:
    return session.events[-1].seq


def inherited(session: Session) -> list[Any]:
    """A seeded child's constructor seed: its log minus the end-seed marker."""
    events = list(session.events)
    assert events, "seeded child has no events"
    assert events[-1].type == "session/end-seed", "seeded child is missing its end-seed marker"
    return events[:-1]


def first_user_message(events: Any) -> Any:
    for event in events:
        if event.type == "user/message":
            return event
    raise AssertionError("missing user/message")


# spec 19.6 #141
def test_fork__empty_live_session_forks_as_empty_child_with_lineage() -> None:
    store = SessionStore()
    source = store.create("empty-parent", meta={"cwd": "/workspace"})

    child = store.fork(source, None, "empty-child")

    assert inherited(child) == []
    assert [e.type for e in child.events] == ["session/end-seed"]
    assert child.first_live_seq == 0
    assert child.header["id"] == "empty-child"
    assert child.header["cwd"] == "/workspace"
    assert child.header["parentSession"] == "empty-parent"
    assert child.header["seedLength"] == 0
    assert store.get("empty-child") is child
    assert source.events == []


# spec 19.6 #142
def test_fork__default_boundary_is_latest_event_copied_into_detached_frozen_seed() -> None:
    store = SessionStore()
    source = store.create(
        "parent",
        meta={"cwd": "/workspace", "delegationDepth": 1, "origin": "subagent", "agentPreset": "coder"},
    )
    append_closed_turn(source, 1, "hello")

    child = store.fork("parent", None, "child")

    assert inherited(child) == list(source.events)
    assert child.events is not source.events
    assert child.events[1] is not source.events[1]
    assert child.events[1] == source.events[1]
    with pytest.raises(TypeError):
        first_user_message(child.events).data["content"][0] = {"type": "text", "text": "child mutation"}
    assert first_user_message(source.events).data["content"] == [{"type": "text", "text": "hello"}]
    assert first_user_message(child.events).data["content"] == [{"type": "text", "text": "hello"}]
    assert child.header["id"] == "child"
    assert child.header["cwd"] == "/workspace"
    assert child.header["parentSession"] == "parent"
    assert child.header["seedLength"] == len(source.events)
    # Lineage is minimal: depth, origin and preset are not inherited (spec §12 step 4, §18 #5).
    assert "delegationDepth" not in child.header
    assert "origin" not in child.header
    assert "agentPreset" not in child.header
    assert child.derive_messages() == source.derive_messages()


# spec 19.6 #143
def test_fork__includes_stable_log_only_events_after_a_closed_turn() -> None:
    store = SessionStore()
    source = store.create("log-only-parent")
    append_closed_turn(source, 1, "hello")
    source.append("test/log-only", {"value": "after execution"})

    child = store.fork(source, None, "log-only-child")

    assert inherited(child) == list(source.events)
    last = inherited(child)[-1]
    assert last.type == "test/log-only"
    assert last.data == {"value": "after execution"}


# spec 19.6 #144
def test_fork__from_earlier_turn_boundary_while_source_has_open_tail() -> None:
    store = SessionStore()
    source = store.create("parent", meta={"cwd": "/workspace"})
    append_closed_turn(source, 1, "first")
    first_boundary = last_seq(source)
    append_closed_turn(source, 2, "second")
    append_open_turn(source, 3)

    child = store.fork(source, first_boundary, "child-from-first")

    assert inherited(child) == list(source.events)[: first_boundary + 1]
    assert child.header["seedLength"] == first_boundary + 1
    messages = child.derive_messages()
    assert len(messages) == 1
    assert isinstance(messages[0]["id"], str)
    assert messages[0]["role"] == "user"
    assert messages[0]["content"] == [{"type": "text", "text": "first"}]
    assert messages[0]["source"] == {"kind": "user"}


_REASONS: list[dict[str, Any]] = [
    {"kind": "completed"},
    {"kind": "aborted", "reason": {"kind": "user"}},
    {"kind": "error", "error": {"message": "model failed", "code": "UNKNOWN"}},
    {"kind": "aborted", "reason": {"kind": "disposed"}},
    {"kind": "max-tokens"},
    {"kind": "interrupted"},
]


# spec 19.6 #145
@pytest.mark.parametrize("reason", _REASONS, ids=[f"{r['kind']}-{i}" for i, r in enumerate(_REASONS)])
def test_fork__accepts_every_turn_end_reason_as_explicit_boundary(reason: dict[str, Any]) -> None:
    store = SessionStore()
    source = store.create("parent")
    append_closed_turn(source, 1, reason["kind"], reason)

    child = store.fork(source, last_seq(source), "child")

    assert inherited(child)[-1].type == "turn/end"
    assert inherited(child)[-1].data["reason"] == reason
    assert child.header["seedLength"] == len(source.events)


# spec 19.6 #146
def test_fork__marks_a_bracket_inherited_from_a_still_running_parent() -> None:
    store = SessionStore()
    parent = store.create("bracket-parent", meta={"cwd": "/workspace"})
    append_closed_turn(parent, 1, "work")
    opened = parent.append("test/bracket-open", {"id": "op-1"})

    child = store.fork(parent, None, "bracket-child")

    assert parent.events[-1] is opened
    assert not any(e.type == "session/end-seed" for e in parent.events)
    boundary = child.events[-1]
    assert boundary.type == "session/end-seed"
    assert boundary.seq > opened.seq
    assert child.first_live_seq == opened.seq + 1
    last = inherited(child)[-1]
    assert last.type == "test/bracket-open"
    assert last.data == {"id": "op-1"}


# spec 19.6 #147
def test_fork__rejects_invalid_boundaries_before_creating_a_child() -> None:
    store = SessionStore()
    empty = store.create("empty")
    with pytest.raises(
        SessionForkError,
        match=re.escape('fork boundary 0 does not exist in session "empty" (last seq: none)'),
    ) as excinfo:
        store.fork(empty, 0, "empty-child")
    assert excinfo.value.code == "INVALID_BOUNDARY"
    assert store.get("empty-child") is None

    source = store.create("parent")
    append_closed_turn(source, 1)
    for boundary, child_id in ((-1, "negative"), (0.5, "fraction"), (MAX_SAFE_INTEGER + 1, "unsafe")):
        text = f'fork boundary for session "parent" must be a non-negative safe integer, got {boundary}'
        with pytest.raises(SessionForkError, match=re.escape(text)) as excinfo:
            store.fork(source, boundary, child_id)
        assert excinfo.value.code == "INVALID_BOUNDARY"
        assert store.get(child_id) is None

    past_end = source.seq
    text = f'fork boundary {past_end} does not exist in session "parent" (last seq: {past_end - 1})'
    with pytest.raises(SessionForkError, match=re.escape(text)) as excinfo:
        store.fork(source, past_end, "past-end")
    assert excinfo.value.code == "INVALID_BOUNDARY"
    assert store.get("past-end") is None
    assert [s.id for s in store.list()] == ["empty", "parent"]


def _internal_log(session: Session) -> list[Any]:
    """The session's private mutable log list (the original test reaches into ``session.log`` too)."""
    log = getattr(session, "_log", None)
    assert type(log) is list and log == list(session.events), "could not locate the internal log list"
    return log


# spec 19.6 #148
def test_fork__rejects_corrupted_live_source_whose_index_no_longer_matches_seq() -> None:
    store = SessionStore()
    source = store.create("corrupt-parent")
    append_closed_turn(source, 1)
    log = _internal_log(source)
    corrupted = dict(log[2])
    corrupted["seq"] = 99
    log[2] = type(log[2])(corrupted)

    with pytest.raises(
        SessionForkError,
        match=re.escape('fork boundary 2 does not match a contiguous event seq in session "corrupt-parent"'),
    ) as excinfo:
        store.fork(source, 2, "corrupt-child")
    assert excinfo.value.code == "INVALID_BOUNDARY"
    assert store.get("corrupt-child") is None


# spec 19.6 #149
def test_fork__rejects_unknown_live_session_id() -> None:
    store = SessionStore()
    with pytest.raises(SessionForkError, match=re.escape('session "missing" not found')) as excinfo:
        store.fork("missing")
    assert excinfo.value.code == "SESSION_NOT_FOUND"
    assert store.list() == []


# spec 19.6 #150
def test_fork__rejects_detached_session_object_that_is_not_live() -> None:
    store = SessionStore()
    detached = Session.create("detached")
    with pytest.raises(SessionForkError, match=re.escape('session "detached" not found')) as excinfo:
        store.fork(detached)
    assert excinfo.value.code == "SESSION_NOT_FOUND"
    assert store.list() == []


# spec 19.6 #151
def test_fork__rejects_stale_session_object_whose_id_is_live_on_another_instance() -> None:
    store = SessionStore()
    live = store.create("same-id")
    stale = Session.create("same-id")
    with pytest.raises(
        SessionForkError, match=re.escape('session "same-id" is not the live store instance')
    ) as excinfo:
        store.fork(stale)
    assert excinfo.value.code == "SESSION_NOT_LIVE"
    assert store.list() == [live]


def _open_at_turn_start(session: Session) -> int:
    session.append("turn/start", {"turn": 1})
    return last_seq(session)


def _open_at_step_start(session: Session) -> int:
    session.append("turn/start", {"turn": 1})
    session.append("step/start", {"turn": 1, "step": 1})
    return last_seq(session)


def _open_at_user_message(session: Session) -> int:
    session.append("turn/start", {"turn": 1})
    session.append("user/message", user_message("open"), APPEND)
    return last_seq(session)


def _open_at_assistant_message(session: Session) -> int:
    session.append("turn/start", {"turn": 1})
    session.append("step/start", {"turn": 1, "step": 1})
    session.append(
        "assistant/message",
        {"turn": 1, "step": 1, "message": assistant_message("partial", provider="mock", model="mock")},
        APPEND,
    )
    return last_seq(session)


def _open_at_tool_call(session: Session) -> int:
    session.append("turn/start", {"turn": 1})
    session.append("step/start", {"turn": 1, "step": 1})
    session.append(
        "assistant/message",
        {
            "turn": 1,
            "step": 1,
            "message": assistant_message(
                [tool_call_block("call-open", "bash", "{}")], provider="mock", model="mock"
            ),
        },
        APPEND,
    )
    session.append(
        "tool/call", {"turn": 1, "step": 1, "callId": "call-open", "name": "bash", "arguments": "{}"}
    )
    return last_seq(session)


_OPEN_CASES = {
    "turn/start": _open_at_turn_start,
    "step/start": _open_at_step_start,
    "user/message": _open_at_user_message,
    "assistant/message": _open_at_assistant_message,
    "tool/call": _open_at_tool_call,
}


# spec 19.6 #152
@pytest.mark.parametrize("last_type", list(_OPEN_CASES))
def test_fork__rejects_boundary_inside_open_turn(last_type: str) -> None:
    store = SessionStore()
    source = store.create(f"open-{last_type}")
    boundary = _OPEN_CASES[last_type](source)
    assert source.events[boundary].type == last_type

    text = f'fork boundary {boundary} in session "open-{last_type}" ends inside open turn 1'
    with pytest.raises(SessionForkError, match=re.escape(text)) as excinfo:
        store.fork(source, boundary)
    assert excinfo.value.code == "OPEN_TURN"
    assert store.list() == [source]
    # The default boundary (last event) of the same source is inside the open turn too.
    with pytest.raises(SessionForkError, match=re.escape(text)):
        store.fork(source)
    assert store.list() == [source]


def test_fork__an_open_turn_refusal_names_the_nearest_boundaries_it_would_accept() -> None:
    store = SessionStore()
    source = store.create("nearest")
    append_open_turn(source, 1)  # turn 1 opens the log and never ends
    with pytest.raises(SessionForkError) as excinfo:
        store.fork(source, 1)
    assert str(excinfo.value) == (
        'fork boundary 1 in session "nearest" ends inside open turn 1: '
        "turn 1 opens the log and has not ended, so no boundary up to now is closed"
    )
    source.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})  # seq 2
    with pytest.raises(SessionForkError) as excinfo:
        store.fork(source, 0)
    assert str(excinfo.value).endswith(": the nearest closed-turn boundary is 2 (its turn/end); turn 1 opens the log")
    append_closed_turn(source, 2)  # seqs 3-5
    append_open_turn(source, 3)  # seqs 6-7
    with pytest.raises(SessionForkError) as excinfo:
        store.fork(source, 4)
    assert excinfo.value.code == "OPEN_TURN"
    assert str(excinfo.value).endswith(
        ": the nearest closed-turn boundaries are 2 (before turn 2 started) and 5 (its turn/end)"
    )
    with pytest.raises(SessionForkError) as excinfo:
        store.fork(source, 7)
    assert str(excinfo.value).endswith(
        ": the nearest closed-turn boundary is 5 (before turn 3 started); turn 3 has not ended"
    )
    # Each boundary a refusal names is one the fork accepts.
    for boundary in (2, 5):
        assert store.fork(source, boundary).header["seedLength"] == boundary + 1


# spec 19.6 #153
def test_fork__rejects_child_id_that_is_already_live_with_typed_error() -> None:
    store = SessionStore()
    source = store.create("parent")
    append_closed_turn(source, 1)
    existing = store.create("child")

    with pytest.raises(SessionForkError, match=re.escape('session "child" already exists')) as excinfo:
        store.fork(source, None, "child")
    assert excinfo.value.code == "SESSION_ALREADY_EXISTS"
    assert store.get("child") is existing


# spec 19.6 #154
def test_fork__rejects_duplicate_child_id_before_validating_boundary() -> None:
    store = SessionStore()
    source = store.create("open-parent")
    source.append("turn/start", {"turn": 1})
    store.create("child")

    with pytest.raises(SessionForkError, match=re.escape('session "child" already exists')) as excinfo:
        store.fork(source, None, "child")
    assert excinfo.value.code == "SESSION_ALREADY_EXISTS"
    # Also before resolving the source and before the boundary type check.
    with pytest.raises(SessionForkError, match=re.escape('session "child" already exists')) as excinfo:
        store.fork("missing", -1, "child")
    assert excinfo.value.code == "SESSION_ALREADY_EXISTS"


# spec §12 step 4: an absent child id follows the store's id policy and the child is live and announced.
def test_fork__absent_child_id_follows_store_id_policy_and_announces_child() -> None:
    store = SessionStore()
    created: list[str] = []
    store.on_created(lambda s: created.append(s.id))
    source = store.create("session-1")
    append_closed_turn(source, 1)

    child = store.fork(source)

    # issue 7: default ids are unique and time-sortable (no per-process counter)
    assert re.fullmatch(r"\d{8}T\d{6}-\d{3}-[0-9a-f]{12}", child.id), child.id
    assert store.get(child.id) is child
    assert created == ["session-1", child.id]
    assert child.header["seedLength"] == len(source.events)


# ---------------------------------------------------------------------------------------------------------
# Property: forking at any turn/end boundary equals replaying that prefix from scratch.

_turn_strategy = st.fixed_dictionaries(
    {
        "header_model": st.one_of(st.none(), st.sampled_from(["m-1", "m-2"])),
        "system": st.sampled_from(["", "be brief"]),
        "context": st.booleans(),
        "summarize": st.booleans(),
        "user_text": st.text(max_size=8),
        "assistant": st.sampled_from(["none", "text", "empty", "tool"]),
        "todo": st.booleans(),
        "reason": st.sampled_from(_REASONS),
        "trailing_log_only": st.booleans(),
    }
)


def _build_turn(session: Session, turn: int, spec: dict[str, Any]) -> None:
    session.append("turn/start", {"turn": turn})
    if spec["summarize"] and len(session.surface.nodes) >= 2:
        nodes = list(session.surface.nodes)
        session.append(
            "user/message",
            user_message(f"summary before turn {turn}"),
            {"surfaceOp": replace_op(nodes[0], nodes[-1]), "sourceEventSeqs": sorted(nodes)},
        )
    session.append("user/message", user_message(spec["user_text"]), APPEND)
    session.append("step/start", {"turn": turn, "step": 1})
    if spec["header_model"] is not None:
        header: dict[str, Any] = {"config": {"provider": "mock", "model": spec["header_model"]}, "tools": []}
        if spec["system"]:
            header["system"] = spec["system"]
        session.append("request/header", {"header": header, "reason": "change" if turn > 1 else "initial"})
    if spec["context"]:
        session.append("request/context", {"provider": "mock", "model": "m", "contextWindow": 1000 * turn})
    if spec["assistant"] == "text":
        session.append(
            "assistant/message",
            {
                "turn": turn,
                "step": 1,
                "message": assistant_message(f"answer {turn}", provider="mock", model="m"),
            },
            APPEND,
        )
    elif spec["assistant"] == "empty":
        session.append(
            "assistant/message",
            {"turn": turn, "step": 1, "message": assistant_message([], provider="mock", model="m")},
            APPEND,
        )
    elif spec["assistant"] == "tool":
        call_id = f"call-{turn}"
        session.append(
            "assistant/message",
            {
                "turn": turn,
                "step": 1,
                "message": assistant_message(
                    [text_block("checking"), tool_call_block(call_id, "echo", "{}")],
                    provider="mock",
                    model="m",
                ),
            },
            APPEND,
        )
        session.append(
            "tool/call", {"turn": turn, "step": 1, "callId": call_id, "name": "echo", "arguments": "{}"}
        )
        session.append(
            "tool/result",
            {"turn": turn, "step": 1, "message": tool_result_message(call_id, "ok")},
            APPEND,
        )
    if spec["todo"]:
        session.append("todo/write", {"todos": [{"content": f"task {turn}", "status": "pending"}]})
    session.append("step/end", {"turn": turn, "step": 1})
    session.append("turn/end", {"turn": turn, "reason": spec["reason"]})
    if spec["trailing_log_only"]:
        session.append("test/log-only", {"value": f"after {turn}"})


# spec §12 (property): fork at a turn/end boundary == Session.create over the same prefix.
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(turns=st.lists(_turn_strategy, min_size=1, max_size=4), open_tail=st.booleans())
def test_fork__property_child_equals_replay_of_prefix_at_every_turn_end(
    turns: list[dict[str, Any]], open_tail: bool
) -> None:
    store = SessionStore()
    source = store.create("prop-source")
    for index, spec in enumerate(turns, start=1):
        _build_turn(source, index, spec)
    if open_tail:
        append_open_turn(source, len(turns) + 1)

    events = list(source.events)
    boundaries = [e.seq for e in events if e.type == "turn/end"]
    assert len(boundaries) == len(turns)
    for b in boundaries:
        child = store.fork(source, b, f"prop-child-{b}")
        reference = Session.create("x", events[: b + 1])
        assert list(child.events)[: b + 1] == events[: b + 1]
        assert child.derive_messages() == reference.derive_messages()
        assert child.request_header() == reference.request_header()
        assert child.request_context() == reference.request_context()
        assert child.header["seedLength"] == b + 1
        assert child.first_live_seq == b + 1


def test_fork__the_childs_header_and_marker_are_the_originals_bytes() -> None:
    """§12.4: header ``version, id, createdAt, cwd, parentSession, seedLength`` (nothing else inherited),
    then the child's own ``session/end-seed`` with ``{}``."""
    import orjson

    store = SessionStore()
    source = store.create("parent", meta={"cwd": "/work", "agentPreset": "coder", "delegationDepth": 1})
    append_closed_turn(source, 1)
    child = store.fork(source, None, "child")
    created = child.header["createdAt"]
    assert orjson.dumps(child.header) == (
        f'{{"version":0,"id":"child","createdAt":{created},"cwd":"/work","parentSession":"parent","seedLength":3}}'
    ).encode()
    marker = child.events[-1]
    assert orjson.dumps(marker) == f'{{"type":"session/end-seed","seq":3,"time":{marker.time},"data":{{}}}}'.encode()
