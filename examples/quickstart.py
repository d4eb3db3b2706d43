"""agentlog quickstart: an agent session as an append-only event log.

Run:  python examples/quickstart.py

1. record one agent turn (user prompt, a streamed model reply that calls a tool, the tool's result,
   the final answer) and derive the messages the model sees next time;
2. compact: replace the oldest messages with a summary — the log keeps everything, only the
   model-visible *surface* changes;
3. fork the session into a child that inherits the log;
4. simulate a crash in the middle of a tool call and repair the log on restore.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import agentlog
from agentlog import Session, SessionStore
from agentlog.kernel.messages import (
    assistant_message,
    plugin_message,
    text_block,
    text_delta,
    token_usage,
    tool_call_block,
    tool_result_message,
    user_message,
)

PROVIDER, MODEL = "deepseek", "deepseek-chat"
APPEND = {"surfaceOp": "append"}  # surface events (user/assistant messages, tool results) need an intent

READ_FILE = {
    "name": "read_file",
    "description": "Read a text file from the workspace.",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
}


def show(title: str, messages: Any) -> None:
    """Print derived messages one line each: role, then a short rendering of every block."""
    print(f"\n== {title} ({len(messages)} messages)")
    for m in messages:
        parts = []
        for block in m["content"]:
            kind = block["type"]
            if kind == "text":
                parts.append(repr(clip(block["text"])))
            elif kind == "tool-call":
                parts.append(f"call {block['name']}({block['arguments']}) [{block['id']}]")
            elif kind == "tool-result":
                text = " ".join(b["text"] for b in block["content"] if b["type"] == "text")
                error = " ERROR" if block.get("isError") else ""
                parts.append(f"result [{block['toolCallId']}]{error}: {clip(text)!r}")
            else:
                parts.append(f"<{kind}>")
        print(f"  {m['role']:<9} {' | '.join(parts)}")


def clip(text: str, width: int = 60) -> str:
    text = text.replace("\n", " ")
    return text if len(text) <= width else text[: width - 1] + "…"


def stream(session: Session, turn: int, step: int, text: str) -> list[int]:
    """Append the model's streamed text as assistant/chunk events; return their seqs (provenance)."""
    words = text.split(" ")
    pieces = [word + " " for word in words[:-1]] + words[-1:]  # joined, they spell out `text`
    seqs = []
    for piece in pieces:
        data = {"turn": turn, "step": step, "chunk": text_delta(0, piece)}
        seqs.append(session.append("assistant/chunk", data).seq)
    return seqs


def answer(
    session: Session, turn: int, step: int, blocks: list[dict[str, Any]], chunk_seqs: list[int]
) -> None:
    """Append the assembled assistant/message of one step, citing the chunks it was built from."""
    data = {
        "turn": turn,
        "step": step,
        "message": assistant_message(blocks, provider=PROVIDER, model=MODEL),
        "usage": token_usage(812, 31),
    }
    session.append("assistant/message", data, {"surfaceOp": "append", "sourceEventSeqs": chunk_seqs})


# --------------------------------------------------------------------------- 1. one turn

store = SessionStore()
session = store.create("demo", meta={"cwd": str(Path.cwd())})

session.append("turn/start", {"turn": 1})
session.append("user/message", user_message("What is this project about? Check the README."), APPEND)

# Step 1: the model reads the README.
session.append("step/start", {"turn": 1, "step": 1})
session.append(
    "request/header",
    {
        "header": {
            "config": {"provider": PROVIDER, "model": MODEL},
            "system": "You are a helpful coding agent.",
            "tools": [READ_FILE],
        },
        "reason": "initial",
    },
)
intro = "Let me read the README first."
args = '{"path": "README.md"}'
chunks = stream(session, 1, 1, intro)
answer(session, 1, 1, [text_block(intro), tool_call_block("call-1", "read_file", args)], chunks)
call = session.append(
    "tool/call", {"turn": 1, "step": 1, "callId": "call-1", "name": "read_file", "arguments": args}
)
readme = "# agentlog\nAn LLM agent's session as an append-only, validated event log."
session.append(
    "tool/result",
    {"turn": 1, "step": 1, "message": tool_result_message("call-1", readme)},
    {"surfaceOp": "append", "sourceEventSeqs": [call.seq]},
)
session.append("step/end", {"turn": 1, "step": 1})

