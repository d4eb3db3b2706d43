"""agentlog messages ⇄ Anthropic Messages API ``system`` + ``messages``.

Why it is built this way: Anthropic's content blocks are close to agentlog's (ordered text, thinking and
tool-use blocks in one assistant message), so blocks map one to one, in order. Three differences need a
rule, and each is decided once here:

* Tool results. agentlog records each result as its own user-role message; Anthropic wants all the
  results of one assistant step as ``tool_result`` blocks of the single user message that follows it.
  ``to_anthropic`` merges a run of tool-result messages into one user message, and ``from_anthropic``
  splits a user message back into one tool-result message per block (then a user message for any
  other blocks after them).
* Tool arguments. agentlog keeps the model's raw argument text; Anthropic's ``tool_use.input`` is a JSON
  object. ``to_anthropic`` parses the text (and refuses text that is not a JSON object); ``from_anthropic``
  writes ``json.dumps(input, ensure_ascii=False, separators=(",", ":"))``, the canonical text the round
  trip keeps. Empty argument text (some models send ``""`` for a call without arguments) is written
  as ``{}``. Text that is not an object (Codex's ``apply_patch`` input, a free-form tool's) is refused,
  or, with ``wrap_arguments=True``, written as ``{"input": <text>}``, each such call listed in
  ``wrapped`` (the export report): a documented, reversible rule, never a silent change.
* Thinking signatures. Anthropic returns a ``signature`` with each thinking block and requires it back;
  agentlog's reasoning block holds only text, so the signatures ride in the assistant message's
  ``source.replayState`` as ``{"anthropic": {"signatures": [...]}}`` (one entry per reasoning block,
  ``None`` when a block had none) and are written back onto the thinking blocks.

Refused with a located :class:`~agentlog.errors.ConversionError`: images and documents (agentlog images
are attachment references), ``redacted_thinking``, server tool blocks, ``citations``, ``cache_control``,
a system prompt of several blocks; going out, a system message inside the conversation (Anthropic has no
place for one) and tool-call arguments that are not a JSON object.
"""

from __future__ import annotations

import json
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

__all__ = ["canonical_arguments", "from_anthropic", "session_to_anthropic", "to_anthropic", "tools_to_anthropic"]

Reasoning = Literal["signed", "thinking", "omit"]


def canonical_arguments(value: Any) -> str:
    """The argument text ``from_anthropic`` writes for a ``tool_use.input``."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _signatures(message: Mapping[str, Any]) -> list[Any]:
    source = message.get("source")
    state = source.get("replayState") if isinstance(source, Mapping) else None
    mine = state.get("anthropic") if isinstance(state, Mapping) else None
    signatures = mine.get("signatures") if isinstance(mine, Mapping) else None
    return list(signatures) if isinstance(signatures, Sequence) and not isinstance(signatures, str) else []


def to_anthropic(
    messages: Sequence[Any],
    *,
    system: str | None = None,
    reasoning: Reasoning = "signed",
    unsupported: Unsupported = "refuse",
    wrap_arguments: bool = False,
    wrapped: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Render derived messages as ``{"system"?: str, "messages": [...]}`` (``system`` only when given).

    ``wrap_arguments`` writes tool-call arguments that are not a JSON object as ``{"input": <text>}``
    instead of refusing them; ``wrapped``, when given, receives ``{"message", "callId", "name"}`` for
    each call so written.

    Reasoning becomes ``thinking`` blocks carrying the signature kept in ``replayState``. The API
    refuses a thinking block without a valid signature, so by default (``"signed"``) reasoning without
    one (another provider's) is left out; ``"thinking"`` writes every reasoning block (the lossless form,
    for exports), ``"omit"`` none."""
    wire: list[dict[str, Any]] = []
    pending_results: list[dict[str, Any]] | None = None  # the user message collecting tool results
    for index, message in enumerate(messages):
        kind = message_kind(message, index)
        content: Sequence[Any] = message["content"]
        if kind == "system":
            refuse("the Anthropic format has no system message inside the conversation", index, f"$[{index}].role")
        if kind == "assistant":
            pending_results = None
            blocks = _assistant(message, content, index, reasoning, unsupported, wrap_arguments, wrapped)
            wire.append({"role": "assistant", "content": blocks})
            continue
        results, others = _user(content, index, unsupported)
        if results:
            if pending_results is None:
                pending_results = []
                wire.append({"role": "user", "content": pending_results})
            pending_results.extend(results)
        if others is not None:
            pending_results = None
            wire.append({"role": "user", "content": others})
    body: dict[str, Any] = {}
    if system is not None:
        body["system"] = system
    body["messages"] = wire
    return body


