"""A session written back as another tool's transcript: ``export --to claude-code`` and ``--to codex``.

The importers (:mod:`agentlog.interop.transcripts`) read these layouts; the writers here produce files in
the same layouts, so that the tool can resume them (``claude --resume <id>`` finds
``~/.claude/projects/<project>/<id>.jsonl``; ``codex resume`` lists ``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``)
and importing the file again gives the same events, up to ids. The writers walk the **log**, not the
derived messages, so a compaction is written as the tool writes one (the history, then the boundary and
the summary) instead of only what survived it.

Formats from public descriptions of the tools' session files (the same ones the importers follow); the
fields the tools need to resume (``uuid``/``parentUuid`` chains, ``sessionId``, ``cwd``; Codex's
``session_meta``) are written, the rest (git state, versions) is not known to agentlog and left out.
"""

from __future__ import annotations

import datetime
import uuid as uuidlib
from collections.abc import Mapping
from typing import IO, Any, Final

import orjson

from ..kernel.events import (
    ASSISTANT_MESSAGE,
    COMPACTION_SUMMARY,
    REQUEST_HEADER,
    SESSION_TITLE,
    TOOL_RESULT,
    USER_MESSAGE,
)
from ..kernel.jsonvalue import thaw
from ..kernel.session import derive_event_message
from .anthropic import to_anthropic
from .events import IMPORT_DONE, IMPORT_RECORD

__all__ = ["TRANSCRIPT_EXPORT_FORMATS", "write_claude_code", "write_codex"]

TRANSCRIPT_EXPORT_FORMATS: Final = ("claude-code", "codex")
_VERSION: Final = "agentlog-export"
"""The ``version`` written on Claude Code records (the tool's own version is not known here)."""


