"""pydantic-ai adapter: agentlog derived messages to and from ``ModelMessage`` lists, and recording a run.

Why it is built this way:

* **The model-facing content maps; nothing else pretends to.** A user message becomes a
  ``UserPromptPart``, a tool result a ``ToolReturnPart``, an assistant message a ``ModelResponse``
  of ``TextPart`` / ``ThinkingPart`` / ``ToolCallPart``; the system prompt (which agentlog keeps in the
  request header, not among the messages) is a leading ``SystemPromptPart``. What agentlog needs to get
  its own messages back exactly (message ids, sources, an explicit ``isError: false``, the provider's
  replay state) rides in pydantic-ai's ``metadata`` fields, which pydantic-ai never sends to the model;
  what pydantic-ai needs back from a provider (a thinking signature, part ids, ``provider_details``) rides
  in the assistant message's ``source.replayState``. So ``from_model_messages(to_model_messages(m))``
  gives ``m`` back unchanged, and the other direction keeps every model-facing field.
* **Refuse rather than guess.** Anything with no agentlog form (images by reference, files, audio,
  native/built-in tool parts, a system prompt in mid-conversation, a request-scoped system prompt, a
  tool call never answered) raises :class:`~agentlog.errors.ConversionError` naming the message index
  and the part's path (``$[2].parts[1]``). Conversions and recordings are checked whole before anything
  is returned or appended, so a refusal leaves the log as it was.
* **Not carried** (not model-facing, or kept elsewhere in agentlog): timestamps, run and conversation
  ids, ``provider_response_id``, ``finish_reason``, response-level ``provider_details``, foreign
  ``metadata`` keys and ``dynamic_ref``. Per-response token usage is kept by :func:`record_run` in the
  ``assistant/message`` event (``usage``), as the agent loop keeps it. A tool's return value is kept as
  the text the model was shown (``ToolReturnPart.model_response_str``), so ``3`` comes back as ``"3"``.
  A tool outcome maps to what the model sees: ``failed``/``retried`` are ``isError: true``,
  ``success``/``denied``/``interrupted`` plain results; a retry for invalid arguments keeps pydantic's
  error details as their JSON text, and an error result holding exactly that text converts back to the
  ``retried`` part (so the details reach the model as structured data again, as pydantic-ai sent them).
  A recorded tool result gets the recorder's own message id (the conversion's id is kept for user and
  assistant messages).
* **Retry feedback stays pydantic-ai's.** A ``RetryFeedbackPart`` (output validation failed, the output
  validator raised ``ModelRetry``, no usable output) is a plugin message (``plugin: "pydantic-ai"``,
  ``form: "retry-feedback/<cause>"``, ``/json`` added when its content is validation error details kept
  as their JSON text), and comes back as the same ``RetryFeedbackPart``, so pydantic-ai frames it for
  the model exactly as it framed the original (as a bare user prompt it would be flagged as user text).
* **Recording happens while the run does.** :func:`run_recorded` (the recommended path) runs the agent
  with its model wrapped and an event stream handler: the wrapper sees each request as pydantic-ai sends
  it (prompt, instructions, tool definitions, model) and writes the step, the prompt and the
  ``request/header`` before it goes out; the handler gets a tool call's event before the body runs (the
  events are an async generator pydantic-ai advances only as the handler pulls) and makes ``tool/call``
  durable then. So a ``kill -9`` anywhere leaves the open turn crash repair closes as it closes the
  agent loop's, ``TOOL_OUTCOME_UNKNOWN`` for a call whose body was running.
* **Recording writes the loop's protocol.** :func:`record_run` turns a run's ``new_messages()`` into one
  turn through :class:`agentlog.interop.recorder.Recorder`, which writes what the agent loop writes: one
  step per model response (the request's user messages, the ``request/header`` and ``request/context``,
  the reply as ``assistant/chunk`` events and the assembled ``assistant/message`` with its usage, then a
  ``tool/call`` and ``tool/result`` per call), so crash repair, ``at(seq)``, replay and forks work on
  it. The header keeps the session's system prompt and tools unless the run brought a new system
  prompt; its route is each response's ``provider_name`` / ``model_name``. The run is converted and
  checked whole first (a refusal appends nothing) and flushed once at the end, when the session is live
  in a store.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Literal

try:
    import pydantic
    import pydantic_core
    from pydantic_ai.messages import (
        ModelMessage,
        ModelRequest,
        ModelRequestPart,
        ModelResponse,
        ModelResponsePart,
        RetryFeedbackPart,
        RetryInfo,
        RetryPromptPart,
        SystemPromptPart,
        TextContent,
        TextPart,
        ThinkingPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
        error_details_ta,
    )
    from pydantic_ai.models import Model, ModelRequestParameters
    from pydantic_ai.models.wrapper import WrapperModel
    from pydantic_ai.settings import ModelSettings
except ImportError as err:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "agentlog.integrations.pydantic_ai needs pydantic-ai; install the extra: pip install 'agentlog[pydantic-ai]'"
    ) from err

from ..errors import ConversionError
from ..interop._common import ImportedConversation  # the converters' result type, shared with them
from ..interop.recorder import RecordedTurn, Recorder
from ..kernel.messages import new_message_id, token_usage
from ..kernel.session import Session
from ..kernel.store import store_of

__all__ = [
    "METADATA_KEY",
    "REPLAY_KEY",
    "ImportedConversation",
    "RecordedAgentRun",
    "RecordedRun",
    "from_model_messages",
    "record_run",
    "run_recorded",
    "session_to_model_messages",
    "to_model_messages",
]

METADATA_KEY = "agentlog"
"""The key of agentlog's entry in ``ModelRequest.metadata`` / ``ModelResponse.metadata``."""
REPLAY_KEY = "pydanticAi"
"""The key under an assistant message's ``source.replayState`` that holds pydantic-ai's per-part extras."""
RETRY_FEEDBACK_PLUGIN = "pydantic-ai"
RETRY_FEEDBACK_FORM = "retry-feedback"
_PART_EXTRAS = ("id", "signature", "provider_name", "provider_details")
_PART_EXTRAS_NO_SIGNATURE = ("id", "provider_name", "provider_details")  # text and tool-call parts
_DEFAULT_PROVIDER = "pydantic-ai"
SystemAs = Literal["part", "instructions"]
"""How :func:`to_model_messages` hands pydantic-ai the system prompt."""
_DEFAULT_MODEL = "unknown"


