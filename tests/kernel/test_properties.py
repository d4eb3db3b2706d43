"""Property-based checks over random session logs of up to 25 events.

Conformance checklist ``shared/spec/core-session.md`` §19.10 (items 189–194), plus two properties
from §6.2/§6.4: restoring a prefix that ends at a closed turn reproduces the derived state, and every
rejected append leaves the session exactly as it was. Logs are generated as a list of abstract
operations that a small interpreter turns into valid appends (replace ranges are chosen by surface
position, so the same operations produce corresponding logs with or without log-only events).
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agentlog as al
from agentlog import (
    AgentlogError,
    FrozenError,
    InvalidEventError,
    LegacyFormatError,
    Session,
    SurfaceError,
    fold_surface,
    thaw,
)
from agentlog.kernel.events import Event, event_types
from agentlog.kernel.jsoncodec import dumps
from agentlog.kernel.repair import interrupted_turn_closers
from agentlog.kernel.surface import SurfaceTimeline
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.testing.builders import (
    APPEND,
    assistant_msg_data,
    intent,
    replace,
    text_block,
    tool_result_msg_data,
    user_msg,
)
from persistence.conftest import BACKEND_KINDS, BackendFactory

# The plugin's own log-only types: appends of unregistered types are refused (issue 7, defect 2).
for _plugin_type in ("plugin/marker", "plugin/x"):
    event_types.register(_plugin_type)

PROPERTY_SETTINGS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

MESSAGE_KINDS = (
    "user",
    "assistant",
    "assistant_tool_call",
    "assistant_empty",
    "tool_result",
    "replace_user",
    "replace_assistant",
    "rewrite_tool",
)
LOG_ONLY_KINDS = ("boundary", "step", "chunk", "tool_call", "todo", "header", "context", "plugin")
SURFACE_TYPES = ("user/message", "assistant/message", "tool/result")
MAX_OPS = 23  # the interpreter may add two closing events: logs stay within 25 events

texts = st.text(alphabet=st.characters(codec="utf-8"), max_size=6)
#: turn boundaries are drawn more often than other kinds so logs hold several closed turns
op_strategy = st.tuples(
    st.sampled_from(MESSAGE_KINDS + LOG_ONLY_KINDS + ("boundary",) * 4 + ("step",)),
    st.integers(0, 2**16),
    st.integers(0, 2**16),
    texts,
)
#: the length is drawn first so long logs (up to 25 events) are as likely as short ones
ops_strategy = st.integers(0, MAX_OPS).flatmap(lambda n: st.lists(op_strategy, min_size=n, max_size=n))


def now() -> int:
    return 1000


@dataclass
class LogBuilder:
    """Interprets abstract operations as valid appends on ``session``."""

    session: Session
    record: bool = False
    messages: int = 0
    turn: int = 0
    open_turn: bool = False
    step: int = 0
    open_step: bool = False
    returned: list[Any] = field(default_factory=list)
    #: (derive_messages(), request_header()) right after each append, when ``record`` is set
    states: list[tuple[Any, Any]] = field(default_factory=list)

    def _append(self, type: str, data: Any, surface_intent: Any = None) -> Any:
        if surface_intent is None:
            event = self.session.append(type, data)
        else:
            event = self.session.append(type, data, surface_intent)
        self.returned.append(event)
        if self.record:
            self.states.append((self.session.derive_messages(), self.session.request_header()))
        return event

    def _id(self) -> str:
        self.messages += 1
        return f"m{self.messages}"

    def apply(self, op: tuple[str, int, int, str]) -> None:
        kind, a, b, text = op
        s = self.session
        nodes = list(s.surface.nodes)
        tool_nodes = [n for n in nodes if s.events[n].type == "tool/result"]
        if kind in ("replace_user", "replace_assistant") and nodes:
            i = a % len(nodes)
            j = i + b % (len(nodes) - i)
            shadow = nodes[i : j + 1]
            surface_intent = intent(replace(nodes[i], nodes[j]), shadow)
            if kind == "replace_user":
                self._append("user/message", user_msg(text, id=self._id()), surface_intent)
            else:
                self._append("assistant/message", assistant_msg_data(text, id=self._id()), surface_intent)
        elif kind == "rewrite_tool" and tool_nodes:
            seq = tool_nodes[a % len(tool_nodes)]
            data = thaw(s.events[seq].data)
            data["message"]["content"][0]["content"] = [text_block(text)]
            self._append("tool/result", data, intent(replace(seq, seq), [seq]))
        elif kind in ("user", "replace_user", "replace_assistant"):
            self._append("user/message", user_msg(text, id=self._id()), intent(APPEND))
        elif kind == "assistant":
            self._append("assistant/message", assistant_msg_data(text, id=self._id()), intent(APPEND))
        elif kind == "assistant_tool_call":
            blocks = [
                text_block(text),
                {"type": "tool-call", "id": f"call-{a % 4}", "name": "echo", "arguments": "{}"},
            ]
            self._append("assistant/message", assistant_msg_data(blocks, id=self._id()), intent(APPEND))
        elif kind == "assistant_empty":
            data = assistant_msg_data([], id=self._id(), usage={"inputTokens": a % 50, "outputTokens": 0})
            self._append("assistant/message", data, intent(APPEND))
        elif kind in ("tool_result", "rewrite_tool"):
            data = tool_result_msg_data(f"call-{a % 4}", text, id=self._id(), is_error=bool(b % 2))
            self._append("tool/result", data, intent(APPEND))
        elif kind == "boundary":
            if self.open_step:
                self._close_step()
            elif self.open_turn:
                self._close_turn()
            else:
                self._open_turn()
        elif kind == "step":
            if not self.open_turn:
                self._open_turn()
            elif self.open_step:
                self._close_step()
            else:
                self.step += 1
                self.open_step = True
                self._append("step/start", {"turn": self.turn, "step": self.step})
        elif kind == "chunk":
            chunk = {"type": "text-delta", "index": 0, "text": text}
            self._append("assistant/chunk", {"turn": max(self.turn, 1), "step": max(self.step, 1), "chunk": chunk})
        elif kind == "tool_call":
            self._append(
                "tool/call",
                {
                    "turn": max(self.turn, 1),
                    "step": max(self.step, 1),
                    "callId": f"call-{a % 4}",
                    "name": "echo",
                    "arguments": "{}",
                },
            )
        elif kind == "todo":
            self._append("todo/write", {"todos": [{"content": text, "status": "pending"}]})
        elif kind == "header":
            header: dict[str, Any] = {"config": {"provider": "mock", "model": f"model-{a % 3}"}}
            if b % 2:
                header["system"] = text
            if b % 3 == 0:
                header["tools"] = [{"name": "echo", "description": text, "parameters": {"type": "object"}}]
            self._append("request/header", {"header": header, "reason": "initial" if a % 2 else "change"})
        elif kind == "context":
            context: dict[str, Any] = {"provider": "mock", "model": f"model-{a % 3}"}
            if b % 2:
                context["contextWindow"] = 1000 + b
            self._append("request/context", context)
        elif kind == "plugin":
            self._append("plugin/marker", None if a % 2 else {"n": a, "text": text})
        else:  # pragma: no cover - exhaustive over the kinds above
            raise AssertionError(kind)

    def _open_turn(self) -> None:
        self.turn += 1
        self.step = 0
        self.open_turn = True
        self._append("turn/start", {"turn": self.turn})

    def _close_step(self) -> None:
        self.open_step = False
        self._append("step/end", {"turn": self.turn, "step": self.step})

    def _close_turn(self) -> None:
        self.open_turn = False
        self._append("turn/end", {"turn": self.turn, "reason": {"kind": "completed"}})

    def finish(self) -> None:
        """Close what is open, so the log ends at a closed turn (at most two more events)."""
        if self.open_step:
            self._close_step()
        if self.open_turn:
            self._close_turn()
        if not any(e.type == "turn/end" for e in self.session.events):
            self._open_turn()
            self._close_turn()


def build(
    ops: list[tuple[str, int, int, str]],
    *,
    session_id: str = "prop",
    keep: Callable[[str], bool] = lambda kind: True,
    finish: bool = True,
    record: bool = False,
) -> LogBuilder:
    builder = LogBuilder(Session.create(session_id, now=now), record=record)
    for op in ops:
        if keep(op[0]):
            builder.apply(op)
    if finish:
        builder.finish()
    return builder


# ------------------------------------------------------------------------------------ 19.10 items


@PROPERTY_SETTINGS
@given(ops=ops_strategy)
def test_properties__derive_messages_is_deterministic(ops: list[Any]) -> None:
    # spec 19.10 #189
    session = build(ops).session
    first = session.derive_messages()
    second = session.derive_messages()
    assert first == second
    assert all(a is b for a, b in zip(first, second, strict=True))
    again = build(ops, session_id="prop-again").session
    assert again.derive_messages() == first


@PROPERTY_SETTINGS
@given(ops=ops_strategy, every=st.integers(1, 4), only_surface=st.booleans())
def test_properties__a_checkpointed_surface_timeline_equals_the_plain_fold_at_every_seq(
    ops: list[Any], every: int, only_surface: bool
) -> None:
    # SurfaceTimeline (the inspector's slider): one fold with node-list checkpoints answers every seq as
    # the from-scratch fold of the prefix does, and as session.at(seq) does, whichever events it was fed
    # (all of them, or only the surface ones, as a pass stepping over packed chunk runs feeds it).
    session = build(ops).session
    events = list(session.events)
    timeline = SurfaceTimeline(session.events, every=every)
    for event in events:
        if not only_surface or event.type in SURFACE_TYPES:
            timeline.add(event)
    if only_surface and events[-1].type not in SURFACE_TYPES:
        timeline.add(events[-1])  # (a log-only event moves the timeline's last seq: the seqs before it are known)
    assert timeline.nodes == list(session.surface.nodes)
    for seq in range(len(events)):
        plain = fold_surface(events[: seq + 1])
        assert timeline.nodes_at(seq) == plain.nodes == list(session.at(seq).surface.nodes)
        assert timeline.replacements_through(seq) == plain.replacements
    assert timeline.replacements == fold_surface(events).replacements


@PROPERTY_SETTINGS
@given(ops=ops_strategy)
def test_properties__seq_is_strictly_monotonic_and_zero_based_contiguous(ops: list[Any]) -> None:
    # spec 19.10 #190
    builder = build(ops)
    session = builder.session
    events = list(session.events)
    assert len(events) <= 25
    assert [e.seq for e in builder.returned] == list(range(len(builder.returned)))
    assert [e.seq for e in events] == list(range(len(events)))
    assert [e["seq"] for e in events] == list(range(len(events)))
    assert session.seq == len(events) == len(builder.returned)
    assert all(e is r for e, r in zip(events, builder.returned, strict=True))


@PROPERTY_SETTINGS
@given(ops=ops_strategy)
def test_properties__replay_from_seed_reproduces_the_derivation_identically(ops: list[Any]) -> None:
    # spec 19.10 #191
    session = build(ops).session
    events = list(session.events)
    replayed = Session.create("replay", events, now=now)
    assert replayed.derive_messages() == session.derive_messages()
    assert list(replayed.events)[: len(events)] == events
    assert len(replayed.events) == len(events) + 1
    assert replayed.events[-1].type == "session/end-seed"
    assert replayed.events[-1].data == {}
    assert replayed.first_live_seq == len(events)
    assert list(replayed.surface.nodes) == list(session.surface.nodes)
    assert replayed.surface.replace_generation == session.surface.replace_generation
    assert replayed.request_header() == session.request_header()
    assert replayed.request_context() == session.request_context()


@PROPERTY_SETTINGS
@given(ops=ops_strategy)
def test_properties__replaying_a_log_that_already_ends_in_end_seed_adds_no_further_marker(
    ops: list[Any],
) -> None:
    # spec 19.10 #192
    session = build(ops).session
    first = Session.create("replay-1", list(session.events), now=now)
    second = Session.create("replay-2", list(first.events), now=lambda: 2000)
    assert list(second.events) == list(first.events)
    assert second.first_live_seq == len(first.events)
    assert second.seq == first.seq
    assert sum(1 for e in second.events if e.type == "session/end-seed") == 1
    assert second.derive_messages() == first.derive_messages() == session.derive_messages()


@PROPERTY_SETTINGS
@given(ops=ops_strategy)
def test_properties__non_message_events_never_affect_derived_history(ops: list[Any]) -> None:
    # spec 19.10 #193 — the same message operations with and without any interleaving of log-only
    # events derive the same history.
    interleaved = build(ops, finish=False).session
    messages_only = build(
        ops, session_id="messages-only", keep=lambda kind: kind in MESSAGE_KINDS, finish=False
    ).session
    assert all(e.type in SURFACE_TYPES for e in messages_only.events)
    assert interleaved.derive_messages() == messages_only.derive_messages()
    assert len(interleaved.surface.nodes) == len(messages_only.surface.nodes)
    assert interleaved.surface.replace_generation == messages_only.surface.replace_generation


@PROPERTY_SETTINGS
@given(ops=ops_strategy)
def test_properties__every_derived_message_has_a_known_role_and_is_frozen(ops: list[Any]) -> None:
    # spec 19.10 #194
    session = build(ops).session
    before = [thaw(e) for e in session.events]
    for message in session.derive_messages():
        assert message["role"] in ("user", "assistant", "system")
        with pytest.raises(FrozenError):
            message["content"].append(text_block("pushed"))
        with pytest.raises(FrozenError):
            message["role"] = "system"
        if message["content"]:
            with pytest.raises(FrozenError):
                message["content"][0]["type"] = "changed"
    assert list(session.events) == before
    assert session.derive_messages() == Session.create("scratch", before, now=now).derive_messages()


# ------------------------------------------------------------------------ restore at closed turns


@settings(PROPERTY_SETTINGS, max_examples=100)
@given(ops=ops_strategy)
def test_properties__restoring_any_prefix_that_ends_at_a_closed_turn_reproduces_derived_state(
    ops: list[Any],
) -> None:
    # spec 6.2 / 9.2 / 10.4 — both factories, over every closed-turn boundary of a random log
    builder = build(ops, record=True)
    events = list(builder.session.events)
    boundaries = [i for i, e in enumerate(events) if e.type == "turn/end"]
    assert boundaries  # the builder always closes at least one turn
    for i in boundaries:
        messages, request_header = builder.states[i]
        prefix = events[: i + 1]

        created = Session.create("created", prefix, now=now)
        assert created.derive_messages() == messages
        assert created.request_header() == request_header

        restored_id = "restored"
        restored = Session.from_restore(
            restored_id, [thaw(e) for e in prefix], {"version": 0, "id": restored_id, "createdAt": 1}, now=now
        )
        assert restored.derive_messages() == messages
        assert restored.request_header() == request_header
        assert list(restored.events)[: i + 1] == prefix
        assert restored.first_live_seq == i + 1
        # (the accelerated restore commits plain appends unplanned: the fold must be the planned one)
        assert list(restored.surface.nodes) == list(created.surface.nodes)
        assert restored.surface.replace_generation == created.surface.replace_generation


def test_properties__the_accelerated_restore_commits_only_plain_appends_unplanned() -> None:
    """``restore_events``'s ``appended``: a verified message whose append is plain (sources absent or strictly
    increasing earlier seqs, empty only on an assistant/message); any other shape stays for the planner."""
    from agentlog.kernel import session as session_module

    restore = session_module._restore_events
    if restore is None:
        pytest.skip("the accelerator's path")
    user = thaw(al.user_message("hi", id="u"))
    assistant = {"message": {"id": "a", "role": "assistant", "content": [], "source": {"kind": "model",
                 "provider": "p", "model": "m"}}}  # fmt: skip
    cases = [
        ("user/message", user, {}, True),
        ("user/message", user, {"sourceEventSeqs": [0, 2, 5]}, True),
        ("assistant/message", assistant, {"sourceEventSeqs": []}, True),
        ("user/message", user, {"sourceEventSeqs": []}, False),
        ("user/message", user, {"sourceEventSeqs": [2, 0]}, False),
        ("user/message", user, {"sourceEventSeqs": [0, 0]}, False),
        ("user/message", user, {"sourceEventSeqs": [0, 9]}, False),
        ("user/message", user, {"sourceEventSeqs": [True]}, False),
        ("user/message", user, {"sourceEventSeqs": [-1]}, False),
        ("user/message", user, {"sourceEventSeqs": 3}, False),
    ]
    for etype, data, extra, plain in cases:
        log = [{"type": "turn/start", "seq": seq, "time": 1, "data": {"turn": 1}} for seq in range(9)]
        log.append({"type": etype, "seq": 9, "time": 1, "data": data, "surfaceOp": "append", **extra})
        special = frozenset(session_module._RESTORE_SPECIAL_TYPES)
        args = (log, special, Event, session_module._RESTORE_RULES, 0, session_module._MESSAGE_RULES)
        _, specials, stop, _, appended = restore(*args, True)
        assert stop == 10
        assert (appended, specials) == (([9], []) if plain else ([], [9])), (etype, extra)
        assert restore(*args, False)[1:] == ([9], stop, [9], [])  # without ``appends``: always special


# ------------------------------------------------------------------------ rejected appends


class _Exotic:
    pass


def _cycle() -> Any:
    value: dict[str, Any] = {"a": [1]}
    value["a"].append(value)
    return value


_BAD_VALUES: list[Callable[[], Any]] = [
    lambda: math.nan,
    lambda: math.inf,
    lambda: -math.inf,
    lambda: -0.0,
    lambda: (1, 2),
    lambda: {1, 2},
    lambda: b"x",
    lambda: _Exotic(),
    lambda: 2**53,
    lambda: -(2**53),
    lambda: {1: "x"},
    lambda: OrderedDict(a=1),
    lambda: "\ud800",
    lambda: [1, math.nan],
    lambda: {"deep": {"deeper": [(1,)]}},
    _cycle,
]

INVALID_KINDS = (
    "non_json_data",
    "non_json_meta",
    "missing_surface_op",
    "forbidden_surface_op",
    "invalid_surface_op",
    "start_not_found",
    "end_not_found",
    "start_after_end",
    "missing_coverage",
    "future_source",
    "duplicate_sources",
    "negative_source",
    "empty_sources",
    "legacy_delta",
    "legacy_fallback",
    "tool_rewrite_changes_more_than_content",
    "tool_rewrite_two_nodes",
)

_ABSENT_INTENT = object()


def invalid_attempt(session: Session, kind: str, a: int, b: int) -> tuple[str, Any, Any, type[AgentlogError]]:
    """(type, data, intent, expected error class) for an append that must be refused."""
    nodes = list(session.surface.nodes)
    seq = session.seq
    surface_type = SURFACE_TYPES[a % 2]  # user/message or assistant/message: no tool-result restriction
    message = user_msg("x", id="bad") if surface_type == "user/message" else assistant_msg_data("x", id="bad")
    tool_nodes = [n for n in nodes if session.events[n].type == "tool/result"]

    if kind == "non_json_data":
        bad = _BAD_VALUES[a % len(_BAD_VALUES)]()
        target = ("user/message", "todo/write", "plugin/x", "turn/start")[b % 4]
        surface_intent = intent(APPEND) if target == "user/message" else _ABSENT_INTENT
        return target, {"payload": bad}, surface_intent, InvalidEventError
    if kind == "non_json_meta":
        bad = _BAD_VALUES[a % len(_BAD_VALUES)]()
        return surface_type, message, {"surfaceOp": "append", "sourceEventSeqs": bad}, InvalidEventError
    if kind == "missing_surface_op":
        surface_intent = (_ABSENT_INTENT, {}, {"sourceEventSeqs": [0]})[b % 3]
        target = SURFACE_TYPES[a % 3]
        # well-formed data of the target type: only its surface metadata is wrong
        well_formed = {
            "user/message": user_msg("x", id="bad"),
            "assistant/message": assistant_msg_data("x", id="bad"),
            "tool/result": tool_result_msg_data("call-0", "x", id="bad"),
        }
        return target, well_formed[target], surface_intent, SurfaceError
    if kind == "forbidden_surface_op":
        target = ("turn/start", "todo/write", "request/context", "plugin/marker")[a % 4]
        surface_intent = ({"surfaceOp": "append"}, {"surfaceOp": None}, {"sourceEventSeqs": [0]})[b % 3]
        return target, {"turn": 1}, surface_intent, SurfaceError
    if kind == "invalid_surface_op":
        bad_ops: list[Any] = [
            "invalid",
            None,
            5,
            [],
            {"op": "replace", "start": 0},
            {"op": "replace", "start": 0, "end": 0, "extra": 1},
            {"op": "swap", "start": 0, "end": 0},
            {"op": "replace", "start": -1, "end": 0},
            {"op": "replace", "start": 0.5, "end": 0},
            {"op": "replace", "start": "0", "end": 0},
        ]
        return surface_type, message, {"surfaceOp": bad_ops[b % len(bad_ops)]}, SurfaceError
    if kind == "end_not_found" and nodes:
        start = nodes[b % len(nodes)]
        return surface_type, message, intent(replace(start, seq + a % 5), list(nodes)), SurfaceError
    if kind == "start_after_end" and len(nodes) >= 2:
        i = a % (len(nodes) - 1)
        j = i + 1 + b % (len(nodes) - 1 - i)
        return surface_type, message, intent(replace(nodes[j], nodes[i]), list(nodes)), SurfaceError
    if kind == "missing_coverage" and nodes:
        i = a % len(nodes)
        j = i + b % (len(nodes) - i)
        shadow = nodes[i : j + 1]
        sources = shadow[: b % len(shadow)] + shadow[b % len(shadow) + 1 :]
        surface_intent = (
            intent(replace(nodes[i], nodes[j]), sources) if sources else {"surfaceOp": replace(nodes[i], nodes[j])}
        )
        return surface_type, message, surface_intent, SurfaceError
    if kind == "future_source":
        return surface_type, message, intent(APPEND, [seq + a % 3]), SurfaceError
    if kind == "duplicate_sources":
        return surface_type, message, intent(APPEND, [0, 0]), SurfaceError
    if kind == "negative_source":
        return surface_type, message, intent(APPEND, [-1 - a % 3]), SurfaceError
    if kind == "empty_sources":
        return "user/message", user_msg("x", id="bad"), intent(APPEND, []), SurfaceError
    if kind == "legacy_delta":
        return "request/header-delta", {"header": {}}, _ABSENT_INTENT, LegacyFormatError
    if kind == "legacy_fallback":
        header = {"config": {"provider": "mock", "model": "m"}}
        return "request/header", {"header": header, "reason": "fallback"}, _ABSENT_INTENT, LegacyFormatError
    if kind == "tool_rewrite_changes_more_than_content" and tool_nodes:
        target = tool_nodes[a % len(tool_nodes)]
        data = thaw(session.events[target].data)
        data["message"]["content"][0]["content"] = [text_block("pruned")]
        change = b % 4
        if change == 0:
            data["message"]["id"] = "changed-id"
        elif change == 1:
            data["turn"] = data["turn"] + 1
        elif change == 2:
            data["message"]["content"][0]["isError"] = not data["message"]["content"][0].get("isError", False)
        else:
            data["meta"] = {"added": True}
        return "tool/result", data, intent(replace(target, target), [target]), SurfaceError
    if kind == "tool_rewrite_two_nodes" and len(nodes) >= 2:
        i = a % (len(nodes) - 1)
        shadow = nodes[i : i + 2]
        data = tool_result_msg_data("call-0", "x", id="bad")
        return "tool/result", data, intent(replace(shadow[0], shadow[1]), shadow), SurfaceError
    # start_not_found, and the fallback for kinds whose precondition does not hold on this log
    end = nodes[0] if nodes else seq
    return surface_type, message, intent(replace(seq + a % 5, end), list(nodes)), SurfaceError


@dataclass
class Observed:
    events: list[Any]
    seq: int
    nodes: list[int]
    generation: int
    messages: Any
    request_header: Any
    request_context: Any


def observe(session: Session) -> Observed:
    return Observed(
        events=list(session.events),
        seq=session.seq,
        nodes=list(session.surface.nodes),
        generation=session.surface.replace_generation,
        messages=session.derive_messages(),
        request_header=session.request_header(),
        request_context=session.request_context(),
    )


@PROPERTY_SETTINGS
@given(
    ops=ops_strategy,
    attempts=st.lists(
        st.tuples(st.sampled_from(INVALID_KINDS), st.integers(0, 2**16), st.integers(0, 2**16)),
        min_size=1,
        max_size=4,
    ),
    warm=st.booleans(),
)
def test_properties__every_rejected_append_leaves_the_session_exactly_as_before(
    ops: list[Any], attempts: list[tuple[str, int, int]], warm: bool
) -> None:
    # spec 6.4 ("every rejected append leaves events, seq, surface.nodes, surface.replaceGeneration
    # and all derived caches exactly as before")
    builder = build(ops, finish=False)
    session = builder.session
    # expected state from an independent from-scratch replay, so `session`'s own caches can stay cold
    expected_events = list(session.events)
    expected = observe(Session.create("expected", expected_events, now=now))
    expected.events = expected_events
    expected.seq = len(expected_events)
    if warm:
        observe(session)

    for kind, a, b in attempts:
        event_type, data, surface_intent, error = invalid_attempt(session, kind, a, b)
        with pytest.raises(error) as caught:
            if surface_intent is _ABSENT_INTENT:
                session.append(event_type, data)
            else:
                session.append(event_type, data, surface_intent)
        assert isinstance(caught.value, AgentlogError)
        assert observe(session) == expected

    # the session is still fully usable: the next valid append takes the very next seq
    event = session.append("user/message", user_msg("after", id="after"), intent(APPEND))
    assert event.seq == expected.seq
    assert list(session.surface.nodes) == [*expected.nodes, event.seq]
    assert session.derive_messages() == Session.create("scratch", list(session.events), now=now).derive_messages()


# Issue 7, defect 2 (property): whatever append accepts, a fresh reader loads back unchanged.
#
# Random sequences of append attempts (well-formed, near-miss and foreign shapes, unknown types,
# surface replacements) are applied to a live, persisted session; refused ones are skipped. The
# accepted log is closed as an agent would close it, flushed, and read back by a fresh coordinator
# and store over the same storage — on every backend — and once by a real child process. Events,
# derived messages and the request header must be the same.


PLUGIN = "issue7-roundtrip/state"  # a plugin type a reader registers too
SKIPPABLE = "issue7-roundtrip/trace"  # a plugin type readers may skip
event_types.register(PLUGIN)
event_types.register(SKIPPABLE, ignorable=True)

small_ints = st.sampled_from([0, 1, 2, 3])
turns = st.one_of(small_ints, st.sampled_from(["1", 1.0, 1.5, None, True]))
short_texts = st.text(alphabet="abcü ", max_size=5)
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-5, 5), short_texts, st.sampled_from([1.5, 2**53, -0.0])),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(short_texts, inner, max_size=3)),
    max_leaves=8,
)


@st.composite
def attempt(draw: Any) -> tuple[str, Any, Any]:
    """One append attempt ``(type, data, surface)``: surface is None, "append" or ("replace", i, j)."""
    kind = draw(
        st.sampled_from(
            [
                "turn/start", "turn/end", "step/start", "step/end", "assistant/chunk", "tool/call", "user",
                "assistant", "tool/result", "header", "request/context", "todo/write", "plugin", "skippable",
                "unknown", "foreign",
            ]
        )
    )
    turn, step, text = draw(turns), draw(small_ints), draw(short_texts)
    call = draw(st.sampled_from(["c1", "c2"]))
    surface: Any = "append"
    if draw(st.integers(0, 5)) == 0:
        surface = ("replace", draw(st.integers(0, 9)), draw(st.integers(0, 9)))
    if kind == "turn/start":
        return kind, {"turn": turn}, None
    if kind == "turn/end":
        reason = draw(st.sampled_from([{"kind": "completed"}, {"kind": "disposed"}, {"kind": "aborted", "reason": {}}]))
        return kind, {"turn": turn, "reason": reason}, None
    if kind in ("step/start", "step/end"):
        return kind, {"turn": turn, "step": step}, None
    if kind == "assistant/chunk":
        return kind, {"turn": turn, "step": step, "chunk": al.text_delta(0, text)}, None
    if kind == "tool/call":
        return kind, {"turn": turn, "step": step, "callId": call, "name": "t", "arguments": "{}"}, None
    if kind == "user":
        data = draw(st.sampled_from([al.user_message(text), text, {"role": "user", "content": text}]))
        return "user/message", data, surface
    if kind == "assistant":
        blocks = [al.text_block(text)] + ([al.tool_call_block(call, "t", "{}")] if draw(st.booleans()) else [])
        message = al.assistant_message(blocks, provider="p", model="m")
        data = {"turn": turn, "step": step, "message": message} if draw(st.booleans()) else message
        return "assistant/message", data, surface
    if kind == "tool/result":
        data = {"turn": turn, "step": step, "message": al.tool_result_message(call, text)}
        return kind, data, surface
    if kind == "header":
        config = {"provider": "p", "model": draw(st.sampled_from(["m1", "m2", ""]))}
        return "request/header", {"header": {"config": config}, "reason": "initial"}, None
    if kind == "request/context":
        return kind, {"provider": "p", "model": "m", "contextWindow": 1000}, None
    if kind == "todo/write":
        return kind, {"todos": [{"content": text, "status": "pending"}]}, None
    if kind == "plugin":
        return PLUGIN, draw(json_values), None
    if kind == "skippable":
        return SKIPPABLE, draw(json_values), None
    if kind == "unknown":
        return "someone-else/event", draw(json_values), None
    return draw(st.sampled_from(["turn/start", "user/message", "tool/call"])), draw(json_values), surface


def apply_attempts(session: al.Session, attempts: list[tuple[str, Any, Any]]) -> int:
    accepted = 0
    for etype, data, surface in attempts:
        intent: Any = None
        if surface == "append":
            intent = {"surfaceOp": "append"}
        elif surface is not None:
            nodes = list(session.surface.nodes)
            if nodes:
                i, j = sorted((surface[1] % len(nodes), surface[2] % len(nodes)))
                shadowed = nodes[i : j + 1]
                op = {"op": "replace", "start": nodes[i], "end": nodes[j]}
                intent = {"surfaceOp": op, "sourceEventSeqs": shadowed}
        try:
            if intent is None:
                session.append(etype, data)
            else:
                session.append(etype, data, intent)
            accepted += 1
        except AgentlogError:
            pass  # refused: nothing changed
    # close what is open, as an agent's exit path does, so no reader needs a repair
    for closer in interrupted_turn_closers(session.events):
        closer_intent = {k: closer[k] for k in ("surfaceOp", "sourceEventSeqs") if k in closer} or None
        session.append(closer["type"], closer["data"], closer_intent)
    return accepted


def expected_state(session: al.Session) -> tuple[list[bytes], list[bytes], bytes]:
    return (
        [event.json_bytes for event in session.events],
        [dumps(message) for message in session.derive_messages()],
        dumps(session.request_header()),
    )


def reloaded_state(coordinator: PersistenceCoordinator, session_id: str) -> tuple[list[bytes], list[bytes], bytes]:
    events = [dumps(event) for event in coordinator.load(session_id).events]
    view = coordinator.view(session_id)
    return events, [dumps(m) for m in view.derive_messages()], dumps(view.request_header())


@pytest.mark.parametrize("kind", BACKEND_KINDS)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(attempts=st.lists(attempt(), min_size=1, max_size=25))
def test_every_accepted_append_sequence_reloads_identically(
    kind: str, attempts: list[tuple[str, Any, Any]]
) -> None:
    root = Path(tempfile.mkdtemp(prefix="issue7-roundtrip-"))
    factory = BackendFactory(kind, root)
    try:
        writer = PersistenceCoordinator(al.SessionStore(), factory(), batch_delay_ms=5)
        session = writer.store.create("rt", meta={"cwd": "/work"})
        apply_attempts(session, attempts)
        writer.store.flush(session)
        expected = expected_state(session)
        writer.close()
        reader = PersistenceCoordinator(al.SessionStore(), factory())  # a fresh coordinator and store
        try:
            if not expected[0]:
                return  # nothing accepted: nothing was stored
            assert reloaded_state(reader, "rt") == expected
        finally:
            reader.close()
    finally:
        factory.close_all()
        shutil.rmtree(root, ignore_errors=True)


_CHILD = textwrap.dedent(
    """
    import json, sys
    import agentlog as al
    from agentlog.kernel.events import event_types
    from agentlog.kernel.jsoncodec import dumps
    from agentlog.persistence.coordinator import PersistenceCoordinator
    from agentlog.persistence.jsonl.backend import JsonlBackend
    from agentlog.persistence.sqlite.backend import SqliteBackend

    event_types.register(PLUGIN)  # the reader knows the plugin's required type; the skippable one it does not
    kind, location = sys.argv[1], sys.argv[2]
    backend = JsonlBackend(location) if kind == "jsonl" else SqliteBackend(location)
    reader = PersistenceCoordinator(al.SessionStore(), backend)
    events = [dumps(e).decode() for e in reader.load("rt").events]
    view = reader.view("rt")
    messages = [dumps(m).decode() for m in view.derive_messages()]
    print(json.dumps([events, messages, dumps(view.request_header()).decode()]))
    reader.close()
    """
).replace("PLUGIN", repr(PLUGIN))


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(attempts=st.lists(attempt(), min_size=40, max_size=80))
def test_an_accepted_log_reloads_identically_in_a_fresh_process(
    kind: str, attempts: list[tuple[str, Any, Any]]
) -> None:
    from agentlog.persistence.jsonl.backend import JsonlBackend
    from agentlog.persistence.sqlite.backend import SqliteBackend

    root = Path(tempfile.mkdtemp(prefix="issue7-roundtrip-"))
    try:
        location = str(root / ("jsonl" if kind == "jsonl" else "db.sqlite3"))
        backend = JsonlBackend(location) if kind == "jsonl" else SqliteBackend(location)
        writer = PersistenceCoordinator(al.SessionStore(), backend)
        session = writer.store.create("rt", meta={"cwd": "/work"})
        always = [(SKIPPABLE, {"n": 1}, None), ("turn/start", {"turn": 1}, None), (PLUGIN, [1, {"a": None}], None)]
        assert apply_attempts(session, [*always, *attempts]) >= len(always)
        writer.store.flush(session)
        events, messages, header = expected_state(session)
        writer.close()
        child = subprocess.run(
            [sys.executable, "-c", _CHILD, kind, location], capture_output=True, text=True, timeout=300, check=False
        )
        assert child.returncode == 0, child.stderr
        got_events, got_messages, got_header = json.loads(child.stdout)
        assert got_events == [e.decode() for e in events]
        assert got_messages == [m.decode() for m in messages]
        assert got_header == header.decode()
    finally:
        shutil.rmtree(root, ignore_errors=True)
