"""OpenAICompatibleProvider end to end: the real ``openai`` client over HTTP against DemoModelServer.

No mocks: every case streams real SSE over a loopback socket, and every stream is also checked against
the chunk protocol (usage before finish, exactly one finish, nothing after it) and fed to the assembler.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import socket
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from email.utils import formatdate
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import agentlog as al
from agentlog.cli.commands import app
from agentlog.llm import (
    AssembledResponse,
    GenerateRequest,
    LlmError,
    MissingApiKeyError,
    StreamChunk,
    assemble,
    collect,
)
from agentlog.llm.openai_compat import (
    RESPONSE_TOO_LARGE,
    OpenAICompatibleProvider,
    is_deepseek_base_url,
    map_usage,
    parse_retry_after,
    request_body,
    serialize_messages,
    sse_data,
)
from agentlog.testing.demo_server import (
    DemoModelServer,
    ErrorReply,
    Hang,
    RawStream,
    RecordedRequest,
    Reply,
    ToolCall,
    Usage,
)

# --- harness -------------------------------------------------------------------------------------


def request(**overrides: Any) -> GenerateRequest:
    fields: dict[str, Any] = {
        "provider": "deepseek",
        "model": "deepseek-chat",
        "messages": [al.user_message("Hello?")],
    }
    fields.update(overrides)
    return GenerateRequest(**fields)


@dataclass
class Outcome:
    chunks: list[StreamChunk]
    result: AssembledResponse
    requests: list[RecordedRequest]

    @property
    def finish(self) -> Any:
        return self.result.finish

    @property
    def failure(self) -> Any:
        return self.result.failure


def check_protocol(chunks: Sequence[StreamChunk]) -> None:
    """The §3.5 stream contract every provider stream must honour."""
    types = [c["type"] for c in chunks]
    assert types.count("finish") == 1 and types[-1] == "finish", types
    if "usage" in types:
        assert types.index("usage") == len(types) - 2, types
    closed: set[int] = set()
    for chunk in chunks:
        if chunk["type"] == "block-end":
            closed.add(chunk["index"])
        elif chunk["type"] in ("block-start", "text-delta", "reasoning-delta", "tool-call-delta"):
            assert chunk["index"] not in closed, "delta after block-end"


def stream_all(
    script: Sequence[Any],
    req: GenerateRequest | None = None,
    *,
    timeout_s: float = 10.0,
    model: str = "deepseek-chat",
    harness_headers: bool | None = None,
) -> Outcome:
    with DemoModelServer(script) as server:

        async def main() -> list[StreamChunk]:
            async with OpenAICompatibleProvider(
                base_url=server.base_url,
                api_key="sk-test",
                timeout_s=timeout_s,
                model=model,
                harness_headers=harness_headers,
            ) as provider:
                return [chunk async for chunk in provider.stream(req or request())]

        chunks = asyncio.run(main())
        check_protocol(chunks)
        return Outcome(chunks, assemble(chunks), server.requests)


# --- streaming -----------------------------------------------------------------------------------


def test_streamed_text() -> None:
    text = "Hello! This answer arrives in several small SSE events."
    out = stream_all([Reply(text, chunk_chars=5)])
    deltas = [c for c in out.chunks if c["type"] == "text-delta"]
    assert len(deltas) == -(-len(text) // 5)
    assert "".join(c["text"] for c in deltas) == text
    assert out.chunks[0] == {"type": "block-start", "index": 0, "blockType": "text"}
    assert {"type": "block-end", "index": 0, "block": {"type": "text", "text": text}} in out.chunks
    assert out.finish == {"kind": "stop"}
    assert out.result.content == [{"type": "text", "text": text}]
    assert out.result.usage is not None and out.result.ok


def test_reasoning_then_text() -> None:
    out = stream_all([Reply("The answer is 4.", reasoning="2 + 2 is 4, the user wants a number.", chunk_chars=7)])
    starts = [c for c in out.chunks if c["type"] == "block-start"]
    assert starts == [
        {"type": "block-start", "index": 0, "blockType": "reasoning"},
        {"type": "block-start", "index": 1, "blockType": "text"},
    ]
    assert out.result.content == [
        {"type": "reasoning", "text": "2 + 2 is 4, the user wants a number."},
        {"type": "text", "text": "The answer is 4."},
    ]
    block_ends = [c["block"] for c in out.chunks if c["type"] == "block-end"]
    assert block_ends == out.result.content  # replaying the logged chunks gives the same message


@pytest.mark.parametrize("interleave", [False, True])
def test_two_parallel_tool_calls_with_fragmented_arguments(interleave: bool) -> None:
    calls = [
        ToolCall("read_file", {"path": "README.md", "limit": 200}, id="call_a"),
        ToolCall("grep", '{"pattern": "def \\\\w+", "glob": "*.py"}', id="call_b"),
    ]
    out = stream_all(
        [Reply(reasoning="Read and grep.", tool_calls=calls, chunk_chars=3, interleave_tool_calls=interleave)]
    )
    deltas = [c for c in out.chunks if c["type"] == "tool-call-delta"]
    assert len(deltas) > 10  # really fragmented
    by_index: dict[int, str] = {}
    for delta in deltas:
        by_index[delta["index"]] = by_index.get(delta["index"], "") + delta["argumentsDelta"]
        assert delta["id"] == {1: "call_a", 2: "call_b"}[delta["index"]]
        assert delta.get("name") == {1: "read_file", 2: "grep"}[delta["index"]]
    assert by_index == {1: calls[0].arguments_text(), 2: calls[1].arguments_text()}
    assert out.finish == {"kind": "tool-calls"}
    assert out.result.tool_calls == [
        {"type": "tool-call", "id": "call_a", "name": "read_file", "arguments": '{"path": "README.md", "limit": 200}'},
        {"type": "tool-call", "id": "call_b", "name": "grep", "arguments": '{"pattern": "def \\\\w+", "glob": "*.py"}'},
    ]
    assert out.result.content[0] == {"type": "reasoning", "text": "Read and grep."}


def test_usage_mapping_with_cached_and_reasoning_tokens() -> None:
    out = stream_all([Reply("ok", reasoning="hm", usage=Usage(1000, 50, cached_tokens=800, reasoning_tokens=20))])
    expected = {"inputTokens": 200, "outputTokens": 50, "cacheReadTokens": 800, "reasoningTokens": 20}
    assert out.chunks[-2] == {"type": "usage", "usage": expected}
    assert out.result.usage == expected


def test_map_usage_variants() -> None:
    # DeepSeek's own field when the OpenAI-style details are absent or null
    assert map_usage({"prompt_tokens": 10, "completion_tokens": 2, "prompt_cache_hit_tokens": 4}) == {
        "inputTokens": 6,
        "outputTokens": 2,
        "cacheReadTokens": 4,
    }
    assert (
        map_usage(
            {
                "prompt_tokens": 10,
                "completion_tokens": 2,
                "prompt_tokens_details": {"cached_tokens": None},
                "prompt_cache_hit_tokens": 3,
            }
        )["cacheReadTokens"]
        == 3
    )
    # details win over the DeepSeek field; no cache facts → no cache key
    assert (
        map_usage(
            {
                "prompt_tokens": 10,
                "completion_tokens": 2,
                "prompt_tokens_details": {"cached_tokens": 7},
                "prompt_cache_hit_tokens": 3,
            }
        )["cacheReadTokens"]
        == 7
    )
    assert map_usage({"prompt_tokens": 10, "completion_tokens": 2}) == {"inputTokens": 10, "outputTokens": 2}


def test_no_usage_chunk_when_the_server_reports_none() -> None:
    out = stream_all([Reply("hi", usage=None)])
    assert [c["type"] for c in out.chunks][-2:] == ["block-end", "finish"]
    assert out.result.usage is None


def test_length_finish_is_max_tokens_and_drops_tool_calls() -> None:
    out = stream_all([Reply("I will call", tool_calls=[ToolCall("f", '{"x": ')], finish_reason="length")])
    assert out.finish == {"kind": "max-tokens"}
    assert any(c["type"] == "block-end" and c["block"]["type"] == "tool-call" for c in out.chunks)
    assert out.result.content == [{"type": "text", "text": "I will call"}]


def test_other_finish_reason_is_an_error_with_the_upper_cased_reason() -> None:
    out = stream_all([Reply("redacted", finish_reason="content_filter")])
    assert out.failure["code"] == "CONTENT_FILTER"
    assert out.finish["kind"] == "error"


def test_empty_response() -> None:
    out = stream_all([Reply("", usage=Usage(12, 0))])
    assert out.failure["code"] == "EMPTY_RESPONSE"
    assert out.failure["requestId"] == "agentlog-demo-req-1"
    assert out.chunks[0]["type"] == "usage"  # the tokens were still spent: usage precedes the failure
    assert out.result.content == []


def test_default_model_is_used_when_the_request_has_none() -> None:
    out = stream_all(["hi"], request(model=""), model="deepseek-reasoner")
    assert out.requests[0].body["model"] == "deepseek-reasoner"


# --- failures ------------------------------------------------------------------------------------


def test_rate_limit_with_retry_after_is_a_terminal_error_finish_and_can_be_raised() -> None:
    out = stream_all([ErrorReply(429, message="Rate limit reached", retry_after=2)])
    assert out.chunks == [
        {
            "type": "finish",
            "reason": {
                "kind": "error",
                "failure": {
                    "message": "Rate limit reached",
                    "code": "RATE_LIMIT",
                    "status": 429,
                    "providerRetryAfterMs": 2000,
                    "requestId": "agentlog-demo-req-1",
                },
            },
        }
    ]
    with pytest.raises(LlmError) as caught:
        out.result.raise_for_failure()
    err = caught.value
    assert (err.code, err.status, err.provider_retry_after_ms) == ("RATE_LIMIT", 429, 2000)
    assert err.failure == out.failure
    assert isinstance(err, al.AgentlogError)


@pytest.mark.parametrize(
    ("reply", "code"),
    [
        (ErrorReply(500), "SERVER"),
        (ErrorReply(503, message="Server overloaded"), "SERVER"),
        (ErrorReply(401, message="Authentication Fails (no such user)"), "AUTH"),
        (ErrorReply(403), "AUTH"),
        (ErrorReply(402, message="Insufficient Balance"), "QUOTA"),
        (ErrorReply(429, message="You exceeded your current quota", code="insufficient_quota"), "QUOTA"),
        (
            ErrorReply(
                400, message="This model's maximum context length is 131072 tokens. However, you requested 140000"
            ),
            "CONTEXT_WINDOW_EXCEEDED",
        ),
        (ErrorReply(400, message="bad", code="context_length_exceeded"), "CONTEXT_WINDOW_EXCEEDED"),
        (ErrorReply(400, message="Invalid 'messages': empty"), "INVALID_REQUEST"),
        (ErrorReply(413), "INVALID_REQUEST"),
        (ErrorReply(404), "HTTP_404"),
        (ErrorReply(502, body="<html>bad gateway</html>"), "SERVER"),
    ],
)
def test_http_error_mapping(reply: ErrorReply, code: str) -> None:
    out = stream_all([reply])
    assert out.failure["code"] == code
    assert out.failure["status"] == reply.status
    if reply.message:
        assert out.failure["message"] == reply.message
    assert "providerRetryAfterMs" not in out.failure


def test_retry_after_as_http_date() -> None:
    out = stream_all([ErrorReply(503, retry_after=formatdate(time.time() + 30, usegmt=True))])
    assert 25_000 < out.failure["providerRetryAfterMs"] <= 31_000


def test_parse_retry_after() -> None:
    assert parse_retry_after("2") == 2000
    assert parse_retry_after("0.25") == 250
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:10 GMT", now=1445412480.0) == 10_000
    for value in (None, "0", "-1", "soon", "inf", "Wed, 21 Oct 2015 07:28:00 GMT"):
        assert parse_retry_after(value) is None


def test_connection_refused_is_transport() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens here once the socket is closed

    async def main() -> list[StreamChunk]:
        async with OpenAICompatibleProvider(base_url=f"http://127.0.0.1:{port}/v1", api_key="k", timeout_s=5) as p:
            return [c async for c in p.stream(request())]

    chunks = asyncio.run(main())
    check_protocol(chunks)
    failure = assemble(chunks).failure
    assert failure is not None and failure["code"] == "TRANSPORT"
    assert "status" not in failure


def test_connection_dropped_mid_stream_is_transport() -> None:
    """A socket closed in the middle of the chunked body is a failed read: TRANSPORT (retryable), as in the
    original adapter. The deltas that did arrive still assemble into an interrupted prefix."""
    out = stream_all(
        [Reply("The beginning of a long answer", reasoning="ok", chunk_chars=4, ending="drop", cut_after=6)]
    )
    assert out.failure["code"] == "TRANSPORT"
    assert out.failure["requestId"] == "agentlog-demo-req-1"
    assert [c["type"] for c in out.chunks if c["type"] == "block-end"] == []
    assert out.result.content == [{"type": "reasoning", "text": "ok"}, {"type": "text", "text": "The beginning of"}]


def test_body_ending_without_done_is_stream_closed() -> None:
    """A body that ends cleanly but never said [DONE] is truncated: STREAM_CLOSED, even after a finish_reason."""
    out = stream_all([Reply("complete text", ending="eof")])
    assert out.failure["code"] == "STREAM_CLOSED"
    assert out.result.content == [{"type": "text", "text": "complete text"}]


def test_malformed_payload() -> None:
    out = stream_all([RawStream(['{"choices": [{"index": 0, "delta": {"content": "x"}}]}', "{not json"])])
    assert out.failure["code"] == "MALFORMED_RESPONSE"
    assert out.chunks[:2] == [
        {"type": "block-start", "index": 0, "blockType": "text"},
        {"type": "text-delta", "index": 0, "text": "x"},
    ]


def test_error_object_inside_the_stream() -> None:
    out = stream_all([RawStream(['{"error": {"message": "upstream overloaded", "type": "server_error"}}'])])
    assert out.failure == {"message": "upstream overloaded", "code": "SERVER", "requestId": "agentlog-demo-req-1"}
    out = stream_all([RawStream(['{"error": {"message": "Insufficient Balance"}}'])])
    assert out.failure["code"] == "QUOTA"


def test_usage_on_the_finish_chunk_and_a_missing_tool_call_index() -> None:
    events = [
        '{"choices": [{"index": 0, "delta": {"tool_calls": '
        '[{"id": "t1", "function": {"name": "f", "arguments": "{}"}}]}}]}',
        '{"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}], '
        '"usage": {"prompt_tokens": 5, "completion_tokens": 1}}',
    ]
    out = stream_all([RawStream(events)])
    assert out.result.tool_calls == [{"type": "tool-call", "id": "t1", "name": "f", "arguments": "{}"}]
    assert out.result.usage == {"inputTokens": 5, "outputTokens": 1}
    assert out.finish == {"kind": "tool-calls"}


def test_idle_timeout_before_headers_and_mid_stream() -> None:
    started = time.monotonic()
    before = stream_all([Hang(seconds=10)], timeout_s=0.3)
    during = stream_all([Hang(seconds=10, after_headers=True)], timeout_s=0.3)
    assert before.failure["code"] == "TIMEOUT"
    assert during.failure["code"] == "TIMEOUT"
    assert time.monotonic() - started < 5  # the server released the hanging handlers on stop


def test_abort_signal_ends_the_stream_with_an_aborted_finish() -> None:
    with DemoModelServer([Reply("one two three four five six", chunk_chars=4, delay_s=0.3)]) as server:

        async def main() -> tuple[list[StreamChunk], float]:
            signal = asyncio.Event()
            chunks: list[StreamChunk] = []
            async with OpenAICompatibleProvider(base_url=server.base_url, api_key="k") as provider:
                started = time.monotonic()
                async for chunk in provider.stream(request(), signal=signal):
                    chunks.append(chunk)
                    if chunk["type"] == "text-delta":
                        signal.set()
                return chunks, time.monotonic() - started

        chunks, elapsed = asyncio.run(main())
    check_protocol(chunks)
    aborted = {"kind": "aborted", "failure": {"message": "model request aborted by caller", "code": "ABORTED"}}
    assert chunks[-1] == {"type": "finish", "reason": aborted}
    assert elapsed < 1.5  # did not wait for the remaining paced events
    assert assemble(chunks).content == [{"type": "text", "text": "one "}]


def test_a_signal_set_before_the_call_sends_nothing() -> None:
    with DemoModelServer(["unused"]) as server:

        async def main() -> list[StreamChunk]:
            signal = asyncio.Event()
            signal.set()
            async with OpenAICompatibleProvider(base_url=server.base_url, api_key="k") as provider:
                return [c async for c in provider.stream(request(), signal=signal)]

        chunks = asyncio.run(main())
        assert server.requests == []
    assert chunks == [
        {
            "type": "finish",
            "reason": {"kind": "aborted", "failure": {"message": "model request aborted by caller", "code": "ABORTED"}},
        }
    ]


def test_task_cancellation_propagates() -> None:
    with DemoModelServer([Hang(seconds=10)]) as server:

        async def main() -> None:
            async with OpenAICompatibleProvider(base_url=server.base_url, api_key="k") as provider:
                await asyncio.wait_for(collect(provider.stream(request())), timeout=0.3)

        with pytest.raises(TimeoutError):
            asyncio.run(main())


# --- request serialization -----------------------------------------------------------------------

TOOLS: list[Any] = [
    {
        "name": "read_file",
        "description": "Read a file",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    }
]


def conversation() -> list[Any]:
    return [
        al.user_message("What is in README.md?"),
        al.assistant_message(
            [
                al.reasoning_block("I should read it."),
                al.text_block("Let me look."),
                al.tool_call_block("c1", "read_file", '{"path": "README.md"}'),
                al.tool_call_block("c2", "read_file", '{"path": "docs"}'),
            ],
            provider="deepseek",
            model="deepseek-chat",
        ),
        al.tool_result_message("c1", "# agentlog"),
        al.tool_result_message("c2", [], is_error=True),
        al.assistant_message([al.reasoning_block("Done."), al.text_block("It is a README.")], provider="d", model="m"),
        al.user_message([al.text_block("Thanks. "), al.text_block("Bye.")]),
    ]


def test_request_serialization_on_the_wire() -> None:
    req = request(
        messages=conversation(),
        system="You are terse.",
        tools=TOOLS,
        temperature=0.2,
        max_tokens=512,
        stop=["END"],
        reasoning_effort="high",
        session_id="sess-1",
    )
    # DeepSeek's harness headers go to api.deepseek.com only (the provider tests below); forced here.
    out = stream_all(["ok"], req, harness_headers=True)
    sent = out.requests[0]
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["authorization"] == "Bearer sk-test"
    assert sent.headers["x-deepseek-harness-session-id"] == "sess-1"
    assert "x-deepseek-harness-compact" not in sent.headers
    assert sent.headers["x-stainless-retry-count"] == "0"
    body = sent.body
    assert body["messages"] == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "What is in README.md?"},
        {
            "role": "assistant",
            "content": "Let me look.",
            "reasoning_content": "I should read it.",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": '{"path": "README.md"}'},
                },
                {"id": "c2", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "docs"}'}},
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "# agentlog"},
        {"role": "tool", "tool_call_id": "c2", "content": "(no output)"},
        {"role": "assistant", "content": "It is a README.", "reasoning_content": "Done."},
        {"role": "user", "content": "Thanks. Bye."},
    ]
    assert body["tools"] == [{"type": "function", "function": TOOLS[0]}]
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert (body["temperature"], body["max_tokens"], body["stop"]) == (0.2, 512, ["END"])
    assert body["thinking"] == {"type": "enabled"}
    assert body["reasoning_effort"] == "high"
    assert body["model"] == "deepseek-chat"


def test_frozen_messages_from_a_session_serialize() -> None:
    session = al.SessionStore().create()
    session.append("user/message", al.user_message("hi"), {"surfaceOp": "append"})
    req = GenerateRequest.from_config(
        {"provider": "deepseek", "model": "deepseek-chat", "maxTokens": 9}, session.derive_messages(), tools=TOOLS
    )
    out = stream_all(["ok"], req)
    body = out.requests[0].body
    assert body["messages"] == [{"role": "user", "content": "hi"}]
    assert body["max_tokens"] == 9
    assert "thinking" not in body and "reasoning_effort" not in body and "temperature" not in body
    assert req.call_config() == {"provider": "deepseek", "model": "deepseek-chat", "maxTokens": 9}


def test_thinking_and_purpose_mapping() -> None:
    assert request_body(request(reasoning_effort="off"))["thinking"] == {"type": "disabled"}
    assert "reasoning_effort" not in request_body(request(reasoning_effort="off"))
    titled = request_body(request(reasoning_effort="max", purpose="session-title"))
    assert titled["thinking"] == {"type": "disabled"} and "reasoning_effort" not in titled
    plain = request_body(request(reasoning_effort="max"), thinking=False)
    assert "thinking" not in plain and plain["reasoning_effort"] == "max"
    assert "tools" not in request_body(request(tools=[]))


def test_compaction_header() -> None:
    out = stream_all(["summary"], request(purpose="compaction"), harness_headers=True)
    assert out.requests[0].headers["x-deepseek-harness-compact"] == "1"
    elsewhere = stream_all(["summary"], request(purpose="compaction")).requests[0]
    assert "x-deepseek-harness-compact" not in elsewhere.headers


def test_user_message_with_text_and_tool_results_and_images() -> None:
    mixed = {
        "id": "u",
        "role": "user",
        "source": {"kind": "user"},
        "content": [
            al.image_block("att-1", "image/png", bytes=10, width=1, height=1),
            al.tool_result_block("c1", "result"),
            al.text_block("and a note"),
        ],
    }
    assert serialize_messages([mixed]) == [
        {"role": "user", "content": "and a note"},
        {"role": "tool", "tool_call_id": "c1", "content": "result"},
    ]
    image_only = {**mixed, "content": [al.image_block("att-1", "image/png", bytes=10, width=1, height=1)]}
    assert serialize_messages([image_only]) == [{"role": "user", "content": ""}]
    system = {
        "id": "s",
        "role": "system",
        "source": {"kind": "plugin", "plugin": "p"},
        "content": [al.text_block("rules")],
    }
    assert serialize_messages([system]) == [{"role": "system", "content": "rules"}]


# --- configuration -------------------------------------------------------------------------------


def test_missing_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "")
    with pytest.raises(MissingApiKeyError, match=r"DEEPSEEK_API_KEY.*OPENAI_API_KEY") as caught:
        OpenAICompatibleProvider()
    assert caught.value.code == "MISSING_API_KEY"
    assert isinstance(caught.value, LlmError)


def test_api_key_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEEPSEEK_API_KEY", "sk-deepseek")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai")
    with DemoModelServer(["a", "b"]) as server:

        async def main() -> None:
            async with OpenAICompatibleProvider(base_url=server.base_url) as provider:
                await collect(provider.stream(request()))
            monkeypatch.delenv("OPENAI_API_KEY")
            async with OpenAICompatibleProvider(base_url=server.base_url) as provider:
                await collect(provider.stream(request()))

        asyncio.run(main())
        # Another endpoint gets OPENAI_API_KEY; the DeepSeek key is never sent to it (a loopback server then
        # gets no Authorization header at all).
        assert server.requests[0].headers["authorization"] == "Bearer sk-openai"
        assert "authorization" not in server.requests[1].headers


def test_deepseek_key_goes_to_deepseek_only(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentlog.llm.openai_compat import resolve_api_key

    monkeypatch.setenv("DEEPSEEK_API_KEY", "sk-deepseek")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai")
    assert resolve_api_key(None, "deepseek") == "sk-deepseek"
    assert resolve_api_key(None, "deepseek", "https://api.deepseek.com/v1") == "sk-deepseek"
    assert resolve_api_key(None, "x", "https://gateway.example/v1") == "sk-openai"
    monkeypatch.delenv("OPENAI_API_KEY")
    assert resolve_api_key(None, "deepseek") == "sk-deepseek"
    with pytest.raises(MissingApiKeyError) as caught:
        resolve_api_key(None, "x", "https://gateway.example/v1")
    assert "api.deepseek.com only" in str(caught.value)
    assert resolve_api_key(None, "x", "http://127.0.0.1:9/v1") == ""


def test_defaults_point_at_deepseek() -> None:
    provider = OpenAICompatibleProvider(api_key="k")
    assert (provider.name, provider.model, provider.base_url) == (
        "deepseek",
        "deepseek-chat",
        "https://api.deepseek.com",
    )
    assert "deepseek" in repr(provider)
    asyncio.run(provider.aclose())


# Issue 7, defects 10 (providers) and 21 (SSE): real HTTP against the scripted ``DemoModelServer``.
#
# What reaches the server is checked on the server side. Requests meant for DeepSeek's host
# (``http://api.deepseek.com``) never leave the machine: ``HTTP_PROXY`` points the real client at the
# loopback server, which receives them in the absolute form a forward proxy sees.


runner = CliRunner()
SESSION_HEADER = "x-deepseek-harness-session-id"
COMPACT_HEADER = "x-deepseek-harness-compact"
DEEPSEEK_HTTP = "http://api.deepseek.com/v1"


def _request(**overrides: Any) -> GenerateRequest:
    fields: dict[str, Any] = {"provider": "deepseek", "model": "deepseek-chat", "messages": [al.user_message("Hi")]}
    fields.update(overrides)
    return GenerateRequest(**fields)


def _stream(provider_kwargs: dict[str, Any], req: GenerateRequest | None = None) -> list[StreamChunk]:
    async def main() -> list[StreamChunk]:
        async with OpenAICompatibleProvider(**provider_kwargs) as provider:
            return [chunk async for chunk in provider.stream(req or _request())]

    return asyncio.run(main())


@pytest.fixture
def no_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("DEEPSEEK_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def via_proxy(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Route plain-HTTP requests through ``server`` as a forward proxy (``HTTP_PROXY``)."""
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy", "http_proxy", "HTTPS_PROXY", "https_proxy"):
        monkeypatch.delenv(name, raising=False)

    def route(server: DemoModelServer) -> None:
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{server.port}")

    return route


