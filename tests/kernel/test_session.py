"""Session: derivation, seeds, append gate, freezing, events snapshots, headers.

Conformance checklist ``shared/spec/core-session.md`` §19.1 (items 1–47); behaviour from §1, §2, §6,
§7 and §9; Python surface from ``docs/kernel-api.md``. Each test names its checklist item in a
``# spec 19.1 #N`` comment. JavaScript-only mechanisms (getters, BigInt, symbols, prototypes) are
replaced by their closest Python equivalents, as noted per test.
"""

from __future__ import annotations

import copy
import math
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agentlog as al
from agentlog import (
    AgentlogError,
    EventDataError,
    FrozenError,
    InvalidEventError,
    InvalidSeedError,
    MessageShapeError,
    Session,
    SessionHeaderError,
    SurfaceError,
    SurfaceManager,
    adopt_session_event,
    snapshot_json,
    snapshot_session_event,
    thaw,
)
from agentlog._accel import checked_snapshot as _c_checked_snapshot
from agentlog.errors import ReentrantAppendError, SessionDisposedError, UnknownEventTypeError
from agentlog.kernel.events import APPEND_CHECK_KINDS, EventTypes, event_types
from agentlog.kernel.jsoncodec import DEFAULT_MAX_DEPTH, dumps, loads
from agentlog.kernel.jsonvalue import _GIVE_UP, MAX_JSON_DEPTH
from agentlog.kernel.session import _checked_copy
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend
from agentlog.persistence.sqlite.backend import SqliteBackend
from agentlog.testing.builders import (
    APPEND,
    assistant_msg_data,
    intent,
    replace,
    seed_event,
    text_block,
    tool_result_msg_data,
    user_msg,
)

# Plugin-owned types these tests log: appends and seeds of unregistered types are refused (issue 7).
for _plugin_type in ("plugin/event", "test/unstable", "test/deep-restore"):
    event_types.register(_plugin_type)

MAX_SAFE = 2**53 - 1


def now() -> int:
    return 1000


def header(session_id: str, **extra: Any) -> dict[str, Any]:
    return {"version": 0, "id": session_id, "createdAt": 123, **extra}


def assert_frozen_mapping(value: Any) -> None:
    with pytest.raises(FrozenError):
        value["__probe__"] = 1
    assert "__probe__" not in value


def assert_frozen_list(value: Any) -> None:
    before = len(value)
    with pytest.raises(FrozenError):
        value.append("__probe__")
    assert len(value) == before


class DriftingDict(dict):  # type: ignore[type-arg]
    """Closest Python analogue of a JS object whose getter yields a different value on each read.

    Plain dicts cannot run code on read, so the only way to build a drifting container is a dict
    subclass — which the lossless-JSON gate must refuse outright (kernel-api: dict subclasses other
    than the frozen ones are not JSON). Either way validation can never pass one value and store
    another.
    """

    def __init__(self, key: str, first: Any, later: Any, **fixed: Any) -> None:
        super().__init__(fixed)
        dict.__setitem__(self, key, first)
        self._key = key
        self._first = first
        self._later = later
        self.reads = 0

    def _drift(self) -> Any:
        self.reads += 1
        return self._first if self.reads == 1 else self._later

    def __getitem__(self, key: Any) -> Any:
        if key == self._key:
            return self._drift()
        return dict.__getitem__(self, key)

    def get(self, key: Any, default: Any = None) -> Any:
        return self[key] if key in self else default

    def items(self) -> Any:  # type: ignore[override]
        return [(k, self[k]) for k in self]

    def values(self) -> Any:  # type: ignore[override]
        return [self[k] for k in self]


class ExoticObject:
    """A class instance (JS: `new ExoticObject()` / a class-instance shell)."""

    def __init__(self, **fields: Any) -> None:
        for key, value in fields.items():
            setattr(self, key, value)


def turn_end_completed(turn: int = 1) -> dict[str, Any]:
    return {"turn": turn, "reason": {"kind": "completed"}}


# --------------------------------------------------------------------------------------------------


def test_session__exposes_one_stable_readonly_surface_view() -> None:
    # spec 19.1 #1
    session = Session.create("surface-view", now=now)
    surface = session.surface
    assert session.surface is surface
    assert list(surface.nodes) == []
    assert surface.replace_generation == 0
    with pytest.raises((AttributeError, TypeError)):
        session.surface = surface  # type: ignore[misc]
    assert session.surface is surface


