"""An ownerless ``PersistenceCoordinator.append`` refuses whatever a load of the session would refuse.

Before, it checked only JSON, the removed vocabulary and the seqs: an event with a malformed envelope or
data, an unknown type or an impossible surface transition was written, and every later load of the
session failed (``SESSION_CORRUPT``) — a session you could write but not read.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentlog.errors import InvalidEventError, SessionPersistenceCorruptionError

from .conftest import SID, Harness, ev, header, seqs, turn_end, turn_start, user_data, user_event


def _written(env: Harness) -> Any:
    writer = env.coordinator()
    writer.create(header(SID))
    writer.append(SID, [turn_start(0), user_event(1, "q"), turn_end(2)])
    return writer


def _stored_types(env: Harness) -> list[str]:
    return [event["type"] for event in env.coordinator().load(SID).events]


BAD_EVENTS = {
    "labels-not-a-mapping": ev("session/labels", 3, {"labels": 42}, ignorable=True),
    "turn-start-without-a-turn": ev("turn/start", 3, {"turn": "one"}),
    "unknown-type-not-ignorable": ev("plugin/never-registered", 3, {}),
    "envelope-with-a-stray-key": dict(turn_start(3, 2), stray=True),
    "replace-of-a-range-not-on-the-surface": ev(
        "user/message", 3, user_data("x", msg_id="u-3"), surfaceOp={"op": "replace", "start": 40, "end": 41}
    ),
    "message-content-not-a-list": ev("user/message", 3, {"role": "user", "content": 5}, surfaceOp="append"),
}


@pytest.mark.parametrize("bad", list(BAD_EVENTS.values()), ids=list(BAD_EVENTS))
def test_an_event_that_would_not_load_back_is_refused_and_nothing_is_written(env: Harness, bad: Any) -> None:
    writer = _written(env)
    before = _stored_types(env)
    with pytest.raises(InvalidEventError) as excinfo:
        writer.append(SID, [turn_start(3, 2), dict(bad, seq=4)])
    assert excinfo.value.code == "INVALID_EVENT"
    assert f'append to session "{SID}" refused' in str(excinfo.value)
    assert "nothing was written" in str(excinfo.value)
    assert _stored_types(env) == before  # still loads, unchanged
    writer.append(SID, [turn_start(3, 2), turn_end(4, 2)])  # the cursor did not move: valid batches go on
    assert seqs(env.coordinator().load(SID).events) == [0, 1, 2, 3, 4]


def test_a_new_writer_of_the_stored_session_is_held_to_the_same_rule(env: Harness) -> None:
    _written(env)
    adopter = env.coordinator()  # adopts the stored log (no state of its own yet)
    with pytest.raises(InvalidEventError):
        adopter.append(SID, [BAD_EVENTS["labels-not-a-mapping"]])
    adopter.append(SID, [ev("session/labels", 3, {"labels": {"team": "a"}}, ignorable=True)])
    assert _stored_types(env)[-1] == "session/labels"


def test_a_valid_surface_replace_of_stored_messages_is_accepted(env: Harness) -> None:
    writer = _written(env)
    replace = ev(
        "user/message",
        3,
        user_data("summary", msg_id="u-3"),
        surfaceOp={"op": "replace", "start": 1, "end": 1},
        sourceEventSeqs=[1],
    )
    writer.append(SID, [replace])
    messages = env.coordinator().load(SID)
    assert [event["type"] for event in messages.events][-1] == "user/message"


_IDS = itertools.count()
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)
_KEYS = st.sampled_from(["type", "seq", "time", "data", "ignorable", "surfaceOp", "turn", "labels", "role", "content"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(template=st.sampled_from(["turn", "labels", "user"]), key=_KEYS, value=_JSON, drop=st.booleans())
def test_whatever_an_ownerless_append_accepts_loads_back(
    memory_env: Harness, template: str, key: str, value: Any, drop: bool
) -> None:
    """Invariant: a batch is either refused with nothing written, or the session loads with it."""
    writer = memory_env.coordinator()
    session_id = f"p-{next(_IDS)}"  # examples share the fixture's store (hypothesis replays some)
    writer.create(header(session_id))
    writer.append(session_id, [turn_start(0), user_event(1, "q"), turn_end(2)])
    event: dict[str, Any] = {
        "turn": turn_start(3, 2),
        "labels": ev("session/labels", 3, {"labels": {"k": "v"}}, ignorable=True),
        "user": user_event(3, "again"),
    }[template]
    data = event["data"] if isinstance(event["data"], dict) else {}
    target = event if key in ("type", "seq", "time", "data", "ignorable", "surfaceOp") else data
    if drop:
        target.pop(key, None)
    else:
        target[key] = value
    try:
        writer.append(session_id, [event])
    except InvalidEventError:
        assert len(memory_env.coordinator().load(session_id).events) == 3
        return
    except Exception as err:  # a refusal of another kind (JSON gate, seq check) must write nothing either
        assert getattr(err, "code", None) is not None, err
        assert len(memory_env.coordinator().load(session_id).events) == 3
        return
    try:
        loaded = memory_env.coordinator().load(session_id)
    except SessionPersistenceCorruptionError as err:  # pragma: no cover - the defect this test guards
        pytest.fail(f"an accepted append made the session unreadable: {err}")
    assert loaded.events[3]["seq"] == 3  # (a load closes an open turn after it: one more event)
    assert len(loaded.events) in (4, 5)
