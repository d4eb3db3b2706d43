"""The stored events of a session as OpenTelemetry GenAI span descriptions (pure: no OpenTelemetry import).

One mapping serves the live exporter (a store listener feeds each committed event) and the offline one
(a stored log replayed), so both describe the same spans with the same ids:

- ``invoke_agent {agent}`` per turn (``turn/start`` .. ``turn/end``), ``chat {model}`` per model request
  (``step/start``, or the step's first chunk when a log has no step events, .. ``assistant/message``),
  ``execute_tool {tool}`` per tool call (``tool/call`` .. ``tool/result``);
- times are the log's (``time`` is milliseconds since the epoch), never the exporter's clock;
- ids are derived from ``(session id, seq)`` of the span's opening event (:func:`span_id_of`), so a
  session exported twice, or live and then offline, yields the same ids and a backend deduplicates;
- the trace is one *turn of the root session* (:func:`trace_id_of` its ``turn/start``): a subagent's
  turn joins the trace of the delegating turn, under the parent's ``execute_tool`` span. A child's turn
  is therefore held until the parent's ``tool/result`` names it (``meta.subagent``: the child's session
  and the seq of its ``turn/start``); :meth:`SpanMapper.drain` gives up waiting and describes still
  unresolved child turns as traces of their own (a parent outside the store, or never answered).

Message content (prompts, answers, tool arguments and results) never enters a description unless the
mapper is built with ``capture`` on; by default a chat span *references* its input instead
(``gen_ai.input.messages.ref = agentlog://<session>/<seq>``: the derived messages at that seq, the last
one before the response began, are what the model was sent). Usage is counted once: per request on
``chat`` spans (``gen_ai.usage.*``); the turn's and the session's running totals sit on ``invoke_agent``
under ``agentlog.usage.*``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from ..kernel.events import (
    ASSISTANT_CHUNK,
    ASSISTANT_MESSAGE,
    REQUEST_CONTEXT,
    REQUEST_HEADER,
    STEP_START,
    SUBAGENT_DESCRIPTOR,
    TOOL_CALL,
    TOOL_RESULT,
    TURN_END,
    TURN_START,
)

__all__ = [
    "CAPTURE_ENV",
    "CaptureMode",
    "SpanDescription",
    "SpanEventDescription",
    "SpanMapper",
    "capture_mode_from_env",
    "content_ref",
    "span_id_of",
    "trace_id_of",
]

AttributeValue = str | bool | int | float | Sequence[str]

CAPTURE_ENV: Final = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
"""The instrumentation-wide switch for content capture; unset, empty, ``false`` or an unknown value is off."""

CaptureMode = Literal["off", "span_only", "event_only", "span_and_event"]

DETAILS_EVENT: Final = "gen_ai.client.inference.operation.details"
"""The span event that carries content in ``event_only`` / ``span_and_event`` mode."""

# The spec's wire finish reasons in the GenAI vocabulary.
_FINISH: Final[dict[str, str]] = {
    "stop": "stop",
    "tool-calls": "tool_call",
    "max-tokens": "length",
    "error": "error",
    "aborted": "error",
}
# agentlog's provider routes in the GenAI provider vocabulary (others pass through as they are).
_PROVIDERS: Final = ("deepseek", "openai", "anthropic", "azure.ai.openai", "mistral_ai", "groq", "x_ai", "cohere")
_USAGE_KEYS: Final = (
    ("inputTokens", "input_tokens"),
    ("outputTokens", "output_tokens"),
    ("cacheReadTokens", "cache_read.input_tokens"),
    ("cacheWriteTokens", "cache_creation.input_tokens"),
    ("reasoningTokens", "reasoning.output_tokens"),
)
SPAN_EVENT_TYPES: Final = frozenset(
    {
        TURN_START,
        TURN_END,
        STEP_START,
        ASSISTANT_CHUNK,
        ASSISTANT_MESSAGE,
        TOOL_CALL,
        TOOL_RESULT,
        REQUEST_HEADER,
        REQUEST_CONTEXT,
        SUBAGENT_DESCRIPTOR,
    }
)
"""The event types the mapping reads; a listener may drop every other type before calling :meth:`SpanMapper.feed`."""


def capture_mode_from_env(environ: Mapping[str, str]) -> CaptureMode:
    """The capture mode the environment asks for: content stays off unless a known mode is named."""
    value = environ.get(CAPTURE_ENV, "").strip().lower()
    if value in ("span_only", "event_only", "span_and_event"):
        return value  # type: ignore[return-value]
    return "off"


def _digest(kind: str, session_id: str, seq: int, size: int) -> int:
    raw = hashlib.blake2b(f"agentlog/{kind}\0{session_id}\0{seq}".encode(), digest_size=size).digest()
    value = int.from_bytes(raw, "big")
    return value or 1  # an all-zero id is invalid in OpenTelemetry


def trace_id_of(session_id: str, turn_start_seq: int) -> int:
    """The 128-bit trace id of the turn of ``session_id`` opened at ``turn_start_seq``."""
    return _digest("trace", session_id, turn_start_seq, 16)


def span_id_of(session_id: str, seq: int) -> int:
    """The 64-bit span id of the span opened by event ``seq`` of ``session_id``."""
    return _digest("span", session_id, seq, 8)


def content_ref(session_id: str, seq: int) -> str:
    """Where a span's content lives in the log: ``agentlog://<session>/<seq>``."""
    return f"agentlog://{session_id}/{seq}"