# --- defect 10: the DeepSeek session header goes to DeepSeek only -------------------------------------


def test_deepseek_base_url_detection() -> None:
    assert is_deepseek_base_url("https://api.deepseek.com")
    assert is_deepseek_base_url("https://API.DeepSeek.com./beta")
    assert is_deepseek_base_url("http://api.deepseek.com:8080/v1")
    assert not is_deepseek_base_url("http://127.0.0.1:8000/v1")
    assert not is_deepseek_base_url("https://api.deepseek.com.evil.example/v1")
    assert not is_deepseek_base_url("https://gateway.example/api.deepseek.com")
    assert not is_deepseek_base_url("https://openrouter.ai/api/v1")


def test_session_header_is_not_sent_to_another_base_url() -> None:
    with DemoModelServer(["ok", "summary"]) as server:
        kwargs = {"base_url": server.base_url, "api_key": "k"}
        _stream(kwargs, _request(session_id="sess-secret"))
        _stream(kwargs, _request(session_id="sess-secret", purpose="compaction"))
        sent = server.requests
    assert len(sent) == 2
    for recorded in sent:
        assert SESSION_HEADER not in recorded.headers and COMPACT_HEADER not in recorded.headers
        assert "sess-secret" not in json.dumps(dict(recorded.headers))