@dataclass
class RecordedRun:
    """What :func:`record_run` appended: the turn number and the seqs of its first and last event."""

    turn: int
    first_seq: int
    last_seq: int


# --- agentlog -> pydantic-ai ----------------------------------------------------------------------------


def _texts(blocks: Sequence[Any], where: str, index: int, allowed: str) -> list[str]:
    texts: list[str] = []
    for j, block in enumerate(blocks):
        if not isinstance(block, Mapping) or block.get("type") != "text" or not isinstance(block.get("text"), str):
            kind = block.get("type") if isinstance(block, Mapping) else type(block).__name__
            raise ConversionError(
                f"message {index}: a {kind!r} block has no pydantic-ai form in {allowed} (only text blocks map)",
                index=index,
                path=f"{where}[{j}]",
            )
        texts.append(block["text"])
    return texts


def _text_content(texts: list[str]) -> str | list[str]:
    """One text block is a plain string (pydantic-ai's usual form); any other count a list of strings."""
    return texts[0] if len(texts) == 1 else texts


def _plain(value: Any) -> Any:
    """A thawed, plain copy of a (possibly frozen) JSON value, for pydantic-ai's mutable fields."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def to_model_messages(
    messages: Iterable[Mapping[str, Any]], *, system: str | None = None, system_as: SystemAs = "part"
) -> list[ModelMessage]:
    """Render agentlog derived messages as a pydantic-ai history (for ``message_history=``).

    Consecutive user-role messages (prompts, injected context, tool results) form one ``ModelRequest``;
    each assistant message is one ``ModelResponse``. ``system`` becomes a leading ``SystemPromptPart``
    (``system_as="part"``, for an agent built with ``system_prompt=``: pydantic-ai adds no system prompt
    to a given history) or the first request's ``instructions`` (``system_as="instructions"``, for an
    agent built with ``instructions=``: pydantic-ai sends the agent's own instructions, and a
    ``SystemPromptPart`` would be sent beside them). Either form converts back to the same ``system``.
    Raises :class:`ConversionError` naming the message and block that has no pydantic-ai form.
    """
    if system_as not in ("part", "instructions"):
        raise ValueError(f'system_as must be "part" or "instructions", got {system_as!r}')
    out: list[ModelMessage] = []
    parts: list[ModelRequestPart] = []
    entries: list[dict[str, Any] | None] = []
    tool_names: dict[str, str] = {}

    instructions = system if system_as == "instructions" else None

    def close_request(final: bool = False) -> None:
        nonlocal instructions
        if parts or (final and instructions is not None and not out):
            request = ModelRequest(
                parts=list(parts), instructions=instructions, metadata={METADATA_KEY: {"parts": list(entries)}}
            )
            out.append(request)
            instructions = None  # only the first request carries the conversation's system prompt
            parts.clear()
            entries.clear()

    if system is not None and system_as == "part":
        parts.append(SystemPromptPart(system))
        entries.append(None)
    for index, message in enumerate(messages):
        where = f"$[{index}].content"
        if not isinstance(message, Mapping):
            raise ConversionError(f"message {index} is not an agentlog message dict", index=index, path=f"$[{index}]")
        role = message.get("role")
        content = message.get("content")
        source = message.get("source")
        if not isinstance(content, list) or not isinstance(source, Mapping) or not isinstance(message.get("id"), str):
            raise ConversionError(
                f"message {index} is not an agentlog message (id, role, content list and source expected)",
                index=index,
                path=f"$[{index}]",
            )
        if role == "assistant":
            if instructions is not None and not parts:
                close_request(final=True)  # a conversation opening with a reply: the request holds the prompt
            close_request()
            out.append(_response(message, index, tool_names))
        elif role == "user" and source.get("kind") == "tool":
            if len(content) != 1 or not isinstance(content[0], Mapping) or content[0].get("type") != "tool-result":
                raise ConversionError(
                    f"message {index}: a tool message must hold exactly one tool-result block", index=index, path=where
                )
            block = content[0]
            call_id = block.get("toolCallId")
            name = tool_names.get(call_id) if isinstance(call_id, str) else None
            if name is None or not isinstance(call_id, str):
                raise ConversionError(
                    f"message {index}: tool result for call {call_id!r} follows no tool call of that id "
                    "(pydantic-ai needs the tool's name)",
                    index=index,
                    path=f"{where}[0].toolCallId",
                )
            inner = block.get("content")
            if not isinstance(inner, list):
                raise ConversionError(
                    f"message {index}: a tool-result block's content must be a list of blocks",
                    index=index,
                    path=f"{where}[0].content",
                )
            texts = _texts(inner, f"{where}[0].content", index, "a tool result")
            entry: dict[str, Any] = {"id": message["id"], "source": _plain(source)}
            is_error = block.get("isError")
            if is_error is False:
                entry["isError"] = False
            details = _error_details(texts[0]) if is_error is True and len(texts) == 1 else None
            if details is not None:  # argument validation errors: pydantic-ai's retry, sent as structured data
                part: ToolReturnPart[Any] = ToolReturnPart(
                    tool_name=name,
                    content=details,
                    tool_call_id=call_id,
                    outcome="retried",
                    retry=RetryInfo(cause="validation_error"),
                )
            else:
                part = ToolReturnPart(
                    tool_name=name,
                    content=_text_content(texts),
                    tool_call_id=call_id,
                    outcome="failed" if is_error is True else "success",
                )
            parts.append(part)
            entries.append(entry)
        elif role == "user":
            texts = _texts(content, where, index, "a user message")
            feedback = _feedback_part(source, texts)
            parts.append(feedback if feedback is not None else UserPromptPart(_text_content(texts)))
            entries.append({"id": message["id"], "source": _plain(source)})
        else:
            raise ConversionError(
                f"message {index} has role {role!r}; agentlog keeps the system prompt in the request header "
                "(pass it as system=)",
                index=index,
                path=f"$[{index}].role",
            )
    close_request(final=True)
    return out


def _response(message: Mapping[str, Any], index: int, tool_names: dict[str, str]) -> ModelResponse:
    source = message["source"]
    replay = source.get("replayState")
    extras: list[Any] = []
    meta: dict[str, Any] = {"id": message["id"]}
    own = replay.get(REPLAY_KEY) if isinstance(replay, Mapping) and set(replay) == {REPLAY_KEY} else None
    if isinstance(own, Mapping) and isinstance(own.get("parts"), list):
        extras = list(own["parts"])
    elif replay is not None:
        meta["replayState"] = _plain(replay)
    response_parts: list[ModelResponsePart] = []
    for j, block in enumerate(message["content"]):
        kind = block.get("type") if isinstance(block, Mapping) else None
        path = f"$[{index}].content[{j}]"
        extra = _plain(extras[j]) if j < len(extras) and isinstance(extras[j], Mapping) else {}
        allowed = _PART_EXTRAS if kind == "reasoning" else _PART_EXTRAS_NO_SIGNATURE
        unknown = [key for key in extra if key not in allowed]
        if unknown:
            raise ConversionError(
                f"message {index}: replayState[{REPLAY_KEY!r}] gives a {kind!r} block fields pydantic-ai's part "
                f"does not have: {unknown}",
                index=index,
                path=f"$[{index}].source.replayState.{REPLAY_KEY}.parts[{j}]",
            )
        if kind == "text" and isinstance(block.get("text"), str):
            response_parts.append(TextPart(block["text"], **extra))
        elif kind == "reasoning" and isinstance(block.get("text"), str):
            response_parts.append(ThinkingPart(block["text"], **extra))
        elif kind == "tool-call":
            if not all(isinstance(block.get(key), str) for key in ("id", "name", "arguments")):
                raise ConversionError(
                    f"message {index}: a tool-call block needs string id, name and arguments",
                    index=index,
                    path=path,
                )
            tool_names[block["id"]] = block["name"]
            response_parts.append(
                ToolCallPart(tool_name=block["name"], args=block["arguments"], tool_call_id=block["id"], **extra)
            )
        else:
            raise ConversionError(
                f"message {index}: a {kind!r} block has no pydantic-ai form in an assistant message",
                index=index,
                path=path,
            )
    return ModelResponse(
        parts=response_parts,
        model_name=source.get("model"),
        provider_name=source.get("provider"),
        metadata={METADATA_KEY: meta},
    )


def session_to_model_messages(session: Any, *, system_as: SystemAs = "part") -> list[ModelMessage]:
    """A session's (or ``SessionView``'s) derived messages with the system prompt of its request header
    (``system_as`` as in :func:`to_model_messages`: ``"instructions"`` for an agent with ``instructions=``)."""
    header = session.request_header()
    system = header.get("system") if isinstance(header, Mapping) else None
    return to_model_messages(
        session.derive_messages(), system=system if isinstance(system, str) else None, system_as=system_as
    )


# --- pydantic-ai -> agentlog ----------------------------------------------------------------------------


def _is_json(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False
    return True


def _own_entry(metadata: Any) -> Any:
    return metadata.get(METADATA_KEY) if isinstance(metadata, Mapping) else None


def _user_texts(part: UserPromptPart, index: int, path: str) -> list[str]:
    if isinstance(part.content, str):
        return [part.content]
    texts: list[str] = []
    for j, item in enumerate(part.content):
        if isinstance(item, str):
            texts.append(item)
        elif isinstance(item, TextContent) and type(item) is TextContent:
            texts.append(item.content)
        else:
            raise ConversionError(
                f"message {index}: user content of kind {getattr(item, 'kind', type(item).__name__)!r} has no "
                "agentlog form (agentlog images are attachment references; only text maps)",
                index=index,
                path=f"{path}.content[{j}]",
            )
    return texts


def _tool_texts(part: ToolReturnPart, index: int, path: str, ours: bool) -> list[str]:
    """The text blocks of a tool return: the model-facing text, or, for a return
    :func:`to_model_messages` built from several text blocks (``ours``), those blocks again."""
    content = part.content
    if ours and isinstance(content, list) and all(isinstance(item, str) for item in content):
        return list(content)
    if part.outcome == "retried" and isinstance(content, list):
        try:  # validation error details, in the form to_model_messages turns back into them
            return [error_details_ta.dump_json(error_details_ta.validate_python(content)).decode()]
        except (pydantic.ValidationError, pydantic_core.PydanticSerializationError):
            pass
    if part.files:
        raise ConversionError(
            f"message {index}: tool return {part.tool_call_id!r} carries files, which have no agentlog form",
            index=index,
            path=f"{path}.content",
        )
    return [part.model_response_str(wrap_if_error=False)]


def _split_system(model_messages: Sequence[Any]) -> tuple[str | None, int]:
    """The conversation's system prompt and how many leading parts of the first request it used."""
    first = model_messages[0] if model_messages else None
    if not isinstance(first, ModelRequest):
        return None, 0
    leading = 0
    for part in first.parts:
        if not isinstance(part, SystemPromptPart):
            break
        leading += 1
    if leading > 1:
        raise ConversionError(
            "message 0 opens with several system prompts; agentlog keeps one system prompt (join them)",
            index=0,
            path="$[0].parts[1]",
        )
    if leading == 1:
        part = first.parts[0]
        assert isinstance(part, SystemPromptPart)
        if part.scope != "conversation" or part.context_id is not None:
            raise ConversionError(
                "message 0: a request-scoped or context-id system prompt has no agentlog form",
                index=0,
                path="$[0].parts[0]",
            )
        if first.instructions:
            raise ConversionError(
                "message 0 has both a system prompt part and instructions; agentlog keeps one system prompt",
                index=0,
                path="$[0].instructions",
            )
        return part.content, 1
    return first.instructions, 0


