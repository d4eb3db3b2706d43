"""DemoModelServer as a model with a finite context window, through the real ``openai`` client.

The end-to-end compaction tests rely on four things this file proves: a request larger than the window
is refused exactly as a real endpoint refuses it (and is classified ``CONTEXT_WINDOW_EXCEEDED``), every
request's size is recorded in agentlog's own token heuristic (so "every request stayed under the
window" is checkable), an overflow can be forced, and compaction requests get a small deterministic
checkpoint without consuming the script.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import agentlog as al
from agentlog.agent.builtin_tools import builtin_registry
from agentlog.agent.loop import Agent, AgentOptions
from agentlog.compaction import COMPACTION_INSTRUCTION
from agentlog.compaction.estimate import estimate_header, estimate_message
from agentlog.llm import GenerateRequest, StreamChunk, assemble
from agentlog.llm.openai_compat import OpenAICompatibleProvider, is_context_overflow, request_body
from agentlog.testing.demo_server import (
    BIG_FILE,
    COMPACTION_MARKER,
    SUMMARY_SECTIONS,
    DemoModelServer,
    Reply,
    ToolCall,
    context_length_message,
    demo_summary,
    estimate_request_tokens,
    large_result_turns,
)

INSTRUCTION = COMPACTION_INSTRUCTION
TOOLS: list[Any] = [
    {"name": "read_file", "description": "Read a file.", "parameters": {"type": "object", "properties": {}}}
]


def assistant(blocks: list[Any]) -> Any:
    return al.assistant_message(blocks, provider="demo", model="demo-model")


def request(messages: Sequence[Any], **overrides: Any) -> GenerateRequest:
    fields: dict[str, Any] = {"provider": "deepseek", "model": "demo-model", "messages": list(messages)}
    fields.update(overrides)
    return GenerateRequest(**fields)


async def _call(server: DemoModelServer, req: GenerateRequest, harness_headers: bool | None) -> list[StreamChunk]:
    provider = OpenAICompatibleProvider(base_url=server.base_url, api_key="demo", harness_headers=harness_headers)
    try:
        return [chunk async for chunk in provider.stream(req)]
    finally:
        await provider.aclose()


def call(server: DemoModelServer, req: GenerateRequest, *, harness_headers: bool | None = None) -> Any:
    """One streamed call through the real client; the assembled response."""
    return assemble(asyncio.run(_call(server, req, harness_headers)))


def conversation(big: str = "x" * 2000) -> list[Any]:
    """A user prompt, an assistant tool call with reasoning, its (large) result, and an answer."""
    return [
        al.user_message("What does big.txt say?"),
        assistant(
            [
                {"type": "reasoning", "text": "Read it first."},
                {"type": "text", "text": "Reading."},
                {"type": "tool-call", "id": "c1", "name": "read_file", "arguments": '{"path": "big.txt"}'},
            ]
        ),
        al.user_message([{"type": "tool-result", "toolCallId": "c1", "content": [{"type": "text", "text": big}]}]),
        assistant([{"type": "text", "text": "It is big. 😀"}]),
    ]


def priced(messages: Sequence[Any], system: str | None, tools: Sequence[Any]) -> int:
    """What agentlog's heuristic prices the same request at (header plus every message)."""
    header: dict[str, Any] = {}
    if system is not None:
        header["system"] = system
    if tools:
        header["tools"] = list(tools)
    return estimate_header(header) + sum(estimate_message(m) for m in messages)


def test_recorded_estimate_is_agentlogs_price_of_the_same_request() -> None:
    """The size the server records is exactly what agentlog's heuristic prices the request at (system,
    tools, reasoning, tool calls and results, a non-BMP character counted twice): the test of "every
    request stays under the window" compares like with like."""
    messages = conversation()
    with DemoModelServer(["ok"]) as server:
        result = call(server, request(messages, system="Be brief.", tools=TOOLS))
    assert result.finish["kind"] == "stop"
    (recorded,) = server.requests
    assert recorded.estimated_tokens == priced(messages, "Be brief.", TOOLS)
    assert recorded.answer == "script" and recorded.compaction is False
    assert server.max_estimated_tokens == recorded.estimated_tokens


_text = st.text(st.characters(codec="utf-16", exclude_categories=("Cs",)), min_size=1, max_size=40)


