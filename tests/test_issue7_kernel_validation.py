"""Issue 7, defects 2 and 15: append accepts only what every load path accepts back.

Each shape that a loader refused after ``append`` had accepted it (so the session could never be
resumed, shown or exported) is now refused at append with a typed error that names the fix. The
accelerated append path (C) and the pure-Python path must agree on every input: the differential
property at the end checks that directly.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agentlog as al
from agentlog import AgentlogError, EventDataError, InvalidEventError, InvalidSeedError, MessageShapeError, Session
from agentlog._accel import checked_snapshot as _c_checked_snapshot
from agentlog.errors import UnknownEventTypeError
from agentlog.kernel.events import APPEND_CHECK_KINDS, EventTypes
from agentlog.kernel.jsoncodec import DEFAULT_MAX_DEPTH, dumps, loads
from agentlog.kernel.jsonvalue import _GIVE_UP, MAX_JSON_DEPTH
from agentlog.kernel.session import _checked_copy
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend

pytestmark = pytest.mark.accel

APPEND = {"surfaceOp": "append"}


def _open_step(session: Session) -> None:
    session.append("turn/start", {"turn": 1})
    session.append("step/start", {"turn": 1, "step": 1})


# --- defect 2: message shapes --------------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        "hello",  # a plain string
        {"role": "user", "content": "hello"},  # an OpenAI-shaped message
        {"content": [al.text_block("hi")], "source": {"kind": "user"}},  # no id, no role
    ],
    ids=["plain-string", "openai-shape", "pre-identity"],
)
def test_issue7_d2_user_message_must_be_a_message_and_names_its_constructor(data: Any) -> None:
    session = Session.create("s")
    with pytest.raises(MessageShapeError) as caught:
        session.append("user/message", data, APPEND)
    assert "build it with agentlog.user_message(text)" in str(caught.value)
    assert caught.value.code == "INVALID_MESSAGE"
    assert session.seq == 0


def test_issue7_d2_assistant_message_needs_its_turn_step_message_wrapper() -> None:
    session = Session.create("s")
    _open_step(session)
    bare = al.assistant_message("hi", provider="p", model="m", id="a1")
    with pytest.raises(MessageShapeError, match=re.escape('{"turn": n, "step": n, "message": ...}')):
        session.append("assistant/message", bare, APPEND)
    event = session.append("assistant/message", {"turn": 1, "step": 1, "message": bare}, APPEND)
    assert event.data["message"]["id"] == "a1"


def test_issue7_d2_tool_result_needs_a_matching_tool_result_block() -> None:
    session = Session.create("s")
    _open_step(session)
    message = al.tool_result_message("c1", "ok", id="t1")
    with pytest.raises(MessageShapeError, match=re.escape("agentlog.tool_result_message(call_id, text)")):
        session.append("tool/result", message, APPEND)  # without its wrapper
    wrong = al.tool_result_message("c1", "ok", id="t2")
    wrong["source"]["callId"] = "c2"  # type: ignore[index]
    with pytest.raises(MessageShapeError, match="mismatched tool call ids"):
        session.append("tool/result", {"turn": 1, "step": 1, "message": wrong}, APPEND)
    assert session.seq == 2


# --- defect 2: core data shapes -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("etype", "data", "fragment"),
    [
        ("turn/start", {"turn": "1"}, 'turn must be a positive integer (e.g. {"turn": 1}), got "1"'),
        ("turn/start", {"turn": 0}, "turn must be a positive integer"),
        ("turn/start", {"turn": 1, "trigger": {"kind": "user"}}, "pre-react-loop"),
        ("turn/start", None, "must be an object"),
        ("turn/end", {"turn": "1", "reason": {"kind": "completed"}}, "turn must be a positive integer"),
        ("turn/end", {"turn": 1}, 'exactly the keys "turn" and "reason"'),
        ("turn/end", {"turn": 1, "reason": {"kind": "disposed"}}, '"aborted", "reason": {"kind": "disposed"}'),
        ("turn/end", {"turn": 1, "reason": {"kind": "completed", "step": 2}}, "no other keys"),
        ("turn/end", {"turn": 1, "reason": {"kind": "error", "message": "x"}}, '"error": {"message"'),
        ("step/start", {"turn": 1, "step": "1"}, 'step must be a non-negative integer, got "1"'),
        ("step/end", {"turn": 1}, "step must be a non-negative integer, got missing"),
        ("assistant/chunk", {"turn": 1, "step": 1, "chunk": "x"}, "text_delta"),
        ("tool/call", {"turn": 1, "step": 1, "callId": "", "name": "t", "arguments": "{}"}, "callId"),
        ("tool/call", {"turn": 1, "step": 1, "callId": "c", "name": "t", "arguments": {}}, "raw JSON text"),
        ("request/header", {"header": {"config": {}}, "reason": "initial"}, "lacks provider/model"),
    ],
)
def test_issue7_d2_core_data_shapes_are_refused_at_append(etype: str, data: Any, fragment: str) -> None:
    session = Session.create("s")
    with pytest.raises(EventDataError) as caught:
        session.append(etype, data)
    assert fragment in str(caught.value)
    assert caught.value.code == "INVALID_EVENT_DATA"
    assert session.seq == 0


def test_issue7_d2_the_same_core_rules_refuse_a_seed_and_a_restored_log() -> None:
    bad = [{"type": "turn/start", "seq": 0, "time": 1, "data": {"turn": "1"}}]
    with pytest.raises(InvalidSeedError, match=re.escape("seed turn/start at index 0 data turn must be")):
        Session.create("s", bad)
    header = {"version": 0, "id": "s", "createdAt": 1}
    with pytest.raises(InvalidSeedError, match=re.escape("seed turn/start at index 0 data turn must be")):
        Session.from_restore("s", loads(dumps(bad)), header)


def test_issue7_d2_unknown_types_are_refused_with_the_registration_hint() -> None:
    registry = EventTypes()
    session = Session.create("s", registry=registry)
    with pytest.raises(UnknownEventTypeError) as caught:
        session.append("my-plugin/state", {"n": 1})
    assert caught.value.code == "UNKNOWN_EVENT_TYPE"
    assert 'event_types.register("my-plugin/state")' in str(caught.value)
    with pytest.raises(InvalidSeedError, match=re.escape('event_types.register("my-plugin/state")')):
        Session.create("seeded", [{"type": "my-plugin/state", "seq": 0, "time": 1, "data": {}}], registry=registry)
    # a seed event its writer marked ignorable is fine without a registration
    skippable = {"type": "my-plugin/state", "seq": 0, "time": 1, "data": {}, "ignorable": True}
    assert Session.create("seeded", [skippable], registry=registry).events[0].ignorable


def test_issue7_d2_depth_is_limited_to_what_a_reader_loads_back() -> None:
    assert MAX_JSON_DEPTH + 1 == DEFAULT_MAX_DEPTH  # the envelope adds one level

    def nested(containers: int) -> Any:
        value: Any = "leaf"
        for _ in range(containers):
            value = [value]
        return value

    session = Session.create("s")
    with pytest.raises(InvalidEventError, match=re.escape("nested deeper than 99,999 levels")):
        session.append("todo/write", {"todos": nested(MAX_JSON_DEPTH)})  # data adds one more level
    event = session.append("todo/write", nested(MAX_JSON_DEPTH))
    line = dumps(event)
    assert dumps(loads(line)) == line  # the deepest accepted event reads back (== would recurse)
    assert session.seq == 1


def test_issue7_d2_refused_shapes_were_unloadable_and_accepted_ones_load(tmp_path: Path) -> None:
    """The original failure end to end: what append accepts, a fresh coordinator loads back."""
    root = str(tmp_path / "store")
    store = al.SessionStore()
    coordinator = PersistenceCoordinator(store, JsonlBackend(root))
    session = store.create("s1")
    for etype, data in [("user/message", "hi"), ("turn/start", {"turn": "1"}), ("my/type", {})]:
        with pytest.raises(AgentlogError):
            session.append(etype, data, APPEND if etype == "user/message" else None)
    session.append("turn/start", {"turn": 1})
    session.append("user/message", al.user_message("hi", id="u1"), APPEND)
    session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    store.flush(session)
    expected = list(session.events)
    coordinator.close()
    reader = PersistenceCoordinator(al.SessionStore(), JsonlBackend(root))
    try:
        assert list(reader.load("s1").events) == expected
    finally:
        reader.close()


# --- defect 15: the clock -------------------------------------------------------------------------


@pytest.mark.parametrize("value", [1.5, 1000.0, "1000", None, True, 2**53, -(2**53)])
def test_issue7_d15_a_clock_returning_a_non_integer_is_refused_at_append(value: Any) -> None:
    session = Session.create("s", header={"version": 0, "id": "s", "createdAt": 1}, now=lambda: value)
    with pytest.raises(InvalidEventError, match="must be integer Unix epoch milliseconds") as caught:
        session.append("turn/start", {"turn": 1})
    assert caught.value.code == "INVALID_EVENT"
    with pytest.raises(InvalidEventError, match="must be integer Unix epoch milliseconds"):
        session.append("user/message", al.user_message("x", id="u"), APPEND)  # the general path too
    assert session.seq == 0


def test_issue7_d15_a_bad_clock_never_reaches_the_store(tmp_path: Path) -> None:
    ticks = iter([5, 6, 7.5, 8])
    store = al.SessionStore(now=lambda: next(ticks))
    coordinator = PersistenceCoordinator(store, JsonlBackend(str(tmp_path)))
    session = store.create("s1", meta={"createdAt": 1})
    session.append("turn/start", {"turn": 1})
    session.append("step/start", {"turn": 1, "step": 1})
    with pytest.raises(InvalidEventError):
        session.append("step/end", {"turn": 1, "step": 1})
    session.append("step/end", {"turn": 1, "step": 1})
    store.flush(session)
    coordinator.close()
    reader = PersistenceCoordinator(al.SessionStore(), JsonlBackend(str(tmp_path)))
    try:
        assert [e["time"] for e in reader.inspect("s1").events][:3] == [5, 6, 8]
    finally:
        reader.close()


# --- the accelerated rules equal the canonical ones ------------------------------------------------

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.sampled_from([1.0, 0.5, 2**53, "", "x", "1", "user", "assistant", "model", "tool", "tool-result", "completed",
                     "aborted", "disposed", "error", "text-delta", "c1"]),
)
_keys = st.sampled_from(["turn", "step", "chunk", "type", "callId", "name", "arguments", "message", "id", "role",
                         "source", "kind", "content", "provider", "model", "toolCallId", "reason", "error", "trigger"])
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(_keys, inner, max_size=5)),
    max_leaves=12,
)


def _well_formed(etype: str) -> Any:
    return {
        "turn/start": {"turn": 1},
        "step/start": {"turn": 1, "step": 0},
        "step/end": {"turn": 2, "step": 3},
        "assistant/chunk": {"turn": 1, "step": 1, "chunk": al.text_delta(0, "x")},
        "tool/call": {"turn": 1, "step": 1, "callId": "c1", "name": "t", "arguments": "{}"},
        "user/message": al.user_message("x", id="u"),
        "assistant/message": {
            "turn": 1,
            "step": 1,
            "message": al.assistant_message("x", provider="p", model="m", id="a"),
        },
        "tool/result": {"turn": 1, "step": 1, "message": al.tool_result_message("c1", "x", id="t")},
        "turn/end": {"turn": 1, "reason": {"kind": "completed"}},
    }[etype]


def _mutations(etype: str) -> Any:
    """Well-formed data with one random key replaced or added (near misses hit every rule branch)."""
    base = _well_formed(etype)
    return st.tuples(_keys, _values, st.booleans()).map(lambda change: _mutate(base, change))


def _mutate(base: Any, change: tuple[str, Any, bool]) -> Any:
    key, value, nested = change
    data = loads(dumps(base))
    target = data
    if nested:
        for candidate in ("message", "chunk", "reason"):
            if isinstance(data.get(candidate), dict):
                target = data[candidate]
                break
    target[key] = value
    return data


def _canonical(etype: str, data: Any, check: int) -> Any:
    try:
        return ("ok", _checked_copy(etype, data, check))
    except AgentlogError as err:
        return ("err", type(err))


_C_KINDS = sorted(etype for etype, kind in APPEND_CHECK_KINDS.items() if kind > 0)


@pytest.mark.skipif(_c_checked_snapshot is None, reason="no C accelerator")
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(etype=st.sampled_from(_C_KINDS), data=st.data())
def test_issue7_d2_accelerated_rules_never_accept_what_the_python_rules_refuse(etype: str, data: Any) -> None:
    check = APPEND_CHECK_KINDS[etype]
    value = data.draw(st.one_of(_values, _mutations(etype)))
    fast = _c_checked_snapshot(value, check)
    verdict = _canonical(etype, value, check)
    if fast is not _GIVE_UP:
        assert verdict == ("ok", fast)
    # well-formed data takes the fast path (otherwise the accelerator is useless)
    assert _c_checked_snapshot(_well_formed(etype), check) is not _GIVE_UP


_LOG_ONLY_RULES = ["turn/start", "turn/end", "step/start", "step/end", "assistant/chunk", "tool/call"]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(etype=st.sampled_from(_LOG_ONLY_RULES), data=st.data())
def test_issue7_d2_restore_applies_exactly_the_seed_rules(etype: str, data: Any) -> None:
    from agentlog.kernel.seeds import check_seed_data

    value = data.draw(st.one_of(_values, _mutations(etype)))
    try:
        check_seed_data(etype, value, 0)
        expected_ok = True
    except InvalidSeedError:
        expected_ok = False
    seed = loads(dumps([{"type": etype, "seq": 0, "time": 1, "data": value}]))  # freshly parsed, as a reader has
    header = {"version": 0, "id": "r", "createdAt": 1}
    try:
        Session.from_restore("r", seed, header)
        ok = True
    except InvalidSeedError:
        ok = False
    assert ok == expected_ok
