"""What the three format converters share: reading agentlog messages, refusing with a located error.

Each converter is a pure function over JSON-shaped values, so the pieces here are pure too: a reader of
agentlog's derived messages (which may be frozen, from ``derive_messages()``) that refuses a foreign
shape with a :class:`~agentlog.errors.ConversionError` naming the item, the result type of every
``from_*``, and the session protocol the ``session_to_*`` functions read (a live ``Session`` and a
``SessionView`` from ``at(seq)`` both satisfy it). Nothing here knows any API's wire format.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NoReturn, Protocol

from ..errors import ConversionError
from ..kernel.jsonvalue import thaw

Unsupported = Literal["refuse", "omit"]
"""What ``to_*`` does with a block the target cannot carry (an image attachment reference): refuse it
with a located :class:`ConversionError` (the default, so nothing disappears silently) or leave it out."""


@dataclass
class ImportedConversation:
    """A foreign conversation as agentlog sees it: the system prompt (which agentlog keeps in the
    request header, not among the messages) and the messages, as :mod:`agentlog.kernel.messages`
    builds them, ready to append as ``user/message``, ``assistant/message`` and ``tool/result``."""

    system: str | None = None
    messages: list[dict[str, Any]] = field(default_factory=list)


class SessionLike(Protocol):
    """A ``Session`` or a ``SessionView``: the derived messages and the current request header."""

    def derive_messages(self) -> Sequence[Any]: ...

    def request_header(self) -> Any: ...


def refuse(message: str, index: int | None, path: str) -> NoReturn:
    raise ConversionError(f"{path}: {message}", index=index, path=path)


def header_parts(session: SessionLike) -> tuple[list[Any], str | None, list[dict[str, Any]], str | None]:
    """The session's derived messages, system prompt, tool schemas (``name, description, parameters``)
    and model, all thawed into plain values."""
    header = session.request_header()
    messages = list(session.derive_messages())
    if not isinstance(header, Mapping):
        return messages, None, [], None
    system = header.get("system")
    tools = thaw(header.get("tools") or [])
    config = header.get("config")
    model = config.get("model") if isinstance(config, Mapping) else None
    return (
        messages,
        system if isinstance(system, str) else None,
        tools if isinstance(tools, list) else [],
        model if isinstance(model, str) else None,
    )


def tool_schemas(tools: Sequence[Any]) -> list[tuple[str, str, Any]]:
    """``(name, description, parameters)`` of each header tool schema, refusing a malformed one."""
    out: list[tuple[str, str, Any]] = []
    for i, tool in enumerate(tools):
        path = f"tools[{i}]"
        tool = expect_mapping(tool, i, path, "a tool schema")
        name = expect_str(tool.get("name"), i, f"{path}.name", "name")
        description = expect_str(tool.get("description", ""), i, f"{path}.description", "description")
        parameters = expect_mapping(tool.get("parameters"), i, f"{path}.parameters", "parameters")
        out.append((name, description, thaw(parameters)))
    return out


# --- reading agentlog messages ------------------------------------------------------------------

MessageKind = Literal["user", "assistant", "tool", "system"]


def message_kind(message: Any, index: int) -> MessageKind:
    """Classify one derived message, refusing anything that is not agentlog's message shape."""
    path = f"$[{index}]"
    if not isinstance(message, Mapping):
        refuse("not an agentlog message (a mapping with role, content and source)", index, path)
    role = message.get("role")
    content = message.get("content")
    if not isinstance(content, Sequence) or isinstance(content, str):
        refuse("content must be a list of blocks", index, f"{path}.content")
    if role == "assistant":
        return "assistant"
    if role == "system":
        return "system"
    if role != "user":
        refuse(f"unknown role {role!r}", index, f"{path}.role")
    source = message.get("source")
    if isinstance(source, Mapping) and source.get("kind") == "tool":
        return "tool"
    return "user"


def block_type(block: Any, index: int | None, path: str) -> str:
    if not isinstance(block, Mapping) or not isinstance(block.get("type"), str):
        refuse("not a content block (a mapping with a string type)", index, path)
    return str(block["type"])


def text_of(block: Mapping[str, Any], index: int | None, path: str, key: str = "text") -> str:
    text = block.get(key)
    if not isinstance(text, str):
        refuse(f"{key} must be a string", index, f"{path}.{key}")
    return text


def tool_call_of(block: Mapping[str, Any], index: int | None, path: str) -> tuple[str, str, str]:
    """``(id, name, arguments)`` of a tool-call block."""
    values = []
    for key in ("id", "name", "arguments"):
        value = block.get(key)
        if not isinstance(value, str):
            refuse(f"tool-call {key} must be a string", index, f"{path}.{key}")
        values.append(value)
    return values[0], values[1], values[2]


def result_parts(block: Mapping[str, Any], index: int | None, path: str) -> tuple[str, list[Any], bool | None]:
    """``(toolCallId, content blocks, isError)`` of a tool-result block."""
    call_id = block.get("toolCallId")
    if not isinstance(call_id, str):
        refuse("tool-result toolCallId must be a string", index, f"{path}.toolCallId")
    content = block.get("content")
    if not isinstance(content, Sequence) or isinstance(content, str):
        refuse("tool-result content must be a list of blocks", index, f"{path}.content")
    is_error = block.get("isError")
    if is_error is not None and not isinstance(is_error, bool):
        refuse("tool-result isError must be a boolean", index, f"{path}.isError")
    return call_id, list(content), is_error


def result_texts(content: Sequence[Any], index: int | None, path: str, unsupported: Unsupported) -> list[str]:
    """The texts of a tool result's content; other blocks are refused or omitted per ``unsupported``."""
    texts: list[str] = []
    for j, inner in enumerate(content):
        inner_path = f"{path}.content[{j}]"
        kind = block_type(inner, index, inner_path)
        if kind == "text":
            texts.append(text_of(inner, index, inner_path))
        elif unsupported == "refuse":
            refuse(f"a {kind!r} block inside a tool result cannot be rendered in this format", index, inner_path)
    return texts


def unsupported_block(kind: str, index: int | None, path: str, unsupported: Unsupported, where: str) -> None:
    """Refuse (or, with ``omit``, skip) a block the target cannot carry."""
    if unsupported == "refuse":
        refuse(f"a {kind!r} block in {where} cannot be rendered in this format", index, path)


# --- reading foreign values --------------------------------------------------------------------


def expect_mapping(value: Any, index: int | None, path: str, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        refuse(f"{what} must be an object", index, path)
    return value


def expect_str(value: Any, index: int | None, path: str, what: str) -> str:
    if not isinstance(value, str):
        refuse(f"{what} must be a string", index, path)
    return value


def expect_list(value: Any, index: int | None, path: str, what: str) -> Sequence[Any]:
    if not isinstance(value, Sequence) or isinstance(value, (str, bytes)):
        refuse(f"{what} must be a list", index, path)
    return value


def check_keys(item: Mapping[str, Any], allowed: frozenset[str], index: int | None, path: str) -> None:
    """Refuse a field agentlog would drop. ``None`` (and an empty list) counts as absent: SDK dumps
    (``model_dump()``) spell unset optional fields that way, and they carry nothing."""
    for key, value in item.items():
        if key in allowed or value is None or (isinstance(value, list) and not value):
            continue
        refuse(f"field {key!r} cannot be represented in agentlog", index, f"{path}.{key}")
