"""Compaction across the real agent loop (the original's ``compaction-loop-repro.spec.ts``, spec §5.6/§6.3).

The engine is installed with ``Agent(compaction=...)`` and the loop itself decides when its hooks run:
pressure before a step (after the previous step's tool results, before ``step/start``), overflow recovery
inside the step whose request was refused, retried within that same step. The models here are in-process
providers that know their context window and answer summarization calls (``purpose == "compaction"``)
themselves, through the default :class:`~agentlog.compaction.ProviderSummarizer`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from agentlog.agent.loop import Agent, AgentOptions, RetryPolicy
from agentlog.agent.tools import FunctionTool, ToolContext, ToolOutcome, ToolRegistry
from agentlog.compaction import (
    COMPACTION_INSTRUCTION,
    CompactionEngine,
    SummarizationInput,
    SummaryResult,
    TokenMeter,
    balanced_after,
    balanced_before,
    is_checkpoint_source,
)
from agentlog.errors import LlmError
from agentlog.kernel.session import Session
from agentlog.llm.types import GenerateRequest, StreamChunk, failure_chunk
from agentlog.testing import text_reply, tool_call_reply
from agentlog.testing.builders import assistant_msg, intent, user_msg


def run(coro: Any) -> Any:
    return asyncio.run(coro)


class CheckpointSummarizer:
    """A fixed, small summary (the original's ReproCompactionEngine)."""

    async def summarize(self, input: SummarizationInput) -> SummaryResult:
        return SummaryResult(summary=[{"type": "text", "text": "CHECKPOINT SUMMARY"}], provider="mock", model="stub")


class StepwiseToolProvider:
    """Each call asks for one ``work`` tool call until ``tool_steps`` are used, then answers 'all done'."""

    name = "mock"

    def __init__(self, tool_steps: int, window: int = 400) -> None:
        self.tool_steps = tool_steps
        self.window = window
        self.calls = 0

    def context_window_for(self, model: str) -> int:
        return self.window

    async def stream(
        self, request: GenerateRequest, *, signal: asyncio.Event | None = None
    ) -> AsyncIterator[StreamChunk]:
        n = self.calls
        self.calls += 1
        reply = (
            tool_call_reply((f"c{n}", "work", json.dumps({"i": n})), text=f"step {n}")
            if n < self.tool_steps
            else text_reply("all done")
        )
        for chunk in reply:
            yield chunk


def work_tools() -> ToolRegistry:
    async def body(args: Any, ctx: ToolContext) -> ToolOutcome:
        return ToolOutcome.text("work result")

    schema = {"type": "object", "properties": {"i": {"type": "number"}}}
    return ToolRegistry([FunctionTool("work", "does work", schema, body)])


def tool_loop(session_id: str, tool_steps: int = 8) -> Agent:
    compact = CompactionEngine(
        pruner=None,
        summarizer=CheckpointSummarizer(),
        config={"auto": True, "thresholdRatio": 0.5, "retainTokens": 50, "maxTokens": 8192, "compactionRetries": 1},
    )
    session = Session.create(session_id)
    return Agent(
        session,
        StepwiseToolProvider(tool_steps),
        AgentOptions(provider="mock", model="mock"),
        tools=work_tools(),
        durable=False,
        compaction=compact,
    )


def test_pressure_runs_between_the_completed_tool_step_and_the_next_step() -> None:
    """The first compaction/start follows a tool result and its step/end, and precedes the next step/start."""
    agent = tool_loop("post-step-order")
    agent.followup("do tool work")
    outcomes = run(agent.run())
    assert outcomes[-1].reason == {"kind": "completed"}
    events = list(agent.session.events)
    start = next(e for e in events if e["type"] == "compaction/start")
    result = [e for e in events if e["type"] == "tool/result" and e.seq < start.seq][-1]
    step = result["data"]["step"]
    step_end = next(e for e in events if e["type"] == "step/end" and e["data"]["step"] == step and e.seq > result.seq)
    next_start = next(e for e in events if e["type"] == "step/start" and e["data"]["step"] == step + 1)
    assert result.seq < step_end.seq < start.seq < next_start.seq
    assert start["data"]["turn"] == 1  # inside the open turn


def test_the_head_checkpoint_the_loop_lands_is_a_balanced_cut_on_both_sides() -> None:
    """A text-only checkpoint with a high log seq at the surface head is a valid region start and end."""
    agent = tool_loop("repro")
    agent.followup("do a long multi-step task")
    run(agent.run())
    session = agent.session
    checkpoints = [
        e for e in session.events if e["type"] == "user/message" and is_checkpoint_source(e["data"]["source"])
    ]
    assert checkpoints
    on_surface = [e.seq for e in checkpoints if e.seq in session.surface.nodes]
    assert on_surface
    for seq in on_surface:
        assert balanced_before(session, seq), f"checkpoint {seq} must be a balanced region start"
        assert balanced_after(session, seq), f"checkpoint {seq} must be a balanced region end"
    assert session.events[-1]["type"] == "turn/end"
    assert session.events[-1]["data"]["reason"] == {"kind": "completed"}


def test_pressure_keeps_every_request_of_a_runaway_tool_turn_near_the_window() -> None:
    """Without compaction the eight steps would grow past the window; with it, every step stays under it."""
    agent = tool_loop("bounded", tool_steps=12)
    meter = TokenMeter()
    sizes: list[int] = []
    original = agent.provider.stream

    def measured(request: GenerateRequest, *, signal: asyncio.Event | None = None) -> Any:
        sizes.append(meter.measure(agent.session).total_tokens)
        return original(request, signal=signal)

    agent.provider.stream = measured  # type: ignore[method-assign]
    agent.followup("do a long multi-step task")
    run(agent.run())
    assert len(sizes) == 13
    assert max(sizes) < 400
    assert [e["type"] for e in agent.session.events].count("compaction/summary") >= 2


# --- context-overflow recovery across the real loop ---------------------------------------------------


def overflow_history_seed() -> list[dict[str, Any]]:
    """Two closed turns: an old sentinel turn and a recent one (~400 tokens each), no request header."""
    session = Session.create("overflow-history-seed")
    for turn in (1, 2):
        sentinel = "OLD HISTORY SENTINEL" if turn == 1 else "RECENT HISTORY"
        session.append("turn/start", {"turn": turn})
        session.append("user/message", user_msg(f"{sentinel} {'old context ' * 200}"), intent())
        session.append("step/start", {"turn": turn, "step": 1})
        message = assistant_msg(f"historical response {turn} {'detail ' * 200}", provider="mock", model="mock")
        session.append("assistant/message", {"turn": turn, "step": 1, "message": message}, intent())
        session.append("step/end", {"turn": turn, "step": 1})
        session.append("turn/end", {"turn": turn, "reason": {"kind": "completed"}})
    return [dict(e) for e in session.events]


class OverflowRecoveryProvider:
    """The first conversation request overflows (in-band, the provider contract); the retry succeeds.

    ``transient_after_overflow``: the second conversation request fails with a transient SERVER error
    first. Summarization calls (``purpose == "compaction"``) get 'RECOVERY CHECKPOINT'.
    """

    name = "mock"

    def __init__(self, *, transient_after_overflow: bool = False) -> None:
        self.transient = transient_after_overflow
        self.conversation: list[GenerateRequest] = []
        self.summaries: list[GenerateRequest] = []

    def context_window_for(self, model: str) -> int:
        return 128

    async def stream(
        self, request: GenerateRequest, *, signal: asyncio.Event | None = None
    ) -> AsyncIterator[StreamChunk]:
        if request.purpose == "compaction":
            self.summaries.append(request)
            reply = text_reply("RECOVERY CHECKPOINT")
        else:
            self.conversation.append(request)
            if len(self.conversation) == 1:
                reply = [
                    failure_chunk(
                        LlmError("request too large for model context", code="CONTEXT_WINDOW_EXCEEDED").failure
                    )
                ]
            elif self.transient and len(self.conversation) == 2:
                reply = [failure_chunk(LlmError("temporary provider outage", code="SERVER").failure)]
            else:
                reply = text_reply("recovered")
        for chunk in reply:
            yield chunk


def overflow_agent(session_id: str, provider: OverflowRecoveryProvider) -> Agent:
    compact = CompactionEngine(
        pruner=None,
        config={
            "thresholdRatio": 1,
            "retainTokens": 100,
            "maxTokens": 64,
            "compactionRetries": 0,
            "maxOverflowRetries": 1,
        },
    )
    session = Session.create(session_id, overflow_history_seed())
    options = AgentOptions(provider="mock", model="mock", retry=RetryPolicy(initial_delay_ms=1, max_delay_ms=1))
    return Agent(session, provider, options, durable=False, compaction=compact)


def test_overflow_is_force_compacted_within_the_retried_step() -> None:
    """One refused request, one summarization call, one retry in the same step; the retry no longer carries
    the old history, and the bracket sits between that step's step/start and step/end."""
    provider = OverflowRecoveryProvider()
    agent = overflow_agent("overflow-in-band", provider)
    agent.followup("continue from history")
    outcomes = run(agent.run())
    assert outcomes[-1].reason == {"kind": "completed"}
    assert len(provider.conversation) == 2 and len(provider.summaries) == 1
    instruction = provider.summaries[0].messages[-1]["content"][0]["text"]
    assert instruction == COMPACTION_INSTRUCTION
    assert "Write concise English engineering prose." in instruction
    assert "OLD HISTORY SENTINEL" in json.dumps(provider.conversation[0].messages)
    retry = json.dumps(provider.conversation[1].messages)
    assert "RECOVERY CHECKPOINT" in retry and "OLD HISTORY SENTINEL" not in retry

    events = list(agent.session.events)
    step_start = next(e for e in events if e["type"] == "step/start" and e["data"]["turn"] == 3)
    step_end = next(e for e in events if e["type"] == "step/end" and e["data"]["turn"] == 3)
    bracket = [e for e in events if e["type"].startswith("compaction/")]
    assert [e["type"] for e in bracket] == ["compaction/start", "compaction/summary", "compaction/end"]
    assert all(step_start.seq < e.seq < step_end.seq for e in bracket)
    assert [e["data"]["turn"] for e in events if e["type"] == "turn/start"][-1] == 3
    assert len([e for e in events if e["type"] == "step/start" and e["data"]["turn"] == 3]) == 1
    assert events[-1]["type"] == "turn/end" and events[-1]["data"]["reason"] == {"kind": "completed"}


def test_overflow_and_transient_retry_budgets_are_independent_in_one_sequence() -> None:
    """overflow → compaction retry → SERVER → policy retry → success: one llm/retry (for SERVER only)."""
    provider = OverflowRecoveryProvider(transient_after_overflow=True)
    agent = overflow_agent("alternating-recovery", provider)
    agent.followup("continue from history")
    run(agent.run())
    events = list(agent.session.events)
    assert len(provider.conversation) == 3 and len(provider.summaries) == 1
    retries = [e["data"] for e in events if e["type"] == "llm/retry"]
    assert len(retries) == 1
    assert retries[0]["turn"] == 3 and retries[0]["step"] == 1 and retries[0]["retry"] == 1
    assert dict(retries[0]["failure"]) == {"message": "temporary provider outage", "code": "SERVER"}
    assert [e["data"]["turn"] for e in events if e["type"] == "turn/start"][-1] == 3
    assert events[-1]["type"] == "turn/end" and events[-1]["data"]["reason"] == {"kind": "completed"}


def test_a_second_overflow_in_the_same_step_ends_the_turn_with_the_original_error() -> None:
    """maxOverflowRetries 1: after one compaction-and-retry, a repeated overflow is the turn's error."""

    class AlwaysOverflow(OverflowRecoveryProvider):
        async def stream(
            self, request: GenerateRequest, *, signal: asyncio.Event | None = None
        ) -> AsyncIterator[StreamChunk]:
            if request.purpose == "compaction":
                self.summaries.append(request)
                reply = text_reply("RECOVERY CHECKPOINT")
            else:
                self.conversation.append(request)
                reply = [
                    failure_chunk(
                        LlmError("request too large for model context", code="CONTEXT_WINDOW_EXCEEDED").failure
                    )
                ]
            for chunk in reply:
                yield chunk

    provider = AlwaysOverflow()
    agent = overflow_agent("overflow-twice", provider)
    agent.followup("continue from history")
    outcomes = run(agent.run())
    assert len(provider.conversation) == 2 and len(provider.summaries) == 1
    assert outcomes[-1].reason == {
        "kind": "error",
        "error": {"message": "request too large for model context", "code": "CONTEXT_WINDOW_EXCEEDED"},
    }
    assert [e["type"] for e in agent.session.events].count("compaction/summary") == 1