@dataclass(frozen=True, slots=True)
class SpanEventDescription:
    name: str
    time_ns: int
    attributes: dict[str, AttributeValue]


@dataclass(slots=True)
class SpanDescription:
    """One finished span. ``start_attributes`` are known when the span opens (samplers see them);
    ``attributes`` are everything else, set before it ends."""

    name: str
    kind: Literal["internal", "client"]
    session_id: str
    trace_id: int
    span_id: int
    parent_span_id: int | None
    start_ns: int
    end_ns: int
    start_attributes: dict[str, AttributeValue]
    attributes: dict[str, AttributeValue] = field(default_factory=dict)
    error_type: str | None = None
    events: list[SpanEventDescription] = field(default_factory=list)

    def all_attributes(self) -> dict[str, AttributeValue]:
        return {**self.start_attributes, **self.attributes}


# --- content, only when capture is on -------------------------------------------------------------------


def _parts(content: Iterable[Any], redact: Callable[[str], str]) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    for block in content:
        if not isinstance(block, Mapping):
            continue
        kind = block.get("type")
        if kind == "text":
            parts.append({"type": "text", "content": redact(str(block.get("text", "")))})
        elif kind == "reasoning":
            parts.append({"type": "reasoning", "content": redact(str(block.get("text", "")))})
        elif kind == "tool-call":
            parts.append(
                {
                    "type": "tool_call",
                    "id": block.get("id"),
                    "name": block.get("name"),
                    "arguments": redact(str(block.get("arguments", ""))),
                }
            )
        elif kind == "tool-result":
            parts.append(
                {
                    "type": "tool_call_response",
                    "id": block.get("toolCallId"),
                    "response": redact(_text_of(block.get("content", ()))),
                }
            )
        elif kind == "image":
            attachment = block.get("attachment")
            media = attachment.get("mediaType") if isinstance(attachment, Mapping) else None
            parts.append({"type": "blob", "modality": "image", "mime_type": media, "content": ""})
    return parts


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    texts = [str(b.get("text", "")) for b in content if isinstance(b, Mapping) and b.get("type") == "text"]
    return "\n".join(texts)


def input_messages(messages: Iterable[Any], redact: Callable[[str], str]) -> list[dict[str, Any]]:
    """Derived messages in the GenAI input-message schema (``role`` + ``parts``)."""
    result: list[dict[str, Any]] = []
    for message in messages:
        if not isinstance(message, Mapping):
            continue
        content = message.get("content", ())
        role = message.get("role", "user")
        source = message.get("source")
        if isinstance(source, Mapping) and source.get("kind") == "tool":
            role = "tool"
        result.append({"role": role, "parts": _parts(content, redact)})
    return result


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