# Step 2: the model answers.
session.append("step/start", {"turn": 1, "step": 2})
final = "It stores an agent session as an append-only event log and derives messages from it."
answer(session, 1, 2, [text_block(final)], stream(session, 1, 2, final))
session.append("step/end", {"turn": 1, "step": 2})
turn_end = session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})

print(f"session {session.id!r}: {session.seq} events, turn 1 closed at seq {turn_end.seq}")
print(f"surface (model-visible event seqs): {list(session.surface.nodes)}")
show("messages after turn 1", session.derive_messages())

# --------------------------------------------------------------------------- 2. compaction

# Replace the first three surface nodes (prompt, tool call, tool result) with one summary.
# The replacement cites every node it shadows in sourceEventSeqs.
nodes = list(session.surface.nodes)
shadowed = nodes[:3]
summary = plugin_message(
    "Summary so far: the user asked what the project is; the agent read README.md "
    "(agentlog: an agent session as an append-only, validated event log).",
    plugin="compaction",
)
session.append(
    "user/message",
    summary,
    {"surfaceOp": agentlog.replace_op(shadowed[0], shadowed[-1]), "sourceEventSeqs": shadowed},
)
print(f"\ncompacted nodes {shadowed} -> surface {list(session.surface.nodes)}; log still has {session.seq}")
show("messages after compaction", session.derive_messages())

# --------------------------------------------------------------------------- 3. fork

# Fork the whole (closed-turn) log into a live child session; the child gets frozen copies of the
# parent's events plus its own session/end-seed marker. (Pass a boundary seq, e.g. turn_end.seq,
# to fork an earlier closed turn.)
child = store.fork(session)
lineage = {k: child.header[k] for k in ("parentSession", "seedLength") if k in child.header}
print(f"\nforked {child.id!r} {lineage}: {child.seq} events, last {child.events[-1].type!r}")
show(f"messages of {child.id}", child.derive_messages())

# --------------------------------------------------------------------------- 4. crash + repair

# Turn 2 in the parent: the model calls a tool, the call is recorded... and the process dies
# before the tool's result is written.
session.append("turn/start", {"turn": 2})
session.append("user/message", user_message("Run the test suite."), APPEND)
session.append("step/start", {"turn": 2, "step": 1})
intro = "Running the tests."
args = '{"command": "pytest -q"}'
answer(
    session, 2, 1, [text_block(intro), tool_call_block("call-2", "bash", args)], stream(session, 2, 1, intro)
)
session.append("tool/call", {"turn": 2, "step": 1, "callId": "call-2", "name": "bash", "arguments": args})

# On restart: load the stored log (plain, mutable graphs), compute the synthetic closers for the
# open turn, and restore from [*stored, *closers]. The repaired session can be resumed safely.
closers = agentlog.interrupted_turn_closers(session.events)
stored = [agentlog.thaw(event) for event in session.events]
print(f"\ncrash after seq {stored[-1]['seq']} ({stored[-1]['type']}); repair appends:")
for event in closers:
    error = event["data"].get("error")
    print(f"  seq {event['seq']} {event['type']}" + (f" ({error['code']})" if error else ""))

restored = Session.from_restore(session.id, [*stored, *closers], agentlog.thaw(session.header))
print(f"restored {restored.id!r}: {restored.seq} events (first live seq {restored.first_live_seq})")
show("messages after repair", restored.derive_messages())
assert any(e["data"].get("error", {}).get("code") == agentlog.TOOL_OUTCOME_UNKNOWN for e in closers)
