"""Stored-event normalisation and format checks (persistence spec §3.6, §3.8).

Covers, at the level of the pure ``agentlog.persistence.legacy`` module: every legacy migration and
every malformed-record refusal of §3.6 with exact texts, the version-refusal texts of §3.8, and the
module-level behaviour behind checklist items 51–53 (§8.4), 130–134 (§8.5) and 160–161 (§8.6). A
normalised (and validated) log must then be accepted by ``Session.from_restore`` and derive the
messages the original derives.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from _json_strategies import json_values
from agentlog import Session
from agentlog.errors import (
    InvalidEventError,
    LegacyFormatError,
    MessageShapeError,
    PersistenceError,
    SessionFormatUnsupportedError,
)
from agentlog.kernel._js import js_number
from agentlog.kernel.events import KNOWN_SESSION_EVENT_TYPES, EventTypes
from agentlog.kernel.seeds import adopt_session_event
from agentlog.persistence.legacy import (
    assert_events_known,
    assert_supported_events,
    assert_version,
    legacy_message_id,
    needs_legacy_prefix,
    normalize_stored_events,
    version_refusal,
)
from agentlog.testing.builders import user_msg

SID = "sess"


def ev(type: str, seq: int, data: Any, **extra: Any) -> dict[str, Any]:
    """A wire event ``{type, seq, time, data, **extra}`` (extra keys after ``data``, as written)."""
    return {"type": type, "seq": seq, "time": seq + 1, "data": data, **extra}


def normalize_one(event: dict[str, Any], session_id: str = SID) -> dict[str, Any]:
    events = normalize_stored_events(session_id, [event])
    assert len(events) == 1
    return events[0]  # type: ignore[no-any-return]


def dump(value: Any) -> bytes:
    """JSON bytes: equality of these is equality *including key order*."""
    return orjson.dumps(value)


def restore(session_id: str, events: list[dict[str, Any]]) -> Session:
    """What a cold read does after normalisation: validate each event, then build the session."""
    adopted = [adopt_session_event(event) for event in events]
    return Session.from_restore(session_id, adopted, {"version": 0, "id": session_id, "createdAt": 1})


def message_of(event: dict[str, Any]) -> Any:
    return event["data"] if event["type"] == "user/message" else event["data"]["message"]


# --- fixtures: the original's legacy logs ------------------------------------------------------------


def legacy_message_log() -> list[dict[str, Any]]:
    """A valid persisted log from immediately before messages gained wrappers and identities."""
    return [
        ev("turn/start", 0, {"turn": 1}),
        ev(
            "user/message",
            1,
            {"content": [{"type": "text", "text": "hi"}], "source": {"kind": "user"}},
            surfaceOp="append",
        ),
        ev("step/start", 2, {"turn": 1, "step": 1}),
        ev(
            "assistant/message",
            3,
            {
                "turn": 1,
                "step": 1,
                "content": [{"type": "tool-call", "id": "call-1", "name": "read", "arguments": "{}"}],
                "provenance": {"provider": "mock", "model": "mock"},
            },
            surfaceOp="append",
        ),
        ev("tool/call", 4, {"turn": 1, "step": 1, "callId": "call-1", "name": "read", "arguments": "{}"}),
        ev(
            "tool/result",
            5,
            {
                "turn": 1,
                "step": 1,
                "callId": "call-1",
                "content": [{"type": "text", "text": "full result"}],
                "isError": False,
            },
            sourceEventSeqs=[4],
            surfaceOp="append",
        ),
        ev(
            "tool/result",
            6,
            {
                "turn": 1,
                "step": 1,
                "callId": "call-1",
                "content": [{"type": "text", "text": "pruned"}],
                "isError": False,
            },
            sourceEventSeqs=[5],
            surfaceOp={"op": "replace", "start": 5, "end": 5},
        ),
        ev("step/end", 7, {"turn": 1, "step": 1}),
        ev("turn/end", 8, {"turn": 1, "reason": {"kind": "completed"}}),
    ]


MESSAGE_TRIGGER = {"kind": "message", "source": {"kind": "user"}}


def pre_react_loop_log() -> list[dict[str, Any]]:
    """A complete log in the durable event vocabulary of the react-loop refactor base."""
    prompt = user_msg("old prompt", id="prompt-id")
    steering = user_msg("old steering", id="steering-id")
    return [
        ev("turn/start", 0, {"turn": 1, "trigger": MESSAGE_TRIGGER}),
        ev("user/message", 1, prompt, surfaceOp="append"),
        ev("step/start", 2, {"turn": 1, "step": 1}),
        ev("steering/message", 3, {"turn": 1, "message": steering}, surfaceOp="append"),
        ev("step/end", 4, {"turn": 1, "step": 1}),
        ev("turn/end", 5, {"turn": 1, "reason": {"kind": "completed"}}),
        ev("turn/start", 6, {"turn": 2, "trigger": {"kind": "retry"}}),
        ev("step/start", 7, {"turn": 2, "step": 1}),
        ev("step/end", 8, {"turn": 2, "step": 1}),
        ev(
            "turn/end",
            9,
            {
                "turn": 2,
                "reason": {
                    "kind": "error",
                    "step": 1,
                    "failure": {"message": "old provider failure", "code": "SERVER"},
                },
            },
        ),
        ev("turn/start", 10, {"turn": 3, "trigger": MESSAGE_TRIGGER}),
        ev("turn/end", 11, {"turn": 3, "reason": {"kind": "aborted"}}),
        ev("turn/start", 12, {"turn": 4, "trigger": MESSAGE_TRIGGER}),
        ev("turn/end", 13, {"turn": 4, "reason": {"kind": "disposed"}}),
        ev("turn/start", 14, {"turn": 5, "trigger": MESSAGE_TRIGGER}),
        ev("step/start", 15, {"turn": 5, "step": 1}),
        ev("step/end", 16, {"turn": 5, "step": 1}),
        ev("turn/end", 17, {"turn": 5, "reason": {"kind": "error", "step": 1, "message": "old thrown value"}}),
        ev("turn/start", 18, {"turn": 6, "trigger": MESSAGE_TRIGGER}),
        ev(
            "turn/end",
            19,
            {
                "turn": 6,
                "reason": {
                    "kind": "error",
                    "step": 0,
                    "failure": {
                        "message": "old detailed provider failure",
                        "code": "RATE_LIMIT",
                        "status": 429,
                        "providerRetryAfterMs": 1000,
                        "requestId": "request-1",
                    },
                },
            },
        ),
        ev("turn/start", 20, {"turn": 7, "trigger": MESSAGE_TRIGGER}),
        ev(
            "turn/end",
            21,
            {"turn": 7, "reason": {"kind": "error", "step": 0, "message": "old coded error", "code": "CODED"}},
        ),
    ]


# --- item 51: pre-identity message logs ------------------------------------------------------------


def test_item_51_pre_identity_messages_get_legacy_ids_and_replacement_inherits() -> None:
    sid = "legacy-message-load"
    events = normalize_stored_events(sid, legacy_message_log())
    messages = [message_of(e) for e in events if e["type"] in ("user/message", "assistant/message", "tool/result")]
    assert [m["id"] for m in messages] == [
        f"legacy-message:{sid}:1",
        f"legacy-message:{sid}:3",
        f"legacy-message:{sid}:5",
        f"legacy-message:{sid}:5",  # the replacement at seq 6 inherits the id of seq 5
    ]
    session = restore(sid, events)
    assert [m["id"] for m in session.derive_messages()] == [
        f"legacy-message:{sid}:1",
        f"legacy-message:{sid}:3",
        f"legacy-message:{sid}:5",
    ]
    # Resumable: the current vocabulary appends on top.
    session.append("turn/start", {"turn": 2})


def test_item_51_exact_migrated_shapes_and_key_order() -> None:
    sid = "legacy-message-load"
    events = normalize_stored_events(sid, legacy_message_log())
    assert dump(events[1]) == dump(
        {
            "type": "user/message",
            "seq": 1,
            "time": 2,
            "data": {
                "content": [{"type": "text", "text": "hi"}],
                "source": {"kind": "user"},
                "id": f"legacy-message:{sid}:1",
                "role": "user",
            },
            "surfaceOp": "append",
        }
    )
    assert dump(events[3]["data"]) == dump(
        {
            "turn": 1,
            "step": 1,
            "message": {
                "id": f"legacy-message:{sid}:3",
                "role": "assistant",
                "content": [{"type": "tool-call", "id": "call-1", "name": "read", "arguments": "{}"}],
                "source": {"provider": "mock", "model": "mock", "kind": "model"},
            },
        }
    )
    assert dump(events[6]) == dump(
        {
            "type": "tool/result",
            "seq": 6,
            "time": 7,
            "data": {
                "turn": 1,
                "step": 1,
                "message": {
                    "id": f"legacy-message:{sid}:5",
                    "role": "user",
                    "content": [
                        {
                            "type": "tool-result",
                            "toolCallId": "call-1",
                            "content": [{"type": "text", "text": "pruned"}],
                            "isError": False,
                        }
                    ],
                    "source": {"kind": "tool", "callId": "call-1"},
                },
            },
            "sourceEventSeqs": [5],
            "surfaceOp": {"op": "replace", "start": 5, "end": 5},
        }
    )


def test_item_51_suffix_read_needs_the_prefix_and_carries_the_inherited_id() -> None:
    sid = "legacy-message-load"
    stored = legacy_message_log()
    suffix = stored[6:]
    # A suffix read (readFrom 6) cannot normalise alone: the replaced id lives at seq 5.
    assert any(needs_legacy_prefix(event) for event in suffix)
    alone = normalize_stored_events(sid, copy.deepcopy(suffix))
    assert "id" not in alone[0]["data"]["message"]
    whole = [e for e in normalize_stored_events(sid, stored) if e["seq"] >= 6]
    assert whole[0]["type"] == "tool/result"
    assert whole[0]["seq"] == 6
    assert whole[0]["data"]["message"]["id"] == f"legacy-message:{sid}:5"


# --- item 52: pre-react-loop logs ------------------------------------------------------------------


EXPECTED_TURN_ENDS = [
    {"turn": 1, "reason": {"kind": "completed"}},
    {"turn": 2, "reason": {"kind": "error", "error": {"message": "old provider failure", "code": "SERVER"}}},
    {"turn": 3, "reason": {"kind": "aborted", "reason": {"kind": "legacy"}}},
    {"turn": 4, "reason": {"kind": "aborted", "reason": {"kind": "disposed"}}},
    {"turn": 5, "reason": {"kind": "error", "error": {"message": "old thrown value", "code": "UNKNOWN"}}},
    {
        "turn": 6,
        "reason": {
            "kind": "error",
            "error": {
                "message": "old detailed provider failure",
                "code": "RATE_LIMIT",
                "status": 429,
                "providerRetryAfterMs": 1000,
                "requestId": "request-1",
            },
        },
    },
    {"turn": 7, "reason": {"kind": "error", "error": {"message": "old coded error", "code": "CODED"}}},
]


def test_item_52_pre_react_loop_log_normalises_and_resumes() -> None:
    sid = "pre-react-loop-load"
    events = normalize_stored_events(sid, pre_react_loop_log())
    assert not any(e["type"] == "steering/message" for e in events)
    assert [e["data"] for e in events if e["type"] == "turn/start"] == [{"turn": n} for n in range(1, 8)]
    turn_ends = [e["data"] for e in events if e["type"] == "turn/end"]
    assert [dump(d) for d in turn_ends] == [dump(d) for d in EXPECTED_TURN_ENDS]
    assert all("step" not in d for d in turn_ends)
    session = restore(sid, events)
    assert [list(m["content"]) for m in session.derive_messages()] == [
        [{"type": "text", "text": "old prompt"}],
        [{"type": "text", "text": "old steering"}],
    ]


def test_item_52_suffix_from_steering_keeps_the_wrapped_id() -> None:
    sid = "pre-react-loop-load"
    stored = pre_react_loop_log()
    assert needs_legacy_prefix(stored[3])
    suffix = [e for e in normalize_stored_events(sid, stored) if e["seq"] >= 3]
    assert suffix[0]["type"] == "user/message"
    assert suffix[0]["seq"] == 3
    assert suffix[0]["data"]["id"] == "steering-id"
    assert suffix[0]["surfaceOp"] == "append"


def test_item_52_flat_steering_becomes_identified_user_message() -> None:
    flat_id = "pre-react-loop-flat-steering"
    event = ev(
        "steering/message",
        0,
        {"turn": 1, "content": [{"type": "text", "text": "flat steering"}], "source": {"kind": "user"}},
        surfaceOp="append",
    )
    out = normalize_one(event, flat_id)
    assert dump(out) == dump(
        {
            "type": "user/message",
            "seq": 0,
            "time": 1,
            "data": {
                "content": [{"type": "text", "text": "flat steering"}],
                "source": {"kind": "user"},
                "id": f"legacy-message:{flat_id}:0",
                "role": "user",
            },
            "surfaceOp": "append",
        }
    )
    adopt_session_event(out)


def test_item_52_unknown_turn_end_reason_kind_is_preserved() -> None:
    events = [
        ev("turn/start", 0, {"turn": 1}),
        ev("turn/end", 1, {"turn": 1, "reason": {"kind": "extension-reason"}}),
    ]
    originals = list(events)
    out = normalize_stored_events("current-extended-turn-end", events)
    assert out[1] is originals[1]
    assert out[1]["data"] == {"turn": 1, "reason": {"kind": "extension-reason"}}


# --- turn/start ------------------------------------------------------------------------------------


def test_turn_start_trigger_is_removed_keeping_the_envelope() -> None:
    event = {"seq": 4, "type": "turn/start", "time": 9, "data": {"trigger": {"kind": "retry"}, "turn": 2}}
    out = normalize_one(event)
    assert list(out) == ["seq", "type", "time", "data"]
    assert out["data"] == {"turn": 2}
    assert event["data"] == {"trigger": {"kind": "retry"}, "turn": 2}, "the caller's nested data is not mutated"


@pytest.mark.parametrize(
    "data",
    [
        {"turn": 1, "trigger": None},
        {"turn": 1, "trigger": []},
        {"turn": 1, "trigger": {}},
        {"turn": 1, "trigger": {"kind": ""}},
        {"turn": 1, "trigger": {"kind": 3}},
        {"turn": 0, "trigger": {"kind": "retry"}},
        {"turn": 1.5, "trigger": {"kind": "retry"}},
        {"turn": "1", "trigger": {"kind": "retry"}},
        {"turn": True, "trigger": {"kind": "retry"}},
        {"turn": 2**53, "trigger": {"kind": "retry"}},
        {"trigger": {"kind": "retry"}},
        {"turn": 1, "trigger": {"kind": "retry"}, "extra": True},
    ],
)
def test_malformed_legacy_turn_start(data: Any) -> None:
    with pytest.raises(MessageShapeError) as info:
        normalize_one(ev("turn/start", 7, data), "invalid-old-turn-start")
    assert str(info.value) == 'session "invalid-old-turn-start" contains malformed pre-react-loop turn/start at seq 7'


@pytest.mark.parametrize("data", [{"turn": 1}, {"turn": 0}, None, [1], "x", {"turn": 1, "step": 2}])
def test_turn_start_without_trigger_is_untouched(data: Any) -> None:
    event = ev("turn/start", 0, data)
    assert normalize_one(event) is event


def test_turn_start_accepts_integral_float_turn_like_js() -> None:
    out = normalize_one(ev("turn/start", 0, {"turn": 3.0, "trigger": {"kind": "message"}}))
    assert out["data"] == {"turn": 3}


# --- turn/end --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        ({"kind": "completed"}, None),
        ({"kind": "blocked"}, None),
        ({"kind": "max-tokens"}, None),
        ({"kind": "interrupted"}, None),
        ({"kind": "aborted", "reason": {"kind": "user"}}, None),
        ({"kind": "aborted", "reason": None, "extra": 1}, None),  # has `reason`: kept as written
        ({"kind": "error", "error": {"message": "m", "code": "C"}}, None),
        ({"kind": "error", "error": 1, "step": "junk"}, None),  # has `error`: kept as written
        ({"kind": "extension-reason", "anything": [1]}, None),
        ({"kind": "aborted"}, {"kind": "aborted", "reason": {"kind": "legacy"}}),
        ({"kind": "disposed"}, {"kind": "aborted", "reason": {"kind": "disposed"}}),
        (
            {"kind": "error", "step": 0, "message": "boom"},
            {"kind": "error", "error": {"message": "boom", "code": "UNKNOWN"}},
        ),
        (
            {"code": "X", "message": "boom", "step": 3, "kind": "error"},
            {"kind": "error", "error": {"message": "boom", "code": "X"}},
        ),
        (
            {"kind": "error", "step": 2, "failure": {"code": "C", "message": "m"}},
            {"kind": "error", "error": {"code": "C", "message": "m"}},
        ),
        (
            {"kind": "error", "step": 2, "failure": {"message": "m", "code": "C", "status": 1.5}},
            {"kind": "error", "error": {"message": "m", "code": "C", "status": 1.5}},
        ),
    ],
)
def test_turn_end_reason_mappings(reason: dict[str, Any], expected: dict[str, Any] | None) -> None:
    event = ev("turn/end", 3, {"turn": 1, "reason": reason}, ignorable=True)
    before = dump(event)
    out = normalize_one(event)
    if expected is None:
        assert out is event
        assert dump(out) == before
    else:
        assert out is not event
        assert dump(out) == dump(ev("turn/end", 3, {"turn": 1, "reason": expected}, ignorable=True))
        assert dump(event) == before, "the caller's event is not mutated"


def test_turn_end_empty_string_code_is_kept_not_defaulted() -> None:
    out = normalize_one(
        ev("turn/end", 0, {"turn": 1, "reason": {"kind": "error", "step": 0, "message": "", "code": ""}})
    )
    assert out["data"]["reason"] == {"kind": "error", "error": {"message": "", "code": ""}}


def test_turn_end_keeps_written_data_key_order() -> None:
    out = normalize_one(ev("turn/end", 0, {"reason": {"kind": "disposed"}, "turn": 4}))
    assert list(out["data"]) == ["reason", "turn"]


def test_turn_end_failure_object_is_reused_as_the_error() -> None:
    failure = {"message": "m", "code": "C", "requestId": "r"}
    out = normalize_one(ev("turn/end", 0, {"turn": 1, "reason": {"kind": "error", "step": 0, "failure": failure}}))
    assert out["data"]["reason"]["error"] is failure


MALFORMED_TURN_ENDS: list[Any] = [
    # from the original's conformance test
    {"turn": 1, "reason": {"kind": "completed", "extra": True}},
    {"turn": 1, "reason": None},
    {"turn": 1, "step": 1, "reason": {"kind": "completed"}},
    {"turn": 1, "reason": {"kind": "aborted", "extra": True}},
    {"turn": 1, "reason": {"kind": "disposed", "extra": True}},
    {"turn": 1, "reason": {"kind": "error", "step": -1, "message": "bad step"}},
    {"turn": 1, "reason": {"kind": "error", "step": 0, "message": "bad code", "code": 1}},
    # the remaining rules of §3.6
    {},
    {"turn": 0, "reason": {"kind": "completed"}},
    {"turn": 1.5, "reason": {"kind": "completed"}},
    {"turn": "1", "reason": {"kind": "completed"}},
    {"reason": {"kind": "completed"}},
    {"turn": 1},
    {"turn": 1, "reason": {}},
    {"turn": 1, "reason": {"kind": 1}},
    {"turn": 1, "reason": ["completed"]},
    {"turn": 1, "reason": {"kind": "error", "message": "no step"}},
    {"turn": 1, "reason": {"kind": "error", "step": 1.5, "message": "m"}},
    {"turn": 1, "reason": {"kind": "error", "step": 0}},
    {"turn": 1, "reason": {"kind": "error", "step": 0, "message": 3}},
    {"turn": 1, "reason": {"kind": "error", "step": 0, "message": "m", "code": None}},
    {"turn": 1, "reason": {"kind": "error", "step": 0, "message": "m", "extra": 1}},
    {"turn": 1, "reason": {"kind": "error", "step": 0, "failure": {"message": "m"}}},
    {"turn": 1, "reason": {"kind": "error", "step": 0, "failure": {"message": "m", "code": 1}}},
    {"turn": 1, "reason": {"kind": "error", "step": 0, "failure": {"message": "m", "code": "C", "x": 1}}},
    {"turn": 1, "reason": {"kind": "error", "step": 0, "failure": {"message": "m", "code": "C", "status": "429"}}},
    {"turn": 1, "reason": {"kind": "error", "step": 0, "failure": {"message": "m", "code": "C", "status": None}}},
    {"turn": 1, "reason": {"kind": "error", "step": 0, "failure": {"message": "m", "code": "C", "status": True}}},
    {
        "turn": 1,
        "reason": {"kind": "error", "step": 0, "failure": {"message": "m", "code": "C", "providerRetryAfterMs": "1"}},
    },
    {"turn": 1, "reason": {"kind": "error", "step": 0, "failure": {"message": "m", "code": "C", "requestId": 1}}},
    {"turn": 1, "reason": {"kind": "error", "step": 0, "failure": {"message": "m", "code": "C"}, "message": "m"}},
    {"turn": 1, "reason": {"kind": "error", "step": 0, "failure": None}},
]


@pytest.mark.parametrize("data", MALFORMED_TURN_ENDS)
def test_malformed_turn_end(data: Any) -> None:
    with pytest.raises(MessageShapeError) as info:
        normalize_one(ev("turn/end", 0, data), "invalid-old-turn-end")
    assert str(info.value) == 'session "invalid-old-turn-end" contains malformed pre-react-loop turn/end at seq 0'


@pytest.mark.parametrize("data", [None, [1], "text", 3])
def test_turn_end_with_non_object_data_is_left_for_validation(data: Any) -> None:
    event = ev("turn/end", 0, data)
    assert normalize_one(event) is event


# --- steering/message ------------------------------------------------------------------------------


def test_wrapped_steering_without_id_gets_the_legacy_id_through_the_message_upgrade() -> None:
    wrapped = {"content": [], "source": {"kind": "user"}}
    out = normalize_one(ev("steering/message", 5, {"turn": 2, "message": wrapped}, surfaceOp="append"), "s")
    assert out["type"] == "user/message"
    assert dump(out["data"]) == dump(
        {"content": [], "source": {"kind": "user"}, "id": "legacy-message:s:5", "role": "user"}
    )


def test_wrapped_steering_keeps_the_message_object_and_envelope() -> None:
    wrapped = user_msg("x", id="kept")
    event = {"time": 1, "seq": 0, "type": "steering/message", "data": {"message": wrapped, "turn": 1}}
    out = normalize_one(event)
    assert list(out) == ["time", "seq", "type", "data"]
    assert out["type"] == "user/message"
    assert out["data"] is wrapped
    assert event["type"] == "steering/message", "the caller's event is not mutated"


@pytest.mark.parametrize(
    "data",
    [
        None,
        [],
        "x",
        {},
        {"turn": 1, "content": [], "source": {"kind": "user"}, "extra": True},
        {"turn": 1, "content": []},
        {"turn": "1", "content": [], "source": {"kind": "user"}},
        {"turn": 1.5, "content": [], "source": {"kind": "user"}},
        {"content": [], "source": {"kind": "user"}},
        {"turn": 1, "message": "not an object"},
        {"turn": 1, "message": None},
        {"turn": "1", "message": {"id": "m"}},
        {"turn": 1, "message": {"id": "m"}, "extra": 1},
    ],
)
def test_malformed_steering(data: Any) -> None:
    with pytest.raises(MessageShapeError) as info:
        normalize_one(ev("steering/message", 0, data, surfaceOp="append"), "invalid-old-steering")
    assert (
        str(info.value) == 'session "invalid-old-steering" contains malformed pre-react-loop steering/message at seq 0'
    )


def test_steering_turn_may_be_zero_or_negative() -> None:
    # §3.6 requires only a safe integer for steering (unlike turn/start and turn/end).
    out = normalize_one(ev("steering/message", 0, {"turn": -3, "content": [], "source": {"kind": "user"}}))
    assert out["data"]["id"] == f"legacy-message:{SID}:0"


# --- pre-identity messages --------------------------------------------------------------------------


def test_legacy_user_message_appends_id_and_role_after_existing_keys() -> None:
    data = {"source": {"kind": "user"}, "extra": 1, "content": []}
    out = normalize_one(ev("user/message", 12, data, surfaceOp="append"), "abc")
    assert list(out["data"]) == ["source", "extra", "content", "id", "role"]
    assert out["data"]["id"] == "legacy-message:abc:12"
    assert out["data"]["role"] == "user"
    assert "id" not in data


@pytest.mark.parametrize(
    "data",
    [
        {"content": [], "source": {"kind": "user"}, "id": "m", "role": "user"},
        {"content": [], "source": {"kind": "user"}, "role": "user"},  # role without id: left for validation
        {"content": [], "source": {"kind": "user"}, "message": {}},
        {"content": []},
        {"source": {"kind": "user"}},
        {},
        None,
        [],
    ],
)
def test_user_message_that_is_not_pre_identity_is_untouched(data: Any) -> None:
    event = ev("user/message", 0, data, surfaceOp="append")
    assert normalize_one(event) is event


def test_legacy_assistant_message_merges_provenance_into_a_model_source() -> None:
    data = {
        "provenance": {"kind": "old", "provider": "p", "model": "m"},
        "turn": 1,
        "content": [{"type": "text", "text": "x"}],
        "usage": {"input": 1},
    }
    out = normalize_one(ev("assistant/message", 2, data, surfaceOp="append"), "abc")
    assert dump(out["data"]) == dump(
        {
            "turn": 1,
            "usage": {"input": 1},
            "message": {
                "id": "legacy-message:abc:2",
                "role": "assistant",
                "content": [{"type": "text", "text": "x"}],
                "source": {"kind": "model", "provider": "p", "model": "m"},
            },
        }
    )


@pytest.mark.parametrize("provenance", [None, "x", [1, 2], 3])
def test_legacy_assistant_message_with_non_object_provenance(provenance: Any) -> None:
    out = normalize_one(ev("assistant/message", 0, {"content": [], "provenance": provenance}))
    assert out["data"]["message"]["source"] == {"kind": "model"}
    # ...which the message validation then refuses (no provider/model).
    with pytest.raises(MessageShapeError, match="message must have model source"):
        adopt_session_event(out)


@pytest.mark.parametrize(
    "data",
    [
        {"message": None, "content": [], "provenance": {}},
        {"content": []},
        {"provenance": {}},
        None,
    ],
)
def test_assistant_message_that_is_not_pre_identity_is_untouched(data: Any) -> None:
    event = ev("assistant/message", 0, data)
    assert normalize_one(event) is event


def test_legacy_tool_result_shape() -> None:
    data = {"callId": "c", "turn": 1, "content": [{"type": "text", "text": "r"}], "isError": True, "meta": {"a": 1}}
    out = normalize_one(ev("tool/result", 4, data, surfaceOp="append"), "abc")
    assert dump(out["data"]) == dump(
        {
            "turn": 1,
            "meta": {"a": 1},
            "message": {
                "id": "legacy-message:abc:4",
                "role": "user",
                "content": [
                    {
                        "type": "tool-result",
                        "toolCallId": "c",
                        "content": [{"type": "text", "text": "r"}],
                        "isError": True,
                    }
                ],
                "source": {"kind": "tool", "callId": "c"},
            },
        }
    )
    adopt_session_event(out)


@pytest.mark.parametrize(
    "data",
    [
        {"message": None, "callId": "c", "content": [], "isError": False},
        {"callId": "c", "content": []},
        {"callId": "c", "isError": False},
        {"content": [], "isError": False},
        None,
    ],
)
def test_tool_result_that_is_not_pre_identity_is_untouched(data: Any) -> None:
    event = ev("tool/result", 0, data)
    assert normalize_one(event) is event


def legacy_tool_result(seq: int, surface_op: Any) -> dict[str, Any]:
    data = {"callId": "c", "content": [{"type": "text", "text": str(seq)}], "isError": False}
    return ev("tool/result", seq, data, surfaceOp=surface_op)


def test_replacement_inherits_a_current_format_target_id() -> None:
    current = ev(
        "tool/result",
        0,
        {"message": {"id": "current-id", "role": "user", "content": [], "source": {"kind": "tool", "callId": "c"}}},
        surfaceOp="append",
    )
    events = normalize_stored_events(SID, [current, legacy_tool_result(1, {"op": "replace", "start": 0, "end": 0})])
    assert events[1]["data"]["message"]["id"] == "current-id"


def test_replacement_inherits_a_user_message_id_and_the_latest_record_for_a_seq() -> None:
    events = normalize_stored_events(
        SID,
        [
            ev("user/message", 0, {"id": "first", "content": [], "source": {"kind": "user"}, "role": "user"}),
            ev("tool/result", 1, {"message": {"id": "other"}}),
            ev("user/message", 0, {"id": "again", "content": [], "source": {"kind": "user"}, "role": "user"}),
            legacy_tool_result(3, {"op": "replace", "start": 0, "end": 0}),
            legacy_tool_result(4, {"op": "replace", "start": 1.0, "end": 1}),
        ],
    )
    assert events[3]["data"]["message"]["id"] == "again"
    assert events[4]["data"]["message"]["id"] == "other"


def test_replacement_inherits_a_chain_of_legacy_replacements() -> None:
    events = normalize_stored_events(
        "chain",
        [
            legacy_tool_result(0, "append"),
            legacy_tool_result(1, {"op": "replace", "start": 0, "end": 0}),
            legacy_tool_result(2, {"op": "replace", "start": 1, "end": 1}),
        ],
    )
    assert [e["data"]["message"]["id"] for e in events] == ["legacy-message:chain:0"] * 3


@pytest.mark.parametrize(
    "surface_op",
    [
        "append",
        None,
        {"op": "replace"},
        {"op": "replace", "start": "0"},
        {"op": "replace", "start": True},
        {"start": 0},
    ],
)
def test_tool_result_without_numeric_replacement_start_gets_its_own_id(surface_op: Any) -> None:
    events = normalize_stored_events(SID, [legacy_tool_result(0, "append"), legacy_tool_result(1, surface_op)])
    assert events[1]["data"]["message"]["id"] == legacy_message_id(SID, 1)


@pytest.mark.parametrize("start", [0, 1, 7, -1, 0.5])
def test_replacement_of_a_seq_without_a_message_id_fails_validation(start: Any) -> None:
    # seq 0 carries no message; seq 1 is the event itself (ids are recorded only after an event);
    # 7 lies in the future. The original's id is `undefined`; the message validation refuses it.
    events = normalize_stored_events(
        SID,
        [
            ev("turn/start", 0, {"turn": 1}),
            legacy_tool_result(1, {"op": "replace", "start": start, "end": 1}),
        ],
    )
    message = events[1]["data"]["message"]
    assert "id" not in message
    assert list(message) == ["role", "content", "source"]
    with pytest.raises(MessageShapeError, match="lacks an identified message"):
        adopt_session_event(events[1])


def test_ids_recorded_for_damaged_events_are_skipped() -> None:
    events: list[Any] = [
        ["not", "an", "event"],
        {"seq": [0], "type": "user/message", "data": {"id": "x"}},
        {"type": "user/message", "data": {"id": "no-seq"}},
        ev("user/message", 3, {"id": 5}),
        legacy_tool_result(4, {"op": "replace", "start": 3, "end": 3}),
    ]
    out = normalize_stored_events(SID, events)
    assert "id" not in out[4]["data"]["message"]


# --- item 53: malformed persisted message events ---------------------------------------------------


def test_item_53_role_mismatch_is_left_for_message_validation() -> None:
    event = ev(
        "user/message",
        0,
        {
            "id": "wrong-role",
            "role": "assistant",
            "content": [{"type": "text", "text": "wrong"}],
            "source": {"kind": "user"},
        },
        surfaceOp="append",
    )
    assert normalize_one(event) is event
    with pytest.raises(MessageShapeError, match=re.escape('message must have role "user"')):
        adopt_session_event(event)


@pytest.mark.parametrize(
    ("type", "data"),
    [("tool/result", {"message": None}), ("user/message", {}), ("assistant/message", {})],
)
def test_item_53_unidentified_messages_are_left_for_message_validation(type: str, data: Any) -> None:
    event = ev(type, 0, data, surfaceOp="append")
    assert normalize_one(event) is event
    with pytest.raises(MessageShapeError, match="lacks an identified message"):
        adopt_session_event(event)


@pytest.mark.parametrize(
    ("session_id", "event", "text"),
    [
        ("invalid-old-turn-start", ev("turn/start", 0, {"turn": 1, "trigger": None}), "turn/start"),
        (
            "invalid-old-steering",
            ev("steering/message", 0, {"turn": 1, "content": [], "source": {"kind": "user"}, "extra": True}),
            "steering/message",
        ),
        ("invalid-old-steering-data", ev("steering/message", 0, None), "steering/message"),
        (
            "invalid-old-turn-end",
            ev("turn/end", 0, {"turn": 1, "reason": {"kind": "completed", "extra": True}}),
            "turn/end",
        ),
        ("invalid-old-turn-end-reason", ev("turn/end", 0, {"turn": 1, "reason": None}), "turn/end"),
        (
            "unsupported-intermediate-turn-end-step",
            ev("turn/end", 0, {"turn": 1, "step": 1, "reason": {"kind": "completed"}}),
            "turn/end",
        ),
        (
            "invalid-old-turn-end-aborted",
            ev("turn/end", 0, {"turn": 1, "reason": {"kind": "aborted", "extra": True}}),
            "turn/end",
        ),
        (
            "invalid-old-turn-end-disposed",
            ev("turn/end", 0, {"turn": 1, "reason": {"kind": "disposed", "extra": True}}),
            "turn/end",
        ),
        (
            "invalid-old-turn-end-error-step",
            ev("turn/end", 0, {"turn": 1, "reason": {"kind": "error", "step": -1, "message": "bad step"}}),
            "turn/end",
        ),
        (
            "invalid-old-turn-end-error-code",
            ev("turn/end", 0, {"turn": 1, "reason": {"kind": "error", "step": 0, "message": "bad code", "code": 1}}),
            "turn/end",
        ),
    ],
)
def test_item_53_each_malformed_legacy_record(session_id: str, event: dict[str, Any], text: str) -> None:
    with pytest.raises(MessageShapeError) as info:
        normalize_stored_events(session_id, [event])
    assert str(info.value) == f'session "{session_id}" contains malformed pre-react-loop {text} at seq 0'
    assert info.value.code == "INVALID_MESSAGE"


def test_item_53_ignorable_unknown_plugin_event_with_null_data_passes() -> None:
    event = ev("plugin/test", 0, None, ignorable=True)
    events = normalize_stored_events("non-object-plugin-event", [event], adopt=adopt_session_event)
    assert events[0] is event
    assert_events_known("non-object-plugin-event", events)
    assert event == {"type": "plugin/test", "seq": 0, "time": 1, "data": None, "ignorable": True}


def test_malformed_record_reports_the_seq_and_id_as_js_renders_them() -> None:
    with pytest.raises(MessageShapeError) as info:
        normalize_stored_events(42, [{"type": "turn/start", "seq": 3.0, "data": {"trigger": 1}}])
    assert str(info.value) == 'session "42" contains malformed pre-react-loop turn/start at seq 3'
    with pytest.raises(MessageShapeError) as info:
        normalize_stored_events("s", [{"type": "turn/start", "data": {"trigger": 1}}])
    assert str(info.value).endswith("at seq undefined")


# --- the pass as a whole ---------------------------------------------------------------------------


def test_normalise_returns_the_same_list_and_replaces_only_migrated_entries() -> None:
    events = pre_react_loop_log()
    originals = list(events)
    out = normalize_stored_events(SID, events)
    assert out is events
    migrated = {0, 3, 6, 9, 10, 11, 12, 13, 14, 17, 18, 19, 20, 21}
    for index, (before, after) in enumerate(zip(originals, out, strict=True)):
        assert (after is not before) == (index in migrated), index


def test_normalise_is_idempotent() -> None:
    once = normalize_stored_events(SID, legacy_message_log() + pre_react_loop_log())
    snapshot = dump(once)
    twice = normalize_stored_events(SID, list(once))
    assert all(a is b for a, b in zip(once, twice, strict=True))
    assert dump(twice) == snapshot


def test_damaged_entries_pass_through_untouched() -> None:
    events: list[Any] = [None, 3, "text", ["type"], {}, {"type": ["unhashable"]}, {"type": None, "data": {}}]
    originals = list(events)
    out = normalize_stored_events(SID, events)
    assert all(a is b for a, b in zip(originals, out, strict=True))


def test_adopt_runs_per_event_in_seq_order() -> None:
    bad_message = ev("user/message", 0, {"id": "m", "role": "assistant", "content": [], "source": {"kind": "user"}})
    bad_legacy = ev("turn/end", 1, {"turn": 1, "reason": None})
    # Without adopt, only migrations run: the legacy record (seq 1) is the only refusal.
    with pytest.raises(MessageShapeError, match="pre-react-loop turn/end at seq 1"):
        normalize_stored_events(SID, [copy.deepcopy(bad_message), copy.deepcopy(bad_legacy)])
    # With adopt, the lower seq's problem is reported first, as in the original's interleaved loop.
    with pytest.raises(MessageShapeError, match='seq 0 message must have role "user"'):
        normalize_stored_events(SID, [bad_message, bad_legacy], adopt=adopt_session_event)


def test_adopt_sees_migrated_events_and_its_result_is_stored() -> None:
    seen: list[Any] = []

    def adopt(event: dict[str, Any]) -> dict[str, Any]:
        seen.append(event)
        return {"adopted": event["seq"]}

    events = [
        ev("turn/start", 0, {"turn": 1, "trigger": {"kind": "retry"}}),
        ev("step/start", 1, {"turn": 1, "step": 1}),
    ]
    out = normalize_stored_events(SID, events, adopt=adopt)
    assert seen[0]["data"] == {"turn": 1}
    assert out == [{"adopted": 0}, {"adopted": 1}]


def test_adopt_path_tracks_ids_of_adopted_events() -> None:
    events = normalize_stored_events(
        "adopted",
        [legacy_tool_result(0, "append"), legacy_tool_result(1, {"op": "replace", "start": 0, "end": 0})],
        adopt=adopt_session_event,
    )
    assert events[1]["data"]["message"]["id"] == "legacy-message:adopted:0"


def test_legacy_message_id_renders_like_js() -> None:
    assert legacy_message_id("s", 3) == "legacy-message:s:3"
    assert legacy_message_id(7, 3.0) == "legacy-message:7:3"


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        (ev("steering/message", 0, None), True),
        (ev("user/message", 0, {"content": []}), True),
        (ev("user/message", 0, {"content": [], "id": "m"}), False),
        (ev("user/message", 0, {"source": {}}), False),
        (ev("assistant/message", 0, {"content": []}), True),
        (ev("assistant/message", 0, {"content": [], "message": {}}), False),
        (ev("tool/result", 0, {"callId": "c"}), True),
        (ev("tool/result", 0, {"callId": "c", "message": {}}), False),
        (ev("tool/result", 0, None), False),
        (ev("turn/start", 0, {"turn": 1, "trigger": {"kind": "x"}}), False),
        (ev("turn/end", 0, {"turn": 1, "reason": {"kind": "disposed"}}), False),
    ],
)
def test_needs_legacy_prefix(event: dict[str, Any], expected: bool) -> None:
    assert needs_legacy_prefix(event) is expected


# --- removed vocabulary (items 130–134, 160–161) ---------------------------------------------------


def test_item_130_a_live_header_delta_batch_is_refused() -> None:
    batch = [ev("request/header-delta", 0, {"delta": {}})]
    with pytest.raises(LegacyFormatError) as info:
        assert_supported_events("legacy-live", batch)
    assert str(info.value) == 'session "legacy-live" contains unsupported legacy request/header-delta event at seq 0'
    assert info.value.code == "UNSUPPORTED_LEGACY_FORMAT"
    assert isinstance(info.value, InvalidEventError)
    assert not isinstance(info.value, PersistenceError)


def test_item_131_a_live_fallback_header_batch_is_refused() -> None:
    batch = [ev("turn/start", 0, {"turn": 1}), ev("request/header", 1, {"reason": "fallback", "header": {}})]
    with pytest.raises(LegacyFormatError) as info:
        assert_supported_events("legacy-live-fallback", batch)
    assert str(info.value) == (
        'session "legacy-live-fallback" contains unsupported legacy request/header reason "fallback" at seq 1'
    )


def test_item_132_a_stored_prefix_with_a_header_delta_is_refused() -> None:
    with pytest.raises(LegacyFormatError, match=r"unsupported legacy request/header-delta event at seq 0"):
        assert_supported_events("hmr", [ev("request/header-delta", 0, {})])


def test_item_133_and_161_a_stored_fallback_header_is_refused() -> None:
    stored = [ev("request/header", 0, {"header": {"config": {"provider": "p", "model": "m"}}, "reason": "fallback"})]
    with pytest.raises(LegacyFormatError, match=r'unsupported legacy request/header reason "fallback" at seq 0'):
        assert_supported_events("fallback", stored)


def test_item_134_a_stored_named_mode_event_is_refused() -> None:
    with pytest.raises(LegacyFormatError) as info:
        assert_supported_events("mode", [ev("mode/set", 0, {"mode": "plan"})])
    assert str(info.value) == 'session "mode" contains unsupported legacy mode/set event at seq 0'


def test_item_160_a_header_delta_after_a_valid_event_reports_its_seq() -> None:
    with pytest.raises(LegacyFormatError, match=r"unsupported legacy request/header-delta event at seq 1"):
        assert_supported_events("v0", [ev("turn/start", 0, {"turn": 1}), ev("request/header-delta", 1, {})])


def test_removed_vocabulary_priority_follows_the_original() -> None:
    # Searched separately: header-delta anywhere, then mode/set, then the fallback header.
    log = [
        ev("request/header", 0, {"reason": "fallback"}),
        ev("mode/set", 1, {}),
        ev("mode/set", 2, {}),
        ev("request/header-delta", 3, {}),
        ev("request/header-delta", 4, {}),
    ]
    with pytest.raises(LegacyFormatError, match=r"request/header-delta event at seq 3$"):
        assert_supported_events(SID, log)
    with pytest.raises(LegacyFormatError, match=r"mode/set event at seq 1$"):
        assert_supported_events(SID, log[:3])
    with pytest.raises(LegacyFormatError, match=r'"fallback" at seq 0$'):
        assert_supported_events(SID, [*log[:1], ev("request/header", 5, {"reason": "fallback"})])


@pytest.mark.parametrize(
    "events",
    [
        [],
        [ev("request/header", 0, {"reason": "initial"})],
        [ev("request/header", 0, None)],
        [ev("request/header", 0, "fallback")],
        [ev("request/header", 0, {"header": {"reason": "fallback"}})],
        [ev("request/context", 0, {"reason": "fallback"})],
        [ev("mode/sets", 0, {})],
        [{"type": ["mode/set"], "seq": 0}],
        [{"seq": 0}],
    ],
)
def test_supported_logs_pass(events: list[Any]) -> None:
    assert_supported_events(SID, events)


def test_supported_events_accepts_committed_events_and_iterables() -> None:
    session = Session.create("live")
    session.append("turn/start", {"turn": 1})
    assert_supported_events("live", session.events)
    assert_supported_events("live", iter([ev("turn/start", 0, {"turn": 1})]))


# --- unknown types ---------------------------------------------------------------------------------


UNKNOWN_TEXT = (
    'session "newer" contains event type "future/thing" (seq 2) unknown to this harness and not marked '
    "ignorable; refusing to interpret the log — it was likely written by a newer harness"
)


def test_unknown_type_is_refused_with_the_exact_text() -> None:
    events = [ev("turn/start", 0, {"turn": 1}), ev("other/thing", 1, None, ignorable=True), ev("future/thing", 2, {})]
    with pytest.raises(SessionFormatUnsupportedError) as info:
        assert_events_known("newer", events)
    assert str(info.value) == UNKNOWN_TEXT
    assert info.value.code == "SESSION_FORMAT_UNSUPPORTED"
    assert info.value.location is None


def test_unknown_type_refusal_carries_the_raw_log_location() -> None:
    with pytest.raises(SessionFormatUnsupportedError) as info:
        assert_events_known("newer", [ev("future/thing", 2, {})], location="/logs/newer.jsonl")
    assert str(info.value) == f"{UNKNOWN_TEXT} (raw log: /logs/newer.jsonl)"
    assert info.value.location == "/logs/newer.jsonl"


@pytest.mark.parametrize("flag", [False, "true", 1, None])
def test_only_the_literal_true_marks_an_event_ignorable(flag: Any) -> None:
    with pytest.raises(SessionFormatUnsupportedError):
        assert_events_known(SID, [ev("future/thing", 0, {}, ignorable=flag)])


def test_every_known_type_passes_and_the_registry_decides() -> None:
    assert_events_known(SID, [ev(t, i, None) for i, t in enumerate(sorted(KNOWN_SESSION_EVENT_TYPES))])
    registry = EventTypes()
    registry.register("plugin/thing")
    assert_events_known(SID, [ev("plugin/thing", 0, {})], registry)
    registry.unregister("plugin/thing")
    with pytest.raises(SessionFormatUnsupportedError, match='event type "plugin/thing"'):
        assert_events_known(SID, [ev("plugin/thing", 0, {})], registry)


def test_removed_legacy_types_are_unknown_after_normalisation() -> None:
    # steering/message is upgraded away; a stray one would be refused here anyway.
    with pytest.raises(SessionFormatUnsupportedError, match='"steering/message"'):
        assert_events_known(SID, [ev("steering/message", 0, {})])


@pytest.mark.parametrize(
    ("event", "rendered"),
    [
        ({"type": 5, "seq": 1.0}, 'event type "5" (seq 1)'),
        ({"type": None, "seq": 0}, 'event type "null" (seq 0)'),
        ({"type": ["a", None, 1]}, 'event type "a,,1" (seq undefined)'),
        ({"seq": 0}, 'event type "undefined" (seq 0)'),
        ({"type": {"a": 1}, "seq": 0}, 'event type "[object Object]" (seq 0)'),
    ],
)
def test_non_string_types_are_unknown_and_rendered_like_js(event: dict[str, Any], rendered: str) -> None:
    with pytest.raises(SessionFormatUnsupportedError) as info:
        assert_events_known(SID, [event])
    assert rendered in str(info.value)


# --- format version ----------------------------------------------------------------------------------

NEWER = (
    'session "{id}" uses log format v{v}, but this harness reads only v0: the log was written by a newer '
    "harness — upgrade the harness to open it"
)
OLDER = 'session "{id}" uses log format v{v}, older than the supported v0, and this build ships no upgrade path for it'


@pytest.mark.parametrize(
    ("version", "text", "rendered"),
    [
        (1, NEWER, "1"),
        (1.0, NEWER, "1"),
        (2.5, NEWER, "2.5"),
        (1e21, NEWER, "1e+21"),
        (1e-7, NEWER, "1e-7"),
        (123456789012345678901, NEWER, "123456789012345680000"),
        (-1, OLDER, "-1"),
        (-0.5, OLDER, "-0.5"),
        ("2", NEWER, "2"),
        (" 0x10 ", NEWER, " 0x10 "),
        ("abc", OLDER, "abc"),
        ("", OLDER, ""),
        (True, NEWER, "true"),
        (False, OLDER, "false"),
        (None, OLDER, "null"),
        ([3], NEWER, "3"),
        ([], OLDER, ""),
        ({"v": 1}, OLDER, "[object Object]"),
    ],
)
def test_version_refusal_texts(version: Any, text: str, rendered: str) -> None:
    assert version_refusal("s", version) == text.format(id="s", v=rendered)


def test_version_refusal_renders_a_non_string_id_like_js_string() -> None:
    assert version_refusal(123, 1) == NEWER.format(id="123", v="1")
    assert version_refusal(1.0, -1) == OLDER.format(id="1", v="-1")
    assert version_refusal(None, 2) == NEWER.format(id="null", v="2")


@pytest.mark.parametrize("version", [0, 0.0, -0.0])
def test_assert_version_accepts_zero(version: Any) -> None:
    assert_version(SID, {"version": version, "id": SID, "createdAt": 1})


@pytest.mark.parametrize(
    ("meta", "expected"),
    [
        ({"version": 1, "id": "s"}, NEWER.format(id="s", v="1")),
        ({"version": -1, "id": "s"}, OLDER.format(id="s", v="-1")),
        ({"version": "0", "id": "s"}, OLDER.format(id="s", v="0")),
        ({"version": False, "id": "s"}, OLDER.format(id="s", v="false")),
        ({"version": None, "id": "s"}, OLDER.format(id="s", v="null")),
        ({"id": "s"}, OLDER.format(id="s", v="undefined")),
    ],
)
def test_assert_version_refuses_anything_but_exactly_zero(meta: dict[str, Any], expected: str) -> None:
    with pytest.raises(SessionFormatUnsupportedError) as info:
        assert_version("s", meta)
    assert str(info.value) == expected
    assert info.value.location is None


def test_assert_version_location_suffix() -> None:
    with pytest.raises(SessionFormatUnsupportedError) as info:
        assert_version("s", {"version": 7}, location="/x/s.jsonl")
    assert str(info.value) == NEWER.format(id="s", v="7") + " (raw log: /x/s.jsonl)"
    assert info.value.location == "/x/s.jsonl"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0, "0"),
        (-0.0, "0"),
        (1.5, "1.5"),
        (100.0, "100"),
        (0.1, "0.1"),
        (1e-6, "0.000001"),
        (1.5e-10, "1.5e-10"),
        (1e21, "1e+21"),
        (1.7976931348623157e308, "1.7976931348623157e+308"),
        (5e-324, "5e-324"),
        (2**53, "9007199254740992"),
        (2**60, "1152921504606847000"),
        (-(2**60), "-1152921504606847000"),
        (10**400, "Infinity"),
        (float("inf"), "Infinity"),
        (float("nan"), "NaN"),
    ],
)
def test_js_number_rendering(value: float, expected: str) -> None:
    assert js_number(value) == expected


# --- property: current-format events pass through as the same objects ------------------------------


_UNTOUCHED_TYPES = sorted(
    KNOWN_SESSION_EVENT_TYPES - {"turn/start", "turn/end", "user/message", "assistant/message", "tool/result"}
)
turns = st.integers(1, 2**53 - 1)
any_data = json_values(max_leaves=8)
extra_keys = st.dictionaries(st.text(max_size=6), json_values(max_leaves=3), max_size=3)


def _shuffled(draw: st.DrawFn, data: dict[str, Any]) -> dict[str, Any]:
    keys = draw(st.permutations(list(data)))
    return {key: data[key] for key in keys}


@st.composite
def current_turn_end_data(draw: st.DrawFn) -> Any:
    kind = draw(st.sampled_from(["bare", "aborted", "error", "other"]))
    reason: dict[str, Any]
    if kind == "bare":
        reason = {"kind": draw(st.sampled_from(["completed", "blocked", "max-tokens", "interrupted"]))}
    elif kind == "aborted":
        reason = {**draw(extra_keys), "kind": "aborted", "reason": draw(any_data)}
    elif kind == "error":
        reason = {**draw(extra_keys), "kind": "error", "error": draw(any_data)}
    else:
        other = draw(
            st.text(min_size=1, max_size=8).filter(
                lambda k: k not in ("completed", "blocked", "max-tokens", "interrupted", "aborted", "disposed", "error")
            )
        )
        reason = {**draw(extra_keys), "kind": other}
    return _shuffled(draw, {"turn": draw(turns), "reason": _shuffled(draw, reason)})


def _not_dict(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return strategy.filter(lambda value: not isinstance(value, dict))


@st.composite
def current_events(draw: st.DrawFn, seq: int) -> dict[str, Any]:
    type_ = draw(
        st.sampled_from(
            [
                *_UNTOUCHED_TYPES,
                "turn/start",
                "turn/end",
                "user/message",
                "assistant/message",
                "tool/result",
                "plugin/x",
            ]
        )
    )
    data: Any
    if type_ == "turn/start":
        data = draw(_not_dict(any_data) | extra_keys.filter(lambda d: "trigger" not in d))
    elif type_ == "turn/end":
        data = draw(_not_dict(any_data) | current_turn_end_data())
    elif type_ == "user/message":
        data = draw(_not_dict(any_data) | st.builds(lambda extra, id_: {**extra, "id": id_}, extra_keys, any_data))
    elif type_ in ("assistant/message", "tool/result"):
        data = draw(_not_dict(any_data) | st.builds(lambda extra, m: {**extra, "message": m}, extra_keys, any_data))
    elif type_ == "request/header":
        data = draw(any_data.filter(lambda d: not (isinstance(d, dict) and d.get("reason") == "fallback")))
    else:
        data = draw(any_data)
    event: dict[str, Any] = {"type": type_, "seq": seq, "time": draw(st.integers(-5, 5)), "data": data}
    if draw(st.booleans()):
        event["surfaceOp"] = draw(st.sampled_from(["append", {"op": "replace", "start": 0, "end": 0}]))
    if type_ == "plugin/x" or draw(st.booleans()):
        event["ignorable"] = True
    return _shuffled(draw, event)


@st.composite
def current_logs(draw: st.DrawFn) -> list[dict[str, Any]]:
    size = draw(st.integers(0, 12))
    return [draw(current_events(seq)) for seq in range(size)]


@settings(max_examples=300, deadline=None)
@given(current_logs())
def test_current_format_events_pass_through_identical_and_unchanged(events: list[dict[str, Any]]) -> None:
    originals = list(events)
    before = dump(events)
    out = normalize_stored_events(SID, events)
    assert out is events
    assert all(a is b for a, b in zip(out, originals, strict=True))
    assert dump(out) == before
    assert not any(needs_legacy_prefix(event) for event in out)
    assert_supported_events(SID, out)
    assert_events_known(SID, out)


@settings(max_examples=200, deadline=None)
@given(current_logs())
def test_normalising_a_log_twice_changes_nothing(events: list[dict[str, Any]]) -> None:
    first = normalize_stored_events(SID, events)
    again = normalize_stored_events(SID, list(first))
    assert all(a is b for a, b in zip(first, again, strict=True))


# --- the one-pass check a cold load takes first ------------------------------------------------------

_SCAN_TYPES = (
    "turn/start",
    "turn/end",
    "user/message",
    "assistant/message",
    "tool/result",
    "request/header",
    "steering/message",
    "mode/set",
    "request/header-delta",
    "step/start",
    "assistant/chunk",
    "plugin/x",
)
_SCAN_KEYS = (
    "turn", "reason", "kind", "trigger", "id", "role", "message", "content", "source", "provenance",
    "callId", "isError", "error", "step", "failure", "code",
)  # fmt: skip
_SCAN_LEAVES = st.one_of(
    st.sampled_from([1, 2, 0, -1, 1.0, 2**53, True, None, "", "x", "fallback", "completed", "aborted", "error"]),
    st.sampled_from(["disposed", "blocked", "max-tokens", "interrupted", "legacy", "custom"]),
)
_SCAN_DATA = st.recursive(
    _SCAN_LEAVES,
    lambda inner: st.one_of(
        st.dictionaries(st.sampled_from(_SCAN_KEYS), inner, max_size=5),
        st.lists(inner, max_size=2),
    ),
    max_leaves=12,
)


class _Skipped:
    """Stands for a packed chunk run: an item the check steps over."""


@st.composite
def _scan_logs(draw: st.DrawFn) -> list[Any]:
    log: list[Any] = []
    for seq in range(draw(st.integers(0, 6))):
        kind = draw(st.integers(0, 9))
        if kind == 0:
            log.append(_Skipped())
        elif kind == 1:
            log.append(draw(st.sampled_from([None, 3, "x", ["type"], {"seq": seq}, {"type": None}, {"type": 1}])))
        else:
            event = ev(draw(st.sampled_from(_SCAN_TYPES)), seq, draw(_SCAN_DATA))
            if draw(st.booleans()):
                event["surfaceOp"] = draw(st.sampled_from([{"op": "replace", "start": 0}, {"op": "append"}]))
            log.append(event)
    return log


def _full_checks(log: list[Any]) -> tuple[str, Any]:
    """What the three checks do to ``log``: ``("ok", migrated?, types)`` or the error they raise."""
    plain = [item for item in log if item.__class__ is not _Skipped]
    before = list(plain)
    try:
        assert_supported_events(SID, plain)
        normalize_stored_events(SID, plain)
    except Exception as err:  # any outcome is compared
        return ("error", type(err).__name__)
    return ("ok", any(a is not b for a, b in zip(before, plain, strict=True)))


@settings(max_examples=600, deadline=None)
@given(log=_scan_logs())
def test_current_log_types_answers_only_when_the_checks_pass_and_upgrade_nothing(log: list[Any]) -> None:
    """A set means: the removed-vocabulary check passes, normalisation replaces no event and raises nothing,
    and the set is the types present; the accelerator and its pure-Python twin give the same answer."""
    from agentlog.persistence import legacy

    snapshot = dump([item for item in log if item.__class__ is not _Skipped])
    python = legacy._current_log_types(log, _Skipped)
    if legacy._c_current_log_types is not None:
        assert legacy._c_current_log_types(log, _Skipped) == python
    assert legacy.current_log_types(log, _Skipped) == python
    assert dump([item for item in log if item.__class__ is not _Skipped]) == snapshot  # nothing was touched
    if python is not None:
        assert _full_checks(copy.deepcopy(log)) == ("ok", False)
        assert python == {item["type"] for item in log if item.__class__ is not _Skipped}


def test_current_log_types_passes_a_current_format_log_and_refers_legacy_ones() -> None:
    from agentlog.persistence.legacy import current_log_types

    current = [
        ev("turn/start", 0, {"turn": 1}),
        ev("user/message", 1, user_msg("hi", id="u1"), surfaceOp={"op": "append"}),
        ev("request/header", 2, {"reason": "initial"}),
        ev("turn/end", 3, {"turn": 1, "reason": {"kind": "completed"}}),
    ]
    assert current_log_types(current, _Skipped) == {"turn/start", "user/message", "request/header", "turn/end"}
    for legacy_event in (
        ev("turn/start", 0, {"turn": 1, "trigger": {"kind": "user"}}),
        ev("turn/end", 0, {"turn": 1, "reason": {"kind": "disposed"}}),
        ev("user/message", 0, {"content": "hi", "source": "user"}),
        ev("steering/message", 0, {"turn": 1, "content": "x", "source": "user"}),
        ev("request/header", 0, {"reason": "fallback"}),
        ev("mode/set", 0, {}),
    ):
        assert current_log_types([*current, legacy_event], _Skipped) is None