def from_model_messages(model_messages: Sequence[ModelMessage]) -> ImportedConversation:
    """Turn a pydantic-ai history (``result.all_messages()`` or ``new_messages()``) into agentlog messages.

    The first request's leading system prompt (or its ``instructions``) becomes ``system``; each user
    prompt, retry feedback and tool return becomes one agentlog message; each response one assistant
    message. Raises :class:`ConversionError` naming the message and part that has no agentlog form.
    """
    return _from_model_messages(model_messages, check_instructions=True)


def _from_model_messages(model_messages: Sequence[ModelMessage], *, check_instructions: bool) -> ImportedConversation:
    system, skip = _split_system(model_messages)
    out: list[dict[str, Any]] = []
    for index, message in enumerate(model_messages):
        if isinstance(message, ModelRequest):
            if check_instructions and index > 0 and message.instructions not in (None, system):
                raise ConversionError(
                    f"message {index}: its instructions differ from the conversation's system prompt; agentlog "
                    "messages hold one system prompt (record_run keeps each request's in the request header)",
                    index=index,
                    path=f"$[{index}].instructions",
                )
            own = _own_entry(message.metadata)
            entries = own.get("parts") if isinstance(own, Mapping) else None
            for j, part in enumerate(message.parts):
                if index == 0 and j < skip:
                    continue
                entry = entries[j] if isinstance(entries, list) and j < len(entries) else None
                out.append(_request_part(part, entry if isinstance(entry, Mapping) else None, index, j))
        elif isinstance(message, ModelResponse):
            out.append(_response_message(message, index))
        else:
            raise ConversionError(
                f"message {index} is a {type(message).__name__}, not a ModelRequest or ModelResponse",
                index=index,
                path=f"$[{index}]",
            )
    return ImportedConversation(system=system, messages=out)


