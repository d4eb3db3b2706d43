"""`todo/write` events: whole-list snapshots, last write wins, log-only, durable through replay.

Conformance checklist ``shared/spec/core-session.md`` §19.3 (items 74–77); behaviour from §4.10, §6.4
and §6.2. Each test names its checklist item in a ``# spec 19.3 #N`` comment.
"""

from __future__ import annotations

from typing import Any

import pytest

from agentlog import FrozenError, Session
from agentlog.testing.builders import APPEND, intent, user_msg


def now() -> int:
    return 1000


def last_todos(session: Session) -> Any:
    return [e for e in session.events if e.type == "todo/write"][-1].data["todos"]


def test_todo_write__appends_the_whole_list_snapshot_and_isolates_the_log_from_later_mutation() -> None:
    # spec 19.3 #74
    session = Session.create("t1", now=now)
    todos = [
        {"content": "plan the work", "status": "in_progress"},
        {"content": "write the code", "status": "pending"},
    ]
    returned = session.append("todo/write", {"todos": todos})

    event = [e for e in session.events if e.type == "todo/write"][-1]
    assert event is returned
    assert event.type == "todo/write"
    assert event.data["todos"] == todos
    assert event.surface_op is None
    assert "surfaceOp" not in event

    todos.append({"content": "sneak in", "status": "pending"})
    todos[0]["status"] = "completed"
    expected = [
        {"content": "plan the work", "status": "in_progress"},
        {"content": "write the code", "status": "pending"},
    ]
    assert event.data["todos"] == expected
    assert last_todos(session) == expected
    with pytest.raises(FrozenError):
        event.data["todos"].append({"content": "direct", "status": "pending"})


def test_todo_write__is_last_write_wins_the_current_list_is_the_most_recent_todo_write() -> None:
    # spec 19.3 #75
    session = Session.create("t2", now=now)
    session.append("todo/write", {"todos": [{"content": "first", "status": "pending"}]})
    session.append(
        "todo/write",
        {
            "todos": [
                {"content": "first", "status": "completed"},
                {"content": "second", "status": "in_progress"},
            ]
        },
    )
    assert last_todos(session) == [
        {"content": "first", "status": "completed"},
        {"content": "second", "status": "in_progress"},
    ]
    assert len([e for e in session.events if e.type == "todo/write"]) == 2


def test_todo_write__is_not_a_surface_event() -> None:
    # spec 19.3 #76
    session = Session.create("t3", now=now)
    session.append("user/message", user_msg("q"), intent(APPEND))
    before = session.derive_messages()
    nodes_before = list(session.surface.nodes)
    session.append("todo/write", {"todos": [{"content": "a task", "status": "pending"}]})
    assert len(session.derive_messages()) == len(before)
    assert session.derive_messages() == before
    assert session.seq - 1 not in session.surface.nodes
    assert list(session.surface.nodes) == nodes_before
    assert session.derive_event_message(session.events[-1]) is None


def test_todo_write__round_trips_through_a_seeded_replay_identically() -> None:
    # spec 19.3 #77
    original = Session.create("t4", now=now)
    original.append("turn/start", {"turn": 1})
    original.append("todo/write", {"todos": [{"content": "only", "status": "completed"}]})
    original.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    replayed = Session.create("t4-replay", list(original.events), now=now)
    assert last_todos(replayed) == [{"content": "only", "status": "completed"}]
    assert list(replayed.events)[: original.seq] == list(original.events)
    assert replayed.first_live_seq == original.seq
    assert replayed.events[-1].type == "session/end-seed"