def test_session__derives_message_history_from_the_event_log() -> None:
    # spec 19.1 #2
    session = Session.create("s1", now=now)
    session.append("turn/start", {"turn": 1})
    session.append("user/message", user_msg("hello"), intent(APPEND))
    session.append("assistant/chunk", {"turn": 1, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": "hi"}})
    session.append(
        "assistant/message",
        assistant_msg_data(
            [text_block("let me check"), {"type": "tool-call", "id": "c1", "name": "echo", "arguments": "{}"}]
        ),
        intent(APPEND),
    )
    session.append("tool/result", tool_result_msg_data("c1", "ok", is_error=False), intent(APPEND))
    session.append("turn/end", turn_end_completed())

    messages = session.derive_messages()
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert len(messages[1]["content"]) == 2
    block = messages[2]["content"][0]
    assert block["type"] == "tool-result"
    assert block["toolCallId"] == "c1"
    # raw chunks never appear in derived history
    assert all(block.get("type") != "text-delta" for m in messages for block in m["content"])


def test_session__accepts_and_round_trips_a_max_tokens_turn_end_reason() -> None:
    # spec 19.1 #3
    session = Session.create("s1", now=now)
    session.append("turn/start", {"turn": 1})
    session.append("turn/end", {"turn": 1, "reason": {"kind": "max-tokens"}})
    turn_end = [e for e in session.events if e.type == "turn/end"][-1]
    assert turn_end.data["reason"] == {"kind": "max-tokens"}
    # survives the persistence serialization boundary (JS: structuredClone)
    assert orjson.loads(orjson.dumps(turn_end.data["reason"])) == {"kind": "max-tokens"}
    assert thaw(turn_end.data["reason"]) == {"kind": "max-tokens"}


def test_session__round_trips_an_aborted_turn_with_its_cancellation_cause() -> None:
    # spec 19.1 #4
    session = Session.create("aborted", now=now)
    session.append("turn/start", {"turn": 1})
    session.append("turn/end", {"turn": 1, "reason": {"kind": "aborted", "reason": {"kind": "user"}}})
    deep_copy = orjson.loads(orjson.dumps(list(session.events)))
    replayed = Session.create("aborted-replay", deep_copy, now=now)
    assert list(replayed.events)[:-1] == list(session.events)
    assert len(replayed.events) == len(session.events) + 1
    assert replayed.events[-1].type == "session/end-seed"
    turn_end = [e for e in replayed.events if e.type == "turn/end"][-1]
    assert turn_end.data["reason"] == {"kind": "aborted", "reason": {"kind": "user"}}


def test_session__renders_injected_context_and_user_messages_as_plain_user_content() -> None:
    # spec 19.1 #5
    session = Session.create("s2", now=now)
    session.append(
        "user/message",
        user_msg("file changed: a.ts", source={"kind": "plugin", "plugin": "watcher"}),
        intent(APPEND),
    )
    session.append("user/message", user_msg("focus on tests"), intent(APPEND))
    context_message, steering_message = session.derive_messages()
    assert context_message["role"] == "user"
    assert context_message["content"] == [{"type": "text", "text": "file changed: a.ts"}]
    assert steering_message["role"] == "user"
    assert steering_message["content"] == [{"type": "text", "text": "focus on tests"}]


def test_session__keeps_the_exact_identified_context_message_in_durable_history_and_projection() -> None:
    # spec 19.1 #6
    session = Session.create("s2-raw", now=now)
    message = user_msg(
        "<system-reminder>Additional instructions from: pkg/AGENTS.md</system-reminder>",
        source={"kind": "plugin", "plugin": "agent-instructions"},
    )
    session.append("user/message", message, intent(APPEND))
    assert session.derive_messages() == [message]
    assert session.events[0].data["source"] == {"kind": "plugin", "plugin": "agent-instructions"}


def _small_turn(session: Session) -> None:
    session.append("turn/start", {"turn": 1})
    session.append("user/message", user_msg("q"), intent(APPEND))
    session.append("assistant/message", assistant_msg_data("a"), intent(APPEND))
    session.append("turn/end", turn_end_completed())


def test_session__replays_identically_from_a_seeded_event_log() -> None:
    # spec 19.1 #7
    original = Session.create("s3", now=now)
    _small_turn(original)
    replayed = Session.create("s3-replay", list(original.events), now=now)
    assert replayed.derive_messages() == original.derive_messages()
    assert list(replayed.events)[: original.seq] == list(original.events)
    assert replayed.seq == original.seq + 1
    assert replayed.first_live_seq == original.seq


def test_session__marks_an_explicitly_empty_seed_without_marking_a_fresh_session() -> None:
    # spec 19.1 #8
    fresh = Session.create("fresh-empty", now=now)
    assert list(fresh.events) == []
    assert fresh.first_live_seq == 0

    resumed = Session.create("resumed-empty", [], now=now)
    assert resumed.first_live_seq == 0
    assert list(resumed.events) == [{"type": "session/end-seed", "seq": 0, "time": 1000, "data": {}}]

    reopened = Session.create("reopened-empty", resumed.events, now=lambda: 2000)
    assert reopened.first_live_seq == 1
    assert list(reopened.events) == list(resumed.events)


def test_session__rejects_pre_provider_request_headers_and_assistant_messages_on_seed_load() -> None:
    # spec 19.1 #9
    request_header = seed_event(
        "request/header", 0, {"header": {"config": {"model": "old-model"}}, "reason": "initial"}, time=1
    )
    with pytest.raises(InvalidSeedError, match=re.escape("seed request/header at index 0 lacks provider/model")):
        Session.create("old-header", [request_header], now=now)

    old_assistant = seed_event(
        "assistant/message",
        0,
        {"turn": 1, "step": 1, "content": [text_block("old")]},
        time=1,
        surfaceOp=APPEND,
    )
    with pytest.raises(
        InvalidSeedError, match=re.escape("seed assistant/message at index 0 lacks an identified message")
    ):
        Session.create("old-assistant", [old_assistant], now=now)

    malformed_header = seed_event("request/header", 0, {"header": "old-header"}, time=1)
    with pytest.raises(InvalidSeedError, match=re.escape("seed request/header at index 0 lacks provider/model")):
        Session.create("malformed-header", [malformed_header], now=now)

    plugin_event = seed_event("plugin/event", 0, None, time=1)
    session = Session.create("primitive-plugin-data", [plugin_event], now=now)
    assert list(session.events)[:1] == [plugin_event]


_USER = {"id": "user", "role": "user", "content": [text_block("content")], "source": {"kind": "user"}}
_ASSISTANT = {
    "id": "assistant",
    "role": "assistant",
    "content": [text_block("content")],
    "source": {"kind": "model", "provider": "mock", "model": "mock"},
}
_TOOL = {
    "id": "tool",
    "role": "user",
    "content": [{"type": "tool-result", "toolCallId": "call", "content": [text_block("result")]}],
    "source": {"kind": "tool", "callId": "call"},
}


@pytest.mark.parametrize(
    ("event_type", "data", "expected"),
    [
        ("user/message", None, "seed user/message at index 0 lacks an identified message"),
        (
            "user/message",
            {**_USER, "role": "assistant"},
            'seed user/message at index 0 message must have role "user"',
        ),
        (
            "user/message",
            {**_USER, "source": None},
            "seed user/message at index 0 message has invalid source",
        ),
        (
            "user/message",
            {**_USER, "content": "not-an-array"},
            "seed user/message at index 0 message has invalid content",
        ),
        (
            "assistant/message",
            {"turn": 1, "step": 1, "message": {**_ASSISTANT, "source": {"kind": "user"}}},
            "seed assistant/message at index 0 message must have model source",
        ),
        (
            "tool/result",
            {"turn": 1, "step": 1, "message": {**_TOOL, "source": {"kind": "user"}}},
            "seed tool/result at index 0 message must have tool source",
        ),
        (
            "tool/result",
            {"turn": 1, "step": 1, "message": {**_TOOL, "content": [text_block("not a result")]}},
            "seed tool/result at index 0 message must contain one tool-result block",
        ),
        (
            "tool/result",
            {"turn": 1, "step": 1, "message": {**_TOOL, "source": {"kind": "tool", "callId": "other-call"}}},
            "seed tool/result at index 0 message has mismatched tool call ids",
        ),
    ],
    ids=[
        "message-record",
        "user-role",
        "source",
        "content-shape",
        "assistant-source",
        "tool-source",
        "tool-tuple",
        "tool-correlation",
    ],
)
def test_session__rejects_event_specific_malformed_message_shapes_on_seed_load(
    event_type: str, data: Any, expected: str
) -> None:
    # spec 19.1 #10
    event = seed_event(event_type, 0, data, time=1, surfaceOp=APPEND)
    with pytest.raises(InvalidSeedError, match=re.escape(expected)):
        Session.create("invalid-message", [event], now=now)


def test_session__snapshots_message_events_without_validating_plugin_owned_block_details() -> None:
    # spec 19.1 #11
    boundary = snapshot_session_event({"type": "turn/start", "seq": 0, "time": 1, "data": {"turn": 1}})
    assert boundary == {"type": "turn/start", "seq": 0, "time": 1, "data": {"turn": 1}}

    extended = snapshot_session_event(
        {
            "type": "user/message",
            "seq": 0,
            "time": 1,
            "surfaceOp": "append",
            "data": {
                "id": "extended-message",
                "role": "user",
                "content": [{"type": "plugin-block", "value": 1}],
                "source": {"kind": "plugin-source", "value": 1},
            },
        }
    )
    assert extended["data"]["content"] == [{"type": "plugin-block", "value": 1}]
    assert extended["data"]["source"] == {"kind": "plugin-source", "value": 1}


def test_session__adopts_exclusively_owned_messages_in_place_and_keeps_snapshots_detached() -> None:
    # spec 19.1 #12 — Python cannot freeze a plain dict in place; adoption freezes the message part by
    # swapping it for its frozen form inside the same event object, which is returned unchanged.
    owned = seed_event("user/message", 0, user_msg("owned", id="owned-message"), time=1, surfaceOp=APPEND)
    assert adopt_session_event(owned) is owned
    assert_frozen_mapping(owned["data"])
    assert_frozen_list(owned["data"]["content"])
    assert owned["data"]["content"] == [text_block("owned")]

    source = thaw(owned)
    snapshot = snapshot_session_event(source)
    assert snapshot is not source
    assert snapshot["data"] is not source["data"]
    assert snapshot["data"]["content"] is not source["data"]["content"]
    assert snapshot == source


def test_session__validates_message_shape_before_adopting_ownership() -> None:
    # spec 19.1 #13
    malformed = {
        "type": "user/message",
        "seq": 0,
        "time": 1,
        "data": {"id": "wrong-role", "role": "assistant", "content": [], "source": {"kind": "user"}},
    }
    with pytest.raises(MessageShapeError, match=re.escape('session event at seq 0 message must have role "user"')):
        adopt_session_event(malformed)
    # validation happens before ownership: nothing was frozen
    malformed["data"]["content"].append(text_block("still mutable"))


def _request_header_event(config: dict[str, Any], **header_extra: Any) -> dict[str, Any]:
    return seed_event("request/header", 0, {"header": {"config": config, **header_extra}, "reason": "initial"}, time=1)


def test_session__round_trips_a_non_empty_reasoning_effort_and_rejects_invalid_durable_values() -> None:
    # spec 19.1 #14
    valid = _request_header_event({"provider": "mock", "model": "model", "reasoningEffort": "adapter-owned"})
    assert Session.create("reasoning-effort", [valid], now=now).events[0] == valid
    for effort in ("", 1):
        invalid = _request_header_event({"provider": "mock", "model": "model", "reasoningEffort": effort})
        with pytest.raises(
            InvalidSeedError, match=re.escape("seed request/header at index 0 has an invalid reasoningEffort")
        ):
            Session.create("invalid-reasoning-effort", [invalid], now=now)


def test_session__round_trips_adapter_default_markers_and_rejects_invalid_durable_values() -> None:
    # spec 19.1 #15
    config = {"provider": "mock", "model": "model", "maxTokens": 256_000}
    valid = _request_header_event(config, adapterDefaults={"maxTokens": True})
    assert Session.create("adapter-defaults", [valid], now=now).events[0] == valid
    for defaults in (None, [], {"unknown": True}, {"maxTokens": False}, {"reasoningEffort": True}):
        invalid = _request_header_event(dict(config), adapterDefaults=defaults)
        with pytest.raises(
            InvalidSeedError, match=re.escape("seed request/header at index 0 has invalid adapterDefaults")
        ):
            Session.create("invalid-adapter-defaults", [invalid], now=now)


def test_session__isolates_the_log_from_mutation_through_a_derived_message() -> None:
    # spec 19.1 #16 — MessageList is immutable in the Python contract, so "reversing the returned
    # list" becomes reordering a copy of it.
    session = Session.create("s4", now=now)
    session.append("user/message", user_msg("original"), intent(APPEND))
    session.append("tool/result", tool_result_msg_data("c1", "tool out", is_error=False), intent(APPEND))
    before = [thaw(e) for e in session.events]

    messages = session.derive_messages()
    with pytest.raises(TypeError):
        messages[0]["content"][0]["text"] = "HACKED"
    with pytest.raises(TypeError):
        messages[1]["content"][0]["content"].append(text_block("injected"))
    with pytest.raises(TypeError):
        messages[0]["content"].append(text_block("extra"))
    with pytest.raises(FrozenError):
        messages[0]["content"].append(text_block("extra"))
    reordered = list(reversed(messages))
    assert reordered[0] is messages[1]

    assert list(session.events) == before
    assert messages[0]["content"] == [text_block("original")]
    fresh = session.derive_messages()
    assert fresh[0]["content"] == [text_block("original")]
    assert [m["role"] for m in fresh] == ["user", "user"]


def _cycle() -> Any:
    cyclic: dict[str, Any] = {"a": 1}
    cyclic["self"] = cyclic
    return cyclic


_NON_JSON_EXTRAS: list[tuple[str, Callable[[], Any]]] = [
    ("bigint:int-beyond-2**53-1", lambda: MAX_SAFE + 1),
    ("bigint:negative-int-beyond", lambda: -(MAX_SAFE + 1)),
    ("function", lambda: lambda: 0),
    ("symbol:unique-sentinel-object", lambda: object()),
    ("map:dict-subclass", lambda: OrderedDict(a=1)),
    ("set", lambda: {1, 2}),
    ("tuple", lambda: (1, 2)),
    ("bytes", lambda: b"x"),
    ("class-instance", lambda: ExoticObject(value=1)),
    ("infinity", lambda: math.inf),
    ("negative-infinity", lambda: -math.inf),
    ("nan", lambda: math.nan),
    ("negative-zero", lambda: -0.0),
    ("lone-surrogate", lambda: "\ud800"),
    ("non-str-key", lambda: {1: "x"}),
    ("dense-list-with-bigint", lambda: [1, 2**60, 3]),
    ("nested-function", lambda: {"nested": {"deep": lambda: 0}}),
    ("cycle", _cycle),
]


@pytest.mark.parametrize("make_extra", [f for _, f in _NON_JSON_EXTRAS], ids=[n for n, _ in _NON_JSON_EXTRAS])
def test_session__rejects_non_json_event_data_at_the_source(make_extra: Callable[[], Any]) -> None:
    # spec 19.1 #17 — `undefined` and sparse arrays have no Python value; see module docstring.
    session = Session.create("s5", now=now)
    data = {"content": [text_block("x")], "source": {"kind": "user"}, "extra": make_extra()}
    with pytest.raises(
        InvalidEventError, match=re.escape('session event "user/message" carries non-JSON-serializable data')
    ):
        session.append("user/message", data, intent(APPEND))
    assert list(session.events) == []
    assert session.seq == 0
    assert list(session.surface.nodes) == []


def test_session__rejects_a_surface_eligible_append_with_no_surface_op_marker() -> None:
    # spec 19.1 #18
    session = Session.create("s5b", now=now)
    session.append("turn/start", {"turn": 1})
    with pytest.raises(
        SurfaceError,
        match=re.escape('session event "user/message" is surface-eligible and requires a surfaceOp marker'),
    ):
        session.append("user/message", user_msg("hi"))
    assert len(session.events) == 1
    assert session.events[0].type == "turn/start"
    assert session.seq == 1


def test_session__accepts_dense_arrays_and_nested_plain_objects() -> None:
    # spec 19.1 #19
    session = Session.create("s6", now=now)
    extra = [1, 2, [3, {"a": None, "b": True}]]
    event = session.append(
        "user/message",
        {"id": "u-extra", "role": "user", "content": [text_block("x")], "source": {"kind": "user"}, "extra": extra},
        intent(APPEND),
    )
    assert len(session.events) == 1
    assert event.data["extra"] == extra


def test_session__validates_seed_events_rejects_a_non_json_serializable_seed() -> None:
    # spec 19.1 #20 — BigInt → an int beyond 2**53-1
    bad_seed = [seed_event("user/message", 0, {**user_msg("x"), "bad": 2**60}, time=1, surfaceOp=APPEND)]
    with pytest.raises(
        InvalidSeedError, match=re.escape("seed event at index 0 is not losslessly JSON-serializable")
    ) as caught:
        Session.create("seed-bad", bad_seed, now=now)
    assert caught.value.index == 0


def test_session__validates_seed_events_rejects_a_non_contiguous_seq() -> None:
    # spec 19.1 #21
    gap_seed = [
        seed_event("turn/start", 0, {"turn": 1}, time=1),
        seed_event("turn/end", 5, turn_end_completed(), time=2),
    ]
    with pytest.raises(
        InvalidSeedError,
        match=re.escape("seed event at index 1 has seq 5 (expected 1); seed must be contiguous from 0"),
    ) as caught:
        Session.create("seed-gap", gap_seed, now=now)
    assert caught.value.index == 1


def test_session__validates_seed_events_rejects_a_markerless_surface_eligible_event() -> None:
    # spec 19.1 #22
    markerless = [
        seed_event("turn/start", 0, {"turn": 1}, time=1),
        seed_event("user/message", 1, user_msg("hi"), time=2),
        seed_event("turn/end", 2, turn_end_completed(), time=3),
    ]
    with pytest.raises(
        InvalidSeedError,
        match=re.escape(
            'invalid seed event at index 1: session event "user/message" is surface-eligible '
            "and requires a surfaceOp marker"
        ),
    ):
        Session.create("seed-no-marker", markerless, now=now)


def test_session__accepts_a_well_formed_contiguous_serializable_seed() -> None:
    # spec 19.1 #23
    good_seed = [
        seed_event("turn/start", 0, {"turn": 1}, time=1),
        seed_event("user/message", 1, user_msg("hi"), time=2, surfaceOp=APPEND),
        seed_event("turn/end", 2, turn_end_completed(), time=3),
    ]
    session = Session.create("seed-ok", good_seed, now=now)
    assert list(session.events)[:3] == good_seed
    assert session.first_live_seq == 3
    assert list(session.surface.nodes) == [1]


class DriftingSeed(Sequence):  # type: ignore[type-arg]
    """A one-entry seed whose slot yields a different event on every read (JS: array-slot getter)."""

    def __init__(self, first: Any, later: Any) -> None:
        self._first = first
        self._later = later
        self.reads = 0

    def __len__(self) -> int:
        return 1

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(1))]
        if index not in (0, -1):
            raise IndexError(index)
        self.reads += 1
        return self._first if self.reads == 1 else self._later