def test_session_header_is_sent_to_deepseek(via_proxy: Any) -> None:
    with DemoModelServer(["ok", "summary"]) as server:
        via_proxy(server)
        kwargs = {"base_url": DEEPSEEK_HTTP, "api_key": "k"}
        plain = _stream(kwargs, _request(session_id="sess-1"))
        compaction = _stream(kwargs, _request(session_id="sess-1", purpose="compaction"))
        sent = server.requests
    assert assemble(plain).ok and assemble(compaction).ok
    assert [r.headers["host"] for r in sent] == ["api.deepseek.com", "api.deepseek.com"]
    assert sent[0].headers[SESSION_HEADER] == "sess-1" and COMPACT_HEADER not in sent[0].headers
    assert sent[1].headers[SESSION_HEADER] == "sess-1" and sent[1].headers[COMPACT_HEADER] == "1"


def test_harness_headers_can_be_chosen_explicitly(via_proxy: Any) -> None:
    with DemoModelServer(["ok"]) as server:
        _stream({"base_url": server.base_url, "api_key": "k", "harness_headers": True}, _request(session_id="s"))
        assert server.requests[-1].headers[SESSION_HEADER] == "s"
    with DemoModelServer(["ok"]) as server:
        via_proxy(server)
        _stream({"base_url": DEEPSEEK_HTTP, "api_key": "k", "harness_headers": False}, _request(session_id="s"))
        assert SESSION_HEADER not in server.requests[-1].headers


