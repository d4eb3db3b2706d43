"""Builders of typical sessions and turns: wire events (plain ``dict`` values) and live appends.

Two kinds of helper, for tests of a backend or of code built on agentlog:

* wire builders — :func:`header`, :func:`ev`, :func:`turn_start`, :func:`user_event`,
  :func:`closed_turn`, :func:`open_turn_with_chunks` … — return stored events exactly as a backend holds
  them (camelCase keys, ``time`` = ``1000 + seq``), to write through ``PersistenceCoordinator.create`` /
  ``append`` or straight into a backend's ``append_batch``;
* live builders — :func:`append_closed_turn` — append a typical turn to a live
  :class:`~agentlog.Session` through its public ``append``.

Example::

    from agentlog import SessionStore
    from agentlog.testing.builders import append_closed_turn, closed_turn, live_meta, types

    session = SessionStore().create("s1", meta=live_meta())
    append_closed_turn(session)
    assert types(session.events) == types(closed_turn())

This module imports nothing but the JSON codec; it does not need pytest.
"""

from __future__ import annotations

from typing import Any

from ..kernel.events import (
    ASSISTANT_CHUNK,
    ASSISTANT_MESSAGE,
    STEP_END,
    STEP_START,
    TOOL_CALL,
    TOOL_RESULT,
    TURN_END,
    TURN_START,
    USER_MESSAGE,
    Message,
    SurfaceIntent,
)
from ..kernel.jsoncodec import dumps

__all__ = [
    "APPEND_INTENT",
    "CWD",
    "SID",
    "append_closed_turn",
    "assistant_data",
    "assistant_event",
    "chunk_event",
    "closed_turn",
    "ev",
    "event_bytes",
    "header",
    "live_meta",
    "open_turn_with_chunks",
    "seqs",
    "step_end",
    "step_start",
    "tool_call_data",
    "tool_call_event",
    "tool_result_data",
    "tool_result_event",
    "turn_end",
    "turn_start",
    "types",
    "user_data",
    "user_event",
]

#: The default working directory and session id of the builders.
CWD = "/work/project"
SID = "s1"


def chunk_event(seq: int, text: str, *, turn: int = 1, step: int = 1, time: int | None = None) -> dict[str, Any]:
    return {
        "type": ASSISTANT_CHUNK,
        "seq": seq,
        "time": 1000 + seq if time is None else time,
        "data": {"turn": turn, "step": step, "chunk": {"type": "text-delta", "index": 0, "text": text}},
    }


def header(session_id: str = SID, *, created_at: int = 1000, cwd: str | None = CWD, **extra: Any) -> dict[str, Any]:
    """A complete stored header; ``delegationDepth`` is explicit so every backend returns it unchanged."""
    meta: dict[str, Any] = {"version": 0, "id": session_id, "createdAt": created_at}
    if cwd is not None:
        meta["cwd"] = cwd
    meta.update(extra)
    meta.setdefault("delegationDepth", 0)
    return meta


def live_meta(*, created_at: int = 1000, cwd: str | None = CWD, **extra: Any) -> dict[str, Any]:
    """``SessionStore.create(meta=...)`` keys (wire names)."""
    meta: dict[str, Any] = {"createdAt": created_at, "delegationDepth": 0}
    if cwd is not None:
        meta["cwd"] = cwd
    meta.update(extra)
    return meta


def ev(type: str, seq: int, data: Any, *, time: int | None = None, **extra: Any) -> dict[str, Any]:
    event: dict[str, Any] = {"type": type, "seq": seq, "time": 1000 + seq if time is None else time, "data": data}
    event.update(extra)
    return event


def turn_start(seq: int, turn: int = 1) -> dict[str, Any]:
    return ev(TURN_START, seq, {"turn": turn})


def turn_end(seq: int, turn: int = 1, kind: str = "completed") -> dict[str, Any]:
    return ev(TURN_END, seq, {"turn": turn, "reason": {"kind": kind}})


def step_start(seq: int, turn: int = 1, step: int = 1) -> dict[str, Any]:
    return ev(STEP_START, seq, {"turn": turn, "step": step})


def step_end(seq: int, turn: int = 1, step: int = 1) -> dict[str, Any]:
    return ev(STEP_END, seq, {"turn": turn, "step": step})


def user_data(text: str = "hello", *, msg_id: str | None = None) -> Message:
    return {
        "id": msg_id or f"user-{text}",
        "role": "user",
        "content": [{"type": "text", "text": text}],
        "source": {"kind": "user"},
    }


