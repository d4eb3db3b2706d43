"""A scripted model behind a real OpenAI-compatible HTTP endpoint, on loopback only.

Tests and ``agentlog demo`` need a model that answers predictably and offline, yet exercises the *real*
client path: HTTP, SSE framing, status codes, headers, lost connections. So instead of mocking the
``openai`` client, this serves ``POST /v1/chat/completions`` (and ``/chat/completions``) from a
``ThreadingHTTPServer`` on ``127.0.0.1``, streaming chunks in the exact wire format of the OpenAI /
DeepSeek streaming API. What it answers is a *script*: one item per request, in order::

    with DemoModelServer([
        Reply(reasoning="The user wants the file.", tool_calls=[ToolCall("read_file", {"path": "README.md"})]),
        "It is a README.",                                    # a plain string is Reply(text=...)
        ErrorReply(429, retry_after=2),                       # an HTTP error, with Retry-After
        Reply("partial answ", ending="drop"),                 # connection lost mid-stream
        Hang(seconds=5),                                      # no response at all (client times out)
        Hang(seconds=5, keepalive_s=0.5),                     # only ": keep-alive" comments, no data
        lambda request: f"You said {len(request.body['messages'])} things",   # computed from the request
    ]) as server:
        provider = OpenAICompatibleProvider(base_url=server.base_url, api_key="demo")

Every request body is recorded (``server.requests``) so tests can assert on exactly what the client
sent. Request targets in absolute form (``POST http://host/v1/chat/completions``) are accepted too, so
the server can stand in as an ``HTTP_PROXY`` for a client configured with another host's base URL —
the recorded ``host`` header is then the one the client meant. Responses carry
``x-agentlog-demo: scripted`` and ``system_fingerprint: "agentlog-demo"`` so a transcript can never be
mistaken for a real model's. The server binds loopback only, every wait is bounded, and ``stop()`` (or
leaving the ``with`` block) closes open connections and joins its threads.

For compaction tests the server also behaves like a model with a finite context window:

* ``context_window=N``: a request whose estimated prompt exceeds ``N`` tokens is refused with HTTP 400 and
  the provider's context-length text (``This model's maximum context length is N tokens. However, you
  requested M tokens …``), which the OpenAI-compatible provider classifies ``CONTEXT_WINDOW_EXCEEDED``.
  The estimate (:func:`estimate_request_tokens`) is agentlog's own token heuristic (runtime spec §5.4,
  :mod:`agentlog.llm.tokens`) applied to the request as the wire carries it: each wire message
  priced as one message, the leading system message and the tool schemas as the request header. It is
  within a few tokens per message of what the token meter prices for the same request. Every recorded
  request carries its ``estimated_tokens``, so "every request stayed under the window" is checkable.
* ``overflow_next=N`` (also settable while running): the next N non-compaction requests are refused with
  the same 400, whatever their size, to script "overflow → compaction → retry".
* A compaction request — its last user message is the compaction instruction, or it carries
  ``x-deepseek-harness-compact: 1`` — is answered by :func:`demo_summary`: a short, deterministic Markdown
  checkpoint with the instruction's eight section headings (with usage), so a summary is always much
  smaller than what it replaces. ``auto_compaction=False`` hands such requests to the script instead.

Refused and auto-answered requests consume no script item, so a script written for the agent's turns
stays in step however often compaction happens. :func:`large_result_turns` scripts turns whose tool
result is large (a ``read_file`` of a big file), to fill a small window quickly.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final, Literal, TypeAlias

from ..llm.compaction_protocol import COMPACT_HEADER, COMPACTION_MARKER, SUMMARY_OPEN_TAG, SUMMARY_SECTIONS
from ..llm.tokens import CHARS_PER_TOKEN, estimate_header, estimate_message

LOOPBACK: Final = "127.0.0.1"
CHAT_PATHS: Final = frozenset({"/v1/chat/completions", "/chat/completions"})
DEMO_LABEL: Final = "agentlog-demo"

Ending = Literal["done", "eof", "drop"]
"""How a stream ends: ``done`` sends ``data: [DONE]`` (normal); ``eof`` ends the body cleanly without it
(a truncated stream → ``STREAM_CLOSED``); ``drop`` closes the socket mid-body (→ ``TRANSPORT``)."""


@dataclass(frozen=True)
class ToolCall:
    """A scripted tool call; ``arguments`` is raw JSON text or a mapping (serialized for you)."""

    name: str
    arguments: str | Mapping[str, Any] = "{}"
    id: str | None = None

    def arguments_text(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments, ensure_ascii=False)


@dataclass(frozen=True)
class Usage:
    """Reported token counts, in the wire's (DeepSeek's) convention: ``prompt_tokens`` includes cache hits."""

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int | None = None
    reasoning_tokens: int | None = None

    def wire(self) -> dict[str, Any]:
        usage: dict[str, Any] = {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
        }
        if self.cached_tokens is not None:
            usage["prompt_tokens_details"] = {"cached_tokens": self.cached_tokens}
            usage["prompt_cache_hit_tokens"] = self.cached_tokens
            usage["prompt_cache_miss_tokens"] = self.prompt_tokens - self.cached_tokens
        if self.reasoning_tokens is not None:
            usage["completion_tokens_details"] = {"reasoning_tokens": self.reasoning_tokens}
        return usage


@dataclass(frozen=True)
class Reply:
    """A streamed assistant reply: reasoning, then text, then tool calls, then the finish chunk and usage.

    Text, reasoning and tool-call arguments are split into ``chunk_chars``-sized fragments, one SSE
    event each, as a real model streams them. ``finish_reason`` defaults to ``tool_calls`` when there are
    tool calls, else ``stop``. ``usage="auto"`` estimates counts (≈4 characters a token); ``None`` sends
    no usage chunk. ``cut_after`` sends only the first N events before ``ending`` applies, to simulate a
    stream that breaks off early. ``delay_s`` paces events (to test idle timeouts and aborts).
    """

    text: str = ""
    reasoning: str = ""
    tool_calls: Sequence[ToolCall] = ()
    usage: Usage | Literal["auto"] | None = "auto"
    finish_reason: str | None = None
    chunk_chars: int = 8
    interleave_tool_calls: bool = False
    ending: Ending = "done"
    cut_after: int | None = None
    delay_s: float = 0.0


@dataclass(frozen=True)
class RawStream:
    """SSE ``data`` payloads sent verbatim (malformed JSON, in-stream error objects, odd servers)."""

    events: Sequence[str]
    ending: Ending = "done"
    delay_s: float = 0.0


@dataclass(frozen=True)
class ErrorReply:
    """An HTTP error: ``{"error": {message, type, param, code}}`` unless ``body`` (JSON value or raw
    ``str``/``bytes``) replaces it. ``retry_after`` becomes the ``Retry-After`` header (seconds or a date)."""

    status: int
    message: str | None = None
    retry_after: str | float | None = None
    type: str | None = None
    code: str | None = None
    body: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Hang:
    """Say nothing for ``seconds`` (bounded; cut short by ``stop()``), then close the connection.
    ``after_headers`` first sends the 200 headers and one role chunk: a stream that stalls mid-body.
    ``keepalive_s`` sends the 200 headers and then only SSE keep-alive comments (``: keep-alive``), one
    every ``keepalive_s`` seconds: bytes keep flowing, but no event ever arrives."""

    seconds: float = 30.0
    after_headers: bool = False
    keepalive_s: float | None = None


Answer = Literal["script", "summary", "context-overflow"]
"""How a request was answered: from the script, by the built-in compaction summary, or refused as too
large for the context window (or by ``overflow_next``)."""


@dataclass(frozen=True)
class RecordedRequest:
    """One request as received: headers lower-cased, ``body`` parsed JSON.

    ``estimated_tokens`` is :func:`estimate_request_tokens` of the body (0 for a body that is not a JSON
    object), ``compaction`` whether it is a compaction request (:func:`is_compaction_request`), and
    ``answer`` how the server answered it.
    """

    method: str
    path: str
    headers: Mapping[str, str]
    body: Any
    estimated_tokens: int = 0
    compaction: bool = False
    answer: Answer = "script"


ScriptItem: TypeAlias = Reply | RawStream | ErrorReply | Hang | str | Callable[[RecordedRequest], "ScriptItem"]
"""One scripted answer; a callable computes it from the request it answers."""

_ERROR_TYPES: Final = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "insufficient_balance",
    403: "permission_error",
    404: "not_found_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
}


def _pieces(text: str, size: int) -> list[str]:
    size = max(size, 1)
    return [text[i : i + size] for i in range(0, len(text), size)]


def reply_payloads(
    reply: Reply, *, model: str, completion_id: str, created: int, include_usage: bool, prompt_chars: int, ordinal: int
) -> list[str]:
    """The SSE ``data`` payloads (JSON text, without ``[DONE]``) a real endpoint would stream for ``reply``."""

    def event(delta: dict[str, Any] | None, finish: str | None = None, usage: dict[str, Any] | None = None) -> str:
        chunk: dict[str, Any] = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "system_fingerprint": DEMO_LABEL,
            "choices": []
            if delta is None
            else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
        if usage is not None:
            chunk["usage"] = usage
        return json.dumps(chunk, ensure_ascii=False)

    events = [event({"role": "assistant", "content": ""})]
    events += [event({"content": None, "reasoning_content": p}) for p in _pieces(reply.reasoning, reply.chunk_chars)]
    events += [event({"content": p}) for p in _pieces(reply.text, reply.chunk_chars)]
    per_call: list[list[str]] = []
    for index, call in enumerate(reply.tool_calls):
        call_id = call.id if call.id is not None else f"call_{ordinal}_{index}"
        opening = {"index": index, "id": call_id, "type": "function", "function": {"name": call.name, "arguments": ""}}
        fragments = [event({"tool_calls": [opening]})]
        fragments += [
            event({"tool_calls": [{"index": index, "function": {"arguments": p}}]})
            for p in _pieces(call.arguments_text(), reply.chunk_chars)
        ]
        per_call.append(fragments)
    if reply.interleave_tool_calls:
        longest = max((len(f) for f in per_call), default=0)
        events += [f[i] for i in range(longest) for f in per_call if i < len(f)]
    else:
        events += [e for fragments in per_call for e in fragments]
    finish = reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")
    events.append(event({"content": ""}, finish))
    usage = reply.usage
    if usage == "auto":
        completion_chars = (
            len(reply.text) + len(reply.reasoning) + sum(len(c.arguments_text()) for c in reply.tool_calls)
        )
        usage = Usage(
            prompt_tokens=max(prompt_chars // 4, 1),
            completion_tokens=max(completion_chars // 4, 1),
            reasoning_tokens=len(reply.reasoning) // 4 if reply.reasoning else None,
        )
    if include_usage and isinstance(usage, Usage):
        events.append(event(None, usage=usage.wire()))
    return events


# --- a model with a context window, and compaction requests -------------------------------------------

# The request markers, the eight section headings and the checkpoint tag are the compaction wire protocol
# (agentlog.llm.compaction_protocol), shared with the summarizer that writes them.
_CLIP: Final = 80


def context_length_message(window: int, requested: int) -> str:
    """The provider's context-length refusal (OpenAI's and DeepSeek's wording)."""
    return (
        f"This model's maximum context length is {window} tokens. However, you requested {requested} tokens "
        f"({requested} in the messages, 0 in the completion). Please reduce the length of the messages or completion."
    )


