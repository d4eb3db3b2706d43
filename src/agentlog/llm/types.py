"""The provider-neutral vocabulary of one model call (spec runtime §9.1, core-session §3.5–§3.6).

Everything a provider yields is a plain wire dict (``StreamChunk``) so the agent loop can append it
verbatim as the ``chunk`` of an ``assistant/chunk`` event: no conversion layer sits between what the
model streamed and what the log stores. Failures travel the same way — a provider never raises out of
``stream``; it ends with a terminal ``finish`` whose reason is ``error`` or ``aborted`` and carries an
:class:`~agentlog.events.LlmFailure`. :class:`LlmError` is the exception form of the same facts, for
code that prefers ``try``/``except`` (``AssembledResponse.raise_for_failure``, request building).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, NotRequired, Protocol, TypedDict

from ..errors import LlmError as LlmError
from ..errors import MissingApiKeyError as MissingApiKeyError
from ..kernel.events import LlmCallConfig, LlmFailure, Message, TokenUsage, ToolSchema

# --- failure codes -------------------------------------------------------------------------------

AUTH: Final = "AUTH"
QUOTA: Final = "QUOTA"
RATE_LIMIT: Final = "RATE_LIMIT"
CONTEXT_WINDOW_EXCEEDED: Final = "CONTEXT_WINDOW_EXCEEDED"
INVALID_REQUEST: Final = "INVALID_REQUEST"
SERVER: Final = "SERVER"
TRANSPORT: Final = "TRANSPORT"
TIMEOUT: Final = "TIMEOUT"
ABORTED: Final = "ABORTED"
EMPTY_RESPONSE: Final = "EMPTY_RESPONSE"
STREAM_CLOSED: Final = "STREAM_CLOSED"
MALFORMED_RESPONSE: Final = "MALFORMED_RESPONSE"
RESPONSE_TOO_LARGE: Final = "RESPONSE_TOO_LARGE"
"""One SSE line or event exceeded the provider's cap (``max_event_bytes``); not retried by default."""
MISSING_API_KEY: Final = "MISSING_API_KEY"
UNKNOWN: Final = "UNKNOWN"
MAX_TOKENS: Final = "MAX_TOKENS"
"""A call that had to be complete (a compaction summary) stopped at its token cap."""
UNSUPPORTED_CONTENT: Final = "UNSUPPORTED_CONTENT"
"""The output holds content the caller cannot use (an image in a compaction summary)."""

FAILURE_CODES: Final = frozenset(
    {
        AUTH,
        QUOTA,
        RATE_LIMIT,
        CONTEXT_WINDOW_EXCEEDED,
        INVALID_REQUEST,
        SERVER,
        TRANSPORT,
        TIMEOUT,
        ABORTED,
        EMPTY_RESPONSE,
        STREAM_CLOSED,
        MALFORMED_RESPONSE,
        RESPONSE_TOO_LARGE,
        MISSING_API_KEY,
        UNKNOWN,
        MAX_TOKENS,
        UNSUPPORTED_CONTENT,
    }
)
"""The fixed codes. Open-ended ones exist too: ``HTTP_<status>`` for unclassified HTTP statuses and the
upper-cased wire ``finish_reason`` (``CONTENT_FILTER``…) when a model stops for a reason that is neither
stop, tool calls nor length."""

DEFAULT_RETRYABLE_CODES: Final = frozenset({EMPTY_RESPONSE, RATE_LIMIT, SERVER, TIMEOUT, TRANSPORT})
"""The retry policy's default code set (spec §6.7). Providers never retry; the loop does, and logs it."""


def http_status_code(status: int) -> str:
    """The code of an HTTP status no rule classifies (``HTTP_404``)."""
    return f"HTTP_{status}"


# --- stream chunks (core-session §3.5) -----------------------------------------------------------


class StopReason(TypedDict):
    kind: Literal["stop", "tool-calls", "max-tokens"]


class FailureReason(TypedDict):
    kind: Literal["error", "aborted"]
    failure: LlmFailure


FinishReason = StopReason | FailureReason


class BlockStartChunk(TypedDict):
    type: Literal["block-start"]
    index: int
    blockType: str


class TextDeltaChunk(TypedDict):
    type: Literal["text-delta"]
    index: int
    text: str


class ReasoningDeltaChunk(TypedDict):
    type: Literal["reasoning-delta"]
    index: int
    text: str


