"""An OpenAI-compatible chat-completions provider; DeepSeek by default (spec runtime §9.2).

Built on the official ``openai`` package's :class:`~openai.AsyncOpenAI`: it owns authentication, the
HTTP connection, timeouts and the typed HTTP error classes. Two things are deliberately done here
instead of by the client:

* **No client retries** (``max_retries=0``). Retrying is the agent loop's decision and must be logged
  (``llm/retry``) so a replay sees every attempt; a hidden retry inside the client would be invisible.
* **SSE decoding.** The request goes through ``with_streaming_response`` and the event stream is decoded
  here, because the client's own iterator silently ends at ``[DONE]`` *or* at end of body and skips
  nothing we could observe: a stream cut off before ``[DONE]`` must be ``STREAM_CLOSED`` and a payload
  that is not JSON must be ``MALFORMED_RESPONSE``, not a quietly shorter answer. Payloads are handled as
  plain JSON dicts so DeepSeek's extra fields (``reasoning_content``, ``prompt_cache_hit_tokens``) need
  no typed model.

Failure codes (all delivered as a terminal ``finish`` of kind ``error``/``aborted``):

=====================================  ========================================================
HTTP 401/403                           ``AUTH``
error text naming an exhausted quota   ``QUOTA`` (any status, e.g. DeepSeek's 402)
other 429                              ``RATE_LIMIT`` (``Retry-After`` → ``providerRetryAfterMs``)
400 naming the context window          ``CONTEXT_WINDOW_EXCEEDED``
other 400, 413                         ``INVALID_REQUEST``
5xx                                    ``SERVER``
any other status                       ``HTTP_<status>``
no response (refused, DNS, TLS)        ``TRANSPORT``
connection lost mid-body               ``TRANSPORT`` (as the original adapter: the read failed)
body ended cleanly without ``[DONE]``  ``STREAM_CLOSED``
no data event for ``timeout_s`` s      ``TIMEOUT`` (before or during the body; keep-alive comments and
                                       other non-data lines are not progress)
SSE line or event over the cap         ``RESPONSE_TOO_LARGE`` (``max_event_bytes``, 16 MiB by default)
payload is not a JSON object           ``MALFORMED_RESPONSE``
``{"error": …}`` payload mid-stream    ``QUOTA``/``CONTEXT_WINDOW_EXCEEDED`` if its text says so, else ``SERVER``
``[DONE]`` with no content, stop       ``EMPTY_RESPONSE``
finish_reason other than stop/tool_calls/length   the reason upper-cased (``CONTENT_FILTER``)
``signal`` set                         ``ABORTED`` (finish kind ``aborted``)
=====================================  ========================================================

DeepSeek's harness headers (the session id, which lets DeepSeek route a session's calls to one prompt
cache, and the compaction marker) go only to a base URL whose host is ``api.deepseek.com``: another
endpoint never learns the session id. A loopback base URL (``localhost``, ``127.0.0.1``, ``::1``) needs
no API key, and ``api_key=""`` explicitly sends none (for keyless local servers behind other names).
"""

from __future__ import annotations

import asyncio
import email.utils
import ipaddress
import json
import math
import os
import re
import time
import urllib.parse
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import UTC
from typing import TYPE_CHECKING, Any, Final, Literal, cast

import openai

from ..errors import InvalidOptionError
from ..kernel.jsonvalue import thaw
from .compaction_protocol import COMPACT_HEADER
from .types import (
    ABORTED,
    AUTH,
    CONTEXT_WINDOW_EXCEEDED,
    EMPTY_RESPONSE,
    INVALID_REQUEST,
    MALFORMED_RESPONSE,
    QUOTA,
    RATE_LIMIT,
    RESPONSE_TOO_LARGE,
    SERVER,
    STREAM_CLOSED,
    TIMEOUT,
    TRANSPORT,
    UNKNOWN,
    FinishChunk,
    GenerateRequest,
    LlmError,
    MissingApiKeyError,
    StreamChunk,
    ToolCallDeltaChunk,
    failure_chunk,
    finish_chunk,
    http_status_code,
)

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletionMessageParam

    from ..kernel.events import TokenUsage