def _request_part(part: Any, entry: Mapping[str, Any] | None, index: int, j: int) -> dict[str, Any]:
    path = f"$[{index}].parts[{j}]"
    if entry is not None and isinstance(part, (UserPromptPart, ToolReturnPart)):
        # An entry is trusted only for the part it was written for (a history processor may have moved parts).
        entry_source = entry.get("source")
        is_tool_entry = isinstance(entry_source, Mapping) and entry_source.get("kind") == "tool"
        call_id = part.tool_call_id if isinstance(part, ToolReturnPart) else None
        if (call_id is not None) != is_tool_entry or (
            is_tool_entry and isinstance(entry_source, Mapping) and entry_source.get("callId") != call_id
        ):
            entry = None
    own_id = entry.get("id") if entry is not None else None
    message_id: str = own_id if isinstance(own_id, str) and own_id else new_message_id()
    source = entry.get("source") if entry is not None and isinstance(entry.get("source"), Mapping) else None
    if type(part) is UserPromptPart:
        texts = _user_texts(part, index, path)
        if source is None or source.get("kind") == "tool":  # no entry, or one that belongs to another part
            source = {"kind": "user"}
        return {  # the original's message factories' key order: content, source, role, id
            "content": [{"type": "text", "text": t} for t in texts],
            "source": _plain(source),
            "role": "user",
            "id": message_id,
        }
    if type(part) is ToolReturnPart:
        if part.tool_kind is not None:
            raise ConversionError(
                f"message {index}: tool return of kind {part.tool_kind!r} has no agentlog form", index=index, path=path
            )
        block: dict[str, Any] = {
            "type": "tool-result",
            "toolCallId": part.tool_call_id,
            "content": [{"type": "text", "text": t} for t in _tool_texts(part, index, path, entry is not None)],
        }
        if part.outcome in ("failed", "retried"):
            block["isError"] = True
        elif entry is not None and entry.get("isError") is False:
            block["isError"] = False
        return {
            "source": {"kind": "tool", "callId": part.tool_call_id},
            "content": [block],
            "role": "user",
            "id": message_id,
        }
    if isinstance(part, RetryPromptPart):  # deprecated in 2.x; still found in histories built by hand
        if part.tool_name is not None:  # pydantic-ai reads it as the call's ToolReturnPart(outcome="retried")
            return {
                "source": {"kind": "tool", "callId": part.tool_call_id},
                "content": [
                    {
                        "type": "tool-result",
                        "toolCallId": part.tool_call_id,
                        "content": [{"type": "text", "text": _json_text(part.content, index, path)}],
                        "isError": True,
                    }
                ],
                "role": "user",
                "id": message_id,
            }
        cause = "model_retry" if isinstance(part.content, str) else "validation_error"
        return _feedback(message_id, part.content, cause, index, path)
    if type(part) is RetryFeedbackPart:
        return _feedback(message_id, part.content, part.retry.cause, index, path)
    if isinstance(part, SystemPromptPart):
        raise ConversionError(
            f"message {index}: a system prompt after the conversation's start has no agentlog form "
            "(agentlog keeps one system prompt, in the request header)",
            index=index,
            path=path,
        )
    raise ConversionError(
        f"message {index}: request part {getattr(part, 'part_kind', type(part).__name__)!r} has no agentlog form",
        index=index,
        path=path,
    )


