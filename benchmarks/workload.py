"""The canonical agent-session workload W(T) (shared/bench/WORKLOAD.md).

``build_workload(turns)`` returns the whole session as a list of ``(type, data, intent)`` tuples,
in append order, ready to be fed to ``Session.append(type, data, intent)`` (``intent`` is ``None``
for log-only events). Everything is built up front so a benchmark times appending only.

Per turn i (1-based): turn/start, user/message, step/start, [request/header in turn 1 only],
20 x assistant/chunk, assistant/message (text + tool-call), tool/call, tool/result, step/end,
step/start, 20 x assistant/chunk, assistant/message (final text), step/end, turn/end
= 51 events per turn, 52 in turn 1. W(T) has 51*T + 1 events and 4*T surface messages.

Seqs are computed by position: the workload is meant for a fresh session without a seed, where
the event at list index n gets seq n.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from agentlog.kernel.messages import (
    assistant_message,
    text_block,
    text_delta,
    token_usage,
    tool_call_block,
    tool_result_message,
    user_message,
)

WorkloadEvent = tuple[str, Any, dict[str, Any] | None]

PROVIDER = "deepseek"
MODEL = "deepseek-chat"
TOOL_NAME = "read_file"

USER_TEXT_CHARS = 200
SYSTEM_CHARS = 2_000
TOOL_SCHEMA_CHARS = 300
TOOL_COUNT = 5
CHUNKS_PER_STEP = 20
CHUNK_CHARS = 20
STEP1_TEXT_CHARS = 100
TOOL_ARGS_CHARS = 100
TOOL_RESULT_CHARS = 1_000
FINAL_TEXT_CHARS = 400

EVENTS_PER_TURN = 51
SURFACE_MESSAGES_PER_TURN = 4


def _fill(unit: str, length: int) -> str:
    """``unit`` repeated and cut to exactly ``length`` characters (deterministic text)."""
    return (unit * (length // len(unit) + 1))[:length]


def _tool_schema(n: int) -> dict[str, Any]:
    """One ~300-char JSON schema (serialized size), named tool_<n>."""
    schema: dict[str, Any] = {
        "name": TOOL_NAME if n == 0 else f"tool_{n}",
        "description": "",
        "parameters": {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "File path relative to the workspace."},
                "limit": {"type": "integer"},
            },
            "required": ["path"],
        },
    }
    pad = TOOL_SCHEMA_CHARS - len(json.dumps(schema))
    schema["description"] = _fill(f"Tool {n} does a thing. ", max(pad, 0))
    return schema


def _tool_arguments(i: int) -> str:
    """The raw JSON text the model produced for turn i's read_file call (~100 chars)."""
    args: dict[str, Any] = {"path": f"src/pkg/module_{i:05d}.py", "offset": 0, "limit": 200, "note": ""}
    pad = TOOL_ARGS_CHARS - len(json.dumps(args))
    args["note"] = _fill("x", max(pad, 0))
    return json.dumps(args)


def request_header_data() -> dict[str, Any]:
    return {
        "header": {
            "config": {"provider": PROVIDER, "model": MODEL},
            "system": _fill("You are a careful coding agent. ", SYSTEM_CHARS),
            "tools": [_tool_schema(n) for n in range(TOOL_COUNT)],
        },
        "reason": "initial",
    }


def append_workload(session: Any, events: Iterable[WorkloadEvent]) -> None:
    """Append W(T)'s ``(type, data, intent)`` tuples to ``session`` (no intent argument where the builder
    gave none), as every figure that replays the workload appends it."""
    append = session.append
    for type_, data, intent in events:
        if intent is None:
            append(type_, data)
        else:
            append(type_, data, intent)


def build_workload(turns: int) -> list[WorkloadEvent]:
    """W(turns) as ``(type, data, intent_or_None)`` tuples in append order."""
    if turns < 1:
        raise ValueError("turns must be >= 1")
    events: list[WorkloadEvent] = []
    add = events.append

    def step(i: int, s: int, chunk_text: str) -> list[int]:
        """Append step/start (+ header in turn 1 step 1) and the 20 chunks; return the chunk seqs."""
        add(("step/start", {"turn": i, "step": s}, None))
        if i == 1 and s == 1:
            add(("request/header", request_header_data(), None))
        seqs: list[int] = []
        for c in range(CHUNKS_PER_STEP):
            seqs.append(len(events))
            piece = chunk_text[c * CHUNK_CHARS : (c + 1) * CHUNK_CHARS]
            add(("assistant/chunk", {"turn": i, "step": s, "chunk": text_delta(0, piece)}, None))
        return seqs

    for i in range(1, turns + 1):
        call_id = f"c{i}"
        arguments = _tool_arguments(i)
        step1_text = _fill(f"a{i} ", STEP1_TEXT_CHARS)
        final_text = _fill(f"f{i} ", FINAL_TEXT_CHARS)
        streamed = _fill(f"s{i} ", CHUNKS_PER_STEP * CHUNK_CHARS)

        add(("turn/start", {"turn": i}, None))
        add(
            (
                "user/message",
                user_message(_fill(f"q{i} ", USER_TEXT_CHARS), id=f"u{i}"),
                {"surfaceOp": "append"},
            )
        )

        # Step 1: model streams, answers with text + one tool call, the tool runs.
        chunk_seqs = step(i, 1, streamed)
        message = assistant_message(
            [text_block(step1_text), tool_call_block(call_id, TOOL_NAME, arguments)],
            provider=PROVIDER,
            model=MODEL,
            id=f"a{i}-1",
        )
        add(
            (
                "assistant/message",
                {"turn": i, "step": 1, "message": message, "usage": token_usage(1_000 + 300 * i, 60)},
                {"surfaceOp": "append", "sourceEventSeqs": chunk_seqs},
            )
        )
        add(
            (
                "tool/call",
                {"turn": i, "step": 1, "callId": call_id, "name": TOOL_NAME, "arguments": arguments},
                None,
            )
        )
        result = tool_result_message(call_id, _fill(f"r{i} ", TOOL_RESULT_CHARS), id=f"t{i}")
        add(("tool/result", {"turn": i, "step": 1, "message": result}, {"surfaceOp": "append"}))
        add(("step/end", {"turn": i, "step": 1}, None))

        # Step 2: model streams the final answer (the 20 chunks spell out the final text).
        chunk_seqs = step(i, 2, final_text)
        message = assistant_message([text_block(final_text)], provider=PROVIDER, model=MODEL, id=f"a{i}-2")
        add(
            (
                "assistant/message",
                {"turn": i, "step": 2, "message": message, "usage": token_usage(1_400 + 300 * i, 100)},
                {"surfaceOp": "append", "sourceEventSeqs": chunk_seqs},
            )
        )
        add(("step/end", {"turn": i, "step": 2}, None))
        add(("turn/end", {"turn": i, "reason": {"kind": "completed"}}, None))

    assert len(events) == EVENTS_PER_TURN * turns + 1, len(events)
    return events


if __name__ == "__main__":  # quick look: sizes and the first turn
    import sys

    w = build_workload(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
    print(f"{len(w)} events")
    for n, (t, d, intent) in enumerate(w[:52]):
        print(n, t, len(json.dumps(d)), intent if intent is None else json.dumps(intent)[:60])