# --- defect 10: keyless local servers -----------------------------------------------------------------


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_loopback_base_url_needs_no_key(no_keys: None, host: str) -> None:
    with DemoModelServer(["ok"]) as server:
        chunks = _stream({"base_url": f"http://{host}:{server.port}/v1"})
        [sent] = server.requests
    assert assemble(chunks).ok
    assert "authorization" not in sent.headers


def test_explicit_empty_key_sends_no_authorization(no_keys: None, via_proxy: Any) -> None:
    with DemoModelServer(["ok"]) as server:
        via_proxy(server)
        assert assemble(_stream({"base_url": DEEPSEEK_HTTP, "api_key": ""})).ok
        [sent] = server.requests
    assert sent.headers["host"] == "api.deepseek.com" and "authorization" not in sent.headers
    with pytest.raises(al.AgentlogError) as missing:
        OpenAICompatibleProvider(base_url=DEEPSEEK_HTTP)
    assert missing.value.code == "MISSING_API_KEY"


def _cli_run(store: Path, work: Path, *extra: str) -> Any:
    args = ["run", "hi", "--store", str(store), "--cwd", str(work), "--json", *extra]
    return runner.invoke(app, args)


def test_cli_run_keyless_loopback_and_explicit_empty_key(
    tmp_path: Path, no_keys: None, via_proxy: Any
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    store = tmp_path / "store"
    with DemoModelServer(["Hello from a local model."]) as server:
        local = _cli_run(store, work, "--base-url", f"http://localhost:{server.port}/v1")
        [sent] = server.requests
    assert local.exit_code == 0, local.stderr
    assert orjson.loads(local.stdout)["messages"][-1]["content"][0]["text"] == "Hello from a local model."
    assert "authorization" not in sent.headers
    # DeepSeek's own URL without a key is still refused before anything is written ...
    refused = _cli_run(store, work, "--base-url", DEEPSEEK_HTTP, "--session-id", "s2")
    assert refused.exit_code == 1 and orjson.loads(refused.stderr)["error"]["code"] == "MISSING_API_KEY"
    # ... unless the empty key is explicit; an explicit key is sent as given.
    with DemoModelServer(["Keyless.", "Keyed."]) as server:
        via_proxy(server)
        empty = _cli_run(store, work, "--base-url", DEEPSEEK_HTTP, "--api-key", "")
        keyed = _cli_run(store, work, "--base-url", DEEPSEEK_HTTP, "--api-key", "sk-given")
        first, second = server.requests
    assert empty.exit_code == 0, empty.stderr
    assert keyed.exit_code == 0, keyed.stderr
    assert "authorization" not in first.headers
    assert second.headers["authorization"] == "Bearer sk-given"
    assert first.headers[SESSION_HEADER] == orjson.loads(empty.stdout)["sessionId"]


# --- defect 21: SSE decoding is bounded ------------------------------------------------------------------


async def _pieces(data: bytes, size: int) -> AsyncIterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i : i + size]


