"""Builders of typical sessions, turns and messages: wire events (plain ``dict`` values) and live appends.

Three kinds of helper, for tests of a backend or of code built on agentlog:

* wire builders — :func:`header`, :func:`ev`, :func:`turn_start`, :func:`user_event`,
  :func:`closed_turn`, :func:`open_turn_with_chunks` … — return stored events exactly as a backend holds
  them (camelCase keys, ``time`` = ``1000 + seq``), to write through ``PersistenceCoordinator.create`` /
  ``append`` or straight into a backend's ``append_batch``;
* live builders — :func:`append_closed_turn` — append a typical turn to a live
  :class:`~agentlog.Session` through its public ``append``;
* message builders — :func:`user_msg`, :func:`assistant_msg`, :func:`tool_result_msg`,
  :func:`assistant_msg_data`, :func:`tool_result_msg_data`, :func:`intent`, :func:`replace`,
  :func:`seed_event` … — the ``data`` and ``intent`` of ``Session.append`` and whole seed events, as
  plain JSON-shaped values exactly as they appear on the wire.

Example::

    from agentlog import SessionStore
    from agentlog.testing.builders import append_closed_turn, closed_turn, live_meta, types

    session = SessionStore().create("s1", meta=live_meta())
    append_closed_turn(session)
    assert types(session.events) == types(closed_turn())

The message builders' messages always carry the fields seed validation requires: a non-empty ``id``, the
right ``role``, a ``source`` with a ``kind`` and a ``content`` list. Their ids are minted in order
(``msg-1``, ``msg-2``, …) unless passed explicitly. A keyword argument whose default is :data:`ABSENT` is
left out of the result when not given; passing ``None`` puts an explicit JSON ``null`` in (the wire
distinguishes the two)::

    session.append("user/message", user_msg("hello"), intent(APPEND))
    session.append("assistant/message", assistant_msg_data("hi"), intent(replace(0, 1), [0, 1]))
    events = [seed_event("user/message", 0, user_msg("a"), surfaceOp=APPEND)]

This module imports nothing but the JSON codec and the event vocabulary; it does not need pytest.
"""
from __future__ import annotations

import itertools
from typing import Any, Final

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
    "ABSENT",
    "APPEND",
    "APPEND_INTENT",
    "CWD",
    "SID",
    "append_closed_turn",
    "assistant_data",
    "assistant_event",
    "assistant_msg",
    "assistant_msg_data",
    "chunk_event",
    "closed_turn",
    "ev",
    "event_bytes",
    "header",
    "intent",
    "live_meta",
    "log_event",
    "open_turn_with_chunks",
    "replace",
    "seed_event",
    "seqs",
    "step_end",
    "step_start",
    "text_block",
    "tool_call_data",
    "tool_call_event",
    "tool_result_block",
    "tool_result_data",
    "tool_result_event",
    "tool_result_msg",
    "tool_result_msg_data",
    "turn_end",
    "turn_start",
    "types",
    "user_data",
    "user_event",
    "user_msg",
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


# --- message builders: the data and intent of Session.append, and seed events ------------------------


class _Absent:
    """Sentinel type: "leave this key out" (distinct from ``None`` = JSON null)."""

    _instance: _Absent | None = None

    def __new__(cls) -> _Absent:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "ABSENT"

    def __bool__(self) -> bool:
        return False


ABSENT: Final = _Absent()

#: The append surface marker.
APPEND: Final = "append"

_ids = itertools.count(1)


def _next_id() -> str:
    return f"msg-{next(_ids)}"


def _blocks(text_or_blocks: str | list[Any]) -> list[Any]:
    if isinstance(text_or_blocks, str):
        return [text_block(text_or_blocks)]
    return list(text_or_blocks)


def replace(start: int, end: int) -> dict[str, Any]:
    """A replace surface op ``{"op": "replace", "start": start, "end": end}`` (seqs, inclusive)."""
    return {"op": "replace", "start": start, "end": end}


def intent(surface_op: Any = APPEND, sources: Any = ABSENT) -> dict[str, Any]:
    """The ``intent`` mapping for ``Session.append``: ``{"surfaceOp": ..., "sourceEventSeqs"?: ...}``."""
    out: dict[str, Any] = {"surfaceOp": surface_op}
    if sources is not ABSENT:
        out["sourceEventSeqs"] = sources
    return out


def text_block(text: str) -> dict[str, Any]:
    """``{"type": "text", "text": text}``."""
    return {"type": "text", "text": text}