def _assistant(
    message: Mapping[str, Any],
    content: Sequence[Any],
    index: int,
    reasoning: Reasoning,
    unsupported: Unsupported,
    wrap_arguments: bool = False,
    wrapped: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    signatures = _signatures(message)
    blocks: list[dict[str, Any]] = []
    thought = 0
    for j, block in enumerate(content):
        path = f"$[{index}].content[{j}]"
        kind = block_type(block, index, path)
        if kind == "text":
            blocks.append({"type": "text", "text": text_of(block, index, path)})
        elif kind == "reasoning":
            signature = signatures[thought] if thought < len(signatures) else None
            thought += 1
            if reasoning == "thinking" or (reasoning == "signed" and isinstance(signature, str)):
                rendered: dict[str, Any] = {"type": "thinking", "thinking": text_of(block, index, path)}
                if isinstance(signature, str):
                    rendered["signature"] = signature
                blocks.append(rendered)
        elif kind == "tool-call":
            call_id, name, arguments = tool_call_of(block, index, path)
            try:
                value = json.loads(arguments) if arguments.strip() else {}
            except ValueError:
                value = None
            if not isinstance(value, dict):
                if not wrap_arguments:
                    refuse(
                        "tool-call arguments are not a JSON object (Anthropic's input must be one); to write "
                        'them as {"input": <text>}, reported, export with --wrap-arguments '
                        "(wrap_arguments=True)",
                        index,
                        f"{path}.arguments",
                    )
                value = {"input": arguments}
                if wrapped is not None:
                    wrapped.append({"message": index, "callId": call_id, "name": name})
            blocks.append({"type": "tool_use", "id": call_id, "name": name, "input": value})
        else:
            unsupported_block(kind, index, path, unsupported, "an assistant message")
    return blocks


def _user(
    content: Sequence[Any], index: int, unsupported: Unsupported
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """The message's tool results (as ``tool_result`` blocks) and its other blocks (``None`` if none)."""
    results: list[dict[str, Any]] = []
    others: list[dict[str, Any]] = []
    for j, block in enumerate(content):
        path = f"$[{index}].content[{j}]"
        kind = block_type(block, index, path)
        if kind == "tool-result":
            call_id, inner, is_error = result_parts(block, index, path)
            texts = result_texts(inner, index, path, unsupported)
            rendered: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": call_id,
                "content": [{"type": "text", "text": text} for text in texts],
            }
            if is_error is not None:
                rendered["is_error"] = is_error
            results.append(rendered)
        elif kind == "text":
            others.append({"type": "text", "text": text_of(block, index, path)})
        else:
            unsupported_block(kind, index, path, unsupported, "a user message")
    if not results and not others:
        return results, []
    return results, (others or None)


def tools_to_anthropic(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Header tool schemas as Anthropic tools (``input_schema``)."""
    return [
        {"name": name, "description": description, "input_schema": parameters}
        for name, description, parameters in tool_schemas(tools)
    ]


def session_to_anthropic(
    session: SessionLike,
    *,
    reasoning: Reasoning = "signed",
    unsupported: Unsupported = "refuse",
    wrap_arguments: bool = False,
    wrapped: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The conversational part of a Messages request body for a session (or an ``at(seq)`` view):
    ``model``, ``system`` and ``tools`` from its request header, plus its messages (``wrap_arguments``
    and ``wrapped`` as in :func:`to_anthropic`)."""
    messages, system, tools, model = header_parts(session)
    body: dict[str, Any] = {}
    if model is not None:
        body["model"] = model
    body.update(
        to_anthropic(
            messages,
            system=system,
            reasoning=reasoning,
            unsupported=unsupported,
            wrap_arguments=wrap_arguments,
            wrapped=wrapped,
        )
    )
    if tools:
        body["tools"] = tools_to_anthropic(tools)
    return body


# --- from Anthropic ---------------------------------------------------------------------------------


def _system_text(system: Any) -> str | None:
    if system is None or isinstance(system, str):
        return system
    blocks = expect_list(system, None, "system", "system")
    if len(blocks) != 1:
        refuse("a system prompt of several blocks (agentlog keeps one text)", None, "system")
    block = expect_mapping(blocks[0], None, "system[0]", "a system block")
    if block.get("type") != "text":
        refuse(f"a {block.get('type')!r} system block cannot be represented", None, "system[0]")
    check_keys(block, frozenset({"type", "text"}), None, "system[0]")
    return expect_str(block.get("text"), None, "system[0].text", "text")


def from_anthropic(
    messages: Sequence[Any], *, system: Any = None, provider: str = "anthropic", model: str = "unknown"
) -> ImportedConversation:
    """Anthropic ``messages`` (and ``system``: a string or one text block) as agentlog messages;
    ``provider`` and ``model`` name the source of the assistant messages."""
    out = ImportedConversation(system=_system_text(system))
    for index, raw in enumerate(messages):
        path = f"$[{index}]"
        item = expect_mapping(raw, index, path, "a message")
        check_keys(item, frozenset({"role", "content"}), index, path)
        role = item.get("role")
        content = item.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        blocks = expect_list(content, index, f"{path}.content", "content")
        if role == "assistant":
            out.messages.append(_parse_assistant(blocks, index, path, provider, model))
        elif role == "user":
            out.messages.extend(_parse_user(blocks, index, path))
        else:
            refuse(f"unknown role {role!r}", index, f"{path}.role")
    return out


def _parse_assistant(blocks: Sequence[Any], index: int, path: str, provider: str, model: str) -> dict[str, Any]:
    content: list[Any] = []
    signatures: list[str | None] = []
    for j, raw in enumerate(blocks):
        block_path = f"{path}.content[{j}]"
        block = expect_mapping(raw, index, block_path, "a content block")
        kind = block.get("type")
        if kind == "text":
            check_keys(block, frozenset({"type", "text"}), index, block_path)
            content.append(m.text_block(expect_str(block.get("text"), index, f"{block_path}.text", "text")))
        elif kind == "thinking":
            check_keys(block, frozenset({"type", "thinking", "signature"}), index, block_path)
            content.append(
                m.reasoning_block(expect_str(block.get("thinking"), index, f"{block_path}.thinking", "thinking"))
            )
            signature = block.get("signature")
            signatures.append(
                None if signature is None else expect_str(signature, index, f"{block_path}.signature", "signature")
            )
        elif kind == "tool_use":
            check_keys(block, frozenset({"type", "id", "name", "input"}), index, block_path)
            value = expect_mapping(block.get("input"), index, f"{block_path}.input", "input")
            content.append(
                m.tool_call_block(
                    expect_str(block.get("id"), index, f"{block_path}.id", "id"),
                    expect_str(block.get("name"), index, f"{block_path}.name", "name"),
                    canonical_arguments(value),
                )
            )
        else:
            refuse(f"a {kind!r} block cannot be represented in agentlog", index, block_path)
    state = {"anthropic": {"signatures": signatures}} if any(s is not None for s in signatures) else None
    return dict(m.assistant_message(content, provider=provider, model=model, replay_state=state))


def _parse_user(blocks: Sequence[Any], index: int, path: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    others: list[Any] = []
    for j, raw in enumerate(blocks):
        block_path = f"{path}.content[{j}]"
        block = expect_mapping(raw, index, block_path, "a content block")
        kind = block.get("type")
        if kind == "text":
            check_keys(block, frozenset({"type", "text"}), index, block_path)
            others.append(m.text_block(expect_str(block.get("text"), index, f"{block_path}.text", "text")))
        elif kind == "tool_result":
            if others:
                refuse("a tool_result after other content (Anthropic puts tool results first)", index, block_path)
            check_keys(block, frozenset({"type", "tool_use_id", "content", "is_error"}), index, block_path)
            call_id = expect_str(block.get("tool_use_id"), index, f"{block_path}.tool_use_id", "tool_use_id")
            inner = block.get("content")
            if inner is None:
                inner = []
            elif isinstance(inner, str):
                inner = [{"type": "text", "text": inner}]
            texts = []
            for k, raw_inner in enumerate(expect_list(inner, index, f"{block_path}.content", "content")):
                inner_path = f"{block_path}.content[{k}]"
                part = expect_mapping(raw_inner, index, inner_path, "a content block")
                if part.get("type") != "text":
                    refuse(f"a {part.get('type')!r} block in a tool result cannot be represented", index, inner_path)
                check_keys(part, frozenset({"type", "text"}), index, inner_path)
                texts.append(m.text_block(expect_str(part.get("text"), index, f"{inner_path}.text", "text")))
            is_error = block.get("is_error")
            if is_error is not None and not isinstance(is_error, bool):
                refuse("is_error must be a boolean", index, f"{block_path}.is_error")
            out.append(dict(m.tool_result_message(call_id, texts, is_error=is_error)))
        else:
            refuse(f"a {kind!r} block cannot be represented in agentlog", index, block_path)
    if others or not out:
        out.append(dict(m.user_message(others)))
    return out