@st.composite
def _messages(draw: st.DrawFn) -> list[Any]:
    out: list[Any] = []
    for index in range(draw(st.integers(0, 6))):
        kind = draw(st.sampled_from(["user", "assistant", "tool"]))
        if kind == "user":
            out.append(al.user_message(draw(_text)))
        elif kind == "tool":
            block = {
                "type": "tool-result",
                "toolCallId": f"c{index}",
                "content": [{"type": "text", "text": draw(_text)}],
            }
            out.append(al.user_message([block]))
        else:
            blocks: list[Any] = []
            if draw(st.booleans()):
                blocks.append({"type": "reasoning", "text": draw(_text)})
            if draw(st.booleans()):
                blocks.append({"type": "text", "text": draw(_text)})
            for n in range(draw(st.integers(0 if blocks else 1, 2))):
                blocks.append(
                    {"type": "tool-call", "id": f"c{index}-{n}", "name": draw(_text), "arguments": draw(_text)}
                )
            out.append(assistant(blocks))
    return out


@settings(max_examples=150, deadline=None)
@given(messages=_messages(), system=st.none() | _text, with_tools=st.booleans())
def test_estimate_matches_the_heuristic_for_any_single_block_conversation(
    messages: list[Any], system: str | None, with_tools: bool
) -> None:
    """For any conversation whose messages carry one text, one result or an assistant's reasoning /
    text / calls, pricing the wire body equals pricing the agentlog messages (the serialization loses
    nothing the heuristic counts)."""
    tools = TOOLS if with_tools else []
    body = request_body(request(messages, system=system, tools=tools))
    assert estimate_request_tokens(body) == priced(messages, system, tools)


def test_a_request_over_the_window_is_refused_as_context_overflow_without_consuming_the_script() -> None:
    """Over the window: HTTP 400 with the provider's context-length text, classified
    CONTEXT_WINDOW_EXCEEDED by the real provider; the scripted reply waits for the next request."""
    messages = conversation("y" * 4000)
    size = priced(messages, None, [])
    with DemoModelServer(["after compaction"], context_window=size - 1) as server:
        refused = call(server, request(messages))
        assert server.remaining == 1
        served = call(server, request(messages[:1]))
    failure = refused.finish["failure"]
    assert failure["code"] == "CONTEXT_WINDOW_EXCEEDED"
    assert context_length_message(size - 1, size) in failure["message"]
    assert is_context_overflow(context_length_message(size - 1, size))
    assert served.finish["kind"] == "stop"
    assert [r.answer for r in server.requests] == ["context-overflow", "script"]
    assert [r.estimated_tokens for r in server.requests] == [size, priced(messages[:1], None, [])]


def test_a_request_exactly_at_the_window_is_served() -> None:
    """The window is the largest prompt accepted (a request must *exceed* it to be refused)."""
    messages = conversation()
    with DemoModelServer(["fits"], context_window=priced(messages, None, [])) as server:
        assert call(server, request(messages)).finish["kind"] == "stop"


def test_overflow_next_refuses_that_many_requests_whatever_their_size() -> None:
    """``overflow_next`` scripts an overflow (for "overflow → compaction → retry") and is consumed one per
    refused request; a compaction request in between is not refused and does not use it up."""
    tiny = [al.user_message("hi")]
    with DemoModelServer(["served"], overflow_next=1) as server:
        first = call(server, request(tiny))
        summary = call(server, request([*tiny, al.user_message(INSTRUCTION)]))
        server.overflow_next = 1
        second = call(server, request(tiny))
        third = call(server, request(tiny))
    assert first.finish["failure"]["code"] == "CONTEXT_WINDOW_EXCEEDED"
    assert second.finish["failure"]["code"] == "CONTEXT_WINDOW_EXCEEDED"
    assert summary.finish["kind"] == "stop" and third.finish["kind"] == "stop"
    assert [r.answer for r in server.requests] == ["context-overflow", "summary", "context-overflow", "script"]
    assert server.overflow_next == 0


def _text_of(result: Any) -> str:
    return "".join(b["text"] for b in result.content if b["type"] == "text")


def test_a_compaction_request_gets_a_small_deterministic_checkpoint_with_the_eight_sections() -> None:
    """The instruction as the last user message is answered by the built-in summary: the eight headings
    in order, a few hundred characters however long the region, the same text for the same request,
    usage included, and no script item used."""
    region = conversation("z" * 20_000)
    req = request([*region, al.user_message(INSTRUCTION)], system="Be brief.", tools=TOOLS)
    with DemoModelServer(["for the agent"]) as server:
        first = call(server, req)
        again = call(server, req)
        assert server.remaining == 1
    text = _text_of(first)
    assert text == _text_of(again)
    headings = [line[3:] for line in text.splitlines() if line.startswith("## ")]
    assert headings == list(SUMMARY_SECTIONS)
    assert 200 <= len(text) <= 1000
    assert '"What does big.txt say?"' in text
    assert "1 tool calls, 1 tool results" in text
    assert first.usage is not None and first.usage["outputTokens"] > 0
    assert [r.answer for r in server.requests] == ["summary", "summary"]
    assert all(r.compaction for r in server.requests)


