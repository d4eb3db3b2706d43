"""agentlog messages ⇄ OpenAI chat-completions ``messages``.

Why it is built this way: agentlog keeps the system prompt in the request header and a conversation as
derived messages (an assistant message holds reasoning, text and tool-call blocks; each tool result is
its own user-role message). The chat-completions wire splits and names these differently (``system``
first, ``tool_calls`` beside ``content``, one ``role: tool`` message per result), so both directions
are written out here once, field by field, instead of being re-derived in every exporter and adapter.

* ``to_openai_chat`` renders what the API expects: a leading system message when there is a system
  prompt, assistant ``content`` as a string (``""`` rather than ``null`` when there is no text: several
  gateways reject a null content), ``tool_calls`` with the raw argument text, tool results as ``role:
  tool`` messages placed before any other content of the same user message (the API wants them right
  after the assistant's calls). Reasoning goes into ``reasoning_content`` (DeepSeek's extension, what
  agentlog's own provider sends) unless ``reasoning="omit"``.
* ``from_openai_chat`` is lossless for what the format can express and refuses the rest with a
  :class:`~agentlog.errors.ConversionError` naming the item's index and JSON path: image/audio/file
  parts (agentlog images are attachment references, not URLs), ``refusal``, ``name``, ``audio``,
  deprecated ``function_call``, a second or late system message.

The text of a content is written in its smallest exact form: no text blocks → ``""``, one non-empty text
block → that string, anything else → a list of ``{"type": "text"}`` parts. That is the canonical form
the round trip keeps exactly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from ..kernel import messages as m
from ._common import (
    ImportedConversation,
    SessionLike,
    Unsupported,
    block_type,
    check_keys,
    expect_list,
    expect_mapping,
    expect_str,
    header_parts,
    message_kind,
    refuse,
    result_parts,
    result_texts,
    text_of,
    tool_call_of,
    tool_schemas,
    unsupported_block,
)

__all__ = ["from_openai_chat", "session_to_openai_chat", "to_openai_chat", "tools_to_openai_chat"]

Reasoning = Literal["reasoning_content", "omit"]


def _text_content(texts: list[str]) -> str | list[dict[str, Any]]:
    if not texts:
        return ""
    if len(texts) == 1 and texts[0]:
        return texts[0]
    return [{"type": "text", "text": text} for text in texts]


def to_openai_chat(
    messages: Sequence[Any],
    *,
    system: str | None = None,
    reasoning: Reasoning = "reasoning_content",
    unsupported: Unsupported = "refuse",
) -> list[dict[str, Any]]:
    """Render derived messages (plus an optional system prompt) as chat-completions ``messages``."""
    wire: list[dict[str, Any]] = []
    if system is not None:
        wire.append({"role": "system", "content": system})
    for index, message in enumerate(messages):
        kind = message_kind(message, index)
        content: Sequence[Any] = message["content"]
        if kind == "assistant":
            wire.append(_assistant(content, index, reasoning, unsupported))
        elif kind == "system":
            texts = _texts(content, index, unsupported, "a system message")
            wire.append({"role": "system", "content": "".join(texts) if len(texts) <= 1 else _text_content(texts)})
        else:
            wire.extend(_user(content, index, unsupported))
    return wire


def _texts(content: Sequence[Any], index: int, unsupported: Unsupported, where: str) -> list[str]:
    texts: list[str] = []
    for j, block in enumerate(content):
        path = f"$[{index}].content[{j}]"
        kind = block_type(block, index, path)
        if kind == "text":
            texts.append(text_of(block, index, path))
        else:
            unsupported_block(kind, index, path, unsupported, where)
    return texts


def _assistant(content: Sequence[Any], index: int, reasoning: Reasoning, unsupported: Unsupported) -> dict[str, Any]:
    texts: list[str] = []
    thoughts: list[str] = []
    calls: list[dict[str, Any]] = []
    for j, block in enumerate(content):
        path = f"$[{index}].content[{j}]"
        kind = block_type(block, index, path)
        if kind == "text":
            texts.append(text_of(block, index, path))
        elif kind == "reasoning":
            thoughts.append(text_of(block, index, path))
        elif kind == "tool-call":
            call_id, name, arguments = tool_call_of(block, index, path)
            calls.append({"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}})
        else:
            unsupported_block(kind, index, path, unsupported, "an assistant message")
    entry: dict[str, Any] = {"role": "assistant", "content": _text_content(texts)}
    if thoughts and reasoning == "reasoning_content":
        entry["reasoning_content"] = "".join(thoughts)
    if calls:
        entry["tool_calls"] = calls
    return entry


def _user(content: Sequence[Any], index: int, unsupported: Unsupported) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    texts: list[str] = []
    others = False
    for j, block in enumerate(content):
        path = f"$[{index}].content[{j}]"
        kind = block_type(block, index, path)
        if kind == "tool-result":
            call_id, inner, _ = result_parts(block, index, path)
            tool_texts = result_texts(inner, index, path, unsupported)
            results.append({"role": "tool", "tool_call_id": call_id, "content": _text_content(tool_texts)})
        elif kind == "text":
            texts.append(text_of(block, index, path))
            others = True
        else:
            unsupported_block(kind, index, path, unsupported, "a user message")
            others = True
    if others or not results:
        results.append({"role": "user", "content": _text_content(texts)})
    return results


def tools_to_openai_chat(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Header tool schemas (``name, description, parameters``) as chat-completions ``tools``."""
    return [
        {"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}
        for name, description, parameters in tool_schemas(tools)
    ]


def session_to_openai_chat(
    session: SessionLike, *, reasoning: Reasoning = "reasoning_content", unsupported: Unsupported = "refuse"
) -> dict[str, Any]:
    """The conversational part of a chat-completions request body for a session (or an ``at(seq)``
    view): ``model`` and the system prompt and ``tools`` from its request header, plus its messages."""
    messages, system, tools, model = header_parts(session)
    body: dict[str, Any] = {}
    if model is not None:
        body["model"] = model
    body["messages"] = to_openai_chat(messages, system=system, reasoning=reasoning, unsupported=unsupported)
    if tools:
        body["tools"] = tools_to_openai_chat(tools)
    return body


# --- from chat-completions ------------------------------------------------------------------------

_SYSTEM_KEYS = frozenset({"role", "content"})
_USER_KEYS = frozenset({"role", "content"})
_ASSISTANT_KEYS = frozenset({"role", "content", "tool_calls", "reasoning_content"})
_TOOL_KEYS = frozenset({"role", "content", "tool_call_id"})


def _parse_texts(value: Any, index: int, path: str) -> list[dict[str, Any]]:
    """A chat ``content`` (string, null or text parts) as text blocks; ``""`` and null are no text."""
    if value is None or value == "":
        return []
    if isinstance(value, str):
        return [dict(m.text_block(value))]
    parts = expect_list(value, index, path, "content")
    blocks: list[dict[str, Any]] = []
    for j, part in enumerate(parts):
        part_path = f"{path}[{j}]"
        part = expect_mapping(part, index, part_path, "a content part")
        kind = part.get("type")
        if kind != "text":
            refuse(f"a {kind!r} content part cannot be represented in agentlog", index, part_path)
        check_keys(part, frozenset({"type", "text"}), index, part_path)
        blocks.append(dict(m.text_block(expect_str(part.get("text"), index, f"{part_path}.text", "text"))))
    return blocks


def from_openai_chat(items: Sequence[Any], *, provider: str = "openai", model: str = "unknown") -> ImportedConversation:
    """Chat-completions ``messages`` as agentlog messages; ``provider`` and ``model`` (which the format
    does not carry) name the source of the assistant messages. A leading ``system`` (or ``developer``)
    message becomes :attr:`ImportedConversation.system`."""
    out = ImportedConversation()
    for index, raw in enumerate(items):
        path = f"$[{index}]"
        item = expect_mapping(raw, index, path, "a chat message")
        role = item.get("role")
        if role in ("system", "developer"):
            if out.messages or out.system is not None:
                refuse(
                    "a system message after the first message (agentlog keeps one system prompt, in the "
                    "request header)",
                    index,
                    path,
                )
            check_keys(item, _SYSTEM_KEYS, index, path)
            texts = _parse_texts(item.get("content"), index, f"{path}.content")
            if len(texts) > 1:
                refuse("a system prompt of several parts (agentlog keeps one text)", index, f"{path}.content")
            out.system = texts[0]["text"] if texts else ""
        elif role == "user":
            check_keys(item, _USER_KEYS, index, path)
            out.messages.append(dict(m.user_message(_parse_texts(item.get("content"), index, f"{path}.content"))))
        elif role == "assistant":
            out.messages.append(_parse_assistant(item, index, path, provider, model))
        elif role == "tool":
            check_keys(item, _TOOL_KEYS, index, path)
            call_id = expect_str(item.get("tool_call_id"), index, f"{path}.tool_call_id", "tool_call_id")
            content = _parse_texts(item.get("content"), index, f"{path}.content")
            out.messages.append(dict(m.tool_result_message(call_id, content)))
        else:
            refuse(f"unknown role {role!r}", index, f"{path}.role")
    return out


def _parse_assistant(item: Mapping[str, Any], index: int, path: str, provider: str, model: str) -> dict[str, Any]:
    check_keys(item, _ASSISTANT_KEYS, index, path)
    blocks: list[Any] = []
    reasoning = item.get("reasoning_content")
    if reasoning is not None and expect_str(reasoning, index, f"{path}.reasoning_content", "reasoning_content"):
        blocks.append(m.reasoning_block(reasoning))
    blocks.extend(_parse_texts(item.get("content"), index, f"{path}.content"))
    calls = item.get("tool_calls") or []
    for j, raw in enumerate(expect_list(calls, index, f"{path}.tool_calls", "tool_calls")):
        call_path = f"{path}.tool_calls[{j}]"
        call = expect_mapping(raw, index, call_path, "a tool call")
        if call.get("type", "function") != "function":
            refuse(f"a {call.get('type')!r} tool call cannot be represented in agentlog", index, call_path)
        check_keys(call, frozenset({"id", "type", "function"}), index, call_path)
        function = expect_mapping(call.get("function"), index, f"{call_path}.function", "function")
        check_keys(function, frozenset({"name", "arguments"}), index, f"{call_path}.function")
        blocks.append(
            m.tool_call_block(
                expect_str(call.get("id"), index, f"{call_path}.id", "id"),
                expect_str(function.get("name"), index, f"{call_path}.function.name", "name"),
                expect_str(function.get("arguments"), index, f"{call_path}.function.arguments", "arguments"),
            )
        )
    return dict(m.assistant_message(blocks, provider=provider, model=model))