def context_overflow_reply(window: int, requested: int) -> ErrorReply:
    """The HTTP 400 a real endpoint answers to a prompt larger than its window (a script item too)."""
    return ErrorReply(
        400,
        message=context_length_message(window, requested),
        type="invalid_request_error",
        code="context_length_exceeded",
    )


def _wire_text(content: Any) -> str:
    """A wire message's ``content`` as text: a string, or the text parts of a content-part list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(part.get("text", "")) for part in content if isinstance(part, Mapping) and part.get("type") == "text"
        )
    return ""


def _priced_message(wire: Mapping[str, Any]) -> dict[str, Any]:
    """One wire message as the provider-neutral message it was serialized from (blocks only)."""
    role = wire.get("role")
    text = _wire_text(wire.get("content"))
    blocks: list[dict[str, Any]] = []
    if role == "assistant":
        reasoning = wire.get("reasoning_content")
        if isinstance(reasoning, str) and reasoning:
            blocks.append({"type": "reasoning", "text": reasoning})
        if text:
            blocks.append({"type": "text", "text": text})
        for call in wire.get("tool_calls") or ():
            function = call.get("function") if isinstance(call, Mapping) else None
            if isinstance(function, Mapping):
                blocks.append(
                    {
                        "type": "tool-call",
                        "id": str(call.get("id", "")),
                        "name": str(function.get("name", "")),
                        "arguments": str(function.get("arguments", "")),
                    }
                )
    elif role == "tool":
        content = [{"type": "text", "text": text}]
        blocks.append({"type": "tool-result", "toolCallId": str(wire.get("tool_call_id", "")), "content": content})
    else:
        blocks.append({"type": "text", "text": text})
    return {"role": role, "content": blocks}


def estimate_request_tokens(body: Any) -> int:
    """The prompt size of a chat-completions body in agentlog's heuristic tokens (runtime spec §5.4).

    The leading ``system`` message and the tool schemas are priced as the request header
    (:func:`~agentlog.llm.tokens.estimate_header`), every other wire message as one message
    (:func:`~agentlog.llm.tokens.estimate_message`) rebuilt from the wire: an assistant's
    reasoning, text and tool calls, a tool message's result, a user message's text. The completion
    (``max_tokens``) is not counted. 0 for a body that is not a JSON object.
    """
    if not isinstance(body, Mapping):
        return 0
    raw = body.get("messages")
    messages = [m for m in raw if isinstance(m, Mapping)] if isinstance(raw, list) else []
    header: dict[str, Any] = {}
    if messages and messages[0].get("role") == "system":
        header["system"] = _wire_text(messages[0].get("content"))
        messages = messages[1:]
    tools = [
        {"name": f.get("name"), "description": f.get("description"), "parameters": f.get("parameters")}
        for t in body.get("tools") or ()
        if isinstance(t, Mapping) and isinstance(f := t.get("function"), Mapping)
    ]
    if tools:
        header["tools"] = tools
    return estimate_header(header) + sum(estimate_message(_priced_message(m)) for m in messages)


def _last_user_text(body: Any) -> str:
    raw = body.get("messages") if isinstance(body, Mapping) else None
    candidates: list[Any] = raw if isinstance(raw, list) else []
    for message in reversed(candidates):
        if isinstance(message, Mapping) and message.get("role") == "user":
            return _wire_text(message.get("content"))
    return ""


def is_compaction_request(headers: Mapping[str, str], body: Any) -> bool:
    """A summarization call: the compaction header (DeepSeek's ``x-deepseek-harness-compact: 1``), or a
    last user message carrying the compaction instruction (the header goes to DeepSeek's host only)."""
    if headers.get(COMPACT_HEADER) == "1":
        return True
    return COMPACTION_MARKER in _last_user_text(body)


def _clip(text: str, limit: int = _CLIP) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def demo_summary(body: Any) -> str:
    """The scripted checkpoint for a compaction request: the eight sections, a few hundred characters.

    Deterministic (a function of the request only): the first user request it condenses (clipped), how
    many messages and tool results it condenses, and how many earlier checkpoints it merges. Its size
    does not grow with the conversation, so a summary is always smaller than a region worth compacting.
    """
    raw = body.get("messages") if isinstance(body, Mapping) else None
    messages = [m for m in raw if isinstance(m, Mapping)] if isinstance(raw, list) else []
    region = [m for m in messages if m.get("role") != "system"][:-1]  # without the instruction itself
    texts = [_wire_text(m.get("content")) for m in region if m.get("role") == "user"]
    checkpoints = sum(1 for text in texts if SUMMARY_OPEN_TAG in text)
    requests = [text for text in texts if SUMMARY_OPEN_TAG not in text and text.strip()]
    results = sum(1 for m in region if m.get("role") == "tool")
    calls = sum(len(m.get("tool_calls") or ()) for m in region if m.get("role") == "assistant")
    facts = {
        "Primary Request and Intent": f'- "{_clip(requests[0])}"' if requests else "- (none)",
        "Key Technical Concepts": "- (none)",
        "Files and Code": "- (none)",
        "Errors and Fixes": "- (none)",
        "Pending Jobs": "- (none)",
        "Current Work": f"- condensed {len(region)} messages: {calls} tool calls, {results} tool results"
        + (f", merging {checkpoints} earlier checkpoint(s)" if checkpoints else ""),
        "Next Step": "- continue from the messages that follow",
        "Critical Context": f"- written by the scripted demo model ({DEMO_LABEL}), not a real LLM",
    }
    return "\n\n".join(f"## {title}\n{facts[title]}" for title in SUMMARY_SECTIONS)


def _summary_reply(request: RecordedRequest) -> Reply:
    text = demo_summary(request.body)
    return Reply(
        text=text,
        usage=Usage(prompt_tokens=max(request.estimated_tokens, 1), completion_tokens=-(-len(text) // CHARS_PER_TOKEN)),
    )


BIG_FILE: Final = "big.txt"


def large_result_turns(turns: int, *, path: str = BIG_FILE, answer: str = "Read it.") -> list[ScriptItem]:
    """Two script items per turn: a ``read_file`` of ``path`` (create it large, e.g. 5,000 characters), then
    a short final answer. Call ids are unique per turn (``call-big-<turn>``)."""
    script: list[ScriptItem] = []
    for turn in range(1, turns + 1):
        script.append(
            Reply(text="Reading it.", tool_calls=[ToolCall("read_file", {"path": path}, id=f"call-big-{turn}")])
        )
        script.append(f"{answer} (turn {turn})")
    return script


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: DemoModelServer

    def __init__(self, owner: DemoModelServer, port: int) -> None:
        self.owner = owner
        self._lock = threading.Lock()
        self._active: dict[socket.socket, threading.Thread] = {}
        super().__init__((LOOPBACK, port), _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        thread = threading.Thread(
            target=self.process_request_thread, args=(request, client_address), daemon=True, name="demo-model-conn"
        )
        with self._lock:
            self._active[request] = thread
        thread.start()

    def shutdown_request(self, request: Any) -> None:
        with self._lock:
            self._active.pop(request, None)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        error = sys.exc_info()[1]
        if error is not None and not isinstance(error, OSError):
            self.owner.errors.append(f"{type(error).__name__}: {error}")

    def close_connections(self) -> list[threading.Thread]:
        with self._lock:
            active = list(self._active.items())
        for sock, _ in active:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        return [thread for _, thread in active]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server
    timeout = 30  # an idle keep-alive connection never outlives a test run by much

    def log_message(self, format: str, *args: Any) -> None:
        pass  # tests and the demo stay quiet; requests are recorded on the server instead

    def do_GET(self) -> None:
        self._json(404, {"error": {"message": f"no route {self.path}", "type": "not_found_error"}})

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        path = self.path.split("?", 1)[0]
        if "://" in path:  # absolute form, as a forward proxy receives it
            path = "/" + path.split("://", 1)[1].partition("/")[2]
        if path not in CHAT_PATHS:
            self._json(404, {"error": {"message": f"no route {path}", "type": "not_found_error"}})
            return
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            self._json(400, {"error": {"message": "request body is not JSON", "type": "invalid_request_error"}})
            return
        headers = {k.lower(): v for k, v in self.headers.items()}
        request = RecordedRequest(
            method="POST",
            path=path,
            headers=headers,
            body=body,
            estimated_tokens=estimate_request_tokens(body),
            compaction=is_compaction_request(headers, body),
        )
        ordinal, item = self.server.owner._take(request)
        self._serve(item, request, ordinal)

    # --- responses ---

    def _request_id(self, ordinal: int) -> str:
        return f"{DEMO_LABEL}-req-{ordinal}"

    def _json(self, status: int, payload: Any, headers: Mapping[str, str] | None = None) -> None:
        if isinstance(payload, bytes):
            data = payload
        elif isinstance(payload, str):
            data = payload.encode()
        else:
            data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("x-agentlog-demo", "scripted")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _serve(self, item: ScriptItem, request: RecordedRequest, ordinal: int) -> None:
        stopping = self.server.owner._stopping
        if isinstance(item, ErrorReply):
            self._error(item, ordinal)
        elif isinstance(item, Hang):
            if item.keepalive_s is not None:
                self._start_stream(ordinal)
                deadline = time.monotonic() + item.seconds
                interval = max(item.keepalive_s, 0.001)
                while time.monotonic() < deadline and not stopping.is_set():
                    try:
                        self._chunk(b": keep-alive\n\n")
                    except OSError:
                        return  # the client gave up
                    stopping.wait(interval)
                self._drop()
                return
            if item.after_headers:
                self._start_stream(ordinal)
                self._event(json.dumps({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}))
            stopping.wait(item.seconds)
            self._drop()
        elif isinstance(item, (Reply, RawStream)):
            body = request.body if isinstance(request.body, dict) else {}
            if isinstance(item, Reply):
                options = body.get("stream_options")
                payloads = reply_payloads(
                    item,
                    model=self.server.owner.model or str(body.get("model") or DEMO_LABEL),
                    completion_id=f"{DEMO_LABEL}-{ordinal}",
                    created=int(time.time()),
                    include_usage=isinstance(options, dict) and options.get("include_usage") is True,
                    prompt_chars=len(json.dumps(body.get("messages", []), ensure_ascii=False)),
                    ordinal=ordinal,
                )
                if item.cut_after is not None:
                    payloads = payloads[: item.cut_after]
            else:
                payloads = list(item.events)
            self._stream(payloads, item.ending, item.delay_s, ordinal)
        else:  # pragma: no cover - _take resolves everything else
            raise TypeError(f"unsupported script item {item!r}")

    def _error(self, item: ErrorReply, ordinal: int) -> None:
        headers = {"x-request-id": self._request_id(ordinal), **item.headers}
        if item.retry_after is not None:
            value = item.retry_after
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            headers["Retry-After"] = str(value)
        body = item.body
        if body is None:
            try:
                phrase = HTTPStatus(item.status).phrase
            except ValueError:
                phrase = "Error"
            default_type = "server_error" if item.status >= 500 else _ERROR_TYPES.get(item.status, "api_error")
            body = {
                "error": {
                    "message": item.message or phrase,
                    "type": item.type or default_type,
                    "param": None,
                    "code": item.code,
                }
            }
        self._json(item.status, body, headers)

    def _start_stream(self, ordinal: int) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("x-request-id", self._request_id(ordinal))
        self.send_header("x-agentlog-demo", "scripted")
        self.end_headers()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _event(self, payload: str) -> None:
        self._chunk(f"data: {payload}\n\n".encode())

    def _drop(self) -> None:
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _stream(self, payloads: Sequence[str], ending: Ending, delay_s: float, ordinal: int) -> None:
        stopping = self.server.owner._stopping
        self._start_stream(ordinal)
        for payload in payloads:
            if delay_s > 0 and stopping.wait(delay_s):
                self._drop()
                return
            self._event(payload)
        if ending == "drop":
            self._drop()
            return
        if ending == "done":
            self._event("[DONE]")
        self._chunk(b"")  # the terminating zero-length chunk: the body ends cleanly

    def handle_one_request(self) -> None:
        try:
            super().handle_one_request()
        except (ConnectionError, TimeoutError):
            self.close_connection = True  # the client went away (or the server is stopping)


class DemoModelServer:
    """A scripted OpenAI-compatible model on ``127.0.0.1`` (see the module docstring).

    ``model`` overrides the model name in streamed chunks (default: echo the request's). When the script
    runs out the server answers 400 with a message saying so — a non-retryable failure, so a demo whose
    script is too short stops at once instead of retrying.

    ``context_window``, ``overflow_next`` and ``auto_compaction`` make it a model with a finite window
    (see the module docstring); the two attributes of the same names may be changed while it runs.
    """

    def __init__(
        self,
        script: Iterable[ScriptItem] = (),
        *,
        port: int = 0,
        model: str | None = None,
        context_window: int | None = None,
        overflow_next: int = 0,
        auto_compaction: bool = True,
    ) -> None:
        if context_window is not None and context_window < 1:
            raise ValueError(f"context_window must be a positive number of tokens, not {context_window!r}")
        if overflow_next < 0:
            raise ValueError(f"overflow_next must not be negative, not {overflow_next!r}")
        self.model = model
        self.context_window = context_window
        self.overflow_next = overflow_next
        self.auto_compaction = auto_compaction
        self.errors: list[str] = []
        self._script: deque[ScriptItem] = deque(script)
        self._requests: list[RecordedRequest] = []
        self._served = 0
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._port = port
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle ---

    def start(self) -> DemoModelServer:
        if self._httpd is not None:
            return self
        self._stopping.clear()
        self._httpd = _Server(self, self._port)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True, name="demo-model-server"
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop accepting, release hanging replies, close open connections and join the threads."""
        httpd, thread = self._httpd, self._thread
        if httpd is None:
            return
        self._stopping.set()
        httpd.shutdown()
        for handler in httpd.close_connections():
            handler.join(timeout=5)
        httpd.server_close()
        if thread is not None:
            thread.join(timeout=5)
        self._httpd = self._thread = None

    def __enter__(self) -> DemoModelServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # --- addresses ---

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("DemoModelServer is not running")
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        """The OpenAI-style base URL (``http://127.0.0.1:<port>/v1``) to hand to a client."""
        return f"http://{LOOPBACK}:{self.port}/v1"

    # --- script and records ---

    def push(self, *items: ScriptItem) -> None:
        """Append replies to the script (also while running)."""
        with self._lock:
            self._script.extend(items)

    @property
    def remaining(self) -> int:
        with self._lock:
            return len(self._script)

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every chat-completions request received so far, in arrival order (a copy)."""
        with self._lock:
            return list(self._requests)

    @property
    def max_estimated_tokens(self) -> int:
        """The largest :attr:`RecordedRequest.estimated_tokens` so far (0 before any request)."""
        return max((r.estimated_tokens for r in self.requests), default=0)

    def _refusal(self, request: RecordedRequest) -> ErrorReply | None:
        """The context-length 400 for this request, if it gets one (call with the lock held)."""
        window = self.context_window
        if self.overflow_next > 0 and not request.compaction:
            self.overflow_next -= 1
            limit = window if window is not None else max(request.estimated_tokens - 1, 1)
            return context_overflow_reply(limit, request.estimated_tokens)
        if window is not None and request.estimated_tokens > window:
            return context_overflow_reply(window, request.estimated_tokens)
        return None

    def _take(self, request: RecordedRequest) -> tuple[int, Reply | RawStream | ErrorReply | Hang]:
        with self._lock:
            self._served += 1
            ordinal = self._served
            refusal = self._refusal(request)
            if refusal is not None:
                self._requests.append(replace(request, answer="context-overflow"))
                return ordinal, refusal
            if request.compaction and self.auto_compaction:
                request = replace(request, answer="summary")
                self._requests.append(request)
                return ordinal, _summary_reply(request)
            self._requests.append(request)
            item: ScriptItem | None = self._script.popleft() if self._script else None
        if item is None:
            return ordinal, ErrorReply(
                400,
                message=f"{DEMO_LABEL}: the scripted model has no reply left (request {ordinal})",
                type="demo_script_exhausted",
            )
        for _ in range(16):  # a callable may return another callable; bounded
            if isinstance(item, str):
                return ordinal, Reply(text=item)
            if isinstance(item, (Reply, RawStream, ErrorReply, Hang)):
                return ordinal, item
            item = item(request)
        raise TypeError("script callables nest too deeply")