def test_session__reads_each_seed_array_entry_once_so_validation_and_storage_use_the_same_event() -> None:
    # spec 19.1 #24 — the seed is a Sequence whose slot drifts on the second read.
    accepted = seed_event("turn/start", 0, {"turn": 1}, time=1)
    drifted = {**accepted, "seq": 99, "data": {"invalid": 2**60}}
    seed = DriftingSeed(accepted, drifted)
    session = Session.create("seed-entry-snapshot", seed, now=now)  # type: ignore[arg-type]
    assert seed.reads == 1
    assert list(session.events)[:1] == [accepted]


def test_session__reads_a_nested_seed_data_getter_once_and_stores_its_first_json_value() -> None:
    # spec 19.1 #25 — Python analogue: a drifting dict subclass as nested seed data is refused by the
    # JSON gate, so no drifted value can ever be stored.
    data = DriftingDict("value", "accepted", 2**60)
    seed = [seed_event("test/unstable", 0, {"outer": data}, time=1)]
    with pytest.raises(InvalidSeedError, match=re.escape("seed event at index 0 is not losslessly JSON-serializable")):
        Session.create("seed-nested-drift", seed, now=now)
    # and the same payload as a plain dict (the only container with a stable read) is stored verbatim
    session = Session.create("seed-nested-plain", [seed_event("test/unstable", 0, {"value": "accepted"})], now=now)
    assert session.events[0].data == {"value": "accepted"}


