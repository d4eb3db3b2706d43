"""The assembler (spec runtime §9.1): pure chunk → content assembly, on hand-written chunk sequences."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from agentlog.llm import Assembler, LlmError, StreamChunk, assemble, collect, failure_chunk


def test_blocks_in_first_seen_index_order_from_deltas_only() -> None:
    result = assemble(
        [
            {"type": "reasoning-delta", "index": 0, "text": "think "},
            {"type": "text-delta", "index": 1, "text": "Hel"},
            {"type": "reasoning-delta", "index": 0, "text": "more"},
            {"type": "text-delta", "index": 1, "text": "lo"},
            {"type": "finish", "reason": {"kind": "stop"}},
        ]
    )
    assert result.content == [{"type": "reasoning", "text": "think more"}, {"type": "text", "text": "Hello"}]
    assert result.finish == {"kind": "stop"}
    assert result.finished and result.ok and result.usage is None


def test_order_is_first_seen_not_numeric() -> None:
    result = assemble(
        [
            {"type": "block-start", "index": 5, "blockType": "text"},
            {"type": "text-delta", "index": 2, "text": "second"},
            {"type": "text-delta", "index": 5, "text": "first"},
        ]
    )
    assert [b["text"] for b in result.content] == ["first", "second"]


def test_block_end_is_authoritative_and_later_deltas_are_ignored() -> None:
    result = assemble(
        [
            {"type": "block-start", "index": 0, "blockType": "text"},
            {"type": "text-delta", "index": 0, "text": "draft"},
            {"type": "block-end", "index": 0, "block": {"type": "text", "text": "final"}},
            {"type": "text-delta", "index": 0, "text": " straggler"},
            {"type": "block-end", "index": 0, "block": {"type": "text", "text": "re-closed"}},
            {"type": "finish", "reason": {"kind": "stop"}},
        ]
    )
    assert result.content == [{"type": "text", "text": "final"}]


def test_block_end_without_deltas_and_unknown_block_types_are_carried_verbatim() -> None:
    custom = {"type": "citation", "url": "https://example.invalid"}
    result = assemble([{"type": "block-end", "index": 0, "block": custom}])
    assert result.content == [custom]


def test_unclosed_tool_call_assembles_from_deltas_with_default_id() -> None:
    result = assemble(
        [
            {"type": "block-start", "index": 0, "blockType": "tool-call"},
            {"type": "tool-call-delta", "index": 0, "id": "", "name": "read", "argumentsDelta": '{"pa'},
            {"type": "tool-call-delta", "index": 0, "id": "", "argumentsDelta": 'th": 1}'},
            {"type": "block-start", "index": 1, "blockType": "tool-call"},
            {"type": "tool-call-delta", "index": 1, "id": "c-9", "name": "ls", "argumentsDelta": "{}"},
            {"type": "finish", "reason": {"kind": "tool-calls"}},
        ]
    )
    assert result.content == [
        {"type": "tool-call", "id": "call-0", "name": "read", "arguments": '{"path": 1}'},
        {"type": "tool-call", "id": "c-9", "name": "ls", "arguments": "{}"},
    ]
    assert [c["id"] for c in result.tool_calls] == ["call-0", "c-9"]


def test_unclosed_block_without_deltas_of_block_start_only() -> None:
    result = assemble([{"type": "block-start", "index": 0, "blockType": "tool-call"}])
    assert result.content == [{"type": "tool-call", "id": "call-0", "name": "", "arguments": ""}]


def test_unknown_block_type_never_closed_is_dropped() -> None:
    result = assemble(
        [{"type": "block-start", "index": 0, "blockType": "image"}, {"type": "text-delta", "index": 1, "text": "x"}]
    )
    assert result.content == [{"type": "text", "text": "x"}]


def test_max_tokens_drops_tool_calls_but_keeps_text() -> None:
    chunks: list[Any] = [
        {"type": "text-delta", "index": 0, "text": "Let me call"},
        {"type": "tool-call-delta", "index": 1, "id": "c1", "name": "f", "argumentsDelta": '{"trunc'},
        {"type": "block-end", "index": 1, "block": {"type": "tool-call", "id": "c1", "name": "f", "arguments": "{"}},
        {"type": "usage", "usage": {"inputTokens": 3, "outputTokens": 9}},
        {"type": "finish", "reason": {"kind": "max-tokens"}},
    ]
    result = assemble(chunks)
    assert result.content == [{"type": "text", "text": "Let me call"}]
    assert result.finish == {"kind": "max-tokens"}
    assert result.usage == {"inputTokens": 3, "outputTokens": 9}


def test_missing_finish_means_stop() -> None:
    result = assemble([{"type": "text-delta", "index": 0, "text": "cut"}])
    assert result.finish == {"kind": "stop"}
    assert not result.finished


def test_nothing_after_finish_counts_and_unknown_chunks_are_ignored() -> None:
    result = assemble(
        [
            {"type": "text-delta", "index": 0, "text": "a"},
            {"type": "telemetry", "latencyMs": 3},
            {"type": "finish", "reason": {"kind": "stop"}, "replayState": {"response": "r1"}},
            {"type": "text-delta", "index": 0, "text": "late"},
            {"type": "usage", "usage": {"inputTokens": 1, "outputTokens": 1}},
        ]
    )
    assert result.content == [{"type": "text", "text": "a"}]
    assert result.usage is None
    assert result.replay_state == {"response": "r1"}


def test_failure_finish_and_raise_for_failure() -> None:
    failure = {"message": "slow down", "code": "RATE_LIMIT", "status": 429, "providerRetryAfterMs": 2000}
    result = assemble([failure_chunk(failure)])  # type: ignore[arg-type]
    assert result.failure == failure and not result.ok
    with pytest.raises(LlmError, match="slow down") as caught:
        result.raise_for_failure()
    assert caught.value.code == "RATE_LIMIT"
    assert caught.value.failure == failure


def test_aborted_finish_kind() -> None:
    chunk = failure_chunk({"message": "stop", "code": "ABORTED"})
    assert chunk["reason"]["kind"] == "aborted"
    assert assemble([chunk]).failure == {"message": "stop", "code": "ABORTED"}


def test_interrupted_blocks_keep_only_nonblank_text_and_reasoning() -> None:
    assembler = Assembler()
    for chunk in [
        {"type": "reasoning-delta", "index": 0, "text": "thinking"},
        {"type": "text-delta", "index": 1, "text": "   "},
        {"type": "tool-call-delta", "index": 2, "id": "c1", "name": "f", "argumentsDelta": "{"},
        {"type": "text-delta", "index": 3, "text": "partial answer"},
    ]:
        assembler.push(chunk)
    assert assembler.interrupted_blocks() == [
        {"type": "reasoning", "text": "thinking"},
        {"type": "text", "text": "partial answer"},
    ]


def test_message_builds_an_assistant_message_with_model_source() -> None:
    result = assemble(
        [
            {"type": "text-delta", "index": 0, "text": "hi"},
            {"type": "finish", "reason": {"kind": "stop"}, "replayState": {"response": 1}},
        ]
    )
    message = result.message(provider="deepseek", model="deepseek-chat", id="m1")
    assert message == {
        "id": "m1",
        "role": "assistant",
        "content": [{"type": "text", "text": "hi"}],
        "source": {"kind": "model", "provider": "deepseek", "model": "deepseek-chat", "replayState": {"response": 1}},
    }


def test_collect_calls_on_chunk_before_assembling() -> None:
    seen: list[StreamChunk] = []
    chunks: list[StreamChunk] = [
        {"type": "text-delta", "index": 0, "text": "x"},
        {"type": "finish", "reason": {"kind": "stop"}},
    ]

    async def source() -> AsyncIterator[StreamChunk]:
        for chunk in chunks:
            yield chunk

    result = asyncio.run(collect(source(), on_chunk=seen.append))
    assert seen == chunks
    assert result.content == [{"type": "text", "text": "x"}]
