"""agentlog messages ⇄ OpenAI Responses API ``input`` items.

Why it is built this way: the Responses API flattens a conversation into typed items in order — a
``message`` per user or assistant text, a ``function_call`` per tool call, a ``function_call_output``
per result, a ``reasoning`` item per thought — where agentlog groups an assistant step into one message
of ordered blocks. Because the items keep their order, the mapping is exact in both directions: an
assistant message's blocks become items in block order, and a run of assistant-side items
(``reasoning``, assistant ``message``, ``function_call``) is read back as one assistant message. (So two
assistant messages in a row, with nothing between, come back as one: the format has no boundary there.)

* ``to_openai_responses`` writes user and system text as ``input_text`` parts, each assistant text
  block as an assistant ``message`` item with a string content (the easy-input form: the API's
  ``output_text`` form also wants the ``id`` and ``status`` of an item it stored), tool results
  as ``function_call_output`` (a single text is a string ``output``, anything else a list of
  ``input_text`` parts). Reasoning is left out by default: the API only accepts back reasoning items it
  issued itself (with their ``id``), which agentlog's reasoning text is not. ``reasoning="item"`` writes
  each reasoning block as a ``reasoning`` item with one ``summary_text`` — the lossless form, for exports
  and for servers that accept it.
* ``from_openai_responses`` accepts exactly that, plus a string ``input``, string user contents and
  ``output_text`` assistant contents,
  and refuses with a located :class:`~agentlog.errors.ConversionError` what agentlog cannot hold:
  images and files, annotations, ``encrypted_content`` or full reasoning ``content``, built-in tool
  calls (web search, computer use, …) and item references. Item ``id`` and ``status`` fields are the
  API's bookkeeping for its own stored items and are not kept.
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

__all__ = [
    "from_openai_responses",
    "session_to_openai_responses",
    "to_openai_responses",
    "tools_to_openai_responses",
]

Reasoning = Literal["item", "omit"]


def _input_text(texts: Sequence[str]) -> list[dict[str, Any]]:
    return [{"type": "input_text", "text": text} for text in texts]


def to_openai_responses(
    messages: Sequence[Any],
    *,
    system: str | None = None,
    reasoning: Reasoning = "omit",
    unsupported: Unsupported = "refuse",
) -> list[dict[str, Any]]:
    """Render derived messages (plus an optional system prompt, as a leading ``system`` message item)
    as Responses ``input`` items. For the ``instructions`` form use :func:`session_to_openai_responses`."""
    items: list[dict[str, Any]] = []
    if system is not None:
        items.append({"type": "message", "role": "system", "content": _input_text([system])})
    for index, message in enumerate(messages):
        kind = message_kind(message, index)
        content: Sequence[Any] = message["content"]
        if kind == "assistant":
            items.extend(_assistant(content, index, reasoning, unsupported))
        else:
            items.extend(_user(content, index, unsupported, "system" if kind == "system" else "user"))
    return items


def _assistant(
    content: Sequence[Any], index: int, reasoning: Reasoning, unsupported: Unsupported
) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for j, block in enumerate(content):
        path = f"$[{index}].content[{j}]"
        kind = block_type(block, index, path)
        if kind == "text":
            items.append({"type": "message", "role": "assistant", "content": text_of(block, index, path)})
            continue
        if kind == "reasoning":
            if reasoning == "item":
                text = text_of(block, index, path)
                items.append({"type": "reasoning", "summary": [{"type": "summary_text", "text": text}]})
        elif kind == "tool-call":
            call_id, name, arguments = tool_call_of(block, index, path)
            items.append({"type": "function_call", "call_id": call_id, "name": name, "arguments": arguments})
        else:
            unsupported_block(kind, index, path, unsupported, "an assistant message")
    return items


def _user(content: Sequence[Any], index: int, unsupported: Unsupported, role: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    texts: list[str] = []
    others = False
    for j, block in enumerate(content):
        path = f"$[{index}].content[{j}]"
        kind = block_type(block, index, path)
        if kind == "tool-result" and role == "user":
            call_id, inner, _ = result_parts(block, index, path)
            tool_texts = result_texts(inner, index, path, unsupported)
            output: str | list[dict[str, Any]] = tool_texts[0] if len(tool_texts) == 1 else _input_text(tool_texts)
            items.append({"type": "function_call_output", "call_id": call_id, "output": output})
        elif kind == "text":
            texts.append(text_of(block, index, path))
            others = True
        else:
            unsupported_block(kind, index, path, unsupported, f"a {role} message")
            others = True
    if others or not items:
        items.append({"type": "message", "role": role, "content": _input_text(texts)})
    return items


def tools_to_openai_responses(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Header tool schemas as Responses function tools (``strict: false``: agentlog's schemas are not
    written for strict mode, which the Responses API would otherwise assume)."""
    return [
        {"type": "function", "name": name, "description": description, "parameters": parameters, "strict": False}
        for name, description, parameters in tool_schemas(tools)
    ]


def session_to_openai_responses(
    session: SessionLike, *, reasoning: Reasoning = "omit", unsupported: Unsupported = "refuse"
) -> dict[str, Any]:
    """The conversational part of a Responses request body for a session (or an ``at(seq)`` view):
    ``model``, the system prompt as ``instructions``, ``input`` and ``tools`` from the request header."""
    messages, system, tools, model = header_parts(session)
    body: dict[str, Any] = {}
    if model is not None:
        body["model"] = model
    if system is not None:
        body["instructions"] = system
    body["input"] = to_openai_responses(messages, reasoning=reasoning, unsupported=unsupported)
    if tools:
        body["tools"] = tools_to_openai_responses(tools)
    return body