def test_session__rejects_non_json_surface_metadata_in_a_seed_event() -> None:
    # spec 19.1 #26 — BigInt start → int beyond 2**53-1
    seed = [
        seed_event(
            "user/message",
            0,
            user_msg("hello"),
            time=1,
            surfaceOp={"op": "replace", "start": 2**60, "end": 2},
        )
    ]
    with pytest.raises(InvalidSeedError, match=re.escape("seed event at index 0 is not losslessly JSON-serializable")):
        Session.create("seed-bad-metadata", seed, now=now)


def test_session__rejects_exotic_seed_metadata_before_cloning_can_erase_its_prototype() -> None:
    # spec 19.1 #27
    seed = [
        seed_event("user/message", 0, user_msg("hello"), time=1, surfaceOp=ExoticObject(op="replace", start=0, end=0))
    ]
    with pytest.raises(InvalidSeedError, match=re.escape("seed event at index 0 is not losslessly JSON-serializable")):
        Session.create("seed-exotic-metadata", seed, now=now)


class EventDict(dict):  # type: ignore[type-arg]
    """A dict subclass event shell (JS: an object with a custom prototype)."""


def test_session__rejects_an_exotic_seed_event_shell_before_spreading_erases_its_prototype() -> None:
    # spec 19.1 #28
    shells: list[Any] = [
        ExoticObject(type="turn/start", seq=0, time=1, data={"turn": 1}),
        EventDict(type="turn/start", seq=0, time=1, data={"turn": 1}),
    ]
    for shell in shells:
        with pytest.raises(
            InvalidSeedError, match=re.escape("seed event at index 0 is not losslessly JSON-serializable")
        ):
            Session.create("seed-exotic-shell", [shell], now=now)


def test_session__accepts_a_null_prototype_seed_event_shell_as_a_plain_json_record() -> None:
    # spec 19.1 #29 — Python analogue of the null-prototype record: the port's own frozen dict.
    shell = snapshot_json({"type": "turn/start", "seq": 0, "time": 1, "data": {"turn": 1}})
    session = Session.create("seed-null-prototype", [shell], now=now)
    assert list(session.events)[:1] == [{"type": "turn/start", "seq": 0, "time": 1, "data": {"turn": 1}}]


def test_session__reads_a_nested_seed_metadata_getter_once_and_stores_its_first_json_value() -> None:
    # spec 19.1 #30 — Python analogue: a drifting dict-subclass surfaceOp is refused by the JSON gate;
    # the equivalent plain replace op is stored verbatim.
    drifting = DriftingDict("start", 0, 2**60, op="replace", end=0)
    seed = [
        seed_event("user/message", 0, user_msg("source"), time=1, surfaceOp=APPEND),
        seed_event("user/message", 1, user_msg("hello"), time=2, surfaceOp=drifting, sourceEventSeqs=[0]),
    ]
    with pytest.raises(InvalidSeedError, match=re.escape("seed event at index 1 is not losslessly JSON-serializable")):
        Session.create("seed-unstable-metadata", seed, now=now)

    seed[1]["surfaceOp"] = replace(0, 0)
    session = Session.create("seed-stable-metadata", seed, now=now)
    assert session.events[1]["surfaceOp"] == {"op": "replace", "start": 0, "end": 0}
    assert session.events[1].surface_op == {"op": "replace", "start": 0, "end": 0}