def _iso(ms: int) -> str:
    stamp = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{stamp.microsecond // 1000:03d}Z"


def _line(out: IO[str], record: Mapping[str, Any]) -> None:
    out.write(orjson.dumps(record).decode())
    out.write("\n")


def _own_id(view: Any) -> str:
    """The transcript's session id: the one the session was imported from (its ``import/done``), else
    the session's own id when it is a UUID, else a UUID derived from it (Claude Code and Codex name
    sessions by UUID)."""
    events = view.events
    last = events[len(events) - 1] if len(events) else None
    if last is not None and last["type"] == IMPORT_DONE:
        own = last["data"].get("sessionId")
        if isinstance(own, str) and own and last["data"].get("sidechain") is not True:
            return own
    session_id = str(view.header["id"])
    try:
        return str(uuidlib.UUID(session_id))
    except ValueError:
        return str(uuidlib.uuid5(uuidlib.NAMESPACE_URL, f"agentlog:{session_id}"))


def _anthropic(message: Any, wrapped: list[dict[str, Any]] | None) -> dict[str, Any]:
    rendered = to_anthropic([thaw(message)], reasoning="thinking", wrap_arguments=True, wrapped=wrapped)["messages"]
    assert len(rendered) == 1
    return rendered[0]  # type: ignore[no-any-return]


def _usage(usage: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if not usage:
        return None
    out: dict[str, Any] = {"input_tokens": usage.get("inputTokens", 0), "output_tokens": usage.get("outputTokens", 0)}
    if usage.get("cacheReadTokens") is not None:
        out["cache_read_input_tokens"] = usage["cacheReadTokens"]
    if usage.get("cacheWriteTokens") is not None:
        out["cache_creation_input_tokens"] = usage["cacheWriteTokens"]
    return out


def write_claude_code(view: Any, out: IO[str], *, wrapped: list[dict[str, Any]] | None = None) -> int:
    """Write ``view``'s log as a Claude Code session file; return the number of records.

    One record per message, chained by ``parentUuid`` in log order: a prompt and a tool result are
    ``user`` records (a tool result as a ``tool_result`` block), an assistant message one ``assistant``
    record (text, ``thinking`` with its signature, ``tool_use``; its model and usage). A compaction is
    a ``system``/``compact_boundary`` record (its ``logicalParentUuid`` the last record before it)
    followed by the ``isCompactSummary`` user record holding the checkpoint's text. The latest title is
    the last record: ``custom-title`` for a user's rename, ``ai-title`` otherwise. Records the import
    kept aside (``import/record``) are written back verbatim where they were. Tool-call arguments that
    are not a JSON object are wrapped as ``{"input": text}`` (listed in ``wrapped``).
    """
    sid = _own_id(view)
    cwd = view.header.get("cwd") or "/"
    parent: str | None = None
    count = 0
    title: Any = None
    base = {"isSidechain": False, "userType": "external", "cwd": cwd, "sessionId": sid, "version": _VERSION}

    def emit(record: dict[str, Any]) -> None:
        nonlocal parent, count
        _line(out, record)
        count += 1
        if "uuid" in record:
            parent = record["uuid"]

    for event in view.events:
        etype = event["type"]
        seq = event["seq"]
        stamp = _iso(event["time"])
        record_id = str(uuidlib.uuid5(uuidlib.NAMESPACE_URL, f"agentlog:{sid}:{seq}"))
        if etype == SESSION_TITLE:
            title = event["data"]
            continue
        if etype == IMPORT_RECORD:
            kept = thaw(event["data"].get("record"))
            if kept.get("subtype") == "compact_boundary" if isinstance(kept, dict) else False:
                continue  # the compaction's checkpoint writes its boundary
            if isinstance(kept, dict) and kept.get("type") not in ("user", "assistant", "summary"):
                if "uuid" in kept and kept.get("isSidechain") is not True and "parentUuid" in kept:
                    emit({**kept, "parentUuid": parent})  # back into the chain where it was
                else:
                    _line(out, kept)
                    count += 1
            continue
        if etype not in (USER_MESSAGE, ASSISTANT_MESSAGE, TOOL_RESULT):
            continue
        message = derive_event_message(event)
        if message is None:
            continue
        source = message.get("source") or {}
        if etype == USER_MESSAGE and source.get("kind") == "plugin" and source.get("plugin") == "compact":
            boundary = str(uuidlib.uuid5(uuidlib.NAMESPACE_URL, f"agentlog:{sid}:{seq}:boundary"))
            emit(
                {
                    **base,
                    "parentUuid": None,
                    "logicalParentUuid": parent,
                    "type": "system",
                    "subtype": "compact_boundary",
                    "content": "Conversation compacted",
                    "level": "info",
                    "compactMetadata": {"trigger": "manual"},
                    "uuid": boundary,
                    "timestamp": stamp,
                }
            )
            text = "\n\n".join(b["text"] for b in message["content"] if b.get("type") == "text")
            emit(
                {
                    **base,
                    "parentUuid": parent,
                    "type": "user",
                    "message": {"role": "user", "content": text},
                    "isCompactSummary": True,
                    "isVisibleInTranscriptOnly": True,
                    "uuid": record_id,
                    "timestamp": stamp,
                }
            )
            continue
        rendered = _anthropic(message, wrapped)
        if etype == ASSISTANT_MESSAGE:
            body: dict[str, Any] = {
                "id": f"msg_{record_id.replace('-', '')[:24]}",
                "type": "message",
                "role": "assistant",
                "model": source.get("model") or "unknown",
                "content": rendered["content"],
                "stop_reason": None,
                "stop_sequence": None,
            }
            usage = _usage(event["data"].get("usage"))
            if usage is not None:
                body["usage"] = usage
            emit(
                {
                    **base,
                    "parentUuid": parent,
                    "type": "assistant",
                    "message": body,
                    "uuid": record_id,
                    "timestamp": stamp,
                }
            )
        else:
            content = rendered["content"]
            if etype == USER_MESSAGE and all(b.get("type") == "text" for b in content) and len(content) == 1:
                content = content[0]["text"]  # Claude Code writes a typed prompt as a string
            emit(
                {
                    **base,
                    "parentUuid": parent,
                    "type": "user",
                    "message": {"role": "user", "content": content},
                    "uuid": record_id,
                    "timestamp": stamp,
                }
            )
    if title is not None:
        kind = (title.get("source") or {}).get("kind")
        if kind == "user":
            _line(out, {"type": "custom-title", "customTitle": title["title"], "sessionId": sid})
        else:
            _line(out, {"type": "ai-title", "aiTitle": title["title"], "sessionId": sid})
        count += 1
    return count


def write_codex(view: Any, out: IO[str], *, wrapped: list[dict[str, Any]] | None = None) -> int:
    """Write ``view``'s log as a Codex CLI rollout (``{timestamp, type, payload}`` lines); return the
    number of lines.

    ``session_meta`` first (the id, cwd and the system prompt as ``instructions``), a ``turn_context``
    with the model, then ``response_item`` lines: a message per prompt and per assistant text
    (``input_text``/``output_text``), ``reasoning`` with its text as a summary, ``function_call`` per tool
    call with its arguments text and ``function_call_output`` per result. A compaction is a
    ``compacted`` line whose ``message`` is the checkpoint's text. Usage is written as the
    ``event_msg``/``token_count`` that follows the response it counts.
    """
    del wrapped  # Codex arguments are text: nothing needs wrapping
    sid = _own_id(view)
    header_event = next((e for e in view.events if e["type"] == REQUEST_HEADER), None)
    header = thaw(header_event["data"]["header"]) if header_event is not None else {}
    config = header.get("config") or {}
    first_time = view.events[0]["time"] if len(view.events) else view.header.get("createdAt", 0)
    meta: dict[str, Any] = {"id": sid, "timestamp": _iso(first_time), "cwd": view.header.get("cwd") or "/"}
    meta["originator"] = "agentlog"
    if isinstance(header.get("system"), str):
        meta["instructions"] = header["system"]
    count = 0

    def emit(stamp: int, rtype: str, payload: Any) -> None:
        nonlocal count
        _line(out, {"timestamp": _iso(stamp), "type": rtype, "payload": payload})
        count += 1

    emit(first_time, "session_meta", meta)
    if config.get("model"):
        emit(first_time, "turn_context", {"cwd": meta["cwd"], "model": config["model"]})
    kinds: dict[str, Mapping[str, Any]] = {}  # call id -> the Codex item kind kept by the import
    summary: str | None = None  # the text of the last compaction/summary (a compacted line's message)
    for event in view.events:
        etype, time = event["type"], event["time"]
        if etype == COMPACTION_SUMMARY:
            blocks = thaw(event["data"].get("summary"))
            summary = "\n\n".join(b["text"] for b in blocks if isinstance(b, dict) and b.get("type") == "text") or None
            continue
        if etype not in (USER_MESSAGE, ASSISTANT_MESSAGE, TOOL_RESULT):
            continue
        message = derive_event_message(event)
        if message is None:
            continue
        message = thaw(message)
        source = message.get("source") or {}
        if etype == USER_MESSAGE and source.get("kind") == "plugin" and source.get("plugin") == "compact":
            kept_texts = [b["text"] for b in message["content"] if b.get("type") == "text"]
            history = [
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
                for text in kept_texts
            ]
            emit(
                time,
                "compacted",
                {
                    "message": summary if summary is not None else "\n\n".join(kept_texts),
                    "replacement_history": history,
                },
            )
            summary = None
            continue
        if etype == TOOL_RESULT:
            for block in message["content"]:
                if block.get("type") != "tool-result":
                    continue
                kind = kinds.get(block["toolCallId"], {}).get("type")
                if kind == "web_search_call":
                    continue  # the rollout holds no search result: the import writes its placeholder again
                text = "".join(p.get("text", "") for p in block.get("content") or () if p.get("type") == "text")
                otype = "custom_tool_call_output" if kind == "custom_tool_call" else "function_call_output"
                output: Any = text
                if block.get("isError") is not None and kind != "custom_tool_call":
                    output = {"content": text, "success": not block["isError"]}
                emit(time, "response_item", {"type": otype, "call_id": block["toolCallId"], "output": output})
            continue
        if etype == USER_MESSAGE:
            parts = [{"type": "input_text", "text": b["text"]} for b in message["content"] if b.get("type") == "text"]
            emit(time, "response_item", {"type": "message", "role": "user", "content": parts})
            continue
        items = ((source.get("replayState") or {}).get("codex") or {}).get("items") or {}
        kinds.update(items)
        texts: list[dict[str, Any]] = []
        for block in message["content"]:
            btype = block.get("type")
            if btype == "reasoning":
                emit(
                    time,
                    "response_item",
                    {"type": "reasoning", "summary": [{"type": "summary_text", "text": block["text"]}]},
                )
            elif btype == "text":
                texts.append({"type": "output_text", "text": block["text"]})
            elif btype == "tool-call":
                if texts:
                    emit(time, "response_item", {"type": "message", "role": "assistant", "content": texts})
                    texts = []
                emit(time, "response_item", _codex_call(block, items.get(block["id"]) or {}))
        if texts:
            emit(time, "response_item", {"type": "message", "role": "assistant", "content": texts})
        usage = event["data"].get("usage")
        if usage:
            last = {
                "input_tokens": usage.get("inputTokens", 0),
                "cached_input_tokens": usage.get("cacheReadTokens") or 0,
                "output_tokens": usage.get("outputTokens", 0),
                "reasoning_output_tokens": usage.get("reasoningTokens") or 0,
            }
            last["total_tokens"] = last["input_tokens"] + last["output_tokens"]
            emit(time, "event_msg", {"type": "token_count", "info": {"last_token_usage": last}})
    return count


def _codex_call(block: Mapping[str, Any], kept: Mapping[str, Any]) -> dict[str, Any]:
    """A tool call as the Codex item it was imported from (``replayState.codex.items``), else a
    ``function_call``."""
    kind = kept.get("type")
    item: dict[str, Any]
    if kind in ("local_shell_call", "web_search_call"):
        item = {"type": kind, "call_id": block["id"], "action": orjson.loads(block["arguments"])}
    elif kind == "custom_tool_call":
        item = {"type": kind, "name": block["name"], "input": block["arguments"], "call_id": block["id"]}
    else:
        return {"type": "function_call", "name": block["name"], "arguments": block["arguments"], "call_id": block["id"]}
    if "status" in kept:
        item["status"] = kept["status"]
    return item
