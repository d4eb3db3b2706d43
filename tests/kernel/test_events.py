"""Event envelope, vocabulary and the event-type registry (spec §2, §4)."""

from __future__ import annotations

import re
from typing import Any

import orjson
import pytest

import agentlog as al
from agentlog import EventDataError, EventTypeError, EventTypes, FrozenError, InvalidSeedError
from agentlog.errors import UnknownEventTypeError


def test_events__known_vocabulary_has_the_48_names_of_the_original() -> None:
    assert len(al.KNOWN_SESSION_EVENT_TYPES) == 48
    assert al.CORE_EVENT_TYPES <= al.KNOWN_SESSION_EVENT_TYPES
    assert len(al.CORE_EVENT_TYPES) == 13
    assert al.SURFACE_EVENT_TYPES == {"user/message", "assistant/message", "tool/result"}
    assert "request/header-delta" not in al.KNOWN_SESSION_EVENT_TYPES


def test_events__committed_event_is_a_frozen_wire_dict_with_properties() -> None:
    session = al.Session.create("s", now=lambda: 42)
    event = session.append("user/message", al.user_message("hi", id="u1"), {"surfaceOp": "append"})
    assert list(event) == ["type", "seq", "time", "data", "surfaceOp"]
    assert (event.type, event.seq, event.time, event.surface_op) == ("user/message", 0, 42, "append")
    assert event.source_event_seqs is None
    assert event.ignorable is False
    assert event == {
        "type": "user/message",
        "seq": 0,
        "time": 42,
        "data": {"id": "u1", "role": "user", "content": [{"type": "text", "text": "hi"}], "source": {"kind": "user"}},
        "surfaceOp": "append",
    }
    with pytest.raises(FrozenError):
        event["seq"] = 5  # type: ignore[index]
    with pytest.raises(TypeError):
        event.data["content"][0]["text"] = "changed"
    with pytest.raises(FrozenError):
        event.extra = 1  # type: ignore[attr-defined]
    cached = event.json_bytes
    with pytest.raises(FrozenError):
        event._json = b"{}"  # the bytes persistence writes cannot be swapped
    assert event.json_bytes is cached


def test_events__json_bytes_are_compact_wire_json_computed_once() -> None:
    session = al.Session.create("s", now=lambda: 7)
    event = session.append("turn/start", {"turn": 1})
    first = event.json_bytes
    assert first == b'{"type":"turn/start","seq":0,"time":7,"data":{"turn":1}}'
    assert event.json_bytes is first
    assert orjson.loads(first) == event


def test_registry__default_registry_knows_the_vocabulary() -> None:
    registry = EventTypes()
    assert registry.types() == al.KNOWN_SESSION_EVENT_TYPES
    assert registry.is_known("tool/result")
    assert not registry.is_known("my-plugin/thing")
    assert not registry.is_ignorable("tool/result")


def test_registry__plugin_types_register_with_ignorable_flag_and_validator() -> None:
    registry = EventTypes()
    registry.register("my-plugin/note", ignorable=True)
    assert registry.is_known("my-plugin/note")
    assert registry.is_ignorable("my-plugin/note")
    registry.unregister("my-plugin/note")
    assert not registry.is_known("my-plugin/note")


def test_registry__refuses_core_types_and_conflicting_reregistration() -> None:
    registry = EventTypes()
    with pytest.raises(EventTypeError, match="owned by the session kernel"):
        registry.register("tool/result")
    with pytest.raises(EventTypeError, match="non-empty string"):
        registry.register("")

    def check(data: Any) -> bool:
        return True

    registry.register("p/x", validator=check)
    registry.register("p/x", validator=check)  # identical settings are fine
    with pytest.raises(EventTypeError, match="different settings"):
        registry.register("p/x", ignorable=True)
    assert EventTypeError.code == "EVENT_TYPE_CONFLICT"


def _positive_count(data: Any) -> bool:
    if not isinstance(data, dict) or not isinstance(data.get("count"), int):
        raise ValueError("count must be an integer")
    return data["count"] > 0


def test_registry__validator_refuses_append_without_changing_the_session() -> None:
    registry = EventTypes()
    registry.register("p/counter", validator=_positive_count)
    session = al.Session.create("s", registry=registry)
    ok = session.append("p/counter", {"count": 3})
    assert ok.data == {"count": 3}
    before = list(session.events)
    with pytest.raises(EventDataError, match=re.escape('session event "p/counter" carries invalid data: count must')):
        session.append("p/counter", {"count": "many"})
    with pytest.raises(EventDataError, match=re.escape('session event "p/counter" carries invalid data')) as info:
        session.append("p/counter", {"count": 0})
    assert info.value.code == "INVALID_EVENT_DATA"
    assert list(session.events) == before
    assert session.seq == 1


def test_registry__validator_receives_the_frozen_snapshot() -> None:
    seen: list[Any] = []
    registry = EventTypes()
    registry.register("p/seen", validator=lambda data: seen.append(data))
    session = al.Session.create("s", registry=registry)
    event = session.append("p/seen", {"a": [1]})
    assert seen[0] is event.data
    with pytest.raises(FrozenError):
        seen[0]["a"].append(2)


def test_registry__validator_runs_on_seeds_too() -> None:
    registry = EventTypes()
    registry.register("p/counter", validator=_positive_count)
    seed = [{"type": "p/counter", "seq": 0, "time": 1, "data": {"count": -1}}]
    with pytest.raises(InvalidSeedError, match=re.escape("invalid seed event at index 0: session event")) as info:
        al.Session.create("s", seed, registry=registry)
    assert info.value.index == 0
    with pytest.raises(InvalidSeedError):
        al.Session.from_restore("s", seed, {"version": 0, "id": "s", "createdAt": 1}, registry=registry)


def test_registry__sessions_refuse_unregistered_types_and_name_the_registration() -> None:
    # Issue 7, defect 2: an unregistered type could be written but never loaded back.
    registry = EventTypes()
    session = al.Session.create("s", registry=registry)
    with pytest.raises(UnknownEventTypeError, match=re.escape('event_types.register("someone-else/event")')) as info:
        session.append("someone-else/event", None)
    assert info.value.code == "UNKNOWN_EVENT_TYPE"
    assert session.seq == 0
    registry.register("someone-else/event")
    event = session.append("someone-else/event", None)
    assert event.data is None and "ignorable" not in event
    registry.register("someone-else/skippable", ignorable=True)
    skippable = session.append("someone-else/skippable", {"n": 1})
    assert skippable.ignorable is True  # stamped, so a reader without the registration may skip it
