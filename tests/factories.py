"""Small builders of wire-shaped test data (plain ``dict``/``list`` values, camelCase keys).

Nothing here imports ``agentlog``: every function returns ordinary JSON-shaped Python values exactly
as they appear on the wire (``shared/spec/core-session.md`` §2–§4), so the same helpers serve tests of
``Session.append`` (pass the data), of seeds / ``fold_surface`` (pass whole events from
:func:`seed_event`) and of persistence.

Messages always carry the fields seed validation requires (§7.3): a non-empty ``id``, the right
``role``, a ``source`` with a ``kind`` and a ``content`` list. Ids are minted deterministically
(``msg-1``, ``msg-2``, …) unless passed explicitly.

Absent vs ``None``: keyword arguments whose default is :data:`ABSENT` are left out of the result when
not given; passing ``None`` puts an explicit JSON ``null`` in (the spec distinguishes the two).

Typical use::

    session.append("user/message", user_msg("hello"), intent(APPEND))
    session.append("assistant/message", assistant_data("hi"), intent(replace(0, 1), [0, 1]))
    events = [seed_event("user/message", 0, user_msg("a"), surfaceOp=APPEND)]
"""

from __future__ import annotations

import itertools
from typing import Any, Final

__all__ = [
    "ABSENT",
    "APPEND",
    "assistant_data",
    "assistant_msg",
    "intent",
    "log_event",
    "replace",
    "seed_event",
    "text_block",
    "tool_result_block",
    "tool_result_data",
    "tool_result_msg",
    "user_msg",
]


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


def assistant_data(
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


def tool_result_data(
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


def log_event(type: str = "turn/start", seq: int = 0, data: Any = None, **kwargs: Any) -> dict[str, Any]:
    """A log-only wire event (default ``turn/start`` with ``{"turn": 1}``); kwargs as :func:`seed_event`."""
    return seed_event(type, seq, {"turn": 1} if data is None else data, **kwargs)