# --- from Responses input items -------------------------------------------------------------------

_BOOKKEEPING = frozenset({"id", "status"})


def _parse_parts(value: Any, index: int, path: str, part_type: str) -> list[dict[str, Any]]:
    """A message ``content`` (a string, or parts of ``part_type``) as text blocks."""
    if isinstance(value, str):
        return [dict(m.text_block(value))]
    parts = expect_list(value, index, path, "content")
    blocks: list[dict[str, Any]] = []
    for j, raw in enumerate(parts):
        part_path = f"{path}[{j}]"
        part = expect_mapping(raw, index, part_path, "a content part")
        if part.get("type") != part_type:
            refuse(f"a {part.get('type')!r} content part cannot be represented in agentlog", index, part_path)
        check_keys(part, frozenset({"type", "text"}), index, part_path)
        blocks.append(dict(m.text_block(expect_str(part.get("text"), index, f"{part_path}.text", "text"))))
    return blocks


def from_openai_responses(
    items: str | Sequence[Any],
    *,
    instructions: str | None = None,
    provider: str = "openai",
    model: str = "unknown",
) -> ImportedConversation:
    """Responses ``input`` (a string or items) as agentlog messages. The system prompt is
    ``instructions`` or a leading ``system``/``developer`` message item (not both); ``provider`` and
    ``model`` name the source of the assistant messages."""
    out = ImportedConversation(system=instructions)
    if isinstance(items, str):
        out.messages.append(dict(m.user_message(items)))
        return out
    assistant: list[Any] | None = None  # the blocks of the assistant message being read

    def close() -> None:
        nonlocal assistant
        if assistant is not None:
            out.messages.append(dict(m.assistant_message(assistant, provider=provider, model=model)))
            assistant = None

    for index, raw in enumerate(items):
        path = f"$[{index}]"
        item = expect_mapping(raw, index, path, "an input item")
        kind = item.get("type", "message")
        role = item.get("role")
        if kind == "message" and role in ("system", "developer"):
            if out.messages or assistant is not None or out.system is not None:
                refuse("a second or late system prompt (agentlog keeps one, in the request header)", index, path)
            check_keys(item, _BOOKKEEPING | {"type", "role", "content"}, index, path)
            texts = _parse_parts(item.get("content"), index, f"{path}.content", "input_text")
            if len(texts) != 1:
                refuse("a system prompt must be one text", index, f"{path}.content")
            out.system = texts[0]["text"]
        elif kind == "message" and role == "user":
            close()
            check_keys(item, _BOOKKEEPING | {"type", "role", "content"}, index, path)
            out.messages.append(
                dict(m.user_message(_parse_parts(item.get("content"), index, f"{path}.content", "input_text")))
            )
        elif kind == "message" and role == "assistant":
            check_keys(item, _BOOKKEEPING | {"type", "role", "content"}, index, path)
            blocks = _parse_assistant_text(item.get("content"), index, f"{path}.content")
            assistant = (assistant if assistant is not None else []) + blocks
        elif kind == "message":
            refuse(f"unknown role {role!r}", index, f"{path}.role")
        elif kind == "reasoning":
            check_keys(item, _BOOKKEEPING | {"type", "summary"}, index, path)
            summary = expect_list(item.get("summary"), index, f"{path}.summary", "summary")
            thoughts = []
            for j, raw_part in enumerate(summary):
                part_path = f"{path}.summary[{j}]"
                part = expect_mapping(raw_part, index, part_path, "a summary part")
                if part.get("type") != "summary_text":
                    refuse(f"a {part.get('type')!r} summary part cannot be represented", index, part_path)
                check_keys(part, frozenset({"type", "text"}), index, part_path)
                thoughts.append(m.reasoning_block(expect_str(part.get("text"), index, f"{part_path}.text", "text")))
            assistant = (assistant if assistant is not None else []) + thoughts
        elif kind == "function_call":
            check_keys(item, _BOOKKEEPING | {"type", "call_id", "name", "arguments"}, index, path)
            block = m.tool_call_block(
                expect_str(item.get("call_id"), index, f"{path}.call_id", "call_id"),
                expect_str(item.get("name"), index, f"{path}.name", "name"),
                expect_str(item.get("arguments"), index, f"{path}.arguments", "arguments"),
            )
            assistant = (assistant if assistant is not None else []) + [block]
        elif kind == "function_call_output":
            close()
            check_keys(item, _BOOKKEEPING | {"type", "call_id", "output"}, index, path)
            call_id = expect_str(item.get("call_id"), index, f"{path}.call_id", "call_id")
            output = _parse_parts(item.get("output"), index, f"{path}.output", "input_text")
            out.messages.append(dict(m.tool_result_message(call_id, output)))
        else:
            refuse(f"a {kind!r} item cannot be represented in agentlog", index, f"{path}.type")
    close()
    return out


def _parse_assistant_text(value: Any, index: int, path: str) -> list[dict[str, Any]]:
    if isinstance(value, str):
        return [dict(m.text_block(value))]
    parts = expect_list(value, index, path, "content")
    blocks: list[dict[str, Any]] = []
    for j, raw in enumerate(parts):
        part_path = f"{path}[{j}]"
        part = expect_mapping(raw, index, part_path, "a content part")
        if part.get("type") != "output_text":
            refuse(f"a {part.get('type')!r} content part cannot be represented in agentlog", index, part_path)
        check_keys(part, frozenset({"type", "text"}), index, part_path)
        blocks.append(dict(m.text_block(expect_str(part.get("text"), index, f"{part_path}.text", "text"))))
    return blocks