def _json_text(content: Any, index: int, path: str) -> str:
    """Retry content as text: a string as is, validation error details as their JSON text."""
    if isinstance(content, str):
        return content
    try:
        return error_details_ta.dump_json(error_details_ta.validate_python(content)).decode()
    except (TypeError, ValueError, pydantic_core.PydanticSerializationError) as err:  # ValidationError too
        raise ConversionError(
            f"message {index}: retry details are not JSON: {err}", index=index, path=f"{path}.content"
        ) from None


def _feedback(message_id: str, content: Any, cause: str, index: int, path: str) -> dict[str, Any]:
    """Retry feedback that answers no tool call: injected context (a plugin message) whose ``form``
    names the cause (``retry-feedback/<cause>``, plus ``/json`` for error details kept as JSON text), so
    :func:`to_model_messages` rebuilds the ``RetryFeedbackPart`` pydantic-ai frames for the model."""
    form = f"{RETRY_FEEDBACK_FORM}/{cause}" + ("" if isinstance(content, str) else "/json")
    return {
        "content": [{"type": "text", "text": _json_text(content, index, path)}],
        "source": {"kind": "plugin", "plugin": RETRY_FEEDBACK_PLUGIN, "form": form},
        "role": "user",
        "id": message_id,
    }


def _error_details(text: str) -> list[Any] | None:
    """Validation error details from their JSON text, or None: only pydantic's own details, in exactly
    the JSON form :func:`from_model_messages` writes them in, count (anything else stays text)."""
    if not text.startswith("["):
        return None
    try:
        details: list[Any] = error_details_ta.validate_python(json.loads(text))  # loc becomes a tuple
        canonical = error_details_ta.dump_json(details)
    except (ValueError, pydantic.ValidationError, pydantic_core.PydanticSerializationError):
        return None
    return details if canonical == text.encode() else None


def _feedback_part(source: Mapping[str, Any], texts: list[str]) -> RetryFeedbackPart | None:
    """The ``RetryFeedbackPart`` a retry-feedback plugin message came from, or None for any other message."""
    form = source.get("form")
    if source.get("kind") != "plugin" or source.get("plugin") != RETRY_FEEDBACK_PLUGIN or not isinstance(form, str):
        return None
    pieces = form.split("/")
    if pieces[0] != RETRY_FEEDBACK_FORM or len(pieces) not in (2, 3) or len(texts) != 1:
        return None
    cause = pieces[1]
    if cause not in ("validation_error", "no_output", "model_retry") or pieces[2:] not in ([], ["json"]):
        return None
    content: Any = texts[0]
    if pieces[2:] == ["json"]:
        content = _error_details(texts[0])
        if content is None:
            return None
    return RetryFeedbackPart(content=content, retry=RetryInfo(cause=cause))  # type: ignore[arg-type]