DEEPSEEK_BASE_URL: Final = "https://api.deepseek.com"
DEFAULT_MODEL: Final = "deepseek-chat"
DEEPSEEK_CONTEXT_WINDOW: Final = 1_000_000
"""The context window the DeepSeek endpoint's models are given (tokens) unless ``context_window=`` says
otherwise; compaction's pressure threshold is a ratio of it."""
DEFAULT_TIMEOUT_S: Final = 300.0
"""Idle timeout: the longest wait for progress — from the request to the first SSE data event, and
between data events (keep-alive comments do not count). The original adapter's stream idle watchdog
defaults to 300 s; reasoning models can think that long."""
DEFAULT_MAX_EVENT_BYTES: Final = 16 * 1024 * 1024
"""The largest SSE line, and the largest data event, the decoder holds (16 MiB)."""
DEEPSEEK_HOST: Final = "api.deepseek.com"

API_KEY_ENV_VARS: Final = ("DEEPSEEK_API_KEY", "OPENAI_API_KEY")
SESSION_HEADER: Final = "x-deepseek-harness-session-id"
NO_OUTPUT: Final = "(no output)"


# --- request serialization -----------------------------------------------------------------------


def _joined(blocks: Sequence[Any], block_type: str) -> str:
    return "".join(b["text"] for b in blocks if isinstance(b, Mapping) and b.get("type") == block_type)