def _decode(data: bytes, size: int, **kwargs: Any) -> list[str]:
    async def main() -> list[str]:
        return [p async for p in sse_data(_pieces(data, size), **kwargs)]

    return asyncio.run(main())


def test_sse_decodes_a_large_line_split_anywhere() -> None:
    big = "x" * (8 * 1024 * 1024) + "é"
    stream = (f": comment\r\ndata: {big}\r\n\r\ndata: a\ndata: b\r\rdata: [DONE]\n\n").encode()
    for size in (65536, 65535, 1_000_003):
        assert _decode(stream, size) == [big, "a\nb", "[DONE]"]


def test_sse_line_and_event_caps_are_typed_errors() -> None:
    cap = 1024 * 1024
    over = b"data: " + b"y" * (cap + 10)
    for stream in (over + b"\n\n", over):  # a complete line, and one whose end never comes
        with pytest.raises(LlmError) as err:
            _decode(stream + b"data: [DONE]\n\n", 4096, max_event_bytes=cap)
        assert err.value.code == RESPONSE_TOO_LARGE
        assert "1048576" in err.value.message and "max_event_bytes" in err.value.message
    # Many short data lines of one event add up to the same cap.
    lines = b"".join(b"data: " + b"z" * 1000 + b"\n" for _ in range(1100))
    with pytest.raises(LlmError) as err:
        _decode(lines + b"\n", 65536, max_event_bytes=cap)
    assert err.value.code == RESPONSE_TOO_LARGE
    # Up to the cap (a line counts its field name) everything passes.
    exact = "y" * (cap - len("data: "))
    assert _decode(f"data: {exact}\n\ndata: [DONE]\n\n".encode(), 4096, max_event_bytes=cap)[0] == exact