# --- the mapping ----------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Chat:
    span_id: int
    seq: int
    time: int
    turn: int
    step: int
    first_chunk_time: int | None = None
    first_chunk_seq: int | None = None
    finish: str | None = None

    def sent_at(self, end_seq: int) -> int:
        """The last seq before the response began: the surface there is what the model was sent."""
        return (self.first_chunk_seq if self.first_chunk_seq is not None else end_seq) - 1


@dataclass(slots=True)
class _Tool:
    span_id: int
    seq: int
    time: int
    name: str
    arguments: str


@dataclass(slots=True)
class _Turn:
    key: tuple[str, int]
    turn: int
    seq: int
    time: int
    span_id: int
    usage: dict[str, int] = field(default_factory=dict)
    spans: list[SpanDescription] = field(default_factory=list)
    """A child's spans of this turn, held until the turn's trace is known."""
    done: bool = False


@dataclass(slots=True)
class _Session:
    id: str
    parent_id: str | None
    first_live_seq: int
    provider: str | None = None
    model: str | None = None
    system: str | None = None
    agent_name: str | None = None
    turn: _Turn | None = None
    chats: dict[tuple[int, int], _Chat] = field(default_factory=dict)
    tools: dict[str, _Tool] = field(default_factory=dict)
    usage: dict[str, int] = field(default_factory=dict)
    held: dict[int, _Turn] = field(default_factory=dict)
    """A child's turns by ``turn/start`` seq whose trace is not yet known."""
    disposed: bool = False
    trace_keys: list[tuple[str, int]] = field(default_factory=list)
    """The turns whose trace this mapper remembers (for the subagents they delegate to)."""


def _provider_name(route: str | None) -> str | None:
    if route is None:
        return None
    for known in _PROVIDERS:
        if route == known or route.startswith((known + "-", known + "_", known + ".")):
            return known
    return route