def test_the_compaction_header_marks_a_compaction_request() -> None:
    """``purpose="compaction"`` with harness headers sends ``x-deepseek-harness-compact: 1``, which alone
    makes the request a compaction request (whatever its last message says)."""
    req = request(conversation(), purpose="compaction")
    with DemoModelServer() as server:
        result = call(server, req, harness_headers=True)
    assert server.requests[0].headers.get("x-deepseek-harness-compact") == "1"
    assert server.requests[0].answer == "summary"
    assert "## Primary Request and Intent" in _text_of(result)


def test_a_summary_merging_an_earlier_checkpoint_says_so_and_quotes_the_first_real_request() -> None:
    """An earlier checkpoint in the region is counted as merged, not quoted as the user's request."""
    body = {
        "messages": [
            {"role": "user", "content": "preamble\n\n<compacted-summary>## Primary...</compacted-summary>"},
            {"role": "user", "content": "Now fix the bug."},
            {"role": "assistant", "content": "Done."},
            {"role": "user", "content": INSTRUCTION},
        ]
    }
    text = demo_summary(body)
    assert '"Now fix the bug."' in text
    assert "condensed 3 messages: 0 tool calls, 0 tool results, merging 1 earlier checkpoint(s)" in text


def test_auto_compaction_off_hands_compaction_requests_to_the_script() -> None:
    """With ``auto_compaction=False`` a test scripts the summarizer's answer itself (e.g. an empty one)."""
    with DemoModelServer([Reply("scripted summary")], auto_compaction=False) as server:
        result = call(server, request([al.user_message(INSTRUCTION)]))
    assert _text_of(result) == "scripted summary"
    assert server.requests[0].compaction and server.requests[0].answer == "script"


def test_a_compaction_request_over_the_window_is_refused_too() -> None:
    """A summarization call is a model call like any other: it must fit the window."""
    req = request([*conversation("w" * 8000), al.user_message(INSTRUCTION)])
    with DemoModelServer(context_window=500) as server:
        result = call(server, req)
    assert result.finish["failure"]["code"] == "CONTEXT_WINDOW_EXCEEDED"
    assert server.requests[0].compaction and server.requests[0].answer == "context-overflow"


def test_invalid_window_settings_are_refused() -> None:
    """A window must be a positive token count and an overflow count non-negative."""
    with pytest.raises(ValueError, match="context_window"):
        DemoModelServer(context_window=0)
    with pytest.raises(ValueError, match="overflow_next"):
        DemoModelServer(overflow_next=-1)


def test_large_result_turns_fill_the_window_through_a_real_agent(tmp_path: Path) -> None:
    """The scripted large-result turns drive a real Agent with the built-in read_file: each turn adds the
    whole file to the prompt, so requests grow by about its size every turn and a small window is
    reached within a few turns (without compaction the agent then fails with the overflow)."""
    (tmp_path / BIG_FILE).write_text("0123456789" * 500)  # 5,000 characters ≈ 1,250 tokens
    script = large_result_turns(4)
    assert isinstance(script[0], Reply) and script[0].tool_calls[0] == ToolCall(
        "read_file", {"path": BIG_FILE}, id="call-big-1"
    )

    async def session_run(server: DemoModelServer) -> list[Any]:
        session = al.SessionStore().create("big", meta={"cwd": str(tmp_path)})
        provider = OpenAICompatibleProvider(base_url=server.base_url, api_key="demo")
        options = AgentOptions(provider="demo", model="demo-model", cwd=tmp_path)
        agent = Agent(session, provider, options, tools=builtin_registry(), durable=False)
        outcomes: list[Any] = []
        try:
            for turn in range(4):
                agent.followup(f"read it again ({turn})")
                outcomes += await agent.run()
        finally:
            await provider.aclose()
        return outcomes

    with DemoModelServer(script, context_window=4000) as server:
        outcomes = asyncio.run(session_run(server))
    sizes = [r.estimated_tokens for r in server.requests]
    assert [o.reason["kind"] for o in outcomes[:2]] == ["completed", "completed"]
    assert outcomes[-1].reason["kind"] != "completed"
    assert all(later > earlier for earlier, later in itertools.pairwise(sizes))
    assert sizes[2] - sizes[0] > 1250
    assert server.requests[-1].answer == "context-overflow"


def test_the_summary_has_exactly_the_instructions_sections_and_the_marker_opens_it() -> None:
    """The server recognises agentlog's own instruction by its opening words, and its summary uses the
    instruction's section headings, in the instruction's order."""
    assert COMPACTION_INSTRUCTION.startswith(COMPACTION_MARKER)
    headings = [line[3:] for line in COMPACTION_INSTRUCTION.splitlines() if line.startswith("## ")]
    assert headings == list(SUMMARY_SECTIONS)
