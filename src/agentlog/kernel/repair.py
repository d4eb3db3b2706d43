"""Crash repair: close a turn that a crash left open, so the next request is well-formed.

A model request must never contain a tool call without its result. After a crash the log may end
inside a turn with calls that were requested (and perhaps started) but never answered. The closers
answer each such call with an error result that tells the model what is known — "not started" (safe
to retry) or "outcome unknown" (it may have had side effects) — then close the open step and turn.
Pure: the persistence layer decides where the closers are committed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .events import (
    ASSISTANT_MESSAGE,
    STEP_END,
    STEP_START,
    TOOL_CALL,
    TOOL_RESULT,
    TURN_END,
    TURN_START,
    ToolErrorIdentity,
    ToolResultData,
)
from .jsonvalue import snapshot_json
from .packedrun import ChunkRun

_TURN_BOUNDARIES = frozenset({TURN_START, TURN_END})

TOOL_NOT_STARTED = "TOOL_NOT_STARTED"
TOOL_OUTCOME_UNKNOWN = "TOOL_OUTCOME_UNKNOWN"

TOOL_OUTCOME_UNKNOWN_TEXT = (
    "The tool call was interrupted after it was recorded, but no result was durably recorded. "
    "Its outcome is unknown. Decide whether to retry from the tool semantics: retry only if the "
    "operation is read-only or idempotent; if it may have side effects, first verify external state "
    "or ask the user. Do not retry blindly."
)
TOOL_NOT_STARTED_TEXT = (
    "The tool call was interrupted before the Harness recorded it as started. Retry it if it is still needed."
)


def interrupted_tool_result_data(
    call_id: Any, *, started: bool, turn: Any, step: Any, message_id: str
) -> ToolResultData:
    """The ``tool/result`` data that answers a call whose real result was never recorded.

    ``started`` calls (their ``tool/call`` was recorded, so the body may have run) get
    ``TOOL_OUTCOME_UNKNOWN``; the others ``TOOL_NOT_STARTED``. Crash repair builds its closers with it,
    and the agent loop uses it for a call still running when its turn is cancelled, so both paths say
    the same thing to the model.
    """
    message = snapshot_json(
        {
            "id": message_id,
            "role": "user",
            "source": {"kind": "tool", "callId": call_id},
            "content": [
                {
                    "type": "tool-result",
                    "toolCallId": call_id,
                    "isError": True,
                    "content": [
                        {"type": "text", "text": TOOL_OUTCOME_UNKNOWN_TEXT if started else TOOL_NOT_STARTED_TEXT}
                    ],
                }
            ],
        }
    )
    error: ToolErrorIdentity = (
        {"name": "ToolOutcomeUnknownError", "code": TOOL_OUTCOME_UNKNOWN}
        if started
        else {"name": "ToolNotStartedError", "code": TOOL_NOT_STARTED}
    )
    return {"turn": turn, "step": step, "message": message, "error": error}


def interrupted_turn_closers(events: Sequence[Any]) -> list[dict[str, Any]]:
    """The synthetic events that close an interrupted turn at the end of ``events`` (``[]`` if balanced).

    ``events`` may be a compact restored list whose packed chunk runs are :class:`ChunkRun` items: their
    members are chunks, which change nothing here, so only a run at the very end is looked at (for the
    last member's seq and time).
    """
    open_turn: Any = None
    open_step: Any = None
    pending: dict[Any, dict[str, Any]] = {}
    # Every turn boundary resets the whole scan state, so only the events from the last one matter:
    # a balanced log costs one look at its last event instead of a pass over its history.
    start = 0
    for index in range(len(events) - 1, -1, -1):
        item = events[index]
        if item.__class__ is not ChunkRun and item["type"] in _TURN_BOUNDARIES:
            start = index
            break
    for index in range(start, len(events)):  # by index: a view's iterator would read from seq 0
        event = events[index]
        if event.__class__ is ChunkRun:
            continue
        etype = event["type"]
        data = event["data"]
        if etype == TURN_START:
            open_turn = data["turn"]
            open_step = None
            pending.clear()
        elif etype == TURN_END:
            open_turn = None
            open_step = None
            pending.clear()
        elif etype == STEP_START:
            open_step = data["step"]
        elif etype == STEP_END:
            pending.clear()
            open_step = None
        elif etype == ASSISTANT_MESSAGE:
            message = data.get("message") if isinstance(data, dict) else None
            content = message.get("content") if isinstance(message, dict) else None
            for block in content or ():
                if isinstance(block, dict) and block.get("type") == "tool-call":
                    # Re-registering keeps the call's original position but forgets its start record.
                    pending[block.get("id")] = {"step": data.get("step")}
        elif etype == TOOL_CALL:
            call = pending.get(data.get("callId")) if isinstance(data, dict) else None
            if call is not None:
                call["callSeq"] = event["seq"]
        elif etype == TOOL_RESULT:
            message = data.get("message") if isinstance(data, dict) else None
            source = message.get("source") if isinstance(message, dict) else None
            if isinstance(source, dict):
                pending.pop(source.get("callId"), None)
    if open_turn is None or not events:
        return []
    last = events[-1]
    if last.__class__ is ChunkRun:
        seq = last.seq0 + last.n
        when = last.last_time
    else:
        seq = last["seq"] + 1
        when = last["time"]
    closers: list[dict[str, Any]] = []
    for call_id, call in pending.items():
        started = "callSeq" in call
        closer: dict[str, Any] = {
            "type": TOOL_RESULT,
            "seq": seq,
            "time": when,
            "data": interrupted_tool_result_data(
                call_id,
                started=started,
                turn=open_turn,
                step=call["step"],
                message_id=f"interrupted-tool-result-{call_id}-{seq}",
            ),
            "surfaceOp": "append",
        }
        if started:
            closer["sourceEventSeqs"] = [call["callSeq"]]
        closers.append(closer)
        seq += 1
    if open_step is not None:
        closers.append({"type": STEP_END, "seq": seq, "time": when, "data": {"turn": open_turn, "step": open_step}})
        seq += 1
    closers.append(
        {"type": TURN_END, "seq": seq, "time": when, "data": {"turn": open_turn, "reason": {"kind": "interrupted"}}}
    )
    return closers