def user_event(seq: int, text: str = "hello", *, msg_id: str | None = None) -> dict[str, Any]:
    return ev(USER_MESSAGE, seq, user_data(text, msg_id=msg_id or f"user-{seq}"), surfaceOp="append")


def assistant_data(
    text: str | None = "hi", *call_ids: str, turn: int = 1, step: int = 1, msg_id: str = "assistant-1"
) -> dict[str, Any]:
    blocks: list[Any] = []
    if text is not None:
        blocks.append({"type": "text", "text": text})
    blocks.extend({"type": "tool-call", "id": call_id, "name": "bash", "arguments": "{}"} for call_id in call_ids)
    return {
        "turn": turn,
        "step": step,
        "message": {
            "id": msg_id,
            "role": "assistant",
            "content": blocks,
            "source": {"kind": "model", "provider": "mock", "model": "mock"},
        },
    }


def assistant_event(seq: int, text: str | None = "hi", *call_ids: str, turn: int = 1, step: int = 1) -> dict[str, Any]:
    data = assistant_data(text, *call_ids, turn=turn, step=step, msg_id=f"assistant-{seq}")
    return ev(ASSISTANT_MESSAGE, seq, data, surfaceOp="append")


def tool_call_data(call_id: str, *, turn: int = 1, step: int = 1) -> dict[str, Any]:
    return {"turn": turn, "step": step, "callId": call_id, "name": "bash", "arguments": "{}"}


def tool_call_event(seq: int, call_id: str, *, turn: int = 1, step: int = 1) -> dict[str, Any]:
    return ev(TOOL_CALL, seq, tool_call_data(call_id, turn=turn, step=step))


def tool_result_data(call_id: str, text: str = "ok", *, turn: int = 1, step: int = 1, msg_id: str) -> dict[str, Any]:
    return {
        "turn": turn,
        "step": step,
        "message": {
            "id": msg_id,
            "role": "user",
            "content": [
                {
                    "type": "tool-result",
                    "toolCallId": call_id,
                    "content": [{"type": "text", "text": text}],
                    "isError": False,
                }
            ],
            "source": {"kind": "tool", "callId": call_id},
        },
    }


def tool_result_event(seq: int, call_id: str, text: str = "ok", *, turn: int = 1, step: int = 1) -> dict[str, Any]:
    data = tool_result_data(call_id, text, turn=turn, step=step, msg_id=f"tool-result-{seq}")
    return ev(TOOL_RESULT, seq, data, surfaceOp="append")


def closed_turn(start: int = 0, turn: int = 1) -> list[dict[str, Any]]:
    """Six events: turn/start, user/message, step/start, assistant/message, step/end, turn/end."""
    s = start
    return [
        turn_start(s, turn),
        user_event(s + 1, f"question-{turn}"),
        step_start(s + 2, turn),
        assistant_event(s + 3, f"answer-{turn}", turn=turn),
        step_end(s + 4, turn),
        turn_end(s + 5, turn),
    ]


def open_turn_with_chunks() -> list[dict[str, Any]]:
    """Eight events 0..7 ending inside turn 1 / step 1 (the crash logs of items 33 and 82)."""
    return [
        turn_start(0),
        user_event(1, "question"),
        step_start(2),
        chunk_event(3, "par"),
        chunk_event(4, "tial "),
        chunk_event(5, "ans"),
        chunk_event(6, "wer"),
        assistant_event(7, "partial answer"),
    ]


# Live appends: (type, data, intent) triples for Session.append.
APPEND_INTENT: SurfaceIntent = {"surfaceOp": "append"}


def append_closed_turn(session: Any, turn: int = 1) -> None:
    """Six live appends mirroring :func:`closed_turn`."""
    session.append(TURN_START, {"turn": turn})
    session.append(USER_MESSAGE, user_data(f"question-{turn}", msg_id=f"user-live-{turn}"), APPEND_INTENT)
    session.append(STEP_START, {"turn": turn, "step": 1})
    session.append(
        ASSISTANT_MESSAGE,
        assistant_data(f"answer-{turn}", turn=turn, msg_id=f"assistant-live-{turn}"),
        APPEND_INTENT,
    )
    session.append(STEP_END, {"turn": turn, "step": 1})
    session.append(TURN_END, {"turn": turn, "reason": {"kind": "completed"}})


def event_bytes(events: Any) -> list[bytes]:
    """The JSON bytes of each event (byte-identity comparisons)."""
    return [dumps(event) for event in events]


def seqs(events: Any) -> list[int]:
    return [event["seq"] for event in events]


def types(events: Any) -> list[str]:
    return [event["type"] for event in events]
