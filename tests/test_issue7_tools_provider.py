"""Issue 7, defects 10 (providers) and 21 (SSE): real HTTP against the scripted ``DemoModelServer``.

What reaches the server is checked on the server side. Requests meant for DeepSeek's host
(``http://api.deepseek.com``) never leave the machine: ``HTTP_PROXY`` points the real client at the
loopback server, which receives them in the absolute form a forward proxy sees.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import agentlog as al
from agentlog.cli.commands import app
from agentlog.llm import GenerateRequest, LlmError, StreamChunk, assemble
from agentlog.llm.openai_compat import (
    RESPONSE_TOO_LARGE,
    OpenAICompatibleProvider,
    is_deepseek_base_url,
    sse_data,
)
from agentlog.testing.demo_server import DemoModelServer, Hang, RawStream, Reply

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


def test_issue7_d10_deepseek_base_url_detection() -> None:
    assert is_deepseek_base_url("https://api.deepseek.com")
    assert is_deepseek_base_url("https://API.DeepSeek.com./beta")
    assert is_deepseek_base_url("http://api.deepseek.com:8080/v1")
    assert not is_deepseek_base_url("http://127.0.0.1:8000/v1")
    assert not is_deepseek_base_url("https://api.deepseek.com.evil.example/v1")
    assert not is_deepseek_base_url("https://gateway.example/api.deepseek.com")
    assert not is_deepseek_base_url("https://openrouter.ai/api/v1")


def test_issue7_d10_session_header_is_not_sent_to_another_base_url() -> None:
    with DemoModelServer(["ok", "summary"]) as server:
        kwargs = {"base_url": server.base_url, "api_key": "k"}
        _stream(kwargs, _request(session_id="sess-secret"))
        _stream(kwargs, _request(session_id="sess-secret", purpose="compaction"))
        sent = server.requests
    assert len(sent) == 2
    for recorded in sent:
        assert SESSION_HEADER not in recorded.headers and COMPACT_HEADER not in recorded.headers
        assert "sess-secret" not in json.dumps(dict(recorded.headers))


def test_issue7_d10_session_header_is_sent_to_deepseek(via_proxy: Any) -> None:
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


def test_issue7_d10_harness_headers_can_be_chosen_explicitly(via_proxy: Any) -> None:
    with DemoModelServer(["ok"]) as server:
        _stream({"base_url": server.base_url, "api_key": "k", "harness_headers": True}, _request(session_id="s"))
        assert server.requests[-1].headers[SESSION_HEADER] == "s"
    with DemoModelServer(["ok"]) as server:
        via_proxy(server)
        _stream({"base_url": DEEPSEEK_HTTP, "api_key": "k", "harness_headers": False}, _request(session_id="s"))
        assert SESSION_HEADER not in server.requests[-1].headers


# --- defect 10: keyless local servers -----------------------------------------------------------------


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_issue7_d10_loopback_base_url_needs_no_key(no_keys: None, host: str) -> None:
    with DemoModelServer(["ok"]) as server:
        chunks = _stream({"base_url": f"http://{host}:{server.port}/v1"})
        [sent] = server.requests
    assert assemble(chunks).ok
    assert "authorization" not in sent.headers


def test_issue7_d10_explicit_empty_key_sends_no_authorization(no_keys: None, via_proxy: Any) -> None:
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


def test_issue7_d10_cli_run_keyless_loopback_and_explicit_empty_key(
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


def test_issue7_d21_sse_decodes_a_large_line_split_anywhere() -> None:
    big = "x" * (8 * 1024 * 1024) + "é"
    stream = (f": comment\r\ndata: {big}\r\n\r\ndata: a\ndata: b\r\rdata: [DONE]\n\n").encode()
    for size in (65536, 65535, 1_000_003):
        assert _decode(stream, size) == [big, "a\nb", "[DONE]"]


def test_issue7_d21_sse_line_and_event_caps_are_typed_errors() -> None:
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
def test_issue7_d21_sse_decoder_is_exact_for_any_split(
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


def test_issue7_d21_provider_streams_an_8_mib_event_and_refuses_one_over_its_cap() -> None:
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


def test_issue7_d21_keepalive_only_stream_times_out() -> None:
    with DemoModelServer([Hang(seconds=20, keepalive_s=0.05)]) as server:
        started = time.monotonic()
        chunks = _stream({"base_url": server.base_url, "api_key": "k", "timeout_s": 0.6})
        elapsed = time.monotonic() - started
    failure = assemble(chunks).failure
    assert failure is not None and failure["code"] == "TIMEOUT", failure
    assert "keep-alive" in failure["message"]
    assert elapsed < 10


def test_issue7_d21_a_slow_stream_that_makes_progress_does_not_time_out() -> None:
    text = "tick " * 12
    with DemoModelServer([Reply(text, chunk_chars=5, delay_s=0.12)]) as server:
        chunks = _stream({"base_url": server.base_url, "api_key": "k", "timeout_s": 0.8})
    result = assemble(chunks)
    assert result.ok and result.content == [{"type": "text", "text": text}]


def test_issue7_d21_cli_timeout_option(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
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