_PAYLOAD = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n"), max_size=40)


@settings(max_examples=150, deadline=None)
@given(
    events=st.lists(st.lists(_PAYLOAD, min_size=1, max_size=3), max_size=6),
    ending=st.sampled_from(["\n", "\r", "\r\n"]),
    comments=st.booleans(),
    cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=12),
)
def test_sse_decoder_is_exact_for_any_split(
    events: list[list[str]], ending: str, comments: bool, cuts: list[int]
) -> None:
    """The rewritten decoder gives every event's data, whatever the line ends and however reads split."""
    text = ""
    for lines in events:
        if comments:
            text += ": keep-alive" + ending
        text += "".join(f"data: {line}{ending}" for line in lines) + ending
    text += "data: [DONE]" + ending + ending
    data = text.encode()
    points = sorted({min(c, len(data)) for c in cuts} | {0, len(data)})
    pieces = [data[a:b] for a, b in itertools.pairwise(points)]

    async def reads() -> AsyncIterator[bytes]:
        for piece in pieces:
            yield piece

    async def main() -> list[str]:
        return [p async for p in sse_data(reads())]

    assert asyncio.run(main()) == ["\n".join(lines) for lines in events] + ["[DONE]"]


def _text_event(text: str) -> str:
    return json.dumps({"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]})


def test_provider_streams_an_8_mib_event_and_refuses_one_over_its_cap() -> None:
    big = "w" * (8 * 1024 * 1024)
    stop = json.dumps({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    with DemoModelServer([RawStream([_text_event(big), stop]), RawStream([_text_event(big), stop])]) as server:
        chunks = _stream({"base_url": server.base_url, "api_key": "k"})
        capped = _stream({"base_url": server.base_url, "api_key": "k", "max_event_bytes": 1024 * 1024})
    result = assemble(chunks)
    assert result.ok and result.content == [{"type": "text", "text": big}]
    failure = assemble(capped).failure
    assert failure is not None and failure["code"] == RESPONSE_TOO_LARGE


# --- defect 21: keep-alive comments are not progress ----------------------------------------------------


def test_keepalive_only_stream_times_out() -> None:
    with DemoModelServer([Hang(seconds=20, keepalive_s=0.05)]) as server:
        started = time.monotonic()
        chunks = _stream({"base_url": server.base_url, "api_key": "k", "timeout_s": 0.6})
        elapsed = time.monotonic() - started
    failure = assemble(chunks).failure
    assert failure is not None and failure["code"] == "TIMEOUT", failure
    assert "keep-alive" in failure["message"]
    assert elapsed < 10


def test_a_slow_stream_that_makes_progress_does_not_time_out() -> None:
    text = "tick " * 12
    with DemoModelServer([Reply(text, chunk_chars=5, delay_s=0.12)]) as server:
        chunks = _stream({"base_url": server.base_url, "api_key": "k", "timeout_s": 0.8})
    result = assemble(chunks)
    assert result.ok and result.content == [{"type": "text", "text": text}]


def test_cli_timeout_option(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEEPSEEK_API_KEY", "k")
    work = tmp_path / "work"
    work.mkdir()
    with DemoModelServer([Hang(seconds=20, keepalive_s=0.05)]) as server:
        started = time.monotonic()
        result = _cli_run(
            tmp_path / "store", work, "--base-url", server.base_url, "--timeout", "0.6", "--max-retries", "0"
        )
        elapsed = time.monotonic() - started
        assert len(server.requests) == 1
    assert result.exit_code == 1
    assert orjson.loads(result.stderr)["error"]["code"] == "TIMEOUT"
    assert elapsed < 10
