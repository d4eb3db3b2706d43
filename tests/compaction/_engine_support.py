"""Shared builders for the compaction engine, manual, loop and end-to-end tests.

Sessions are built with plain appends in the shapes the original's spec files use (closed two-message
turns, three tool turns, one oversized tool result), a recording :class:`Summarizer` stands in for the
model where the test is about *when* compaction runs, and :class:`WindowProvider` is a scripted model
that knows its context window (what ``context_window_for`` answers for the OpenAI-compatible one).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentlog.agent.loop import Agent, AgentOptions
from agentlog.compaction import (
    CompactionEngine,
    SummarizationInput,
    SummaryResult,
    TokenMeter,
    ToolResultPruner,
)
from agentlog.kernel.events import TokenUsage
from agentlog.kernel.session import Session
from agentlog.llm.types import StreamChunk
from agentlog.testing import ScriptedProvider
from agentlog.testing.builders import assistant_msg, intent, tool_result_msg, user_msg

MODEL = "test-model"
FIXTURE_TEXT = " ".join(["fixture"] * 40)


def header_data(provider: str = MODEL, model: str = MODEL, *, reason: str = "initial", **extra: Any) -> dict[str, Any]:
    """The ``data`` of a ``request/header`` event routing ``provider``/``model``."""
    return {"header": {"config": {"provider": provider, "model": model}, **extra}, "reason": reason}


def conversation(turns: int = 4, text: str = FIXTURE_TEXT, *, session_id: str | None = None) -> Session:
    """``turns`` closed user/assistant turns (the first routes ``MODEL``), then one open turn."""
    session = Session.create(session_id or f"conversation-{turns}")
    for turn in range(1, turns + 1):
        session.append("turn/start", {"turn": turn})
        session.append("user/message", user_msg(f"{text} user {turn}"), intent())
        session.append("step/start", {"turn": turn, "step": 1})
        if turn == 1:
            session.append("request/header", header_data())
        session.append(
            "assistant/message",
            {
                "turn": turn,
                "step": 1,
                "message": assistant_msg(f"{text} assistant {turn}", provider=MODEL, model=MODEL),
            },
            intent(),
        )
        session.append("step/end", {"turn": turn, "step": 1})
        session.append("turn/end", {"turn": turn, "reason": {"kind": "completed"}})
    session.append("turn/start", {"turn": turns + 1})
    return session


def closed_conversation(turns: int = 2, last_turn: int | None = None, *, text: str | None = None) -> Session:
    """Closed turns only (no open turn): the idle history manual compaction works on."""
    prompt = text if text is not None else "older conversation history " * 60
    session = Session.create(f"closed-{turns}-{last_turn}")
    for index in range(1, turns + 1):
        turn = last_turn if index == turns and last_turn is not None else index
        session.append("turn/start", {"turn": turn})
        session.append("user/message", user_msg(f"{prompt} {turn}"), intent())
        session.append("step/start", {"turn": turn, "step": 1})
        if index == 1:
            session.append("request/header", header_data())
        session.append(
            "assistant/message",
            {"turn": turn, "step": 1, "message": assistant_msg(f"answer {turn}", provider=MODEL, model=MODEL)},
            intent(),
        )
        session.append("step/end", {"turn": turn, "step": 1})
        session.append("turn/end", {"turn": turn, "reason": {"kind": "completed"}})
    return session


def tool_step(session: Session, turn: int, call_id: str, result: str, *, text: str | None = None) -> None:
    """One assistant message with a tool call and its result, inside an open step of ``turn``."""
    blocks: list[Any] = [] if text is None else [{"type": "text", "text": text}]
    blocks.append({"type": "tool-call", "id": call_id, "name": "read", "arguments": "{}"})
    session.append(
        "assistant/message",
        {"turn": turn, "step": 1, "message": assistant_msg(blocks, provider=MODEL, model=MODEL)},
        intent(),
    )
    call = session.append("tool/call", {"turn": turn, "step": 1, "callId": call_id, "name": "read", "arguments": "{}"})
    session.append(
        "tool/result",
        {"turn": turn, "step": 1, "message": tool_result_msg(call_id, result)},
        intent("append", [call.seq]),
    )


def tool_conversation() -> Session:
    """Three closed turns of prompt / assistant-with-tool-call / tool result (~300 words each), then turn 4."""
    session = Session.create("tools")
    for turn in range(1, 4):
        session.append("turn/start", {"turn": turn})
        session.append("user/message", user_msg(f"request {turn} " * 300), intent())
        session.append("step/start", {"turn": turn, "step": 1})
        if turn == 1:
            session.append("request/header", header_data())
        tool_step(session, turn, f"call-{turn}", f"result {turn} " * 300, text=f"calling {turn} " * 300)
        session.append("step/end", {"turn": turn, "step": 1})
        session.append("turn/end", {"turn": turn, "reason": {"kind": "completed"}})
    session.append("turn/start", {"turn": 4})
    return session


def oversized_tool_result(chars: int = 3_000, with_compactable_prompt: bool = False) -> Session:
    """One closed routed tool step whose result is ``chars`` X's (optionally after a long prompt), then turn 2."""
    session = Session.create(f"oversized-tool-{chars}")
    session.append("turn/start", {"turn": 1})
    if with_compactable_prompt:
        session.append("user/message", user_msg("older history " * 200), intent())
    session.append("step/start", {"turn": 1, "step": 1})
    session.append("request/header", header_data())
    tool_step(session, 1, "oversized", "X" * chars)
    session.append("step/end", {"turn": 1, "step": 1})
    session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    session.append("turn/start", {"turn": 2})
    return session


