"""Stores the inspector tests read: sessions built with the kernel, stored by a real backend.

``main`` holds every kind of event the log pane renders (a request header, streamed chunks folded into
their message, a tool call and its result, a pruned result and a compaction checkpoint over turn 1);
``main-fork`` is its child (lineage); ``crashed`` stops inside a turn after a tool call (a resume would
add ``TOOL_OUTCOME_UNKNOWN`` closers); ``hostile`` holds content that must never run as code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import agentlog as al
from agentlog.compaction.estimate import estimate_message
from agentlog.persistence.backend import Backend
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend
from agentlog.persistence.sqlite.backend import SqliteBackend

BIG = "0123456789" * 500
PRUNED = BIG[:100] + "\n\n[... tool result middle pruned ...]\n\n" + BIG[-20:]
COMPACTION_ID = "2f0c4d8e-0000-4000-8000-000000000001"
SUMMARY = "## Primary Request and Intent\n- read big.txt"
SEARCH_WORD = "zebrafinch"
"""A word only the second prompt of ``main`` holds: search finds it there."""

HOSTILE_TEXTS = [
    "<script>window.__pwned = 1</script>",
    '<img src=x onerror="window.__pwned = 2">',
    '<a href="javascript:window.__pwned = 3">click me</a>',
    "\x1b[31mred\x1b[0m \x1b]8;;http://evil.example/\x07osc link\x1b]8;;\x07 \x1b]0;title\x07",
    "\u202eevil.exe\u202c RTL override",
    '"><svg onload="window.__pwned = 4"></svg>',
]


def open_backend(root: Path, kind: str) -> Backend:
    if kind == "sqlite":
        return SqliteBackend(str(root / "sessions.sqlite3"))
    return JsonlBackend(str(root), compression="zstd" if kind == "jsonl-zstd" else "none")


def open_read_only(root: Path, kind: str) -> Backend:
    if kind == "sqlite":
        return SqliteBackend(str(root / "sessions.sqlite3"), read_only=True)
    return JsonlBackend(str(root), compression="auto", read_only=True)


def _assistant(blocks: list[Any], turn: int, step: int) -> dict[str, Any]:
    return {"turn": turn, "step": step, "message": al.assistant_message(blocks, provider="deepseek", model="m1")}


def _chunks(session: al.Session, turn: int, step: int, text: str) -> None:
    session.append(
        "assistant/chunk",
        {"turn": turn, "step": step, "chunk": {"type": "block-start", "index": 0, "blockType": "text"}},
    )
    for start in range(0, len(text), 4):
        chunk = {"type": "text-delta", "index": 0, "text": text[start : start + 4]}
        session.append("assistant/chunk", {"turn": turn, "step": step, "chunk": chunk})
    usage = {"inputTokens": usage_input(turn, step), "outputTokens": 10 * step}
    session.append("assistant/chunk", {"turn": turn, "step": step, "chunk": {"type": "usage", "usage": usage}})


def usage_input(turn: int, step: int) -> int:
    """The input tokens the usage chunk of ``(turn, step)`` reports in ``main``."""
    return 1000 * turn + 100 * step


def _tool_turn(session: al.Session, turn: int, prompt: str, call_id: str) -> int:
    session.append("turn/start", {"turn": turn})
    session.append("user/message", al.user_message(prompt), {"surfaceOp": "append"})
    session.append("step/start", {"turn": turn, "step": 1})
    if turn == 1:
        header = {
            "config": {"provider": "deepseek", "model": "m1"},
            "system": "Be careful.",
            "tools": [{"name": "read_file", "description": "Read a file", "inputSchema": {"type": "object"}}],
        }
        session.append("request/header", {"header": header, "reason": "initial"})
    _chunks(session, turn, 1, "Reading it.")
    call = al.tool_call_block(call_id, "read_file", '{"path": "big.txt"}')
    session.append(
        "assistant/message", _assistant([al.text_block("Reading it."), call], turn, 1), {"surfaceOp": "append"}
    )
    session.append(
        "tool/call",
        {"turn": turn, "step": 1, "callId": call_id, "name": "read_file", "arguments": '{"path": "big.txt"}'},
    )
    result = {"turn": turn, "step": 1, "message": al.tool_result_message(call_id, BIG)}
    seq = session.append("tool/result", result, {"surfaceOp": "append"}).seq
    session.append("step/end", {"turn": turn, "step": 1})
    return seq


def _answer(session: al.Session, turn: int, text: str) -> None:
    session.append("step/start", {"turn": turn, "step": 2})
    _chunks(session, turn, 2, text)
    session.append("assistant/message", _assistant([al.text_block(text)], turn, 2), {"surfaceOp": "append"})
    session.append("step/end", {"turn": turn, "step": 2})
    session.append("turn/end", {"turn": turn, "reason": {"kind": "completed"}})


def _prune(session: al.Session, seq: int) -> None:
    original = session.events[seq]
    price = estimate_message(original["data"]["message"])
    session.append(
        "compaction/prune",
        {"shadowedRange": {"start": seq, "end": seq}, "shadowedSeqs": [seq], "shadowedTokenCount": price},
    )
    data = al.thaw(original["data"])
    data["message"]["content"][0]["content"] = [{"type": "text", "text": PRUNED}]
    session.append(
        "tool/result", data, {"surfaceOp": {"op": "replace", "start": seq, "end": seq}, "sourceEventSeqs": [seq]}
    )


def _compact(session: al.Session, turn: int, shadowed: list[int]) -> int:
    tokens = sum(estimate_message(al.Session.derive_event_message(session.events[s])) for s in shadowed)
    start = session.append("compaction/start", {"compactionId": COMPACTION_ID, "turn": turn})
    blocks = [{"type": "text", "text": SUMMARY}]
    summary = session.append(
        "compaction/summary",
        {
            "compactionId": COMPACTION_ID,
            "summary": blocks,
            "shadowedRange": {"start": shadowed[0], "end": shadowed[-1]},
            "shadowedSeqs": shadowed,
            "shadowedTokenCount": tokens,
            "provider": "deepseek",
            "model": "m1",
        },
    )
    checkpoint = al.user_message(
        [
            {"type": "text", "text": "checkpoint <compacted-summary>"},
            *blocks,
            {"type": "text", "text": "</compacted-summary>"},
        ],
        source={"kind": "plugin", "plugin": "compact", "compactionId": COMPACTION_ID},
    )
    event = session.append(
        "user/message",
        checkpoint,
        {
            "surfaceOp": {"op": "replace", "start": shadowed[0], "end": shadowed[-1]},
            "sourceEventSeqs": [start.seq, summary.seq, *shadowed],
        },
    )
    session.append("compaction/end", {"compactionId": COMPACTION_ID, "turn": turn})
    return event.seq


def write_store(
    root: Path, kind: str = "jsonl", *, hostile_bytes: int = 0, backend: Backend | None = None
) -> dict[str, Any]:
    """Write the test sessions into a store at ``root`` (or into ``backend``, e.g. a PostgreSQL schema);
    return what the tests check against."""
    clock = iter(range(1_700_000_000_000, 1_800_000_000_000, 1000))
    store = al.SessionStore(now=lambda: next(clock))
    coordinator = PersistenceCoordinator(store, backend if backend is not None else open_backend(root, kind))
    facts: dict[str, Any] = {}
    try:
        session = store.create("main", meta={"cwd": "/work/project"})
        _tool_turn(session, 1, "What does big.txt say?", "c1")
        _answer(session, 1, "It is digits.")
        turn_one = list(session.surface.nodes)
        result_seq = _tool_turn(session, 2, f"Read it again, {SEARCH_WORD}.", "c2")
        facts["beforePrune"] = session.events[-1].seq
        _prune(session, result_seq)
        facts["replacement"] = session.events[-1].seq
        facts["beforeCompaction"] = session.events[-1].seq
        facts["checkpoint"] = _compact(session, 2, turn_one)
        _answer(session, 2, "Still digits.")
        facts.update(turnOne=turn_one, resultSeq=result_seq, lastSeq=session.events[-1].seq)
        store.flush(session)
        child = store.fork(session, child_id="main-fork")
        store.flush(child)
        store.dispose(child)
        store.dispose(session)

        crashed = store.create("crashed", meta={"cwd": "/work/project"})
        crashed.append("turn/start", {"turn": 1})
        crashed.append("user/message", al.user_message("Run the job"), {"surfaceOp": "append"})
        crashed.append("step/start", {"turn": 1, "step": 1})
        call = al.tool_call_block("job", "run_command", '{"command": "sleep 30"}')
        crashed.append("assistant/message", _assistant([call], 1, 1), {"surfaceOp": "append"})
        crashed.append("tool/call", {"turn": 1, "step": 1, "callId": "job", "name": "run_command", "arguments": "{}"})
        facts["crashedLastStored"] = crashed.events[-1].seq
        store.flush(crashed)
        store.dispose(crashed)

        hostile = store.create("hostile", meta={"cwd": "/work/<script>alert(1)</script>"})
        hostile.append("turn/start", {"turn": 1})
        for text in HOSTILE_TEXTS:
            hostile.append("user/message", al.user_message(text), {"surfaceOp": "append"})
        if hostile_bytes:
            hostile.append("user/message", al.user_message("<b>big</b>" + "x" * hostile_bytes), {"surfaceOp": "append"})
        hostile.append(
            "session/title",
            {"title": "<img src=x onerror=window.__pwned=5>", "messageSeqs": [1], "source": {"kind": "user"}},
        )
        hostile.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
        store.flush(hostile)
        store.dispose(hostile)
    finally:
        coordinator.close()
    return facts


def write_cached_session(root: Path, session_id: str, turns: int, kind: str = "jsonl") -> int:
    """``session_id`` with ``turns`` tool turns, written as ``agentlog run`` writes it: the CLI's
    projections attached, released with its projection cache current. Returns its last seq."""
    from agentlog.cli.projection_commands import attach_projections

    store = al.SessionStore()
    coordinator = PersistenceCoordinator(store, open_backend(root, kind))
    projections = attach_projections(coordinator)
    try:
        session = store.create(session_id, meta={"cwd": "/work/project"})
        for turn in range(1, turns + 1):
            _tool_turn(session, turn, f"Read it, time {turn}.", f"call-{turn}")
            _answer(session, turn, f"Digits, time {turn}.")
        last: int = session.events[-1].seq
        store.flush(session)
        projections.checkpoint(session)
        store.dispose(session)
    finally:
        projections.close()
        coordinator.close()
    return last


def damage_line(root: Path, session_id: str, line: int) -> None:
    """Bit rot in a raw JSONL log: line ``line`` (0 is the header) made invalid JSON, its length kept."""
    [path] = [p for p in root.rglob("session.jsonl") if p.parent.name == session_id]
    lines = path.read_bytes().split(b"\n")
    lines[line] = b"{" + b"x" * (len(lines[line]) - 1)
    path.write_bytes(b"\n".join(lines))