def _response_message(message: ModelResponse, index: int) -> dict[str, Any]:
    own = _own_entry(message.metadata)
    own = own if isinstance(own, Mapping) else {}
    blocks: list[dict[str, Any]] = []
    extras: list[dict[str, Any] | None] = []
    for j, part in enumerate(message.parts):
        path = f"$[{index}].parts[{j}]"
        if type(part) is TextPart:
            if part.citations:
                raise ConversionError(
                    f"message {index}: text with citations has no agentlog form", index=index, path=path
                )
            blocks.append({"type": "text", "text": part.content})
        elif type(part) is ThinkingPart:
            blocks.append({"type": "reasoning", "text": part.content})
        elif type(part) is ToolCallPart and part.tool_kind is None:
            args = part.args
            if isinstance(args, str):
                arguments = args
            elif args is None:
                arguments = "{}"
            else:
                arguments = pydantic_core.to_json(args).decode()
            blocks.append(
                {"type": "tool-call", "id": part.tool_call_id, "name": part.tool_name, "arguments": arguments}
            )
        else:
            raise ConversionError(
                f"message {index}: response part {getattr(part, 'part_kind', type(part).__name__)!r} has no "
                "agentlog form (text, thinking and function tool calls map)",
                index=index,
                path=path,
            )
        extra = {name: getattr(part, name) for name in _PART_EXTRAS if getattr(part, name, None) is not None}
        if extra and not _is_json(extra):
            raise ConversionError(
                f"message {index}: the part's provider data is not plain JSON", index=index, path=f"{path}"
            )
        extras.append(extra or None)
    source: dict[str, Any] = {
        "kind": "model",
        "provider": message.provider_name or _DEFAULT_PROVIDER,
        "model": message.model_name or _DEFAULT_MODEL,
    }
    if any(extras):
        source["replayState"] = {REPLAY_KEY: {"parts": extras}}
    elif "replayState" in own:
        source["replayState"] = _plain(own["replayState"])
    message_id = own.get("id") if isinstance(own.get("id"), str) else new_message_id()
    return {"role": "assistant", "content": blocks, "source": source, "id": message_id}


# --- recording a run ------------------------------------------------------------------------------------


def _usage(response: ModelResponse) -> Any:
    usage = response.usage
    if not (usage.input_tokens or usage.output_tokens):
        return None
    cache_read = usage.cache_read_tokens or 0
    return token_usage(
        max(usage.input_tokens - cache_read, 0),
        usage.output_tokens,
        cache_read_tokens=cache_read or None,
        cache_write_tokens=usage.cache_write_tokens or None,
    )


def record_run(session: Session, result: Any) -> RecordedRun:
    """Record a pydantic-ai run's ``new_messages()`` as one agentlog turn (see the module docstring).

    ``result`` is an ``AgentRunResult`` (or anything with ``new_messages()``). The whole run is
    converted and checked before the first append: a run that cannot be represented (a part with no
    agentlog form, a tool call left unanswered, a tool return for a call the run never made) raises
    :class:`ConversionError` and appends nothing; a session that ends inside an open turn is refused by
    the recorder (:class:`~agentlog.errors.RecorderStateError`), also before any append.
    """
    model_messages = list(result.new_messages())
    converted = _from_model_messages(model_messages, check_instructions=False)  # per-step: the header
    # Re-walk the converted messages per source message to group them into steps.
    per_message: list[list[dict[str, Any]]] = []
    cursor = 0
    system, skip = _split_system(model_messages)
    for index, message in enumerate(model_messages):
        count = len(message.parts) - (skip if index == 0 else 0) if isinstance(message, ModelRequest) else 1
        per_message.append(converted.messages[cursor : cursor + count])
        cursor += count

    steps: list[tuple[list[dict[str, Any]], dict[str, Any], ModelResponse, int, str | None]] = []
    pending_users: list[dict[str, Any]] = []
    instructions: str | None = None
    results: dict[str, dict[str, Any]] = {}
    result_owner: dict[str, int] = {}
    for index, message in enumerate(model_messages):
        if isinstance(message, ModelRequest):
            instructions = message.instructions if message.instructions is not None else instructions
            for item in per_message[index]:
                if item["source"].get("kind") == "tool":
                    call_id = item["source"]["callId"]
                    results[call_id] = item
                    result_owner[call_id] = index
                else:
                    pending_users.append(item)
        else:
            assert isinstance(message, ModelResponse)
            steps.append((pending_users, per_message[index][0], message, index, instructions))
            pending_users = []
    if not steps:
        raise ConversionError("the run has no model response to record", index=None, path="$")
    if pending_users:
        raise ConversionError(
            "the run ends with user input no model response answers; record complete runs only",
            index=len(model_messages) - 1,
            path=f"$[{len(model_messages) - 1}]",
        )
    called: set[str] = set()
    for _, assistant, _, response_index, _ in steps:
        if not assistant["content"]:
            raise ConversionError(
                f"message {response_index}: a model response with no parts has no agentlog form "
                "(a recorded reply needs text, reasoning or a tool call)",
                index=response_index,
                path=f"$[{response_index}].parts",
            )
        for j, block in enumerate(assistant["content"]):
            if block["type"] == "tool-call":
                if block["id"] in called:
                    raise ConversionError(
                        f"tool call id {block['id']!r} is used twice in the run",
                        index=response_index,
                        path=f"$[{response_index}].parts[{j}]",
                    )
                called.add(block["id"])
                if block["id"] not in results:
                    raise ConversionError(
                        f"tool call {block['id']!r} ({block['name']}) has no tool return in the run "
                        "(a deferred call cannot be recorded as a finished turn)",
                        index=response_index,
                        path=f"$[{response_index}].parts[{j}]",
                    )
    for call_id, owner in result_owner.items():
        if call_id not in called:
            raise ConversionError(
                f"tool return for call {call_id!r} answers no tool call of this run",
                index=owner,
                path=f"$[{owner}]",
            )

    current = session.request_header()
    current = current if isinstance(current, Mapping) else {}
    base = system if skip == 1 else None  # the run's own system prompt part
    if base is None and isinstance(current.get("system"), str):
        base = current["system"]  # a run continuing a history: the session's prompt still holds
    tools = _plain(current.get("tools")) or None

    def route(response: ModelResponse | None) -> tuple[str, str]:
        """The response's provider and model (the assistant message's source and the header's config)."""
        provider = (response.provider_name if response else None) or _DEFAULT_PROVIDER
        return provider, (response.model_name if response else None) or _DEFAULT_MODEL

    # The recorder writes the loop's protocol; durability is one flush at the end (the run already
    # happened, so there is no model call or tool body for a barrier to precede).
    # A request's instructions are the system prompt the model saw for it; each goes into the header.
    provider, model = route(steps[0][2])
    first_system = steps[0][4] if steps[0][4] is not None else base
    recorder = Recorder(session, provider=provider, model=model, system=first_system, tools=tools, flush=False)
    first_seq = session.seq
    with recorder.turn(steps[0][0]) as turn:
        for step, (users, assistant, response, _, step_instructions) in enumerate(steps, start=1):
            if step > 1:
                provider, model = route(response)
                step_system = step_instructions if step_instructions is not None else base
                recorder.configure(provider=provider, model=model, system=step_system)
                for user in users:
                    turn.user(user)
            turn.assistant(
                content=assistant["content"],
                usage=_usage(response),
                replay_state=assistant["source"].get("replayState"),
                id=assistant["id"],
            )
            for block in assistant["content"]:
                if block["type"] == "tool-call":
                    answer = results[block["id"]]["content"][0]
                    turn.tool_result(block["id"], list(answer["content"]), is_error=answer.get("isError"))
    live = store_of(session)
    if live is not None:
        live.flush(session)
    return RecordedRun(turn=turn.number, first_seq=first_seq, last_seq=session.seq - 1)