def _replace_seed() -> list[dict[str, Any]]:
    return [
        seed_event("user/message", 0, user_msg("source"), time=1, surfaceOp=APPEND),
        seed_event("user/message", 1, user_msg("hello"), time=2, surfaceOp=replace(0, 0), sourceEventSeqs=[0]),
    ]


def _patch_validate_next(monkeypatch: pytest.MonkeyPatch, failure: BaseException) -> None:
    original = SurfaceManager.validate_next

    def failing(self: Any, candidate: Any) -> Any:
        op = candidate.get("surfaceOp")
        if isinstance(op, dict) and op.get("op") == "replace":
            raise failure
        return original(self, candidate)

    monkeypatch.setattr(SurfaceManager, "validate_next", failing)


def test_session__adds_seed_context_when_surface_validation_throws_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # spec 19.1 #31
    _patch_validate_next(monkeypatch, RuntimeError("validator failed"))
    with pytest.raises(InvalidSeedError, match=re.escape("invalid seed event at index 1: validator failed")):
        Session.create("seed-error-metadata-failure", _replace_seed(), now=now)


def test_session__adds_seed_context_when_surface_validation_throws_a_non_error_value(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # spec 19.1 #32 — Python can only raise exceptions; the analogue of a non-Error throw is a failure
    # that carries no message.
    _patch_validate_next(monkeypatch, RuntimeError())
    with pytest.raises(InvalidSeedError, match=re.escape("invalid seed event at index 1: invalid surface metadata")):
        Session.create("seed-non-error-metadata-failure", _replace_seed(), now=now)


def test_session__snapshots_the_seed() -> None:
    # spec 19.1 #33
    seed = [
        seed_event("turn/start", 0, {"turn": 1}, time=1),
        seed_event("user/message", 1, user_msg("original", id="seed-input"), time=2, surfaceOp=APPEND),
        seed_event("turn/end", 2, turn_end_completed(), time=3),
    ]
    session = Session.create("seed-snapshot", seed, now=now)
    seed[1]["data"]["content"][0]["text"] = "HACKED"
    seed[1]["data"]["injected"] = 2**60
    logged = session.events[1]
    assert logged.data["content"][0]["text"] == "original"
    assert "injected" not in logged.data
    assert session.derive_messages()[0]["content"] == [text_block("original")]


def test_session__snapshots_append_data() -> None:
    # spec 19.1 #34
    session = Session.create("append-snapshot", now=now)
    data = user_msg("original", id="append-input")
    event = session.append("user/message", data, intent(APPEND))
    data["content"][0]["text"] = "HACKED"
    data["injected"] = 2**60
    logged = session.events[0]
    assert logged.data["content"][0]["text"] == "original"
    assert "injected" not in logged.data
    assert event.data["content"][0]["text"] == "original"
    assert event.data is not data


def test_session__reads_a_nested_append_data_getter_once_and_stores_its_first_json_value() -> None:
    # spec 19.1 #35 — Python analogue: a drifting dict-subclass payload is refused at append.
    session = Session.create("append-nested-drift", now=now)
    data = DriftingDict("value", "accepted", 2**60)
    with pytest.raises(
        InvalidEventError, match=re.escape('session event "todo/write" carries non-JSON-serializable data')
    ):
        session.append("todo/write", data)
    assert list(session.events) == []
    event = session.append("todo/write", {"value": "accepted"})
    assert event.data == {"value": "accepted"}
    assert list(session.events) == [event]


@pytest.mark.parametrize(
    "surface_intent",
    [
        {"surfaceOp": {"op": "replace", "start": 2**60, "end": 2}},
        {"surfaceOp": {"op": "replace", "start": 0, "end": math.nan}},
        {"surfaceOp": "append", "sourceEventSeqs": (0,)},
    ],
    ids=["bigint-start", "nan-end", "tuple-sources"],
)
def test_session__rejects_non_json_surface_metadata_before_appending_the_event(surface_intent: Any) -> None:
    # spec 19.1 #36
    session = Session.create("append-bad-metadata", now=now)
    with pytest.raises(
        InvalidEventError,
        match=re.escape('session event "user/message" carries non-JSON-serializable surface metadata'),
    ):
        session.append("user/message", user_msg("hello"), surface_intent)
    assert list(session.events) == []


def test_session__rejects_exotic_surface_metadata_before_cloning_can_erase_its_prototype() -> None:
    # spec 19.1 #37
    session = Session.create("append-exotic-metadata", now=now)
    with pytest.raises(
        InvalidEventError,
        match=re.escape('session event "user/message" carries non-JSON-serializable surface metadata'),
    ):
        session.append("user/message", user_msg("hello"), {"surfaceOp": ExoticObject(op="replace", start=0, end=0)})
    assert list(session.events) == []


def test_session__reads_a_nested_append_metadata_getter_once_and_stores_its_first_json_value() -> None:
    # spec 19.1 #38 — Python analogue: a drifting dict-subclass surfaceOp is refused at append; the
    # equivalent plain op is stored.
    session = Session.create("append-unstable-metadata", now=now)
    source = session.append("user/message", user_msg("source"), intent(APPEND))
    drifting = DriftingDict("start", 0, 2**60, op="replace", end=0)
    with pytest.raises(
        InvalidEventError,
        match=re.escape('session event "user/message" carries non-JSON-serializable surface metadata'),
    ):
        session.append("user/message", user_msg("hello"), {"surfaceOp": drifting, "sourceEventSeqs": [0]})
    assert list(session.events) == [source]

    event = session.append("user/message", user_msg("hello"), intent(replace(0, 0), [0]))
    assert event.surface_op == {"op": "replace", "start": 0, "end": 0}
    assert list(session.events) == [source, event]


def test_session__rejects_invalid_plain_surface_metadata_shapes_at_append() -> None:
    # spec 19.1 #39
    session = Session.create("append-invalid-surface-shape", now=now)
    data = user_msg("hello", id="u-hello")
    with pytest.raises(SurfaceError, match=re.escape('session event "user/message" carries an invalid surfaceOp')):
        session.append("user/message", data, {"surfaceOp": "invalid"})
    with pytest.raises(
        SurfaceError, match=re.escape('session event "user/message" carries an invalid replace surfaceOp')
    ):
        session.append("user/message", data, {"surfaceOp": {"op": "replace", "start": -1, "end": 0}})
    with pytest.raises(
        SurfaceError,
        match=re.escape('session event "user/message" sourceEventSeqs must densely contain non-negative safe integers'),
    ):
        session.append("user/message", data, {"surfaceOp": "append", "sourceEventSeqs": [0, -1]})
    assert list(session.events) == []


def test_session__rejects_surface_metadata_on_non_surface_append_and_seed_events() -> None:
    # spec 19.1 #40
    session = Session.create("non-surface-metadata", now=now)
    with pytest.raises(
        SurfaceError,
        match=re.escape('session event "turn/start" is not surface-eligible and cannot carry surfaceOp'),
    ):
        session.append("turn/start", {"turn": 1}, {"surfaceOp": "append"})
    with pytest.raises(
        InvalidSeedError,
        match=re.escape(
            'invalid seed event at index 0: session event "turn/start" is not surface-eligible '
            "and cannot carry surfaceOp"
        ),
    ):
        Session.create(
            "non-surface-metadata-seed",
            [seed_event("turn/start", 0, {"turn": 1}, time=1, surfaceOp=APPEND)],
            now=now,
        )
    assert list(session.events) == []


def test_session__deep_freezes_seeded_and_appended_event_snapshots() -> None:
    # spec 19.1 #41
    seeded = Session.create("seed-frozen", [seed_event("turn/start", 0, {"turn": 1}, time=1)], now=now)
    seeded_event = seeded.events[0]
    assert_frozen_mapping(seeded_event)
    with pytest.raises(FrozenError):
        seeded_event.data["turn"] = 99
    assert seeded_event.data["turn"] == 1

    appended = Session.create("append-frozen", now=now)
    event = appended.append("todo/write", {"todos": [{"content": "first", "status": "pending"}]})
    assert_frozen_mapping(event)
    assert_frozen_mapping(event.data)
    assert_frozen_list(event.data["todos"])
    assert_frozen_mapping(event.data["todos"][0])
    with pytest.raises(FrozenError):
        event.data["todos"][0]["content"] = "mutated"
    assert event.data["todos"][0]["content"] == "first"


def test_session__iteratively_freezes_deeply_nested_restored_event_data() -> None:
    # spec 19.1 #42
    depth = 20_000
    data: dict[str, Any] = {}
    tail = data
    for _ in range(depth):
        child: dict[str, Any] = {}
        tail["child"] = child
        tail = child
    event = {"type": "test/deep-restore", "seq": 0, "time": 1, "data": data}

    session = Session.from_restore("deep-restore", [event], {"version": 0, "id": "deep-restore", "createdAt": 1})

    node: Any = session.events[0]
    assert node.type == "test/deep-restore"
    frozen_nodes = 0
    for _ in range(depth + 2):
        with pytest.raises(FrozenError):
            node["__probe__"] = 1
        frozen_nodes += 1
        node = node["data"] if frozen_nodes == 1 else node.get("child")
        if node is None:
            break
    assert frozen_nodes == depth + 2


def test_session__returns_cached_frozen_event_array_snapshots_that_do_not_grow_after_append() -> None:
    # spec 19.1 #43
    session = Session.create("events-snapshot", now=now)
    first = session.append("turn/start", {"turn": 1})
    before = session.events
    assert session.events is before
    assert before == [first]
    with pytest.raises(FrozenError):
        before.append(first)  # type: ignore[attr-defined]
    with pytest.raises(FrozenError):
        before[0] = first  # type: ignore[index]
    with pytest.raises(FrozenError):
        before[0].data["turn"] = 99
    assert len(before) == 1

    second = session.append("turn/end", turn_end_completed())
    after = session.events
    assert len(before) == 1
    assert list(before) == [first]
    assert len(after) == 2
    assert after is not before
    assert session.events is after
    assert after == [first, second]


def test_session__events_view_equals_a_list_and_never_changes() -> None:
    # spec 6.5 / kernel-api `EventsView`: equality with a plain list (both directions), old snapshots
    # stay as they were across later appends.
    session = Session.create("events-view", now=now)
    empty = session.events
    assert empty == []
    assert [] == empty
    a = session.append("turn/start", {"turn": 1})
    one = session.events
    b = session.append("user/message", user_msg("x"), intent(APPEND))
    two = session.events
    assert empty == [] and len(empty) == 0
    assert one == [a] and [a] == one
    assert two == [a, b]
    assert two != [a]
    assert two[0] is a and two[1] is b
    assert list(two) == [a, b]
    assert session.events is two


def test_session__detaches_and_freezes_an_explicitly_supplied_session_header() -> None:
    # spec 19.1 #44
    supplied = header(
        "header-owned",
        cwd="/accepted",
        teamId="team-owned",
        participantId="participant-owned",
        parentSession="parent",
        seedLength=2,
    )
    session = Session.create("header-owned", None, supplied, now=now)
    supplied["cwd"] = "/caller-mutated"
    supplied["teamId"] = "caller-mutated-team"

    assert session.header == {
        "version": 0,
        "id": "header-owned",
        "createdAt": 123,
        "cwd": "/accepted",
        "teamId": "team-owned",
        "participantId": "participant-owned",
        "parentSession": "parent",
        "seedLength": 2,
    }
    assert session.header is not supplied
    with pytest.raises(FrozenError):
        session.header["cwd"] = "/published-mutated"
    assert session.id == "header-owned"
    assert session.header["cwd"] == "/accepted"


class ExoticHeaderDict(dict):  # type: ignore[type-arg]
    """A dict-subclass header (JS: a class instance implementing SessionHeader)."""


def test_session__rejects_an_exotic_non_json_or_mismatched_supplied_header() -> None:
    # spec 19.1 #45
    exotic = ExoticObject(version=0, id="header-invalid", createdAt=123)
    with pytest.raises(SessionHeaderError, match=re.escape("session header is not losslessly JSON-serializable")):
        Session.create("header-invalid", None, exotic, now=now)  # type: ignore[arg-type]
    with pytest.raises(SessionHeaderError, match=re.escape("session header is not a plain JSON record")):
        Session.from_restore("header-invalid", [], exotic)  # type: ignore[arg-type]
    with pytest.raises(SessionHeaderError, match=re.escape("session header is not a plain JSON record")):
        Session.from_restore("header-invalid", [], ExoticHeaderDict(header("header-invalid")))
    for bad in (None, 1, []):
        with pytest.raises(SessionHeaderError, match=re.escape("session header is not a plain JSON record")):
            Session.from_restore("header-invalid", [], bad)  # type: ignore[arg-type]
    # BigInt parentSession → int beyond 2**53-1: the snapshot path's JSON check catches it first,
    # the restore path (no JSON check) reaches rule 6.
    with pytest.raises(SessionHeaderError, match=re.escape("session header is not losslessly JSON-serializable")):
        Session.create("header-invalid", None, header("header-invalid", parentSession=2**60), now=now)
    with pytest.raises(SessionHeaderError, match=re.escape("session header parentSession must be a string")):
        Session.from_restore("header-invalid", [], header("header-invalid", parentSession=2**60))
    with pytest.raises(
        SessionHeaderError,
        match=re.escape('session header id "other" does not match session id "header-invalid"'),
    ):
        Session.create("header-invalid", None, header("other"), now=now)


_BASE_HEADER = {"version": 0, "id": "header-shape", "createdAt": 123}

_INVALID_HEADERS: list[tuple[Any, str]] = [
    (1, "session header is not a plain JSON record"),
    ([], "session header is not a plain JSON record"),
    ({**_BASE_HEADER, "version": 1}, "session header version must be 0, got 1"),
    ({**_BASE_HEADER, "createdAt": "123"}, "session header createdAt must be a non-negative safe integer"),
    ({**_BASE_HEADER, "cwd": 1}, "session header cwd must be a string"),
    ({**_BASE_HEADER, "cwd": "relative"}, 'session header cwd must be an absolute path, got "relative"'),
    ({**_BASE_HEADER, "parentSession": 1}, "session header parentSession must be a string"),
    ({**_BASE_HEADER, "seedLength": "1"}, "session header seedLength must be a non-negative safe integer"),
    ({**_BASE_HEADER, "seedLength": 0.5}, "session header seedLength must be a non-negative safe integer"),
    ({**_BASE_HEADER, "seedLength": -1}, "session header seedLength must be a non-negative safe integer"),
    ({**_BASE_HEADER, "origin": "fork"}, 'session header origin must be "subagent"'),
    (
        {**_BASE_HEADER, "delegationDepth": -1},
        "session header delegationDepth must be a non-negative safe integer",
    ),
    ({**_BASE_HEADER, "agentPreset": 1}, "session header agentPreset must be a string"),
]


def test_session__rejects_invalid_scalar_fields_in_an_explicitly_supplied_header() -> None:
    # spec 19.1 #46 — `None` means "no header" for create(), so the null case runs on the restore
    # path only.
    for bad, expected in _INVALID_HEADERS:
        with pytest.raises(SessionHeaderError, match=re.escape(expected)):
            Session.create("header-shape", None, bad, now=now)
        with pytest.raises(SessionHeaderError, match=re.escape(expected)):
            Session.from_restore("header-shape", [], copy.deepcopy(bad))
    with pytest.raises(SessionHeaderError, match=re.escape("session header is not a plain JSON record")):
        Session.from_restore("header-shape", [], None)  # type: ignore[arg-type]


_ENVELOPE_BASE = {"type": "turn/start", "seq": 0, "time": 1, "data": {"turn": 1}}


@pytest.mark.parametrize(
    "event",
    [
        {**_ENVELOPE_BASE, "extra": True},
        {**_ENVELOPE_BASE, "type": 1},
        {**_ENVELOPE_BASE, "seq": "0"},
        {**_ENVELOPE_BASE, "seq": 0.5},
        {**_ENVELOPE_BASE, "seq": -1},
        {**_ENVELOPE_BASE, "time": "1"},
        {**_ENVELOPE_BASE, "time": 0.5},
        {"type": "turn/start", "seq": 0, "time": 1},
        {**_ENVELOPE_BASE, "ignorable": False},
        {**_ENVELOPE_BASE, "ignorable": "yes"},
    ],
    ids=[
        "extra-key",
        "numeric-type",
        "string-seq",
        "fractional-seq",
        "negative-seq",
        "string-time",
        "fractional-time",
        "missing-data",
        "ignorable-false",
        "ignorable-string",
    ],
)
def test_session__rejects_seed_records_with_invalid_fixed_envelope_fields(event: dict[str, Any]) -> None:
    # spec 19.1 #47
    with pytest.raises(InvalidSeedError, match=re.escape("seed event at index 0 has an invalid event envelope")):
        Session.create("bad-envelope", [event], now=now)


def test_session__accepts_and_preserves_the_ignorable_true_envelope_marker() -> None:
    # spec 19.1 #47 (accepted case)
    marked = Session.create("ignorable-envelope", [{**_ENVELOPE_BASE, "ignorable": True}], now=now)
    assert marked.events[0]["ignorable"] is True
    assert marked.events[0].ignorable is True
    assert list(marked.events)[:1] == [{**_ENVELOPE_BASE, "ignorable": True}]


def test_events_view_slices_exactly_like_a_list_of_its_prefix() -> None:
    """A view's slice equals slicing the prefix as a list (any bounds, any step), though the backing list
    has grown past the view: the forward fast path must never see the newer events."""
    from agentlog.kernel.session import _Snapshot

    backing = list(range(12))
    view = _Snapshot(backing, 10)
    prefix = list(range(10))
    bounds = [None, -15, -3, 0, 2, 9, 10, 20]
    for start in bounds:
        for stop in bounds:
            for step in (None, 1, 2, -1, -2, 3):
                assert view[start:stop:step] == prefix[start:stop:step], (start, stop, step)


# Issue 7, defect 3: appends from several threads are serialized per session.
#
# Before: four threads appending to one session produced out-of-order seqs in memory, a misleading
# "cannot reenter" error (another thread's append looked like a reentrant one) and a session that was
# lost on disk. Now every append takes the session's lock; a listener appending on its own thread is
# still refused with REENTRANT_APPEND.


THREADS = 4
PER_THREAD = 300


def _todo(worker: int, n: int) -> dict[str, Any]:
    return {"todos": [{"content": f"{worker}-{n}", "status": "pending"}]}


def _hammer(session: al.Session, worker: int, errors: list[BaseException], start: threading.Barrier) -> None:
    start.wait()
    try:
        for n in range(PER_THREAD):
            session.append("todo/write", _todo(worker, n))
    except BaseException as err:  # reported by the test thread
        errors.append(err)


def _check_log(events: Any) -> None:
    assert [e["seq"] for e in events] == list(range(len(events)))
    contents = [e["data"]["todos"][0]["content"] for e in events if e["type"] == "todo/write"]
    assert len(contents) == THREADS * PER_THREAD
    for worker in range(THREADS):
        mine = [int(c.split("-")[1]) for c in contents if c.startswith(f"{worker}-")]
        assert mine == list(range(PER_THREAD))  # each thread's appends keep their order


def _yielding_clock() -> int:
    time.sleep(0)  # gives other threads the interpreter in the middle of every append
    return 1000


def test_threads_appending_to_a_detached_session_get_contiguous_seqs() -> None:
    session = al.Session.create("s", now=_yielding_clock)
    errors: list[BaseException] = []
    start = threading.Barrier(THREADS)
    workers = [threading.Thread(target=_hammer, args=(session, w, errors, start)) for w in range(THREADS)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join(30)
    assert errors == []
    _check_log(session.events)
    assert len(session.derive_messages()) == 0


@pytest.mark.parametrize("backend", ["jsonl", "sqlite"])
def test_threads_appending_while_a_coordinator_flushes_lose_nothing(tmp_path: Path, backend: str) -> None:
    def make() -> Any:
        if backend == "jsonl":
            return JsonlBackend(str(tmp_path / "jsonl"))
        return SqliteBackend(str(tmp_path / "db.sqlite3"))

    coordinator = PersistenceCoordinator(al.SessionStore(), make(), batch_delay_ms=2)
    store = coordinator.store
    session = store.create("shared", meta={"cwd": "/work"})
    heard: list[int] = []
    store.on_event(lambda s, e: heard.append(e.seq))  # listeners hear every event once, in seq order
    errors: list[BaseException] = []
    start = threading.Barrier(THREADS + 1)
    done = threading.Event()

    def flusher() -> None:
        start.wait()
        try:
            while not done.is_set():
                store.flush(session)
                time.sleep(0.001)
        except BaseException as err:
            errors.append(err)

    workers = [threading.Thread(target=_hammer, args=(session, w, errors, start)) for w in range(THREADS)]
    flushing = threading.Thread(target=flusher)
    for thread in [*workers, flushing]:
        thread.start()
    for thread in workers:
        thread.join(60)
    done.set()
    flushing.join(30)
    assert errors == []
    store.flush(session)
    assert heard == list(range(len(session.events)))
    expected = [e.json_bytes for e in session.events]
    coordinator.close()

    reader = PersistenceCoordinator(al.SessionStore(), make())
    try:
        stored = reader.load("shared").events
        _check_log(stored)
        assert [e.json_bytes for e in stored] == expected
    finally:
        reader.close()


def test_a_listener_on_another_thread_waits_instead_of_being_called_reentrant() -> None:
    store = al.SessionStore()
    session = store.create("s")
    in_listener = threading.Event()
    release = threading.Event()

    def slow_listener(s: al.Session, event: Any) -> None:
        if event.seq == 0:
            in_listener.set()
            release.wait(5)

    store.on_event(slow_listener)
    first = threading.Thread(target=session.append, args=("todo/write", {"todos": []}))
    first.start()
    assert in_listener.wait(5)
    outcome: list[Any] = []
    second = threading.Thread(target=lambda: outcome.append(session.append("todo/write", {"todos": []}).seq))
    second.start()
    time.sleep(0.05)
    assert outcome == []  # waiting for the first append's publication, not refused
    release.set()
    first.join(5)
    second.join(5)
    assert outcome == [1]


def test_a_listener_appending_on_its_own_thread_is_still_reentrant() -> None:
    store = al.SessionStore()
    session = store.create("s")
    caught: list[BaseException] = []

    def reenter(s: al.Session, event: Any) -> None:
        if event.seq == 0:
            try:
                s.append("todo/write", {"todos": []})
            except ReentrantAppendError as err:
                caught.append(err)

    store.on_event(reenter)
    session.append("todo/write", {"todos": []})
    assert len(caught) == 1 and caught[0].code == "REENTRANT_APPEND"
    assert session.seq == 1


def test_dispose_racing_with_appends_stores_every_acknowledged_event(tmp_path: Path) -> None:
    coordinator = PersistenceCoordinator(al.SessionStore(), JsonlBackend(str(tmp_path)), batch_delay_ms=2)
    store = coordinator.store
    session = store.create("racing")
    acknowledged: list[int] = []
    refused: list[BaseException] = []
    started = threading.Event()

    def appender() -> None:
        for n in range(5_000):
            try:
                acknowledged.append(session.append("todo/write", _todo(0, n)).seq)
            except SessionDisposedError as err:
                refused.append(err)
                return
            if n == 50:
                started.set()

    thread = threading.Thread(target=appender)
    thread.start()
    assert started.wait(5)
    store.dispose(session)
    thread.join(10)
    assert len(refused) == 1 and refused[0].code == "SESSION_DISPOSED"
    coordinator.close()
    reader = PersistenceCoordinator(al.SessionStore(), JsonlBackend(str(tmp_path)))
    try:
        assert [e["seq"] for e in reader.inspect("racing").events] == acknowledged
    finally:
        reader.close()


# Issue 7, defects 2 and 15: append accepts only what every load path accepts back.
#
# Each shape that a loader refused after ``append`` had accepted it (so the session could never be
# resumed, shown or exported) is now refused at append with a typed error that names the fix. The
# accelerated append path (C) and the pure-Python path must agree on every input: the differential
# property at the end checks that directly.


APPEND_INTENT = {"surfaceOp": "append"}


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
def test_user_message_must_be_a_message_and_names_its_constructor(data: Any) -> None:
    session = Session.create("s")
    with pytest.raises(MessageShapeError) as caught:
        session.append("user/message", data, APPEND_INTENT)
    assert "build it with agentlog.user_message(text)" in str(caught.value)
    assert caught.value.code == "INVALID_MESSAGE"
    assert session.seq == 0


def test_assistant_message_needs_its_turn_step_message_wrapper() -> None:
    session = Session.create("s")
    _open_step(session)
    bare = al.assistant_message("hi", provider="p", model="m", id="a1")
    with pytest.raises(MessageShapeError, match=re.escape('{"turn": n, "step": n, "message": ...}')):
        session.append("assistant/message", bare, APPEND_INTENT)
    event = session.append("assistant/message", {"turn": 1, "step": 1, "message": bare}, APPEND_INTENT)
    assert event.data["message"]["id"] == "a1"


def test_tool_result_needs_a_matching_tool_result_block() -> None:
    session = Session.create("s")
    _open_step(session)
    message = al.tool_result_message("c1", "ok", id="t1")
    with pytest.raises(MessageShapeError, match=re.escape("agentlog.tool_result_message(call_id, text)")):
        session.append("tool/result", message, APPEND_INTENT)  # without its wrapper
    wrong = al.tool_result_message("c1", "ok", id="t2")
    wrong["source"]["callId"] = "c2"  # type: ignore[index]
    with pytest.raises(MessageShapeError, match="mismatched tool call ids"):
        session.append("tool/result", {"turn": 1, "step": 1, "message": wrong}, APPEND_INTENT)
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
def test_core_data_shapes_are_refused_at_append(etype: str, data: Any, fragment: str) -> None:
    session = Session.create("s")
    with pytest.raises(EventDataError) as caught:
        session.append(etype, data)
    assert fragment in str(caught.value)
    assert caught.value.code == "INVALID_EVENT_DATA"
    assert session.seq == 0


def test_the_same_core_rules_refuse_a_seed_and_a_restored_log() -> None:
    bad = [{"type": "turn/start", "seq": 0, "time": 1, "data": {"turn": "1"}}]
    with pytest.raises(InvalidSeedError, match=re.escape("seed turn/start at index 0 data turn must be")):
        Session.create("s", bad)
    header = {"version": 0, "id": "s", "createdAt": 1}
    with pytest.raises(InvalidSeedError, match=re.escape("seed turn/start at index 0 data turn must be")):
        Session.from_restore("s", loads(dumps(bad)), header)


def test_unknown_types_are_refused_with_the_registration_hint() -> None:
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


def test_depth_is_limited_to_what_a_reader_loads_back() -> None:
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


def test_refused_shapes_were_unloadable_and_accepted_ones_load(tmp_path: Path) -> None:
    """The original failure end to end: what append accepts, a fresh coordinator loads back."""
    root = str(tmp_path / "store")
    store = al.SessionStore()
    coordinator = PersistenceCoordinator(store, JsonlBackend(root))
    session = store.create("s1")
    for etype, data in [("user/message", "hi"), ("turn/start", {"turn": "1"}), ("my/type", {})]:
        with pytest.raises(AgentlogError):
            session.append(etype, data, APPEND_INTENT if etype == "user/message" else None)
    session.append("turn/start", {"turn": 1})
    session.append("user/message", al.user_message("hi", id="u1"), APPEND_INTENT)
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
def test_a_clock_returning_a_non_integer_is_refused_at_append(value: Any) -> None:
    session = Session.create("s", header={"version": 0, "id": "s", "createdAt": 1}, now=lambda: value)
    with pytest.raises(InvalidEventError, match="must be integer Unix epoch milliseconds") as caught:
        session.append("turn/start", {"turn": 1})
    assert caught.value.code == "INVALID_EVENT"
    with pytest.raises(InvalidEventError, match="must be integer Unix epoch milliseconds"):
        session.append("user/message", al.user_message("x", id="u"), APPEND_INTENT)  # the general path too
    assert session.seq == 0


def test_a_bad_clock_never_reaches_the_store(tmp_path: Path) -> None:
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
def test_accelerated_rules_never_accept_what_the_python_rules_refuse(etype: str, data: Any) -> None:
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
def test_restore_applies_exactly_the_seed_rules(etype: str, data: Any) -> None:
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
