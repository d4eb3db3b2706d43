"""Constructors for messages, content blocks and usage, in wire shape.

Users should never hand-build wire dictionaries: a misspelt key (``tool_call_id`` for ``toolCallId``)
is accepted by the lenient append path and only surfaces when the log is reloaded. These helpers
produce exactly the shapes the seed/load validation expects. They return plain dicts; the session's
JSON gate copies and freezes them on append.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..errors import ArgumentTypeError
from .events import (
    Message,
    ReasoningBlock,
    TextBlock,
    TokenUsage,
    ToolCallBlock,
    ToolResultBlock,
)

_counter = itertools.count(1)
_prefix = os.urandom(6).hex()


def new_message_id() -> str:
    """A process-unique message id (random prefix + counter: cheap and collision-free in practice)."""
    return f"msg-{_prefix}-{next(_counter)}"


def text_block(text: str) -> TextBlock:
    return {"type": "text", "text": text}


def reasoning_block(text: str) -> ReasoningBlock:
    return {"type": "reasoning", "text": text}


def tool_call_block(id: str, name: str, arguments: str) -> ToolCallBlock:
    """``arguments`` is the raw JSON text the model produced; it is kept verbatim, never parsed."""
    return {"type": "tool-call", "id": id, "name": name, "arguments": arguments}


def _blocks(content: str | Sequence[Any]) -> list[Any]:
    if isinstance(content, str):
        return [text_block(content)]
    if isinstance(content, (bytes, Mapping)) or not isinstance(content, Iterable):
        raise ArgumentTypeError(
            f"message content must be a str or a list of content blocks, got {content!r} "
            f"({content.__class__.__name__}): pass str(value) or [text_block(...)]"
        )
    return list(content)


def tool_result_block(
    tool_call_id: str, content: str | Sequence[Any], *, is_error: bool | None = None
) -> ToolResultBlock:
    block: ToolResultBlock = {"type": "tool-result", "toolCallId": tool_call_id, "content": _blocks(content)}
    if is_error is not None:
        block["isError"] = is_error
    return block


def image_block(
    attachment_id: str,
    media_type: str,
    *,
    bytes: int,
    width: int,
    height: int,
    name: str | None = None,
) -> dict[str, Any]:
    attachment: dict[str, Any] = {
        "attachmentId": attachment_id,
        "mediaType": media_type,
        "bytes": bytes,
        "width": width,
        "height": height,
    }
    if name is not None:
        attachment["name"] = name
    return {"type": "image", "attachment": attachment}


def user_message(
    content: str | Sequence[Any], *, id: str | None = None, source: dict[str, Any] | None = None
) -> Message:
    """A user-role message; ``source`` defaults to a direct human prompt ``{"kind": "user"}``.

    Keys in the original's ``createUserMessage`` order (content, source, role, id: the input spread,
    then the role, then the minted id), so a log written here holds the original's bytes.
    """
    return {
        "content": _blocks(content),
        "source": source if source is not None else {"kind": "user"},  # type: ignore[typeddict-item]
        "role": "user",
        "id": id if id is not None else new_message_id(),
    }


def plugin_message(
    content: str | Sequence[Any], *, plugin: str, form: str | None = None, id: str | None = None
) -> Message:
    """Injected context (a user-role message whose source names the plugin that produced it)."""
    source: dict[str, Any] = {"kind": "plugin", "plugin": plugin}
    if form is not None:
        source["form"] = form
    return user_message(content, id=id, source=source)


def assistant_message(
    content: str | Sequence[Any],
    *,
    provider: str,
    model: str,
    id: str | None = None,
    replay_state: Any = None,
) -> Message:
    """A model-produced message; keys in the original's ``createAssistantMessage`` order (role,
    content, source, then the minted id)."""
    source: dict[str, Any] = {"kind": "model", "provider": provider, "model": model}
    if replay_state is not None:
        source["replayState"] = replay_state
    return {
        "role": "assistant",
        "content": _blocks(content),
        "source": source,  # type: ignore[typeddict-item]
        "id": id if id is not None else new_message_id(),
    }


def tool_result_message(
    call_id: str, content: str | Sequence[Any], *, is_error: bool | None = None, id: str | None = None
) -> Message:
    """A tool's model-facing result: a user-role message holding exactly one tool-result block.

    Keys in the original's ``createToolResultMessage`` order (source, content, role, id).
    """
    return {
        "source": {"kind": "tool", "callId": call_id},
        "content": [tool_result_block(call_id, content, is_error=is_error)],
        "role": "user",
        "id": id if id is not None else new_message_id(),
    }


def token_usage(
    input_tokens: int,
    output_tokens: int,
    *,
    cache_read_tokens: int | None = None,
    cache_write_tokens: int | None = None,
    reasoning_tokens: int | None = None,
) -> TokenUsage:
    """Counts are disjoint: ``input_tokens`` is the uncached input only."""
    usage: TokenUsage = {"inputTokens": input_tokens, "outputTokens": output_tokens}
    if cache_read_tokens is not None:
        usage["cacheReadTokens"] = cache_read_tokens
    if cache_write_tokens is not None:
        usage["cacheWriteTokens"] = cache_write_tokens
    if reasoning_tokens is not None:
        usage["reasoningTokens"] = reasoning_tokens
    return usage


def text_delta(index: int, text: str) -> dict[str, Any]:
    """A streamed text chunk (payload ``chunk`` of ``assistant/chunk``)."""
    return {"type": "text-delta", "index": index, "text": text}


def reasoning_delta(index: int, text: str) -> dict[str, Any]:
    return {"type": "reasoning-delta", "index": index, "text": text}


def tool_call_delta(index: int, id: str, arguments_delta: str, *, name: str | None = None) -> dict[str, Any]:
    chunk: dict[str, Any] = {"type": "tool-call-delta", "index": index, "id": id}
    if name is not None:
        chunk["name"] = name
    chunk["argumentsDelta"] = arguments_delta
    return chunk