class SpanMapper:
    """Turns committed events of any number of sessions into finished :class:`SpanDescription` values.

    Feed each session's header once (:meth:`add_session`) and then its events in seq order
    (:meth:`feed`); a child session's events may interleave with its parent's, as they do live.
    ``messages_at(session_id, seq)`` returns the derived messages the model was sent by the request
    opened at ``seq``; it is called only when ``capture`` is on.
    """

    def __init__(
        self,
        *,
        capture: CaptureMode = "off",
        redact: Callable[[str], str] | None = None,
        agent_name: str = "agentlog",
        messages_at: Callable[[str, int], Iterable[Any]] | None = None,
    ) -> None:
        self.capture = capture
        self.redact: Callable[[str], str] = redact if redact is not None else _identity
        self.agent_name = agent_name
        self.messages_at = messages_at
        self._on_span = capture in ("span_only", "span_and_event")
        self._on_event = capture in ("event_only", "span_and_event")
        self._sessions: dict[str, _Session] = {}
        # Child turn (child id, its turn/start seq) -> the parent's (turn key, tool span id).
        self._delegations: dict[tuple[str, int], tuple[tuple[str, int], int]] = {}
        # Turn key -> its trace id, once known (a root turn's at its start; a child's once resolved).
        self._traces: dict[tuple[str, int], int] = {}
        # Parent turn key -> child turn keys waiting for that turn's trace.
        self._waiting: dict[tuple[str, int], list[tuple[str, int]]] = {}

    # -- sessions ----------------------------------------------------------------------------------------
    def add_session(self, session_id: str, header: Mapping[str, Any], first_live_seq: int = 0) -> None:
        """Announce a session (idempotent); events before ``first_live_seq`` (a fork seed) only set state."""
        if session_id in self._sessions:
            return
        parent = header.get("parentSession") if header.get("origin") == "subagent" else None
        self._sessions[session_id] = _Session(session_id, parent if isinstance(parent, str) else None, first_live_seq)

    def forget(self, session_id: str) -> None:
        """Drop a disposed session's state (a child's turns still held stay until resolved or drained), so a
        long-lived exporter keeps nothing per finished session."""
        state = self._sessions.get(session_id)
        if state is None:
            return
        if state.held:
            state.disposed = True  # forgotten once its last held turn is released
            return
        del self._sessions[session_id]
        for key in state.trace_keys:
            self._traces.pop(key, None)

    def has_session(self, session_id: str) -> bool:
        return session_id in self._sessions

    # -- events ------------------------------------------------------------------------------------------
    def feed(self, session_id: str, event: Mapping[str, Any]) -> list[SpanDescription]:
        """The spans ``event`` finishes (and the held child spans it releases), in ending order."""
        state = self._sessions[session_id]
        etype = event["type"]
        seq: int = event["seq"]
        data = event["data"]
        if etype == REQUEST_HEADER:
            config = data.get("header", {}).get("config", {})
            state.provider = config.get("provider", state.provider)
            state.model = config.get("model", state.model)
            system = data.get("header", {}).get("system")
            state.system = system if isinstance(system, str) else None
            return []
        if etype == REQUEST_CONTEXT:
            state.provider = data.get("provider", state.provider)
            state.model = data.get("model", state.model)
            return []
        if seq < state.first_live_seq:
            return []  # an inherited seed: exported with the session that lived it
        if etype == ASSISTANT_CHUNK:
            self._chunk(state, seq, event["time"], data)
            return []
        if etype == TURN_START:
            self._turn_start(state, seq, event["time"], data)
            return []
        turn = state.turn
        if turn is None:
            return []  # outside any turn (a standalone append): no span to belong to
        if etype == STEP_START:
            key = (data["turn"], data["step"])
            state.chats[key] = _Chat(span_id_of(state.id, seq), seq, event["time"], data["turn"], data["step"])
            return []
        if etype == ASSISTANT_MESSAGE:
            return self._emit(state, turn, self._chat_end(state, turn, seq, event["time"], data))
        if etype == TOOL_CALL:
            state.tools[data["callId"]] = _Tool(
                span_id_of(state.id, seq), seq, event["time"], data["name"], data.get("arguments", "")
            )
            return []
        if etype == TOOL_RESULT:
            return self._emit(state, turn, self._tool_end(state, turn, seq, event["time"], data))
        if etype == SUBAGENT_DESCRIPTOR:
            label = data.get("label")
            state.agent_name = label if isinstance(label, str) else state.agent_name
            return []
        if etype == TURN_END:
            return self._turn_end(state, turn, seq, event["time"], data)
        return []

    def drain(self) -> list[SpanDescription]:
        """Give up waiting: every held child turn becomes a trace of its own (its ``turn/start``'s)."""
        released: list[SpanDescription] = []
        for state in list(self._sessions.values()):
            for start_seq, turn in list(state.held.items()):
                if turn.done:
                    released.extend(self._resolve(turn.key, trace_id_of(state.id, start_seq), None))
        return released

    # -- turns -------------------------------------------------------------------------------------------
    def _turn_start(self, state: _Session, seq: int, time: int, data: Mapping[str, Any]) -> None:
        key = (state.id, seq)
        state.turn = _Turn(key, data.get("turn", 0), seq, time, span_id_of(state.id, seq))
        state.chats.clear()
        state.tools.clear()
        if state.parent_id is None:
            self._traces[key] = trace_id_of(state.id, seq)
            state.trace_keys.append(key)
        else:
            state.held[seq] = state.turn

    def _turn_end(
        self, state: _Session, turn: _Turn, seq: int, time: int, data: Mapping[str, Any]
    ) -> list[SpanDescription]:
        reason = data.get("reason", {})
        kind = reason.get("kind") if isinstance(reason, Mapping) else None
        error_type: str | None = None
        if kind == "error":
            failure = reason.get("error")
            code = failure.get("code") if isinstance(failure, Mapping) else None
            error_type = code if isinstance(code, str) and code else "error"
        elif kind in ("aborted", "interrupted", "blocked"):
            error_type = kind
        ended: list[SpanDescription] = []
        # A request or tool call the turn's end left open failed with it.
        for chat in list(state.chats.values()):
            ended.append(self._chat_span(state, turn, chat, seq, time, error_type or "unfinished"))
        for call_id, tool in list(state.tools.items()):
            ended.append(self._tool_span(state, turn, tool, call_id, seq, time, error_type or "unfinished", None))
        state.chats.clear()
        state.tools.clear()
        name = state.agent_name or (self.agent_name if state.parent_id is None else "subagent")
        start: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.conversation.id": state.id,
            "gen_ai.agent.name": name,
            "agentlog.session.id": state.id,
            "agentlog.seq.start": turn.seq,
        }
        self._route(state, start)
        if state.parent_id is not None:
            start["agentlog.session.parent_id"] = state.parent_id
        attributes: dict[str, AttributeValue] = {"agentlog.seq.end": seq, "agentlog.turn": turn.turn}
        if kind is not None:
            attributes["agentlog.turn.end_reason"] = kind
        for key, value in turn.usage.items():
            attributes[f"agentlog.usage.turn.{key}"] = value
        for key, value in state.usage.items():
            attributes[f"agentlog.usage.session.{key}"] = value
        if error_type is not None:
            attributes["error.type"] = error_type
        ended.append(
            SpanDescription(
                f"invoke_agent {name}",
                "internal",
                state.id,
                0,
                turn.span_id,
                None,
                turn.time * 1_000_000,
                time * 1_000_000,
                start,
                attributes,
                error_type,
            )
        )
        state.turn = None
        turn.done = True
        return self._emit(state, turn, ended)

    # -- model requests ----------------------------------------------------------------------------------
    def _chunk(self, state: _Session, seq: int, time: int, data: Mapping[str, Any]) -> None:
        if state.turn is None:
            return
        key = (data.get("turn", 0), data.get("step", 0))
        chat = state.chats.get(key)
        if chat is None:  # no step/start in this log: the request opens with its first chunk
            chat = state.chats[key] = _Chat(span_id_of(state.id, seq), seq, time, key[0], key[1])
        if chat.first_chunk_time is None:
            chat.first_chunk_time = time
            chat.first_chunk_seq = seq
        chunk = data.get("chunk")
        if isinstance(chunk, Mapping) and chunk.get("type") == "finish":
            reason = chunk.get("reason")
            kind = reason.get("type", reason.get("kind")) if isinstance(reason, Mapping) else reason
            if isinstance(kind, str):
                chat.finish = kind

    def _chat_end(
        self, state: _Session, turn: _Turn, seq: int, time: int, data: Mapping[str, Any]
    ) -> list[SpanDescription]:
        key = (data.get("turn", turn.turn), data.get("step", 0))
        chat = state.chats.pop(key, None)
        if chat is None:
            chat = _Chat(span_id_of(state.id, seq), seq, time, key[0], key[1])
        return [self._chat_span(state, turn, chat, seq, time, None, data)]

    def _chat_span(
        self,
        state: _Session,
        turn: _Turn,
        chat: _Chat,
        end_seq: int,
        end_time: int,
        error_type: str | None,
        data: Mapping[str, Any] | None = None,
    ) -> SpanDescription:
        message = data.get("message") if data is not None else None
        source = message.get("source") if isinstance(message, Mapping) else None
        response_model = source.get("model") if isinstance(source, Mapping) else None
        model = state.model or (response_model if isinstance(response_model, str) else None)
        start: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.conversation.id": state.id,
            "agentlog.session.id": state.id,
            "agentlog.seq.start": chat.seq,
        }
        self._route(state, start)
        if state.parent_id is not None:
            start["agentlog.session.parent_id"] = state.parent_id
        attributes: dict[str, AttributeValue] = {"agentlog.seq.end": end_seq, "agentlog.step": chat.step}
        if chat.first_chunk_time is not None:
            attributes["gen_ai.response.time_to_first_chunk"] = max(0, chat.first_chunk_time - chat.time) / 1000
        events: list[SpanEventDescription] = []
        if isinstance(message, Mapping):
            message_id = message.get("id")
            if isinstance(message_id, str):
                attributes["gen_ai.response.id"] = message_id
            if isinstance(response_model, str):
                attributes["gen_ai.response.model"] = response_model
            finish = chat.finish
            if finish is None:
                calls = any(isinstance(b, Mapping) and b.get("type") == "tool-call" for b in message.get("content", ()))
                finish = "tool-calls" if calls else "stop"
            if data is not None and data.get("interrupted") is True:
                finish = "aborted"
            attributes["gen_ai.response.finish_reasons"] = (_FINISH.get(finish, finish),)
            usage = data.get("usage") if data is not None else None
            if isinstance(usage, Mapping):
                for wire, name in _USAGE_KEYS:
                    value = usage.get(wire)
                    if isinstance(value, int) and not isinstance(value, bool):
                        attributes[f"gen_ai.usage.{name}"] = value
                        turn.usage[name] = turn.usage.get(name, 0) + value
                        state.usage[name] = state.usage.get(name, 0) + value
            if self.capture == "off":
                start["gen_ai.input.messages.ref"] = content_ref(state.id, chat.sent_at(end_seq))
            else:
                content = self._chat_content(state, chat, chat.sent_at(end_seq), message, finish)
                if self._on_span:
                    attributes.update(content)
                if self._on_event:
                    events.append(SpanEventDescription(DETAILS_EVENT, end_time * 1_000_000, dict(content)))
        elif self.capture == "off":
            start["gen_ai.input.messages.ref"] = content_ref(state.id, chat.sent_at(end_seq))
        if error_type is not None:
            attributes["error.type"] = error_type
        name = f"chat {model}" if model else "chat"
        return SpanDescription(
            name,
            "client",
            state.id,
            0,
            chat.span_id,
            turn.span_id,
            chat.time * 1_000_000,
            end_time * 1_000_000,
            start,
            attributes,
            error_type,
            events,
        )

    def _chat_content(
        self, state: _Session, chat: _Chat, sent_at: int, message: Mapping[str, Any], finish: str
    ) -> dict[str, AttributeValue]:
        redact = self.redact
        content: dict[str, AttributeValue] = {}
        if self.messages_at is not None:
            content["gen_ai.input.messages"] = _json(input_messages(self.messages_at(state.id, sent_at), redact))
        if state.system:
            content["gen_ai.system_instructions"] = _json([{"type": "text", "content": redact(state.system)}])
        output = {
            "role": "assistant",
            "parts": _parts(message.get("content", ()), redact),
            "finish_reason": _FINISH.get(finish, finish),
        }
        content["gen_ai.output.messages"] = _json([output])
        return content

    # -- tool calls --------------------------------------------------------------------------------------
    def _tool_end(
        self, state: _Session, turn: _Turn, seq: int, time: int, data: Mapping[str, Any]
    ) -> list[SpanDescription]:
        message = data.get("message", {})
        source = message.get("source", {}) if isinstance(message, Mapping) else {}
        call_id = source.get("callId") if isinstance(source, Mapping) else None
        if not isinstance(call_id, str):
            return []
        tool = state.tools.pop(call_id, None)
        if tool is None:  # no tool/call in this log (an import): the call opens with its result
            tool = _Tool(span_id_of(state.id, seq), seq, time, "", "")
        error = data.get("error")
        error_type: str | None = None
        if isinstance(error, Mapping) and isinstance(error.get("code"), str):
            error_type = error["code"]
        else:
            blocks = message.get("content", ()) if isinstance(message, Mapping) else ()
            if any(isinstance(b, Mapping) and b.get("isError") is True for b in blocks):
                error_type = "tool_error"
        meta = data.get("meta")
        record = meta.get("subagent") if isinstance(meta, Mapping) else None
        if isinstance(record, Mapping):
            child = record.get("sessionId")
            seqs = record.get("seqs")
            if isinstance(child, str) and isinstance(seqs, Sequence) and seqs and isinstance(seqs[0], int):
                self._delegations[(child, seqs[0])] = (turn.key, tool.span_id)
        span = self._tool_span(state, turn, tool, call_id, seq, time, error_type, message)
        released = self._emit(state, turn, [span])
        if isinstance(record, Mapping):
            released.extend(self._try_resolve_child(record))
        return released

    def _tool_span(
        self,
        state: _Session,
        turn: _Turn,
        tool: _Tool,
        call_id: str,
        end_seq: int,
        end_time: int,
        error_type: str | None,
        message: Any,
    ) -> SpanDescription:
        start: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.conversation.id": state.id,
            "gen_ai.tool.name": tool.name,
            "gen_ai.tool.call.id": call_id,
            "gen_ai.tool.type": "function",
            "agentlog.session.id": state.id,
            "agentlog.seq.start": tool.seq,
        }
        if state.provider is not None:
            start["gen_ai.provider.name"] = _provider_name(state.provider) or state.provider
        if state.parent_id is not None:
            start["agentlog.session.parent_id"] = state.parent_id
        attributes: dict[str, AttributeValue] = {"agentlog.seq.end": end_seq}
        if error_type is not None:
            attributes["error.type"] = error_type
        events: list[SpanEventDescription] = []
        if self.capture != "off":
            content: dict[str, AttributeValue] = {"gen_ai.tool.call.arguments": self.redact(tool.arguments)}
            if isinstance(message, Mapping):
                result = _parts(message.get("content", ()), self.redact)
                response = result[0].get("response", "") if result else ""
                content["gen_ai.tool.call.result"] = response
            if self._on_span:
                attributes.update(content)
            if self._on_event:
                events.append(SpanEventDescription(DETAILS_EVENT, end_time * 1_000_000, dict(content)))
        return SpanDescription(
            f"execute_tool {tool.name}" if tool.name else "execute_tool",
            "internal",
            state.id,
            0,
            tool.span_id,
            turn.span_id,
            tool.time * 1_000_000,
            end_time * 1_000_000,
            start,
            attributes,
            error_type,
            events,
        )

    # -- traces ------------------------------------------------------------------------------------------
    def _route(self, state: _Session, attributes: dict[str, AttributeValue]) -> None:
        provider = _provider_name(state.provider)
        if provider is not None:
            attributes["gen_ai.provider.name"] = provider
        if state.model is not None:
            attributes["gen_ai.request.model"] = state.model

    def _emit(self, state: _Session, turn: _Turn, spans: list[SpanDescription]) -> list[SpanDescription]:
        trace = self._traces.get(turn.key)
        if trace is None:
            turn.spans.extend(spans)
            if turn.done and state.parent_id is not None:
                return self._try_resolve_turn(state, turn)
            return []
        for span in spans:
            span.trace_id = trace
        if turn.done:
            state.held.pop(turn.seq, None)
        return spans

    def _try_resolve_child(self, record: Mapping[str, Any]) -> list[SpanDescription]:
        child_id = record.get("sessionId")
        seqs = record.get("seqs")
        state = self._sessions.get(child_id) if isinstance(child_id, str) else None
        if state is None or not isinstance(seqs, Sequence) or not seqs:
            return []
        turn = state.held.get(seqs[0])
        if turn is None or not turn.done:
            return []
        return self._try_resolve_turn(state, turn)

    def _try_resolve_turn(self, state: _Session, turn: _Turn) -> list[SpanDescription]:
        delegation = self._delegations.get(turn.key)
        if delegation is None:
            return []  # the parent's result naming this turn has not arrived (yet)
        parent_key, tool_span = delegation
        trace = self._traces.get(parent_key)
        if trace is None:  # the parent is a child whose own turn waits: release with it
            self._waiting.setdefault(parent_key, []).append(turn.key)
            return []
        return self._resolve(turn.key, trace, tool_span)

    def _resolve(self, key: tuple[str, int], trace: int, parent_span: int | None) -> list[SpanDescription]:
        state = self._sessions[key[0]]
        turn = state.held.pop(key[1], None)
        self._traces[key] = trace
        state.trace_keys.append(key)
        self._delegations.pop(key, None)
        released: list[SpanDescription] = []
        if turn is not None:
            for span in turn.spans:
                span.trace_id = trace
                if span.span_id == turn.span_id:
                    span.parent_span_id = parent_span
            released.extend(turn.spans)
            turn.spans = []
        for waiting in self._waiting.pop(key, []):
            delegation = self._delegations.get(waiting)
            released.extend(self._resolve(waiting, trace, delegation[1] if delegation is not None else None))
        if state.disposed and not state.held:
            self.forget(state.id)
        return released


def _identity(text: str) -> str:
    return text