def serialize_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Provider-neutral messages → chat-completions messages.

    * assistant → ``content`` = joined text (``""``, never ``null``: several gateways reject a null
      content, and the message stays in the log, so one rejection would poison every later turn),
      ``reasoning_content`` when there is reasoning (DeepSeek requires it back on tool-call turns),
      ``tool_calls`` with the raw argument strings;
    * user → a user message (when it has text or carries no tool results), then one ``role: tool``
      message per ``tool-result`` block (empty output becomes ``(no output)``: the wire needs content);
    * system → a system message. Blocks the wire cannot carry (images) are skipped.
    """
    wire: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        content: Sequence[Any] = message.get("content") or ()
        if role == "system":
            wire.append({"role": "system", "content": _joined(content, "text")})
        elif role == "assistant":
            entry: dict[str, Any] = {"role": "assistant", "content": _joined(content, "text")}
            reasoning = _joined(content, "reasoning")
            if reasoning:
                entry["reasoning_content"] = reasoning
            calls = [
                {"id": b["id"], "type": "function", "function": {"name": b["name"], "arguments": b["arguments"]}}
                for b in content
                if isinstance(b, Mapping) and b.get("type") == "tool-call"
            ]
            if calls:
                entry["tool_calls"] = calls
            wire.append(entry)
        else:
            results = [b for b in content if isinstance(b, Mapping) and b.get("type") == "tool-result"]
            text = _joined(content, "text")
            if text or not results:
                wire.append({"role": "user", "content": text})
            for result in results:
                output = _joined(result.get("content") or (), "text")
                wire.append({"role": "tool", "tool_call_id": result["toolCallId"], "content": output or NO_OUTPUT})
    return wire


def request_body(request: GenerateRequest, *, model: str | None = None, thinking: bool = True) -> dict[str, Any]:
    """The exact JSON body of the streaming chat-completions request.

    ``system`` becomes a leading system message. Reasoning effort ``off`` (and any ``session-title``
    call, whose short budget must yield visible text) sends ``thinking: {type: disabled}``; another effort
    sends ``thinking: {type: enabled}`` plus ``reasoning_effort``. ``thinking=False`` omits DeepSeek's
    ``thinking`` switch for servers that reject unknown fields. Unset options are omitted, never ``null``,
    so server defaults apply.
    """
    messages: list[dict[str, Any]] = []
    if request.system is not None:
        messages.append({"role": "system", "content": request.system})
    messages.extend(serialize_messages(request.messages))
    body: dict[str, Any] = {
        "model": model or request.model,
        "messages": messages,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    effort = request.reasoning_effort
    if request.purpose == "session-title" or effort == "off":
        if thinking:
            body["thinking"] = {"type": "disabled"}
    elif effort is not None:
        if thinking:
            body["thinking"] = {"type": "enabled"}
        body["reasoning_effort"] = effort
    if request.tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": tool["name"],
                    "description": tool["description"],
                    "parameters": thaw(tool["parameters"]),
                },
            }
            for tool in request.tools
        ]
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.max_tokens is not None:
        body["max_tokens"] = request.max_tokens
    if request.stop is not None:
        body["stop"] = list(request.stop)
    return body


def _host(base_url: str) -> str:
    try:
        host = urllib.parse.urlsplit(base_url.strip()).hostname
    except ValueError:
        return ""
    return (host or "").rstrip(".").lower()


def is_deepseek_base_url(base_url: str) -> bool:
    """Whether ``base_url``'s host is DeepSeek's API host (``api.deepseek.com``), on any scheme and port."""
    return _host(base_url) == DEEPSEEK_HOST


def is_loopback_base_url(base_url: str) -> bool:
    """Whether ``base_url`` names this machine: ``localhost``, ``127.0.0.0/8`` or ``::1``."""
    host = _host(base_url)
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def request_headers(request: GenerateRequest, *, harness_headers: bool = True) -> dict[str, str]:
    """Per-call headers: the SSE accept type and, with ``harness_headers`` (DeepSeek only), the session id
    (lets DeepSeek route a session's calls to the same prompt cache) and the compaction marker."""
    headers: dict[str, str] = {"accept": "text/event-stream"}
    if not harness_headers:
        return headers
    if request.session_id is not None:
        headers[SESSION_HEADER] = request.session_id
    if request.purpose == "compaction":
        headers[COMPACT_HEADER] = "1"
    return headers


# --- error mapping -------------------------------------------------------------------------------

_QUOTA = re.compile(
    r"insufficient[\s_-]+(?:quota|balance|credits?)"
    r"|(?:quota|usage[\s_-]+limit)[\s_-]+(?:exceeded|exhausted|reached)"
    r"|exceed(?:ed|s)?[\s_-]+(?:your[\s_-]+|the[\s_-]+)?(?:current[\s_-]+)?quota"
    r"|(?:balance|credits?)[\s_-]+(?:exhausted|depleted)"
    r"|out[\s_-]+of[\s_-]+(?:credits?|budget)",
    re.IGNORECASE,
)
_CONTEXT = re.compile(
    r"context[\s_-]+(?:length|window)[\s_-]+(?:exceed(?:ed|s)?|overflow(?:ed)?|limit[\s_-]+exceeded)"
    r"|(?:maximum|max)(?:[\s_-]+(?:allowed|supported))?[\s_-]+context[\s_-]+(?:length|window)"
    r"|(?:request|prompt|input|messages?)\s+(?:is\s+|are\s+)?too\s+(?:large|long)\s+for\s+(?:this\s+|the\s+)?"
    r"(?:model(?:'s)?|context)"
    r"|(?:input|prompt|request|messages?)\b.{0,40}\b(?:exceed(?:s|ed)?|overflows?|is\s+larger\s+than)\b.{0,40}"
    r"\bcontext\b",
    re.IGNORECASE,
)


def is_quota_error(detail: str) -> bool:
    """An exhausted account (quota, balance, credits) — not a transient rate limit, so not retryable."""
    return _QUOTA.search(detail) is not None


def is_context_overflow(detail: str) -> bool:
    """The request does not fit the model's context window (compaction, not retrying, can fix it)."""
    return _CONTEXT.search(detail) is not None


def http_error_code(status: int, detail: str = "") -> str:
    """Classify a non-2xx response; ``detail`` is the provider's error code, type and message joined."""
    if status in (401, 403):
        return AUTH
    if is_quota_error(detail):
        return QUOTA
    if status == 429:
        return RATE_LIMIT
    if status == 400:
        return CONTEXT_WINDOW_EXCEEDED if is_context_overflow(detail) else INVALID_REQUEST
    if status == 413:
        return INVALID_REQUEST
    if status >= 500:
        return SERVER
    return http_status_code(status)


_SECONDS = re.compile(r"^\d+(?:\.\d+)?$")


def parse_retry_after(value: str | None, *, now: float | None = None) -> int | None:
    """``Retry-After`` (delta seconds or an HTTP date) → milliseconds; ``None`` unless a positive delay."""
    if value is None:
        return None
    value = value.strip()
    if _SECONDS.match(value):
        delay_s = float(value)
    else:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        delay_s = when.timestamp() - (time.time() if now is None else now)
    if not math.isfinite(delay_s) or delay_s <= 0:
        return None
    return math.ceil(delay_s * 1000)


def _header_request_id(headers: Mapping[str, str]) -> str | None:
    value = headers.get("x-request-id") or headers.get("x-deepseek-request-id")
    return value or None


def _error_detail(body: object) -> tuple[str | None, str]:
    """(provider message, classifier text) of an error body (``{"error": {...}}`` or its inner dict)."""
    if isinstance(body, Mapping) and isinstance(body.get("error"), Mapping):
        body = body["error"]
    if isinstance(body, Mapping):
        message = body.get("message")
        parts = [str(body[k]) for k in ("code", "type", "message") if body.get(k)]
        return (message if isinstance(message, str) and message else None), " ".join(parts)
    if isinstance(body, str):
        return (body[:500] or None), body
    return None, ""


def _mro_names(exc: BaseException) -> set[str]:
    return {cls.__name__ for cls in type(exc).__mro__}


def to_llm_error(exc: BaseException, *, request_id: str | None = None) -> LlmError:
    """Normalize anything a model call can raise into an :class:`LlmError` (for the terminal finish).

    The HTTP library underneath ``openai`` changed between major versions (``httpx``, ``httpx2``), and
    errors raised while the body is being read are not wrapped by the client, so body-read errors are
    recognised by class name (``TimeoutException``, ``TransportError``…) instead of importing either.
    """
    if isinstance(exc, LlmError):
        return exc
    if isinstance(exc, asyncio.CancelledError):
        return LlmError("model request aborted", code=ABORTED, request_id=request_id)
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        message, detail = _error_detail(exc.body)
        headers = exc.response.headers
        return LlmError(
            message or f"model API error (HTTP {status})",
            code=http_error_code(status, detail),
            status=status,
            provider_retry_after_ms=parse_retry_after(headers.get("retry-after")),
            request_id=_header_request_id(headers) or request_id,
        )
    if isinstance(exc, openai.APITimeoutError):
        return LlmError(f"model API request timed out: {exc}", code=TIMEOUT, request_id=request_id)
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__ or exc.__context__
        detail = f": {type(cause).__name__}: {cause}" if cause is not None else ""
        return LlmError(f"model API request failed{detail}", code=TRANSPORT, request_id=request_id)
    names = _mro_names(exc)
    if "TimeoutException" in names or isinstance(exc, TimeoutError):
        return LlmError(f"model API stream timed out: {type(exc).__name__}", code=TIMEOUT, request_id=request_id)
    if names & {"TransportError", "RequestError", "StreamError", "EndOfStream"} or isinstance(exc, OSError):
        return LlmError(f"model API stream failed: {type(exc).__name__}: {exc}", code=TRANSPORT, request_id=request_id)
    return LlmError(f"{type(exc).__name__}: {exc}", code=UNKNOWN, request_id=request_id)


# --- SSE decoding and translation ----------------------------------------------------------------

DONE: Final = "[DONE]"


_LINE_END: Final = re.compile(rb"[\r\n]")


def _too_large(what: str, cap: int) -> LlmError:
    return LlmError(
        f"model API stream sent {what} larger than {cap} bytes (max_event_bytes); if the endpoint really "
        "sends events this large, raise OpenAICompatibleProvider(max_event_bytes=...)",
        code=RESPONSE_TOO_LARGE,
    )


async def sse_data(
    chunks: AsyncIterator[bytes], *, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES
) -> AsyncIterator[str]:
    """Decode an event stream into ``data`` payloads, ``[DONE]`` last.

    Handles reads split anywhere (mid-line, mid-UTF-8), CR/LF/CRLF line ends, comments, multi-line data
    and a final event without its blank line. Raises ``STREAM_CLOSED`` when the body ends before
    ``[DONE]``: a truncated answer must not pass for a complete one.

    Linear in the stream's length: each byte is scanned for a line end once, and consumed lines are
    dropped from the front of one buffer. Bounded: a line (field name included; complete or still
    arriving) or one event's data longer than ``max_event_bytes`` is ``RESPONSE_TOO_LARGE``, so memory
    never grows past about one cap plus one read.
    """
    buffer = bytearray()
    scan = 0  # where the search for the next line end resumes (bytes before it hold none)
    data: list[bytes] = []
    event_bytes = 0

    def line(raw: bytes | bytearray) -> str | None:
        nonlocal event_bytes
        if len(raw) > max_event_bytes:
            raise _too_large("a line", max_event_bytes)
        if not raw:
            if not data:
                return None
            payload = b"\n".join(data)
            data.clear()
            event_bytes = 0
            try:
                return payload.decode("utf-8")
            except UnicodeDecodeError as err:
                raise LlmError("model API stream is not valid UTF-8", code=MALFORMED_RESPONSE) from err
        if raw.startswith(b"data:"):
            value = bytes(raw[6:] if raw.startswith(b"data: ") else raw[5:])
            event_bytes += len(value) + (1 if data else 0)
            if event_bytes > max_event_bytes:
                raise _too_large("a data event", max_event_bytes)
            data.append(value)
        return None  # comments (":…") and other fields (event, id, retry) carry nothing here

    async for raw in chunks:
        buffer += raw
        start = 0
        while (found := _LINE_END.search(buffer, scan)) is not None:
            at = found.start()
            if buffer[at] == 0x0D:  # "\r": alone, or the first half of "\r\n"
                if at + 1 == len(buffer):
                    scan = at  # the next read decides
                    break
                after = at + 2 if buffer[at + 1] == 0x0A else at + 1
            else:
                after = at + 1
            payload = line(buffer[start:at])
            start = scan = after
            if payload is not None:
                yield payload
                if payload.strip() == DONE:
                    return
        else:
            scan = len(buffer)
        if start:
            del buffer[:start]  # CPython drops a bytearray's prefix without moving the rest
            scan -= start
        if len(buffer) > max_event_bytes:
            raise _too_large("a line", max_event_bytes)
    for raw_line in (buffer.rstrip(b"\r\n"), b""):
        payload = line(raw_line)
        if payload is not None:
            yield payload
            if payload.strip() == DONE:
                return
    raise LlmError("model API stream ended without [DONE]", code=STREAM_CLOSED)


def _int(value: object) -> int:
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return 0


def _opt_int(value: object) -> int | None:
    return None if value is None or isinstance(value, bool) or not isinstance(value, (int, float)) else _int(value)


def map_usage(usage: Mapping[str, Any]) -> TokenUsage:
    """Wire usage → disjoint ``TokenUsage``. DeepSeek's ``prompt_tokens`` *includes* cache hits, so the
    cache read (``prompt_tokens_details.cached_tokens``, else ``prompt_cache_hit_tokens``) is subtracted."""
    details = usage.get("prompt_tokens_details")
    cached = _opt_int(details.get("cached_tokens")) if isinstance(details, Mapping) else None
    if cached is None:
        cached = _opt_int(usage.get("prompt_cache_hit_tokens"))
    completion_details = usage.get("completion_tokens_details")
    reasoning = (
        _opt_int(completion_details.get("reasoning_tokens")) if isinstance(completion_details, Mapping) else None
    )
    mapped: TokenUsage = {
        "inputTokens": max(_int(usage.get("prompt_tokens")) - (cached or 0), 0),
        "outputTokens": _int(usage.get("completion_tokens")),
    }
    if cached is not None:
        mapped["cacheReadTokens"] = cached
    if reasoning is not None:
        mapped["reasoningTokens"] = reasoning
    return mapped


class _Open:
    __slots__ = ("call_id", "index", "kind", "name", "text")

    def __init__(self, index: int, kind: Literal["text", "reasoning", "tool-call"]) -> None:
        self.index = index
        self.kind = kind
        self.text = ""
        self.call_id: str | None = None
        self.name: str | None = None

    def block(self) -> dict[str, Any]:
        if self.kind == "tool-call":
            call_id = self.call_id if self.call_id is not None else f"call-{self.index}"
            return {"type": "tool-call", "id": call_id, "name": self.name or "", "arguments": self.text}
        return {"type": self.kind, "text": self.text}


class StreamTranslator:
    """Chat-completions chunk payloads → :data:`StreamChunk` dicts (one instance per response).

    One reasoning block, one text block and one block per ``tool_calls[].index``, numbered in the order
    they open; empty deltas open nothing. ``finish_reason`` and the latest usage are held back until
    ``[DONE]`` (:meth:`done`), which emits every ``block-end``, then ``usage``, then ``finish`` — so usage
    attached to the finish chunk and a trailing usage-only chunk both land before ``finish``.
    """

    def __init__(self, *, request_id: str | None = None) -> None:
        self._request_id = request_id
        self._order: list[_Open] = []
        self._text: _Open | None = None
        self._reasoning: _Open | None = None
        self._tools: dict[int, _Open] = {}
        self._finish_reason: str | None = None
        self._usage: TokenUsage | None = None

    def _open(self, kind: Literal["text", "reasoning", "tool-call"], out: list[StreamChunk]) -> _Open:
        block = _Open(len(self._order), kind)
        self._order.append(block)
        out.append({"type": "block-start", "index": block.index, "blockType": kind})
        return block

    def _malformed(self, message: str) -> LlmError:
        return LlmError(message, code=MALFORMED_RESPONSE, request_id=self._request_id)

    def feed(self, payload: str) -> list[StreamChunk]:
        try:
            chunk = json.loads(payload)
        except ValueError as err:
            raise self._malformed(f"malformed SSE payload: {payload[:120]}") from err
        if not isinstance(chunk, dict):
            raise self._malformed(f"SSE payload is not a JSON object: {payload[:120]}")
        error = chunk.get("error")
        if error and not chunk.get("choices"):
            message, detail = _error_detail(chunk)
            code = SERVER
            if is_quota_error(detail):
                code = QUOTA
            elif is_context_overflow(detail):
                code = CONTEXT_WINDOW_EXCEEDED
            raise LlmError(message or "model API reported an error mid-stream", code=code, request_id=self._request_id)
        out: list[StreamChunk] = []
        choices = chunk.get("choices")
        for choice in choices if isinstance(choices, list) else ():
            if not isinstance(choice, dict):
                continue
            delta = choice.get("delta")
            if isinstance(delta, dict):
                self._delta(delta, out)
            reason = choice.get("finish_reason")
            if isinstance(reason, str) and reason:
                self._finish_reason = reason
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self._usage = map_usage(usage)
        return out

    def _delta(self, delta: Mapping[str, Any], out: list[StreamChunk]) -> None:
        reasoning = delta.get("reasoning_content")
        if isinstance(reasoning, str) and reasoning:
            if self._reasoning is None:
                self._reasoning = self._open("reasoning", out)
            self._reasoning.text += reasoning
            out.append({"type": "reasoning-delta", "index": self._reasoning.index, "text": reasoning})
        content = delta.get("content")
        if isinstance(content, str) and content:
            if self._text is None:
                self._text = self._open("text", out)
            self._text.text += content
            out.append({"type": "text-delta", "index": self._text.index, "text": content})
        calls = delta.get("tool_calls")
        for position, call in enumerate(calls if isinstance(calls, list) else ()):
            if not isinstance(call, dict):
                continue
            wire_index = call.get("index")
            key = wire_index if isinstance(wire_index, int) and not isinstance(wire_index, bool) else position
            block = self._tools.get(key)
            if block is None:
                block = self._tools[key] = self._open("tool-call", out)
            if isinstance(call.get("id"), str) and call["id"]:
                block.call_id = call["id"]
            function = call.get("function")
            fragment = ""
            if isinstance(function, dict):
                if isinstance(function.get("name"), str) and function["name"]:
                    block.name = function["name"]
                if isinstance(function.get("arguments"), str):
                    fragment = function["arguments"]
            block.text += fragment
            tool_delta: ToolCallDeltaChunk = {
                "type": "tool-call-delta",
                "index": block.index,
                "id": block.call_id if block.call_id is not None else f"call-{block.index}",
                "argumentsDelta": fragment,
            }
            if block.name is not None:
                tool_delta["name"] = block.name
            out.append(tool_delta)

    def done(self) -> list[StreamChunk]:
        """The chunks owed at ``[DONE]``: block-ends, usage, finish."""
        out: list[StreamChunk] = [{"type": "block-end", "index": b.index, "block": b.block()} for b in self._order]
        if self._usage is not None:
            out.append({"type": "usage", "usage": self._usage})
        out.append(self._finish())
        return out

    def _finish(self) -> FinishChunk:
        reason = self._finish_reason
        if reason in (None, "stop"):
            if not self._order:
                error = LlmError(
                    "model returned an empty response (no text, reasoning or tool call)",
                    code=EMPTY_RESPONSE,
                    request_id=self._request_id,
                )
                return failure_chunk(error.failure)
            return finish_chunk("stop")
        if reason == "tool_calls":
            return finish_chunk("tool-calls")
        if reason == "length":
            return finish_chunk("max-tokens")
        assert reason is not None
        stopped = LlmError(f"model stopped: {reason}", code=reason.upper(), request_id=self._request_id)
        return failure_chunk(stopped.failure)


# --- the provider --------------------------------------------------------------------------------


class _Failed:
    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


_END: Final = object()
_WAKE: Final = object()


def resolve_api_key(api_key: str | None, provider: str, base_url: str | None = None) -> str:
    """The key to send; ``""`` means none (no ``Authorization`` header).

    An explicit ``api_key`` wins, ``""`` included (a keyless server). Otherwise the environment:
    ``DEEPSEEK_API_KEY`` is read only for DeepSeek's own host (``api.deepseek.com``, the default), so a
    DeepSeek key never leaks to another gateway or a local server; ``OPENAI_API_KEY`` is read for any
    endpoint (empty variables count as unset). With no key, a loopback ``base_url`` needs none and any
    other is ``MISSING_API_KEY``.
    """
    if api_key is not None:
        return api_key
    url = base_url if base_url is not None else DEEPSEEK_BASE_URL
    names = API_KEY_ENV_VARS if is_deepseek_base_url(url) else ("OPENAI_API_KEY",)
    for name in names:
        value = os.environ.get(name)
        if value:
            return value
    if is_loopback_base_url(url):
        return ""
    raise MissingApiKeyError(
        f'no API key for provider "{provider}": pass api_key=... (api_key="" for a server that needs none) '
        "or set DEEPSEEK_API_KEY (read for api.deepseek.com only) or OPENAI_API_KEY (any endpoint)"
    )


class OpenAICompatibleProvider:
    """Streams chat completions from DeepSeek or any OpenAI-compatible endpoint.

    ``provider`` is the route name (``Provider.name``, the ``provider`` of the messages it produces).
    ``model`` is used when a request leaves its model empty. ``api_key``: see :func:`resolve_api_key`
    (``""`` sends none; a loopback ``base_url`` needs none). ``timeout_s`` is an idle timeout — the longest
    wait for the first SSE data event and then between data events; keep-alive comments are not progress
    — not a cap on the whole answer. ``max_event_bytes`` caps one SSE line and one data event
    (``RESPONSE_TOO_LARGE`` beyond it). ``harness_headers`` sends DeepSeek's session-id and compaction
    headers; by default only when the base URL's host is ``api.deepseek.com``. ``thinking=False`` stops
    sending DeepSeek's ``thinking`` switch, for OpenAI-compatible servers that reject unknown fields.
    ``context_window`` is the models' window in tokens (see :meth:`context_window_for`). Use
    one instance per event loop and close it with ``await provider.aclose()`` (or ``async with``) to
    release pooled connections.
    """

    def __init__(
        self,
        base_url: str | None = None,
        model: str = DEFAULT_MODEL,
        api_key: str | None = None,
        provider: str = "deepseek",
        timeout_s: float = DEFAULT_TIMEOUT_S,
        *,
        thinking: bool = True,
        default_headers: Mapping[str, str] | None = None,
        harness_headers: bool | None = None,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        context_window: int | None = None,
    ) -> None:
        if context_window is not None and (
            isinstance(context_window, bool) or not isinstance(context_window, int) or context_window < 1
        ):
            raise InvalidOptionError(f"context_window must be a positive number of tokens, not {context_window!r}")
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be a positive number of seconds, not {timeout_s!r}")
        if max_event_bytes < 1:
            raise ValueError(f"max_event_bytes must be positive, not {max_event_bytes!r}")
        self.name = provider
        self.model = model
        self.base_url = (base_url or DEEPSEEK_BASE_URL).rstrip("/")
        self.timeout_s = timeout_s
        self.thinking = thinking
        self.harness_headers = is_deepseek_base_url(self.base_url) if harness_headers is None else harness_headers
        self.max_event_bytes = max_event_bytes
        self.context_window = context_window
        key = resolve_api_key(api_key, provider, self.base_url)
        # The client insists on a credential; a keyless call omits its Authorization header per request.
        self._keyless = not key
        self._client = openai.AsyncOpenAI(
            api_key=key or "no-key",
            base_url=self.base_url,
            timeout=timeout_s,
            max_retries=0,
            default_headers=default_headers,
        )

    async def aclose(self) -> None:
        await self._client.close()

    async def __aenter__(self) -> OpenAICompatibleProvider:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"OpenAICompatibleProvider(provider={self.name!r}, base_url={self.base_url!r}, model={self.model!r})"

    def context_window_for(self, model: str) -> int | None:
        """The model's context window in tokens (the provider's model info, runtime spec §5.6).

        ``context_window=`` when given; otherwise :data:`DEEPSEEK_CONTEXT_WINDOW` on the DeepSeek endpoint
        and ``None`` (unknown: compaction by pressure stays off, overflow recovery still works) elsewhere.
        """
        if self.context_window is not None:
            return self.context_window
        return DEEPSEEK_CONTEXT_WINDOW if is_deepseek_base_url(self.base_url) else None

    async def stream(
        self, request: GenerateRequest, *, signal: asyncio.Event | None = None
    ) -> AsyncIterator[StreamChunk]:
        """Stream one call as :data:`StreamChunk` dicts, ending with exactly one ``finish`` (see
        :class:`~agentlog.llm.types.Provider`). Setting ``signal`` aborts promptly: the HTTP response is
        closed and the stream ends with ``finish {kind: aborted, failure: {code: ABORTED}}``."""
        aborted = LlmError("model request aborted by caller", code=ABORTED).failure
        if signal is not None and signal.is_set():
            yield failure_chunk(aborted)
            return
        # The HTTP exchange runs in its own task so an abort can cancel it wherever it is waiting (connect,
        # headers, next read) and the response is closed by the task that opened it. The queue is unbounded:
        # the exchange may read ahead of a slow consumer, by at most one response.
        queue: asyncio.Queue[object] = asyncio.Queue()
        producer = asyncio.create_task(self._produce(request, queue))
        watcher: asyncio.Task[Literal[True]] | None = None
        if signal is not None:
            watcher = asyncio.create_task(signal.wait())
            watcher.add_done_callback(lambda _: producer.cancel())
        try:
            while True:
                item = await queue.get()
                if item is _WAKE or (signal is not None and signal.is_set()):
                    yield failure_chunk(aborted)
                    return
                if isinstance(item, _Failed):
                    yield failure_chunk(to_llm_error(item.error).failure)
                    return
                if item is _END:  # cannot happen: the producer always ends with finish or a failure
                    yield failure_chunk(LlmError("model stream ended without finish", code=STREAM_CLOSED).failure)
                    return
                chunk = cast("StreamChunk", item)
                yield chunk
                if chunk["type"] == "finish":
                    return
        finally:
            for task in (watcher, producer):
                if task is not None and not task.done():
                    task.cancel()
            await asyncio.gather(*(t for t in (watcher, producer) if t is not None), return_exceptions=True)

    async def _produce(self, request: GenerateRequest, queue: asyncio.Queue[object]) -> None:
        try:
            async for chunk in self._chunks(request):
                queue.put_nowait(chunk)
        except asyncio.CancelledError:
            queue.put_nowait(_WAKE)
            raise
        except Exception as exc:
            queue.put_nowait(_Failed(exc))
        else:
            queue.put_nowait(_END)

    async def _chunks(self, request: GenerateRequest) -> AsyncIterator[StreamChunk]:
        """The raising core: one HTTP exchange, translated; failures propagate as exceptions."""
        body = request_body(request, model=request.model or self.model, thinking=self.thinking)
        messages: list[ChatCompletionMessageParam] = body.pop("messages")
        model: str = body.pop("model")
        body.pop("stream")
        body.pop("stream_options")
        headers: dict[str, Any] = dict(request_headers(request, harness_headers=self.harness_headers))
        if self._keyless:
            headers["Authorization"] = openai.omit
        loop = asyncio.get_running_loop()
        request_id: str | None = None
        # The idle deadline counts progress, not bytes: only a data event moves it, so a server that sends
        # nothing but keep-alive comments times out like a silent one (the client's own read timeout would
        # be reset by every comment).
        deadline = asyncio.timeout(self.timeout_s)
        try:
            async with deadline:
                async with self._client.chat.completions.with_streaming_response.create(
                    model=model,
                    messages=messages,
                    stream=True,
                    stream_options={"include_usage": True},
                    extra_body=body or None,
                    extra_headers=headers,
                ) as response:
                    request_id = _header_request_id(response.headers)
                    translator = StreamTranslator(request_id=request_id)
                    try:
                        events = sse_data(
                            _guarded(response.iter_bytes(), request_id), max_event_bytes=self.max_event_bytes
                        )
                        async for payload in events:
                            deadline.reschedule(loop.time() + self.timeout_s)
                            if payload.strip() == DONE:
                                for chunk in translator.done():
                                    yield chunk
                                return
                            for chunk in translator.feed(payload):
                                yield chunk
                    except LlmError as err:
                        if err.request_id is None:
                            err.request_id = request_id
                        raise
        except TimeoutError as err:
            if not deadline.expired():
                raise
            raise LlmError(
                f"no data from the model API for {self.timeout_s:g} s (keep-alive comments do not count); "
                "raise the idle timeout (timeout_s, agentlog --timeout) for slow endpoints",
                code=TIMEOUT,
                request_id=request_id,
            ) from err


async def _guarded(chunks: AsyncIterator[bytes], request_id: str | None) -> AsyncIterator[bytes]:
    """Body bytes with read failures (lost connection, idle timeout) turned into :class:`LlmError`."""
    try:
        async for chunk in chunks:
            yield chunk
    except Exception as exc:
        raise to_llm_error(exc, request_id=request_id) from exc