# --- recording a run as it happens ----------------------------------------------------------------------


@dataclass
class RecordedAgentRun:
    """What :func:`run_recorded` returns: pydantic-ai's own result and where the turn sits in the log."""

    result: Any
    """The ``AgentRunResult`` ``agent.run`` returned."""
    turn: int
    first_seq: int
    last_seq: int


EventStreamHandler = Callable[[Any, AsyncIterable[Any]], Awaitable[None]]


class _LiveRecording:
    """The state shared by the model wrapper and the event stream handler of one recorded run.

    pydantic-ai gives two places to stand: the model (it sees every request exactly as it is sent,
    instructions and tool definitions included, and every reply) and the event stream (a tool call's
    event reaches the handler before the tool's body runs, because the stream is an async generator the
    handler pulls). Both feed one :class:`RecordedTurn`, so the turn is the loop's: the step and the
    prompt before the request, the reply when it arrives, ``tool/call`` (flushed) before each body,
    ``tool/result`` as it comes back.
    """

    def __init__(self, session: Session) -> None:
        self.session = session
        self.recorder: Recorder | None = None
        self.turn: RecordedTurn | None = None
        self.first_seq = session.seq
        self.answered: set[str] = set()
        self.responses = 0

    # -- the model's side ----------------------------------------------------------------------------
    def before_request(self, model: Model, messages: Sequence[ModelMessage], params: ModelRequestParameters) -> None:
        last = messages[-1] if messages else None
        if not isinstance(last, ModelRequest):
            raise ConversionError("the model was called without a request to answer", index=None, path="$")
        index = len(messages) - 1
        base, skip = _split_system(messages)
        if base is None:
            current = self.session.request_header()
            base = current.get("system") if isinstance(current, Mapping) else None
        system = last.instructions if last.instructions is not None else base
        tools = [
            {"name": t.name, "description": t.description or "", "parameters": _plain(t.parameters_json_schema)}
            for t in (*params.function_tools, *params.output_tools)
        ]
        provider, model_name = model.system or _DEFAULT_PROVIDER, model.model_name or _DEFAULT_MODEL
        users: list[dict[str, Any]] = []
        returns: list[dict[str, Any]] = []
        for j, part in enumerate(last.parts):
            if index == 0 and j < skip:
                continue  # the conversation's system prompt: it goes into the header
            if isinstance(part, ToolReturnPart) and part.tool_call_id in self.answered:
                continue  # recorded when the tool's result event came
            converted = _request_part(part, None, index, j)
            (returns if converted["source"].get("kind") == "tool" else users).append(converted)
        if self.turn is None:
            if returns:
                raise ConversionError(
                    f"tool return for call {returns[0]['source']['callId']!r} answers no tool call of this run",
                    index=index,
                    path=f"$[{index}]",
                )
            self.recorder = Recorder(
                self.session, provider=provider, model=model_name, system=system, tools=tools or None
            )
            self.first_seq = self.session.seq
            turn = self.recorder.turn(users)
            turn.__enter__()  # turn/start, step/start, the prompt, the header; flushed before the request
            self.turn = turn
            return
        assert self.recorder is not None
        for message in returns:  # a return no result event announced (a call pydantic-ai settled itself)
            self._result(message)
        self.recorder.configure(provider=provider, model=model_name, system=system, tools=tools or None)
        if users:
            for message in users:
                self.turn.user(message)
        else:
            self.turn.step_boundary()

    def after_response(self, response: ModelResponse) -> None:
        if self.turn is None:
            return
        self.responses += 1
        message = _response_message(response, self.responses)
        if not message["content"]:
            return  # pydantic-ai asks again; the next request is recorded in the same step
        self.turn.assistant(
            content=message["content"],
            usage=_usage(response),
            replay_state=message["source"].get("replayState"),
            id=message["id"],
        )

    # -- the tools' side ---------------------------------------------------------------------------------
    def on_event(self, event: Any) -> None:
        turn = self.turn
        if turn is None or turn.closed:
            return
        kind = getattr(event, "event_kind", None)
        if kind in ("function_tool_call", "output_tool_call"):
            call_id = event.part.tool_call_id
            if call_id in turn.open_calls and call_id not in self.answered:
                turn.tool_call(call_id)  # durable before pydantic-ai pulls the stream on into the body
        elif kind in ("function_tool_result", "output_tool_result") and isinstance(event.part, ToolReturnPart):
            if event.part.tool_call_id in turn.open_calls:
                self._result(_request_part(event.part, None, self.responses, 0))

    def _result(self, message: Mapping[str, Any]) -> None:
        assert self.turn is not None
        block = message["content"][0]
        call_id = block["toolCallId"]
        if call_id not in self.turn.open_calls:
            raise ConversionError(
                f"tool return for call {call_id!r} answers no open tool call of this run", index=None, path="$"
            )
        self.turn.tool_result(call_id, list(block["content"]), is_error=block.get("isError"))
        self.answered.add(call_id)

    def settle(self, result: Any) -> None:
        """Results only the finished run shows (an output tool's return, a call skipped after the final
        result): recorded from ``new_messages()`` so the turn closes with every call answered."""
        turn = self.turn
        if turn is None or not turn.open_calls:
            return
        for index, message in enumerate(result.new_messages()):
            if not isinstance(message, ModelRequest):
                continue
            for j, part in enumerate(message.parts):
                if isinstance(part, ToolReturnPart) and part.tool_call_id in turn.open_calls:
                    self._result(_request_part(part, None, index, j))


