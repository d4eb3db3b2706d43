"""Crash repair: ``interrupted_turn_closers`` (spec §13; checklist §19.7, items 155–165)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from agentlog import (
    TOOL_NOT_STARTED,
    TOOL_OUTCOME_UNKNOWN,
    Session,
    interrupted_turn_closers,
)
from agentlog.kernel.messages import (
    assistant_message,
    text_block,
    tool_call_block,
    tool_result_message,
    user_message,
)

NOT_STARTED_TEXT = (
    "The tool call was interrupted before the Harness recorded it as started. Retry it if it is still needed."
)
OUTCOME_UNKNOWN_TEXT = (
    "The tool call was interrupted after it was recorded, but no result was durably recorded. "
    "Its outcome is unknown. Decide whether to retry from the tool semantics: retry only if the "
    "operation is read-only or idempotent; if it may have side effects, first verify external state "
    "or ask the user. Do not retry blindly."
)


def _time(seq: int) -> int:
    return 1_000 + 10 * seq


def turn_start(seq: int, turn: int) -> dict[str, Any]:
    return {"type": "turn/start", "seq": seq, "time": _time(seq), "data": {"turn": turn}}


def turn_end(seq: int, turn: int, kind: str = "completed") -> dict[str, Any]:
    return {
        "type": "turn/end",
        "seq": seq,
        "time": _time(seq),
        "data": {"turn": turn, "reason": {"kind": kind}},
    }


def step_start(seq: int, turn: int, step: int) -> dict[str, Any]:
    return {"type": "step/start", "seq": seq, "time": _time(seq), "data": {"turn": turn, "step": step}}


def step_end(seq: int, turn: int, step: int) -> dict[str, Any]:
    return {"type": "step/end", "seq": seq, "time": _time(seq), "data": {"turn": turn, "step": step}}


def user(seq: int, text: str = "hi") -> dict[str, Any]:
    return {
        "type": "user/message",
        "seq": seq,
        "time": _time(seq),
        "data": user_message(text),
        "surfaceOp": "append",
    }


def assistant(seq: int, turn: int, step: int, *call_ids: str, text: str | None = None) -> dict[str, Any]:
    blocks: list[Any] = []
    if text is not None:
        blocks.append(text_block(text))
    blocks.extend(tool_call_block(call_id, "bash", "{}") for call_id in call_ids)
    return {
        "type": "assistant/message",
        "seq": seq,
        "time": _time(seq),
        "data": {
            "turn": turn,
            "step": step,
            "message": assistant_message(blocks, provider="mock", model="mock"),
        },
        "surfaceOp": "append",
    }


def tool_call(seq: int, turn: int, step: int, call_id: str) -> dict[str, Any]:
    return {
        "type": "tool/call",
        "seq": seq,
        "time": _time(seq),
        "data": {"turn": turn, "step": step, "callId": call_id, "name": "bash", "arguments": "{}"},
    }


def tool_result(seq: int, turn: int, step: int, call_id: str, text: str = "ok") -> dict[str, Any]:
    return {
        "type": "tool/result",
        "seq": seq,
        "time": _time(seq),
        "data": {"turn": turn, "step": step, "message": tool_result_message(call_id, text, is_error=False)},
        "surfaceOp": "append",
    }


def expected_result(
    *, seq: int, time: int, turn: int, step: int, call_id: str, call_seq: int | None
) -> dict[str, Any]:
    started = call_seq is not None
    event: dict[str, Any] = {
        "type": "tool/result",
        "seq": seq,
        "time": time,
        "data": {
            "turn": turn,
            "step": step,
            "message": {
                "id": f"interrupted-tool-result-{call_id}-{seq}",
                "role": "user",
                "source": {"kind": "tool", "callId": call_id},
                "content": [
                    {
                        "type": "tool-result",
                        "toolCallId": call_id,
                        "isError": True,
                        "content": [
                            {"type": "text", "text": OUTCOME_UNKNOWN_TEXT if started else NOT_STARTED_TEXT}
                        ],
                    }
                ],
            },
            "error": (
                {"name": "ToolOutcomeUnknownError", "code": "TOOL_OUTCOME_UNKNOWN"}
                if started
                else {"name": "ToolNotStartedError", "code": "TOOL_NOT_STARTED"}
            ),
        },
        "surfaceOp": "append",
    }
    if started:
        event["sourceEventSeqs"] = [call_seq]
    return event


def _answers_every_tool_call(messages: Any) -> None:
    """Every tool-call block of an assistant message is answered by a later tool-result block."""
    answered: set[str] = set()
    for message in reversed(list(messages)):
        if message["role"] == "assistant":
            for block in message["content"]:
                if block["type"] == "tool-call":
                    assert block["id"] in answered, f"tool call {block['id']} is not answered"
        for block in message["content"]:
            if block["type"] == "tool-result":
                answered.add(block["toolCallId"])


def _restore(events: list[dict[str, Any]], closers: list[dict[str, Any]]) -> Session:
    seed = [*copy.deepcopy(events), *closers]
    return Session.from_restore("restored", seed, {"version": 0, "id": "restored", "createdAt": 1})


def test_repair__constants() -> None:
    assert TOOL_NOT_STARTED == "TOOL_NOT_STARTED"
    assert TOOL_OUTCOME_UNKNOWN == "TOOL_OUTCOME_UNKNOWN"


# spec 19.7 #155
def test_repair__returns_nothing_for_balanced_log() -> None:
    events = [turn_start(0, 1), turn_end(1, 1)]
    assert interrupted_turn_closers(events) == []


# spec 19.7 #156
def test_repair__returns_nothing_for_empty_log() -> None:
    assert interrupted_turn_closers([]) == []


# spec 19.7 #157
def test_repair__closes_open_turn_with_no_open_step() -> None:
    events = [turn_start(0, 1)]
    closers = interrupted_turn_closers(events)
    assert closers == [
        {
            "type": "turn/end",
            "seq": 1,
            "time": _time(0),
            "data": {"turn": 1, "reason": {"kind": "interrupted"}},
        }
    ]
    assert list(closers[0]) == ["type", "seq", "time", "data"]


# spec 19.7 #158
def test_repair__closes_open_step_before_the_turn() -> None:
    events = [turn_start(0, 1), step_start(1, 1, 1)]
    closers = interrupted_turn_closers(events)
    assert [c["type"] for c in closers] == ["step/end", "turn/end"]
    assert [c["seq"] for c in closers] == [2, 3]
    assert closers == [
        {"type": "step/end", "seq": 2, "time": _time(1), "data": {"turn": 1, "step": 1}},
        {
            "type": "turn/end",
            "seq": 3,
            "time": _time(1),
            "data": {"turn": 1, "reason": {"kind": "interrupted"}},
        },
    ]


# spec 19.7 #159
def test_repair__marks_assistant_tool_request_without_recorded_call_as_not_started() -> None:
    events = [
        turn_start(0, 2),
        step_start(1, 2, 1),
        assistant(2, 2, 1, "call-1", text="calling a tool"),
    ]
    before = copy.deepcopy(events)
    closers = interrupted_turn_closers(events)

    assert [c["type"] for c in closers] == ["tool/result", "step/end", "turn/end"]
    assert [c["seq"] for c in closers] == [3, 4, 5]
    assert all(c["time"] == _time(2) for c in closers)  # the last input event's time is reused
    result = closers[0]
    assert result == expected_result(seq=3, time=_time(2), turn=2, step=1, call_id="call-1", call_seq=None)
    assert result["data"]["message"]["content"][0]["isError"] is True
    assert result["data"]["error"]["code"] == TOOL_NOT_STARTED
    assert result["data"]["message"]["content"][0]["content"] == [{"type": "text", "text": NOT_STARTED_TEXT}]
    assert "sourceEventSeqs" not in result
    assert list(result) == ["type", "seq", "time", "data", "surfaceOp"]
    assert list(result["data"]) == ["turn", "step", "message", "error"]
    # The synthesized message is deep-frozen; the event envelope itself is a plain dict.
    with pytest.raises(TypeError):
        result["data"]["message"]["content"][0]["content"].append({"type": "text", "text": "x"})
    with pytest.raises(TypeError):
        result["data"]["message"]["id"] = "other"
    assert type(result) is dict
    assert closers[1] == {"type": "step/end", "seq": 4, "time": _time(2), "data": {"turn": 2, "step": 1}}
    assert closers[2] == {
        "type": "turn/end",
        "seq": 5,
        "time": _time(2),
        "data": {"turn": 2, "reason": {"kind": "interrupted"}},
    }
    assert events == before  # the input is never modified


# spec 19.7 #160
def test_repair__no_result_for_a_tool_call_that_already_has_one() -> None:
    events = [
        turn_start(0, 2),
        step_start(1, 2, 1),
        assistant(2, 2, 1, "call-1"),
        tool_result(3, 2, 1, "call-1"),
    ]
    closers = interrupted_turn_closers(events)
    assert [c["type"] for c in closers] == ["step/end", "turn/end"]
    assert [c["seq"] for c in closers] == [4, 5]


# spec 19.7 #161
def test_repair__no_result_after_the_owning_step_already_closed() -> None:
    events = [
        turn_start(0, 2),
        step_start(1, 2, 1),
        assistant(2, 2, 1, "call-1"),
        step_end(3, 2, 1),
    ]
    closers = interrupted_turn_closers(events)
    assert closers == [
        {
            "type": "turn/end",
            "seq": 4,
            "time": _time(3),
            "data": {"turn": 2, "reason": {"kind": "interrupted"}},
        }
    ]


# spec 19.7 #162
def test_repair__results_only_for_the_still_open_turn() -> None:
    events = [
        turn_start(0, 1),
        step_start(1, 1, 1),
        assistant(2, 1, 1, "old-call"),
        tool_result(3, 1, 1, "old-call"),
        step_end(4, 1, 1),
        turn_end(5, 1),
        turn_start(6, 2),
        step_start(7, 2, 1),
        assistant(8, 2, 1, "new-call"),
    ]
    closers = interrupted_turn_closers(events)
    assert [c["type"] for c in closers] == ["tool/result", "step/end", "turn/end"]
    assert closers[0] == expected_result(
        seq=9, time=_time(8), turn=2, step=1, call_id="new-call", call_seq=None
    )
    assert closers[0]["data"]["message"]["source"]["callId"] == "new-call"
    assert closers[0]["data"]["message"]["id"] == "interrupted-tool-result-new-call-9"


# spec 19.7 #163
def test_repair__result_for_each_unanswered_call_in_log_order() -> None:
    events = [
        turn_start(0, 1),
        step_start(1, 1, 1),
        assistant(2, 1, 1, "call-a", "call-b", "call-c"),
        tool_result(3, 1, 1, "call-a"),
    ]
    closers = interrupted_turn_closers(events)
    assert [c["type"] for c in closers] == ["tool/result", "tool/result", "step/end", "turn/end"]
    assert closers[0] == expected_result(
        seq=4, time=_time(3), turn=1, step=1, call_id="call-b", call_seq=None
    )
    assert closers[1] == expected_result(
        seq=5, time=_time(3), turn=1, step=1, call_id="call-c", call_seq=None
    )
    assert [c["seq"] for c in closers] == [4, 5, 6, 7]


# spec 19.7 #164
def test_repair__synthesized_result_carries_surface_op_and_sources_when_tool_call_was_logged() -> None:
    events = [
        turn_start(0, 1),
        step_start(1, 1, 1),
        assistant(2, 1, 1, "call-1"),
        tool_call(3, 1, 1, "call-1"),
    ]
    closers = interrupted_turn_closers(events)
    assert [c["type"] for c in closers] == ["tool/result", "step/end", "turn/end"]
    result = closers[0]
    assert result["surfaceOp"] == "append"
    assert result["sourceEventSeqs"] == [3]
    assert result["data"]["error"] == {"name": "ToolOutcomeUnknownError", "code": TOOL_OUTCOME_UNKNOWN}
    text = result["data"]["message"]["content"][0]["content"][0]["text"]
    assert "retry only if the operation is read-only or idempotent" in text
    assert "first verify external state or ask the user" in text
    assert text == OUTCOME_UNKNOWN_TEXT
    assert result == expected_result(seq=4, time=_time(3), turn=1, step=1, call_id="call-1", call_seq=3)
    assert list(result) == ["type", "seq", "time", "data", "surfaceOp", "sourceEventSeqs"]


# spec 19.7 #165
def test_repair__tool_call_without_matching_assistant_entry_gets_no_result() -> None:
    events = [turn_start(0, 1), step_start(1, 1, 1), tool_call(2, 1, 1, "orphan")]
    closers = interrupted_turn_closers(events)
    assert [c["type"] for c in closers] == ["step/end", "turn/end"]
    assert [c["seq"] for c in closers] == [3, 4]


# spec 13.3: nested/unclosed steps — pending calls survive a step/start and keep their own step number;
# only the most recently opened step is closed.
def test_repair__nested_unclosed_steps_keep_pending_calls_with_their_own_step() -> None:
    events = [
        turn_start(0, 3),
        step_start(1, 3, 1),
        assistant(2, 3, 1, "early"),
        tool_call(3, 3, 1, "early"),
        step_start(4, 3, 2),
        assistant(5, 3, 2, "late"),
    ]
    closers = interrupted_turn_closers(events)
    assert [c["type"] for c in closers] == ["tool/result", "tool/result", "step/end", "turn/end"]
    assert closers[0] == expected_result(seq=6, time=_time(5), turn=3, step=1, call_id="early", call_seq=3)
    assert closers[1] == expected_result(seq=7, time=_time(5), turn=3, step=2, call_id="late", call_seq=None)
    assert closers[2] == {"type": "step/end", "seq": 8, "time": _time(5), "data": {"turn": 3, "step": 2}}
    assert closers[3]["seq"] == 9


# spec 13.3: an assistant message outside any step leaves pending calls while no step is open.
def test_repair__assistant_message_outside_any_step_yields_results_then_turn_end() -> None:
    events = [turn_start(0, 1), assistant(1, 1, 1, "loose")]
    closers = interrupted_turn_closers(events)
    assert [c["type"] for c in closers] == ["tool/result", "turn/end"]
    assert closers[0] == expected_result(seq=2, time=_time(1), turn=1, step=1, call_id="loose", call_seq=None)


# spec 13.1: re-registering a pending call id keeps its map position but resets its recorded tool/call.
def test_repair__re_registered_call_keeps_position_and_resets_call_seq() -> None:
    events = [
        turn_start(0, 1),
        step_start(1, 1, 1),
        assistant(2, 1, 1, "a", "b"),
        tool_call(3, 1, 1, "a"),
        tool_call(4, 1, 1, "b"),
        assistant(5, 1, 1, "a"),
    ]
    closers = interrupted_turn_closers(events)
    assert [c["type"] for c in closers] == ["tool/result", "tool/result", "step/end", "turn/end"]
    assert closers[0] == expected_result(seq=6, time=_time(5), turn=1, step=1, call_id="a", call_seq=None)
    assert closers[1] == expected_result(seq=7, time=_time(5), turn=1, step=1, call_id="b", call_seq=4)


# spec 13.2: committed Event objects from a live Session are accepted as input as well.
def test_repair__accepts_committed_session_events() -> None:
    session = Session.create("live", now=lambda: 5_000)
    session.append("turn/start", {"turn": 1})
    session.append("step/start", {"turn": 1, "step": 1})
    session.append(
        "assistant/message",
        {
            "turn": 1,
            "step": 1,
            "message": assistant_message(
                [tool_call_block("c1", "bash", "{}")], provider="mock", model="mock"
            ),
        },
        {"surfaceOp": "append"},
    )
    session.append("tool/call", {"turn": 1, "step": 1, "callId": "c1", "name": "bash", "arguments": "{}"})
    closers = interrupted_turn_closers(session.events)
    assert closers[0] == expected_result(seq=4, time=5_000, turn=1, step=1, call_id="c1", call_seq=3)
    assert [c["type"] for c in closers] == ["tool/result", "step/end", "turn/end"]


# spec 13.2: persistence feeds [...stored, ...closers] as a restore seed; the result must be a well-formed
# session whose derived history answers every tool call.
def test_repair__closers_restore_into_a_well_formed_session() -> None:
    events = [
        turn_start(0, 1),
        user(1, "first"),
        step_start(2, 1, 1),
        assistant(3, 1, 1, "done-call", text="let me check"),
        tool_call(4, 1, 1, "done-call"),
        tool_result(5, 1, 1, "done-call"),
        step_end(6, 1, 1),
        turn_end(7, 1),
        turn_start(8, 2),
        user(9, "second"),
        step_start(10, 2, 1),
        assistant(11, 2, 1, "started", "not-started", text="two tools"),
        tool_call(12, 2, 1, "started"),
        step_start(13, 2, 2),
        assistant(14, 2, 2, "third"),
    ]
    closers = interrupted_turn_closers(events)
    assert [c["type"] for c in closers] == [
        "tool/result",
        "tool/result",
        "tool/result",
        "step/end",
        "turn/end",
    ]

    session = _restore(events, closers)

    log = list(session.events)
    assert len(log) == len(events) + len(closers) + 1
    assert log[-1].type == "session/end-seed"
    assert log[-2].type == "turn/end"
    assert log[-2].data == {"turn": 2, "reason": {"kind": "interrupted"}}
    assert session.first_live_seq == len(events) + len(closers)
    messages = session.derive_messages()
    assert [m["role"] for m in messages] == [
        "user",
        "assistant",
        "user",
        "user",
        "assistant",
        "assistant",
    ] + ["user"] * 3
    _answers_every_tool_call(messages)
    synthesized = [m["content"][0]["toolCallId"] for m in messages[-3:]]
    assert synthesized == ["started", "not-started", "third"]
    assert messages[-3]["id"] == "interrupted-tool-result-started-15"
    assert messages[-2]["id"] == "interrupted-tool-result-not-started-16"
    assert messages[-1]["id"] == "interrupted-tool-result-third-17"
    assert log[15].source_event_seqs == [12]
    assert log[16].source_event_seqs is None


# spec 13.2: the same holds for the simplest crash shapes (no step, answered calls only).
@pytest.mark.parametrize(
    "events",
    [
        [turn_start(0, 1)],
        [turn_start(0, 1), user(1), step_start(2, 1, 1)],
        [turn_start(0, 1), step_start(1, 1, 1), assistant(2, 1, 1, "x"), tool_result(3, 1, 1, "x")],
        [turn_start(0, 1), assistant(1, 1, 1, "loose")],
    ],
    ids=["bare-turn", "open-step", "answered-call", "call-outside-step"],
)
def test_repair__restored_seed_with_closers_is_balanced(events: list[dict[str, Any]]) -> None:
    closers = interrupted_turn_closers(events)
    session = _restore(events, closers)
    assert list(session.events)[-2].type == "turn/end"
    _answers_every_tool_call(session.derive_messages())
    assert interrupted_turn_closers(list(session.events)[:-1]) == []


def test_repair__closers_are_the_spec_bytes() -> None:
    """§13.2 gives every closer whole, key order included: the stored bytes are exactly these."""
    import orjson

    events = [turn_start(0, 1), step_start(1, 1, 1), assistant(2, 1, 1, "call-1"), tool_call(3, 1, 1, "call-1")]
    when = _time(3)
    text = orjson.dumps(OUTCOME_UNKNOWN_TEXT).decode()
    assert [orjson.dumps(closer).decode() for closer in interrupted_turn_closers(events)] == [
        f'{{"type":"tool/result","seq":4,"time":{when},"data":{{"turn":1,"step":1,"message":'
        f'{{"id":"interrupted-tool-result-call-1-4","role":"user","source":{{"kind":"tool","callId":"call-1"}},'
        f'"content":[{{"type":"tool-result","toolCallId":"call-1","isError":true,"content":[{{"type":"text",'
        f'"text":{text}}}]}}]}},"error":{{"name":"ToolOutcomeUnknownError","code":"TOOL_OUTCOME_UNKNOWN"}}}},'
        f'"surfaceOp":"append","sourceEventSeqs":[3]}}',
        f'{{"type":"step/end","seq":5,"time":{when},"data":{{"turn":1,"step":1}}}}',
        f'{{"type":"turn/end","seq":6,"time":{when},"data":{{"turn":1,"reason":{{"kind":"interrupted"}}}}}}',
    ]