def tool_result_block(
    call_id: str, text_or_blocks: str | list[Any], *, is_error: Any = ABSENT
) -> dict[str, Any]:
    """A ``tool-result`` content block; ``is_error`` is left out unless given."""
    block: dict[str, Any] = {"type": "tool-result", "toolCallId": call_id, "content": _blocks(text_or_blocks)}
    if is_error is not ABSENT:
        block["isError"] = is_error
    return block


def user_msg(
    text_or_blocks: str | list[Any] = "hello",
    *,
    id: str | None = None,
    source: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A complete ``UserMessage`` — also the whole ``data`` of a ``user/message`` event.

    ``source`` defaults to ``{"kind": "user"}``; a plugin injection is e.g.
    ``source={"kind": "plugin", "plugin": "watcher"}``.
    """
    return {
        "content": _blocks(text_or_blocks),
        "source": dict(source) if source is not None else {"kind": "user"},
        "role": "user",
        "id": id if id is not None else _next_id(),
    }


def assistant_msg(
    text_or_blocks: str | list[Any] = "hi",
    *,
    id: str | None = None,
    provider: str = "mock",
    model: str = "mock",
) -> dict[str, Any]:
    """An ``AssistantMessage`` with a model source. Pass ``[]`` for an empty-content message."""
    return {
        "role": "assistant",
        "content": _blocks(text_or_blocks),
        "source": {"kind": "model", "provider": provider, "model": model},
        "id": id if id is not None else _next_id(),
    }


def tool_result_msg(
    call_id: str,
    text_or_blocks: str | list[Any] = "ok",
    *,
    is_error: Any = ABSENT,
    id: str | None = None,
) -> dict[str, Any]:
    """A ``ToolResultMessage``: user role, tool source, exactly one ``tool-result`` block."""
    return {
        "role": "user",
        "content": [tool_result_block(call_id, text_or_blocks, is_error=is_error)],
        "source": {"kind": "tool", "callId": call_id},
        "id": id if id is not None else _next_id(),
    }


def assistant_msg_data(
    text_or_blocks: str | list[Any] = "hi",
    *,
    turn: int = 1,
    step: int = 1,
    usage: Any = ABSENT,
    id: str | None = None,
) -> dict[str, Any]:
    """The ``data`` of an ``assistant/message`` event: ``{turn, step, message, usage?}``."""
    data: dict[str, Any] = {"turn": turn, "step": step, "message": assistant_msg(text_or_blocks, id=id)}
    if usage is not ABSENT:
        data["usage"] = usage
    return data


def tool_result_msg_data(
    call_id: str,
    text_or_blocks: str | list[Any] = "ok",
    *,
    turn: int = 1,
    step: int = 1,
    is_error: Any = ABSENT,
    id: str | None = None,
    error: Any = ABSENT,
    meta: Any = ABSENT,
) -> dict[str, Any]:
    """The ``data`` of a ``tool/result`` event: ``{turn, step, message, error?, meta?}``."""
    data: dict[str, Any] = {
        "turn": turn,
        "step": step,
        "message": tool_result_msg(call_id, text_or_blocks, is_error=is_error, id=id),
    }
    if error is not ABSENT:
        data["error"] = error
    if meta is not ABSENT:
        data["meta"] = meta
    return data


def seed_event(
    type: str,
    seq: int,
    data: Any,
    *,
    time: int | None = None,
    surfaceOp: Any = ABSENT,  # wire spelling on purpose
    sourceEventSeqs: Any = ABSENT,
    ignorable: Any = ABSENT,
) -> dict[str, Any]:
    """A whole wire event ``{type, seq, time, data, sourceEventSeqs?, surfaceOp?, ignorable?}``.

    ``time`` defaults to ``seq``. Keys given as :data:`ABSENT` (the default) are left out; ``None``
    is kept as an explicit null. Key order follows ``append()``'s (§2.1).
    """
    event: dict[str, Any] = {"type": type, "seq": seq, "time": seq if time is None else time, "data": data}
    if sourceEventSeqs is not ABSENT:
        event["sourceEventSeqs"] = sourceEventSeqs
    if surfaceOp is not ABSENT:
        event["surfaceOp"] = surfaceOp
    if ignorable is not ABSENT:
        event["ignorable"] = ignorable
    return event


def log_event(type: str = TURN_START, seq: int = 0, data: Any = None, **kwargs: Any) -> dict[str, Any]:
    """A log-only wire event (default ``turn/start`` with ``{"turn": 1}``); kwargs as :func:`seed_event`."""
    return seed_event(type, seq, {"turn": 1} if data is None else data, **kwargs)