class _RecordingModel(WrapperModel):
    """The agent's model, seen through the recording: each request is recorded before it is sent."""

    def __init__(self, wrapped: Model | str, recording: _LiveRecording) -> None:
        super().__init__(wrapped)
        self._recording = recording

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        self._recording.before_request(self.wrapped, messages, model_request_parameters)
        response = await super().request(messages, model_settings, model_request_parameters)
        self._recording.after_response(response)
        return response

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: Any = None,
    ) -> AsyncIterator[Any]:
        self._recording.before_request(self.wrapped, messages, model_request_parameters)
        async with super().request_stream(messages, model_settings, model_request_parameters, run_context) as stream:
            yield stream
            response = stream.get()  # the consumer drained it: the whole reply
        self._recording.after_response(response)


async def run_recorded(
    session: Session,
    agent: Any,
    user_prompt: Any = None,
    *,
    event_stream_handler: EventStreamHandler | None = None,
    **run_kwargs: Any,
) -> RecordedAgentRun:
    """Run ``agent.run(user_prompt, **run_kwargs)`` and record it as one turn while it happens.

    The recommended way to record a pydantic-ai agent: unlike :func:`record_run`, which writes a run
    after it finished, this writes the loop's protocol as the run goes — the step, the prompt and the
    ``request/header`` (the system prompt or instructions, the tool definitions and the model that
    pydantic-ai sends) before each model request, the reply as it arrives, each ``tool/call`` before the
    tool's body runs and each ``tool/result`` when it comes back, flushed at the loop's barriers when
    the session is live in a store. A process killed mid-tool leaves an open turn that crash repair
    (``coordinator.resume``) closes with a ``TOOL_OUTCOME_UNKNOWN`` result, as it closes the loop's.

    The run is driven with an event stream handler (pydantic-ai then streams the model's replies); an
    ``event_stream_handler`` of your own still sees every event. ``model=`` in ``run_kwargs`` picks the
    model as ``agent.run`` does. A run that raises ends the turn as the loop would (``error``, or
    ``aborted`` on a cancellation) and the exception goes on; a part with no agentlog form raises
    :class:`ConversionError` inside the run, which ends it.
    """
    recording = _LiveRecording(session)
    chosen = run_kwargs.pop("model", None) or getattr(agent, "model", None)
    if chosen is None:
        raise ConversionError(
            "run_recorded needs the agent's model: give the agent one or pass model=", index=None, path="$"
        )

    async def handler(ctx: Any, events: AsyncIterable[Any]) -> None:
        async def recorded() -> AsyncIterator[Any]:
            async for event in events:
                recording.on_event(event)
                yield event

        stream = recorded()
        if event_stream_handler is not None:
            await event_stream_handler(ctx, stream)
        async for _ in stream:  # what the caller's handler left: still recorded, in order
            pass

    try:
        result = await agent.run(
            user_prompt,
            model=_RecordingModel(chosen, recording),
            event_stream_handler=handler,
            **run_kwargs,
        )
        recording.settle(result)
    except BaseException:
        if recording.turn is not None:
            recording.turn.__exit__(*sys.exc_info())
        raise
    turn = recording.turn
    if turn is None:
        raise ConversionError("the run made no model request: there is no turn to record", index=None, path="$")
    turn.__exit__(None, None, None)
    return RecordedAgentRun(result=result, turn=turn.number, first_seq=recording.first_seq, last_seq=session.seq - 1)