def types_of(session: Session, prefix: str = "compaction/") -> list[str]:
    return [event["type"] for event in session.events if event["type"].startswith(prefix)]


def last_of(session: Session, event_type: str) -> Any:
    return next((event for event in reversed(session.events) if event["type"] == event_type), None)


def summarized_text(summary_input: SummarizationInput) -> str:
    """Every text fragment the summarizer received, recursing into tool results."""

    def collect(blocks: Sequence[Mapping[str, Any]]) -> str:
        parts = []
        for block in blocks:
            if block.get("type") == "text":
                parts.append(str(block["text"]))
            elif block.get("type") == "tool-result":
                parts.append(collect(block.get("content") or ()))
        return "\n".join(parts)

    return "\n".join(collect(message["content"]) for message in summary_input.messages)


@dataclass
class RecordingSummarizer:
    """A summarizer under test control: records its inputs; can fail, block, or run code mid-call."""

    summary: list[dict[str, Any]] = field(default_factory=lambda: [{"type": "text", "text": "small checkpoint"}])
    raw_output: list[dict[str, Any]] | None = None
    usage: TokenUsage | None = None
    error: BaseException | None = None
    during: Callable[[], None] | None = None
    gate: asyncio.Event | None = None
    calls: list[SummarizationInput] = field(default_factory=list)
    entered: asyncio.Event = field(default_factory=asyncio.Event)

    async def summarize(self, input: SummarizationInput) -> SummaryResult:
        self.calls.append(input)
        self.entered.set()
        if self.during is not None:
            self.during()
        if self.gate is not None:
            await self.gate.wait()
        if self.error is not None:
            raise self.error
        return SummaryResult(
            summary=self.summary,
            provider="summary-provider",
            model="summary-model",
            max_tokens=123,
            usage=self.usage,
            raw_output=self.raw_output,
        )


class WindowProvider(ScriptedProvider):
    """A scripted model whose ``context_window_for`` answers ``window`` (``None``: it does not know)."""

    def __init__(
        self, script: Iterable[Sequence[StreamChunk]] = (), *, window: int | None = 1_000, name: str = MODEL
    ) -> None:
        super().__init__(script, name=name)
        self.window = window

    def context_window_for(self, model: str) -> int | None:
        return self.window


def engine(
    config: Mapping[str, Any] | None = None,
    *,
    summarizer: RecordingSummarizer | None = None,
    pruner: ToolResultPruner | None = None,
    meter: TokenMeter | None = None,
) -> tuple[CompactionEngine, RecordingSummarizer]:
    """An engine with a recording summarizer; no pruner unless one is given (the original's default stack)."""
    recorder = summarizer or RecordingSummarizer()
    return (
        CompactionEngine(meter=meter or TokenMeter(), pruner=pruner, summarizer=recorder, config=dict(config or {})),
        recorder,
    )


def small_pruner(meter: TokenMeter) -> ToolResultPruner:
    """The spec files' pruner settings: results over 100 characters keep 20 + marker + 10."""
    return ToolResultPruner(threshold_chars=100, head_chars=20, tail_chars=10, meter=meter)


def agent_for(
    session: Session,
    compaction: CompactionEngine | None,
    *,
    window: int | None = 1_000,
    provider_name: str = MODEL,
    options_model: str = MODEL,
    context_window: int | None = None,
    script: Iterable[Sequence[StreamChunk]] = (),
) -> Agent:
    """A real (non-durable) agent over ``session`` with the engine installed."""
    provider = WindowProvider(script, window=window, name=provider_name)
    options = AgentOptions(provider=options_model, model=options_model, context_window=context_window)
    return Agent(session, provider, options, durable=False, compaction=compaction)


async def pre_step(agent: Agent, turn: int = 1, step: int = 1) -> None:
    """Run the agent's pre-step hooks as the loop does before ``step/start``."""
    for hook in agent.pre_step_hooks:
        await hook(agent, turn, step)


def overflow_failure(message: str = "provider overflow") -> dict[str, Any]:
    return {"message": message, "code": "CONTEXT_WINDOW_EXCEEDED"}


async def recover(agent: Agent, failure: Mapping[str, Any] | None = None, turn: int = 1, step: int = 1) -> bool:
    """Whether the request-error hooks ask the loop to resend (what ``Agent`` does with the answer)."""
    for hook in agent.request_error_hooks:
        if await hook(agent, turn, step, failure or overflow_failure()) == "retry":
            return True
    return False