class ToolCallDeltaChunk(TypedDict):
    type: Literal["tool-call-delta"]
    index: int
    id: str
    name: NotRequired[str]
    argumentsDelta: str


class BlockEndChunk(TypedDict):
    type: Literal["block-end"]
    index: int
    block: dict[str, Any]


class UsageChunk(TypedDict):
    type: Literal["usage"]
    usage: TokenUsage


class FinishChunk(TypedDict):
    type: Literal["finish"]
    reason: FinishReason
    replayState: NotRequired[Any]


StreamChunk = (
    BlockStartChunk
    | TextDeltaChunk
    | ReasoningDeltaChunk
    | ToolCallDeltaChunk
    | BlockEndChunk
    | UsageChunk
    | FinishChunk
)
"""One streamed chunk, exactly the ``chunk`` payload of an ``assistant/chunk`` event."""


def finish_chunk(kind: Literal["stop", "tool-calls", "max-tokens"]) -> FinishChunk:
    return {"type": "finish", "reason": {"kind": kind}}


def failure_chunk(failure: LlmFailure) -> FinishChunk:
    """The terminal chunk of a failed call; ``ABORTED`` becomes an ``aborted`` finish, anything else ``error``."""
    kind: Literal["error", "aborted"] = "aborted" if failure["code"] == ABORTED else "error"
    return {"type": "finish", "reason": {"kind": kind, "failure": failure}}


# --- the request and the provider contract -------------------------------------------------------

Purpose = Literal["compaction", "session-title"]


@dataclass(frozen=True)
class GenerateRequest:
    """One model call, provider-neutral (the spec's ``GenerateOptions`` minus the abort signal).

    ``messages`` are wire :class:`~agentlog.events.Message` dicts — typically ``session.derive_messages()``
    as is, so the request the provider serializes is exactly what the log reconstructs. ``None`` means
    "not set": the provider sends nothing and the server default applies.
    """

    provider: str
    model: str
    messages: Sequence[Message]
    system: str | None = None
    tools: Sequence[ToolSchema] = ()
    reasoning_effort: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    stop: Sequence[str] | None = None
    session_id: str | None = None
    purpose: Purpose | None = None

    @classmethod
    def from_config(
        cls,
        config: Mapping[str, Any],
        messages: Sequence[Message],
        *,
        system: str | None = None,
        tools: Sequence[ToolSchema] = (),
        session_id: str | None = None,
        purpose: Purpose | None = None,
    ) -> GenerateRequest:
        """Build the request from an ``LlmCallConfig`` (e.g. a folded ``request/header``'s ``config``), so the
        request and the logged header cannot drift apart field by field."""
        stop = config.get("stop")
        return cls(
            provider=config["provider"],
            model=config["model"],
            messages=messages,
            system=system,
            tools=tools,
            reasoning_effort=config.get("reasoningEffort"),
            temperature=config.get("temperature"),
            max_tokens=config.get("maxTokens"),
            stop=list(stop) if stop is not None else None,
            session_id=session_id,
            purpose=purpose,
        )

    def call_config(self) -> LlmCallConfig:
        """The ``LlmCallConfig`` this request carries (the inverse of :meth:`from_config`)."""
        config: LlmCallConfig = {"provider": self.provider, "model": self.model}
        if self.reasoning_effort is not None:
            config["reasoningEffort"] = self.reasoning_effort
        if self.temperature is not None:
            config["temperature"] = self.temperature
        if self.max_tokens is not None:
            config["maxTokens"] = self.max_tokens
        if self.stop is not None:
            config["stop"] = list(self.stop)
        return config


class Provider(Protocol):
    """What the agent loop needs from a model backend.

    ``stream`` is an async generator of :data:`StreamChunk` dicts: deltas as they arrive, then every
    ``block-end``, then ``usage`` (if reported), then exactly one ``finish``; nothing follows ``finish``.
    It does not raise for model or transport failures — those end the stream with a ``finish`` of kind
    ``error`` (or ``aborted`` when ``signal`` was set) carrying the ``LlmFailure``. Task cancellation is
    not swallowed: it propagates as ``CancelledError`` after the HTTP response has been closed. Providers
    never retry; retries are the loop's decision and are logged as ``llm/retry`` events.
    """

    name: str

    def stream(
        self, request: GenerateRequest, *, signal: asyncio.Event | None = None
    ) -> AsyncIterator[StreamChunk]: ...
