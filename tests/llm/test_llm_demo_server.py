"""DemoModelServer as a plain HTTP server: wire format, scripting, recording, bounded shutdown."""

from __future__ import annotations

import http.client
import json
import threading
import time
from typing import Any

from agentlog.testing.demo_server import DemoModelServer, ErrorReply, Hang, Reply, ToolCall, Usage


def post(server: DemoModelServer, body: Any, path: str = "/v1/chat/completions") -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    try:
        conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


def sse_payloads(raw: bytes) -> list[str]:
    return [line[6:] for line in raw.decode().split("\n") if line.startswith("data: ")]


BODY = {
    "model": "deepseek-chat",
    "messages": [{"role": "user", "content": "hi"}],
    "stream": True,
    "stream_options": {"include_usage": True},
}


def test_streams_openai_chunk_format() -> None:
    with DemoModelServer(
        [
            Reply(
                "Hi there",
                reasoning="greet",
                tool_calls=[ToolCall("f", {"a": 1}, id="c1")],
                usage=Usage(10, 3, cached_tokens=4),
            )
        ]
    ) as server:
        assert server.base_url == f"http://127.0.0.1:{server.port}/v1"
        status, headers, raw = post(server, BODY)
    assert status == 200
    assert headers["content-type"].startswith("text/event-stream")
    assert headers["x-agentlog-demo"] == "scripted"
    payloads = sse_payloads(raw)
    assert payloads[-1] == "[DONE]"
    chunks = [json.loads(p) for p in payloads[:-1]]
    assert all(c["object"] == "chat.completion.chunk" and c["model"] == "deepseek-chat" for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["prompt_cache_hit_tokens"] == 4
    assert chunks[-1]["usage"]["prompt_tokens_details"] == {"cached_tokens": 4}
    opening = chunks[3]["choices"][0]["delta"]["tool_calls"][0]
    assert opening == {"index": 0, "id": "c1", "type": "function", "function": {"name": "f", "arguments": ""}}


def test_usage_only_when_requested() -> None:
    with DemoModelServer(["hi"]) as server:
        _, _, raw = post(server, {**BODY, "stream_options": None})
    assert all("usage" not in json.loads(p) for p in sse_payloads(raw)[:-1])


def test_records_requests_and_supports_callables_and_strings() -> None:
    def echo(request: Any) -> str:
        return "you said " + str(request.body["messages"][-1]["content"])

    with DemoModelServer([echo]) as server:
        server.push("second")
        assert server.remaining == 2
        _, _, first = post(server, BODY, path="/chat/completions")
        post(server, BODY)
        status, _, exhausted = post(server, BODY)
        recorded = server.requests
    texts = [
        json.loads(p)["choices"][0]["delta"].get("content")
        for p in sse_payloads(first)[:-1]
        if json.loads(p)["choices"]
    ]
    assert "".join(t for t in texts if t) == "you said hi"
    assert [r.path for r in recorded] == ["/chat/completions", "/v1/chat/completions", "/v1/chat/completions"]
    assert recorded[0].body == BODY
    assert recorded[0].headers["content-type"] == "application/json"
    assert status == 400 and b"no reply left" in exhausted


def test_error_reply_shape() -> None:
    with DemoModelServer([ErrorReply(429, retry_after=2.0, headers={"x-extra": "1"})]) as server:
        status, headers, raw = post(server, BODY)
    assert status == 429
    assert headers["retry-after"] == "2" and headers["x-extra"] == "1" and headers["x-request-id"]
    assert json.loads(raw) == {
        "error": {"message": "Too Many Requests", "type": "rate_limit_error", "param": None, "code": None}
    }


def test_unknown_route_and_bad_json() -> None:
    with DemoModelServer(["unused"]) as server:
        assert post(server, BODY, path="/v1/embeddings")[0] == 404
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
        conn.request("POST", "/v1/chat/completions", body=b"{nope", headers={"Content-Type": "application/json"})
        assert conn.getresponse().status == 400
        conn.close()
        assert server.remaining == 1 and server.requests == []


def test_stop_releases_a_hanging_request_promptly() -> None:
    server = DemoModelServer([Hang(seconds=60)]).start()
    outcome: list[BaseException | None] = []

    def client() -> None:
        try:
            post(server, BODY)
            outcome.append(None)
        except Exception as exc:  # the connection is closed without a response
            outcome.append(exc)

    thread = threading.Thread(target=client)
    thread.start()
    deadline = time.monotonic() + 60  # a hang guard: ends when the request arrived
    while not server.requests and time.monotonic() < deadline:
        time.sleep(0.01)
    started = time.monotonic()
    server.stop()
    thread.join(timeout=5)
    assert time.monotonic() - started < 2
    assert outcome and outcome[0] is not None
    server.stop()  # idempotent
