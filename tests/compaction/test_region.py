"""The region transaction and optional pruning, against the original's ``compaction-basic.spec.ts``.

One test per case of the ``optional model-free tool-result pruning`` (1–4) and ``compaction region
transaction`` (5–18) blocks of ``packages/compaction/compaction-basic/tests/compaction-basic.spec.ts``,
named after the case, plus hypothesis properties of the transaction over random valid sessions.

The original subclasses its engine and overrides ``summarize``; here the summarizer is a plug-in
(:class:`RecordingSummarizer`, the same knobs: summary, raw output, usage, an error, a hook that runs
while the summary is "being written"). Sessions are real kernel sessions built with real appends, the
agent is the real :class:`~agentlog.agent.loop.Agent` (not durable: these tests need no store), and the
model window the original's adapter reports is ``AgentOptions.context_window``.

The session builders here (:func:`conversation`, :func:`tool_conversation`,
:func:`oversized_tool_result`) are the original's fixtures and are shared by the other test files of
this package.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentlog import SessionInvariants, SessionStore
from agentlog.agent.loop import Agent, AgentOptions
from agentlog.compaction import (
    CHECKPOINT_PREAMBLE,
    PRUNE_MARKER,
    CompactionEngine,
    CompactionResult,
    RegionOptions,
    SummarizationInput,
    SummaryResult,
    TokenMeasurement,
    TokenMeter,
    ToolResultPruner,
    balanced_after,
    balanced_before,
    compact_surface_region,
    is_checkpoint_source,
    select_compactable_range,
)
from agentlog.compaction.region import error_chain
from agentlog.errors import (
    CompactionBusyError,
    CompactionError,
    CompactionRangeError,
    CompactionStateError,
    SummaryNotSmallerError,
    SurfaceChangedError,
)
from agentlog.kernel.jsonvalue import thaw
from agentlog.kernel.messages import (
    assistant_message,
    plugin_message,
    text_block,
    tool_call_block,
    tool_result_message,
    user_message,
)
from agentlog.kernel.session import Session
from agentlog.testing.provider import ScriptedProvider

T = TypeVar("T")

MODEL = "test-model"
FIXTURE_TEXT = " ".join(["fixture"] * 40)


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


# --- the original's session fixtures (real appends) ------------------------------------------------


def routed_header(provider: str = MODEL, model: str = MODEL, **extra: Any) -> dict[str, Any]:
    return {"config": {"provider": provider, "model": model}, **extra}


def conversation(turns: int = 4, text: str = FIXTURE_TEXT) -> Session:
    """Closed two-message turns (the first routed to ``test-model``), then one open turn."""
    session = Session.create(f"conversation-{turns}")
    for turn in range(1, turns + 1):
        session.append("turn/start", {"turn": turn})
        session.append("user/message", user_message(f"{text} user {turn}"), {"surfaceOp": "append"})
        session.append("step/start", {"turn": turn, "step": 1})
        if turn == 1:
            session.append("request/header", {"header": routed_header(), "reason": "initial"})
        session.append(
            "assistant/message",
            {
                "turn": turn,
                "step": 1,
                "message": assistant_message(f"{text} assistant {turn}", provider=MODEL, model=MODEL),
            },
            {"surfaceOp": "append"},
        )
        session.append("step/end", {"turn": turn, "step": 1})
        session.append("turn/end", {"turn": turn, "reason": {"kind": "completed"}})
    session.append("turn/start", {"turn": turns + 1})
    return session


def tool_conversation() -> Session:
    """Three closed turns of user request, assistant text + one tool call, and its large result."""
    session = Session.create("tools")
    for turn in range(1, 4):
        call_id = f"call-{turn}"
        session.append("turn/start", {"turn": turn})
        session.append("user/message", user_message(f"request {turn} " * 300), {"surfaceOp": "append"})
        session.append("step/start", {"turn": turn, "step": 1})
        if turn == 1:
            session.append("request/header", {"header": routed_header(), "reason": "initial"})
        message = assistant_message(
            [text_block(f"calling {turn} " * 300), tool_call_block(call_id, "read", "{}")], provider=MODEL, model=MODEL
        )
        session.append("assistant/message", {"turn": turn, "step": 1, "message": message}, {"surfaceOp": "append"})
        session.append("tool/call", {"turn": turn, "step": 1, "callId": call_id, "name": "read", "arguments": "{}"})
        session.append(
            "tool/result",
            {"turn": turn, "step": 1, "message": tool_result_message(call_id, f"result {turn} " * 300, is_error=False)},
            {"surfaceOp": "append"},
        )
        session.append("step/end", {"turn": turn, "step": 1})
        session.append("turn/end", {"turn": turn, "reason": {"kind": "completed"}})
    session.append("turn/start", {"turn": 4})
    return session


def oversized_tool_result(chars: int = 3000, with_compactable_prompt: bool = False) -> Session:
    """One closed routed tool step whose result is ``chars`` X's, then an open turn."""
    session = Session.create(f"oversized-tool-{chars}")
    call_id = "oversized"
    session.append("turn/start", {"turn": 1})
    if with_compactable_prompt:
        session.append("user/message", user_message("older history " * 200), {"surfaceOp": "append"})
    session.append("step/start", {"turn": 1, "step": 1})
    session.append("request/header", {"header": routed_header(), "reason": "initial"})
    message = assistant_message([tool_call_block(call_id, "bash", "{}")], provider=MODEL, model=MODEL)
    session.append("assistant/message", {"turn": 1, "step": 1, "message": message}, {"surfaceOp": "append"})
    session.append("tool/call", {"turn": 1, "step": 1, "callId": call_id, "name": "bash", "arguments": "{}"})
    session.append(
        "tool/result",
        {
            "turn": 1,
            "step": 1,
            "message": tool_result_message(call_id, "X" * chars, is_error=False),
            "meta": {"presentation": "preserved"},
        },
        {"surfaceOp": "append"},
    )
    session.append("step/end", {"turn": 1, "step": 1})
    session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    session.append("turn/start", {"turn": 2})
    return session


# --- the original's engine harness ----------------------------------------------------------------


class RecordingSummarizer:
    """The original's ``TestCompactionEngine.summarize``: a scripted summary and the inputs it was given."""

    def __init__(self) -> None:
        self.summary: list[Mapping[str, Any]] = [text_block("small checkpoint")]
        self.raw_output: list[Mapping[str, Any]] | None = None
        self.usage: dict[str, Any] | None = None
        self.provider = "summary-provider"
        self.model = "summary-model"
        self.error: BaseException | None = None
        self.during: Callable[[], object] | None = None
        self.calls: list[SummarizationInput] = []

    async def summarize(self, input: SummarizationInput) -> SummaryResult:
        self.calls.append(input)
        if self.during is not None:
            self.during()
        if self.error is not None:
            raise self.error
        return SummaryResult(
            summary=self.summary,
            provider=self.provider,
            model=self.model,
            max_tokens=123,
            usage=self.usage,  # type: ignore[arg-type]
            raw_output=self.raw_output,
        )


class CountingPruner(ToolResultPruner):
    """A real pruner that counts its ``prune_session`` calls (the original's ``vi.spyOn``)."""

    __slots__ = ("sessions",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sessions: list[Session] = []

    def prune_session(self, session: Any) -> Any:
        self.sessions.append(session)
        return super().prune_session(session)


PRUNE_CONFIG = {"threshold_chars": 100, "head_chars": 20, "tail_chars": 10}


def make_agent(
    session: Session, model: str | None = MODEL, *, window: int | None = 1000, provider: Any = None
) -> Agent:
    """The original's ``agent(session, model)``: options name ``model`` as provider and model (or nothing)."""
    options = AgentOptions(provider=model or "", model=model or "", context_window=window)
    return Agent(session, provider or ScriptedProvider([]), options, durable=False)


def make_engine(
    config: Mapping[str, Any] | None = None,
    *,
    summarizer: Any = None,
    pruner: ToolResultPruner | None = None,
    meter: TokenMeter | None = None,
) -> tuple[CompactionEngine, RecordingSummarizer]:
    """The original's ``service(config)``: no pruner unless given, ``auto: false`` by default."""
    recorder = RecordingSummarizer()
    engine = CompactionEngine(
        meter=meter,
        pruner=pruner,
        summarizer=summarizer or recorder,
        config=dict(config) if config is not None else {"auto": False},
    )
    return engine, recorder


def summarized_text(summary_input: SummarizationInput) -> str:
    """Every text fragment the summarizer received, recursing into tool-result blocks."""

    def collect(blocks: Sequence[Mapping[str, Any]]) -> str:
        parts = []
        for block in blocks:
            if block["type"] == "text":
                parts.append(block["text"])
            elif block["type"] == "tool-result":
                parts.append(collect(block["content"]))
            else:
                parts.append("")
        return "\n".join(parts)

    return "\n".join(collect(message["content"]) for message in summary_input.messages)


def last_event(session: Session, etype: str) -> Any:
    return next((event for event in reversed(session.events) if event["type"] == etype), None)


def has_event(session: Session, etype: str) -> bool:
    return any(event["type"] == etype for event in session.events)


def region(engine: CompactionEngine, session: Session, start: int, end: int, agent: Any) -> CompactionResult:
    return run(engine.compact_region(session, start, end, agent=agent))


# --- optional model-free tool-result pruning (1–4) ------------------------------------------------


def test_does_not_prune_a_below_pressure_session_opportunistically() -> None:
    """Below the threshold nothing runs: no prune (the pruner is not even asked), no summary, no replace."""
    meter = TokenMeter()
    pruner = CountingPruner(**PRUNE_CONFIG, meter=meter)
    engine, recorder = make_engine(
        {"auto": False, "thresholdRatio": 0.8, "retainTokens": 100}, pruner=pruner, meter=meter
    )
    session = oversized_tool_result()

    assert run(engine.compact_if_needed(make_agent(session, window=10_000), "pressure")) is None
    assert pruner.sessions == []
    assert recorder.calls == []
    assert session.surface.replace_generation == 0


def test_skips_llm_summarization_when_pruning_alone_clears_pressure() -> None:
    """Pruning runs first once pressure qualifies; when it clears the threshold no summary is requested."""
    meter = TokenMeter()
    engine, recorder = make_engine(
        {"auto": False, "thresholdRatio": 0.5, "retainTokens": 50},
        pruner=ToolResultPruner(**PRUNE_CONFIG, meter=meter),
        meter=meter,
    )
    session = oversized_tool_result()

    assert meter.measure(session).total_tokens >= 500
    assert run(engine.compact_if_needed(make_agent(session, window=1000), "pressure")) is None
    assert meter.measure(session).total_tokens < 500
    assert recorder.calls == []
    assert session.surface.replace_generation == 1


def test_summarizes_the_pruned_surface_when_pruning_is_insufficient() -> None:
    """When pruning is not enough, the summarizer sees the pruned results (marker in, full text out)."""
    meter = TokenMeter()
    engine, recorder = make_engine(
        {"auto": False, "thresholdRatio": 0.5, "retainTokens": 50},
        pruner=ToolResultPruner(**PRUNE_CONFIG, meter=meter),
        meter=meter,
    )
    session = tool_conversation()

    assert run(engine.compact_if_needed(make_agent(session, window=2000), "pressure")) is not None
    # The original sends the region in one call; here a region larger than one request's budget is
    # summarized in balanced parts (issue 9, beyond the original), so there may be several calls, all
    # committed as one checkpoint.
    assert len(recorder.calls) >= 1
    assert len([e for e in session.events if e["type"] == "compaction/summary"]) == 1
    text = "\n".join(summarized_text(call) for call in recorder.calls)
    assert "tool result middle pruned" in text
    assert PRUNE_MARKER in text
    assert "result 1 " * 300 not in text


def test_retains_the_original_compaction_basic_behavior_without_the_optional_plugin() -> None:
    """Without a pruner the summary path runs alone and the tool result is never rewritten."""
    engine, recorder = make_engine({"auto": False, "thresholdRatio": 0.5, "retainTokens": 50}, pruner=None)
    session = oversized_tool_result(3000, True)

    assert run(engine.compact_if_needed(make_agent(session, window=2000), "pressure")) is not None
    assert len(recorder.calls) == 1
    original = next(event for event in session.events if event["type"] == "tool/result")
    assert thaw(original["data"]["message"]["content"][0]["content"][0]) == {"type": "text", "text": "X" * 3000}
    assert [e for e in session.events if e["type"] == "tool/result" and e.surface_op != "append"] == []


# --- compaction region transaction (5–18) ---------------------------------------------------------


def test_lands_a_framed_replayable_checkpoint_with_exact_source_seqs_and_token_price() -> None:
    """The exact §5.2 event order, the summary record's fields (and their order), the checkpoint framing,
    its cited sources, the price of the shadowed nodes, and an identical replay."""
    engine, recorder = make_engine()
    recorder.raw_output = [{"type": "reasoning", "text": "private compact thought"}, *recorder.summary]
    recorder.usage = {"inputTokens": 40, "outputTokens": 5}
    session = conversation(3)
    agent = make_agent(session)
    before = list(session.surface.nodes)
    length = len(session.events)
    priced = engine.meter.measure(session).nodes[:4]

    result = region(engine, session, before[0], before[3], agent)

    assert list(result.shadowed_seqs) == before[:4]
    assert result.shadowed_token_count == sum(node.tokens for node in priced) > 0
    assert recorder.calls[0].signal is agent.abort_signal
    assert "fixture user 1" in summarized_text(recorder.calls[0])
    new_events = list(session.events)[length:]
    assert [e["type"] for e in new_events] == [
        "compaction/start",
        "compaction/summary",
        "user/message",
        "compaction/end",
    ]
    start, summary, checkpoint, end = new_events
    assert thaw(start["data"]) == {"compactionId": result.compaction_id, "turn": 4}
    assert thaw(end["data"]) == {"compactionId": result.compaction_id, "turn": 4}
    assert list(summary["data"].keys()) == [
        "compactionId",
        "summary",
        "rawOutput",
        "shadowedRange",
        "shadowedSeqs",
        "shadowedTokenCount",
        "provider",
        "model",
        "maxTokens",
        "usage",
    ]
    assert thaw(summary["data"]) == {
        "compactionId": result.compaction_id,
        "summary": [{"type": "text", "text": "small checkpoint"}],
        "rawOutput": recorder.raw_output,
        "shadowedRange": {"start": before[0], "end": before[3]},
        "shadowedSeqs": before[:4],
        "shadowedTokenCount": result.shadowed_token_count,
        "provider": "summary-provider",
        "model": "summary-model",
        "maxTokens": 123,
        "usage": recorder.usage,
    }
    assert "llmStreamCall" not in summary["data"]
    assert checkpoint.surface_op == {"op": "replace", "start": before[0], "end": before[3]}
    assert list(checkpoint.source_event_seqs) == [start.seq, summary.seq, *before[:4]]
    assert thaw(checkpoint["data"]["source"]) == {
        "kind": "plugin",
        "plugin": "compact",
        "compactionId": result.compaction_id,
    }
    head = session.derive_messages()[0]
    assert head["content"][0]["type"] == "text"
    assert head["content"][0]["text"] == f"{CHECKPOINT_PREAMBLE}\n\n<compacted-summary>"
    assert thaw(head["content"][-1]) == {"type": "text", "text": "</compacted-summary>"}
    assert list(session.surface.nodes) == [checkpoint.seq, *before[4:]]
    assert (result.start_seq, result.summary_seq, result.end_seq) == (start.seq, summary.seq, end.seq)

    replay = Session.create("replay", seed=list(session.events))
    assert replay.derive_messages() == session.derive_messages()


def test_replays_the_latest_routed_header_so_the_summarizer_reuses_the_cache() -> None:
    """The summarizer's input carries the latest request header's system prompt and tools verbatim."""
    engine, recorder = make_engine()
    session = conversation(3)
    tools = [{"name": "do_thing", "description": "d", "parameters": {"type": "object"}}]
    session.append(
        "request/header",
        {"header": routed_header(system="CONVERSATION SYSTEM", tools=tools), "reason": "resume"},
    )
    nodes = list(session.surface.nodes)
    region(engine, session, nodes[0], nodes[1], make_agent(session))

    summary_input = recorder.calls[0]
    assert summary_input.system == "CONVERSATION SYSTEM"
    assert [thaw(tool) for tool in summary_input.tools or ()] == tools
    assert "fixture user 1" in summarized_text(summary_input)


def test_rejects_start_missing() -> None:
    """A start seq that is not on the surface is refused before anything is appended."""
    engine, _ = make_engine()
    session = conversation(2)
    nodes = list(session.surface.nodes)
    length = len(session.events)
    with pytest.raises(CompactionRangeError, match=r"^compactRegion: start seq 9001 not found in surface$"):
        region(engine, session, 9001, nodes[1], make_agent(session))
    assert len(session.events) == length


def test_rejects_end_missing() -> None:
    """An end seq that is not on the surface is refused before anything is appended."""
    engine, _ = make_engine()
    session = conversation(2)
    nodes = list(session.surface.nodes)
    length = len(session.events)
    with pytest.raises(CompactionRangeError, match=r"^compactRegion: end seq 9002 not found in surface$"):
        region(engine, session, nodes[0], 9002, make_agent(session))
    assert len(session.events) == length


def test_rejects_reversed_and_tool_unbalanced_positional_boundaries() -> None:
    """Reversed ends, a start inside a call/result pair and an end inside one are refused (exact texts)."""
    engine, _ = make_engine()
    plain = conversation(2)
    nodes = list(plain.surface.nodes)
    with pytest.raises(
        CompactionRangeError,
        match=rf"^compactRegion: start seq {nodes[2]} \(position 2\) is after end seq {nodes[1]} "
        r"\(position 1\) on the surface$",
    ):
        region(engine, plain, nodes[2], nodes[1], make_agent(plain))

    tools = tool_conversation()
    tool_nodes = list(tools.surface.nodes)
    length = len(tools.events)
    with pytest.raises(
        CompactionRangeError,
        match=rf"^compactRegion: start seq {tool_nodes[2]} is not a balanced boundary "
        r"\(would split a step's tool-call/result pair\)$",
    ):
        region(engine, tools, tool_nodes[2], tool_nodes[4], make_agent(tools))
    with pytest.raises(
        CompactionRangeError,
        match=rf"^compactRegion: end seq {tool_nodes[1]} is not a balanced boundary "
        r"\(would split a step, or the step is still open\)$",
    ):
        region(engine, tools, tool_nodes[0], tool_nodes[1], make_agent(tools))
    assert len(tools.events) == length


def test_requires_an_open_turn_and_an_idle_compaction_bracket() -> None:
    """Region compaction needs an open turn, and an unmatched live ``compaction/start`` is the busy lock."""
    engine, _ = make_engine()
    closed = conversation(1)
    closed.append("turn/end", {"turn": 2, "reason": {"kind": "completed"}})
    nodes = list(closed.surface.nodes)
    with pytest.raises(
        CompactionStateError,
        match=r"^compactRegion: no open turn — automatic compaction events must be enclosed in a turn$",
    ):
        region(engine, closed, nodes[0], nodes[1], make_agent(closed))
    assert not has_event(closed, "compaction/start")

    locked = conversation(1)
    locked.append("compaction/start", {"compactionId": "locked-compaction", "turn": 2})
    locked_nodes = list(locked.surface.nodes)
    length = len(locked.events)
    with pytest.raises(
        CompactionBusyError,
        match=r"^compaction: compaction already in progress; the session compaction lock is already active$",
    ):
        region(engine, locked, locked_nodes[0], locked_nodes[1], make_agent(locked))
    assert len(locked.events) == length


def test_rejects_a_session_with_no_turn_boundary_at_all() -> None:
    """A session that never opened a turn has no owner for the bracket: refused, nothing appended."""
    engine, _ = make_engine()
    session = Session.create("turnless")
    session.append("user/message", user_message("orphan"), {"surfaceOp": "append"})
    node = session.surface.nodes[0]
    with pytest.raises(CompactionStateError, match="no open turn"):
        region(engine, session, node, node, make_agent(session))
    assert len(session.events) == 1


class SkewedMeter(TokenMeter):
    """A real meter whose next ``skew`` measurements drop the first priced node (a stale snapshot)."""

    def __init__(self, skew: int = 1) -> None:
        super().__init__()
        self.skew = skew

    def measure(self, session: Any, request_header: Mapping[str, Any] | None = None) -> TokenMeasurement:
        measured = super().measure(session, request_header)
        if self.skew <= 0:
            return measured
        self.skew -= 1
        return TokenMeasurement(
            measured.log_revision,
            measured.baseline,
            measured.surface_delta_tokens,
            measured.total_tokens,
            measured.surface_tokens,
            list(measured.nodes)[1:],
        )


def test_rejects_a_meter_snapshot_that_changed_before_summarization_began() -> None:
    """If the priced nodes do not match the validated span, the attempt fails before the summarizer runs."""
    engine, recorder = make_engine(meter=SkewedMeter())
    session = conversation(2)
    nodes = list(session.surface.nodes)

    with pytest.raises(SurfaceChangedError, match=r"^compaction: selected surface changed before summarization began$"):
        region(engine, session, nodes[0], nodes[2], make_agent(session))
    assert recorder.calls == []
    assert list(session.surface.nodes) == nodes
    assert last_event(session, "compaction/end")["data"]["error"] == (
        "compaction: selected surface changed before summarization began"
    )


def test_records_summarizer_failures_without_mutating_the_surface() -> None:
    """A summarizer error is re-raised as is, recorded once in ``compaction/end.error``; surface unchanged."""
    engine, recorder = make_engine()
    failure = RuntimeError("summary unavailable")
    recorder.error = failure
    session = conversation(2)
    before = list(session.surface.nodes)

    with pytest.raises(RuntimeError) as raised:
        region(engine, session, before[0], before[2], make_agent(session))
    assert raised.value is failure
    assert list(session.surface.nodes) == before
    assert session.surface.replace_generation == 0
    ends = [e for e in session.events if e["type"] == "compaction/end"]
    assert len(ends) == 1
    assert ends[0]["data"]["error"] == "summary unavailable"
    assert ends[0]["data"]["compactionId"] == last_event(session, "compaction/start")["data"]["compactionId"]
    assert not has_event(session, "compaction/summary")


class PlainFailure(BaseException):
    """Python's nearest to the original's thrown non-Error value: a throwable that is not an Exception."""


def test_stringifies_non_error_failures_in_the_durable_end_bracket() -> None:
    """A non-``Exception`` throwable still closes the bracket with its text and propagates unchanged."""
    engine, recorder = make_engine()
    failure = PlainFailure("plain failure")
    recorder.error = failure
    session = conversation(2)
    nodes = list(session.surface.nodes)

    with pytest.raises(PlainFailure) as raised:
        region(engine, session, nodes[0], nodes[2], make_agent(session))
    assert raised.value is failure
    assert last_event(session, "compaction/end")["data"]["error"] == "plain failure"


def test_tolerates_concurrent_log_only_appends_while_the_selected_surface_is_stable() -> None:
    """A log-only append during summarization (a new request header) does not invalidate the summary."""
    engine, recorder = make_engine()
    session = conversation(2)
    recorder.during = lambda: session.append("request/header", {"header": routed_header(), "reason": "change"})
    nodes = list(session.surface.nodes)

    result = region(engine, session, nodes[0], nodes[2], make_agent(session))
    assert list(result.shadowed_seqs) == nodes[:3]
    assert has_event(session, "compaction/summary")


def test_rejects_concurrent_surface_appends_before_committing_the_replacement() -> None:
    """A surface append during summarization (whole-surface stability) aborts before the summary record."""
    engine, recorder = make_engine()
    session = conversation(2)
    recorder.during = lambda: session.append(
        "user/message", plugin_message("concurrent surface mutation", plugin="test"), {"surfaceOp": "append"}
    )
    nodes = list(session.surface.nodes)

    with pytest.raises(SurfaceChangedError, match=r"^compaction: session surface changed during summarization$"):
        region(engine, session, nodes[0], nodes[2], make_agent(session))
    assert not has_event(session, "compaction/summary")
    assert last_event(session, "compaction/end")["data"]["error"] == (
        "compaction: session surface changed during summarization"
    )


def test_rejects_a_non_shrinking_framed_summary_under_the_conversation_meter() -> None:
    """A framed checkpoint priced at or above the shadowed tokens is refused with the original's text."""
    engine, recorder = make_engine()
    recorder.summary = [text_block(f"verbose {index}") for index in range(100)]
    session = conversation(2)
    nodes = list(session.surface.nodes)
    shadowed = sum(node.tokens for node in engine.meter.measure(session).nodes[:3])

    with pytest.raises(
        SummaryNotSmallerError,
        match=rf"^summary is not smaller than the shadowed content \(\d+ estimated framed tokens >= {shadowed}\)$",
    ):
        region(engine, session, nodes[0], nodes[2], make_agent(session))
    assert not has_event(session, "compaction/summary")
    assert list(session.surface.nodes) == nodes


def test_lets_a_model_independent_custom_summarizer_compact_without_a_conversation_model() -> None:
    """No routed header and no agent model: a summarizer that needs no model still compacts."""
    engine, _ = make_engine()
    session = Session.create("model-less-region")
    session.append("turn/start", {"turn": 1})
    session.append("user/message", user_message("history " * 100), {"surfaceOp": "append"})
    session.append("step/start", {"turn": 1, "step": 1})
    session.append(
        "assistant/message",
        {
            "turn": 1,
            "step": 1,
            "message": assistant_message("answer " * 100, provider="historical", model="historical"),
        },
        {"surfaceOp": "append"},
    )
    session.append("step/end", {"turn": 1, "step": 1})
    nodes = list(session.surface.nodes)

    result = region(engine, session, nodes[0], nodes[1], make_agent(session, None, window=None))
    assert list(result.shadowed_seqs) == [nodes[0], nodes[1]]


def test_a_region_too_large_for_any_split_is_summarized_in_one_call() -> None:
    """When the fixed prefix alone exceeds the input budget, splitting cannot help: one whole-span call."""
    _, recorder = make_engine()
    session = conversation(3)
    nodes = list(session.surface.nodes)
    result = run(
        compact_surface_region(
            session,
            nodes[0],
            nodes[3],
            meter=TokenMeter(),
            summarize=recorder.summarize,
            options=RegionOptions(max_input_tokens=1),
        )
    )
    assert len(recorder.calls) == 1
    assert len(recorder.calls[0].messages) == 4
    assert list(result.shadowed_seqs) == nodes[:4]


def test_a_source_command_id_is_carried_by_every_event_of_the_transaction_in_the_originals_field_order() -> None:
    """``sourceCommandId`` follows ``compactionId`` in start, summary and end (and the failure bracket
    ends with ``error``); the checkpoint's source and the result carry it too."""
    _, recorder = make_engine()
    session = conversation(3)
    nodes = list(session.surface.nodes)
    options = RegionOptions(source_command_id="cmd-1")
    result = run(
        compact_surface_region(
            session, nodes[0], nodes[1], meter=TokenMeter(), summarize=recorder.summarize, options=options
        )
    )
    start, summary, checkpoint, end = list(session.events)[result.start_seq : result.end_seq + 1]
    assert list(start["data"]) == ["compactionId", "sourceCommandId", "turn"]
    assert list(end["data"]) == ["compactionId", "sourceCommandId", "turn"]
    assert list(summary["data"])[:2] == ["compactionId", "sourceCommandId"]
    assert summary["data"]["sourceCommandId"] == "cmd-1"
    assert thaw(checkpoint["data"]["source"]) == {
        "kind": "plugin",
        "plugin": "compact",
        "compactionId": result.compaction_id,
        "sourceCommandId": "cmd-1",
    }
    assert list(result.to_json())[:2] == ["compactionId", "sourceCommandId"]
    assert result.to_json()["sourceCommandId"] == "cmd-1"

    recorder.error = RuntimeError("no summary")
    nodes = list(session.surface.nodes)
    with pytest.raises(RuntimeError):
        run(
            compact_surface_region(
                session, nodes[0], nodes[1], meter=TokenMeter(), summarize=recorder.summarize, options=options
            )
        )
    failed = last_event(session, "compaction/end")
    assert list(failed["data"]) == ["compactionId", "sourceCommandId", "turn", "error"]
    assert failed["data"]["error"] == "no summary"


# --- error_chain (the end bracket's text) ------------------------------------------------------------


class HostileError(Exception):
    def __str__(self) -> str:
        raise RuntimeError("hostile __str__")


def test_end_bracket_error_text_renders_the_cause_chain_like_error_chain() -> None:
    """``compaction/end.error`` is the original's ``errorChain``: causes joined by ``: ``, a repeated
    cause skipped, group members bracketed, and an unrenderable value never escapes."""
    try:
        try:
            raise ValueError("socket closed")
        except ValueError as inner:
            raise RuntimeError("summary unavailable") from inner
    except RuntimeError as outer:
        assert error_chain(outer) == "summary unavailable: socket closed"
    same = RuntimeError("same")
    same.__cause__ = RuntimeError("same")
    assert error_chain(same) == "same"
    assert error_chain(RuntimeError()) == "RuntimeError"
    group = ExceptionGroup("parts failed", [ValueError("a"), KeyError("b")])
    assert error_chain(group) == "parts failed [a; 'b']"
    assert error_chain(HostileError()) == "<unrenderable value>"


def test_a_summarizer_error_with_unrenderable_text_still_closes_the_bracket() -> None:
    """An exception whose ``str`` raises must not leave the lock held: the end bracket is still appended."""
    engine, recorder = make_engine()
    failure = HostileError()
    recorder.error = failure
    session = conversation(2)
    nodes = list(session.surface.nodes)

    with pytest.raises(HostileError) as raised:
        region(engine, session, nodes[0], nodes[2], make_agent(session))
    assert raised.value is failure
    assert last_event(session, "compaction/end")["data"]["error"] == "<unrenderable value>"
    # the lock is free again: the next compaction goes through
    recorder.error = None
    region(engine, session, nodes[0], nodes[2], make_agent(session))
    assert has_event(session, "compaction/summary")


# --- properties ------------------------------------------------------------------------------------


def pairing_problems(messages: Sequence[Mapping[str, Any]]) -> tuple[list[str], list[str]]:
    """Calls without a later result and results without an earlier call, in the derived messages."""
    open_calls: list[str] = []
    orphans: list[str] = []
    for message in messages:
        for block in message["content"]:
            if block["type"] == "tool-call":
                open_calls.append(block["id"])
            elif block["type"] == "tool-result":
                if block["toolCallId"] in open_calls:
                    open_calls.remove(block["toolCallId"])
                else:
                    orphans.append(block["toolCallId"])
    return open_calls, orphans


class SessionBuilder:
    """Appends one valid agent-shaped session under the real invariants (turns, steps, parallel calls)."""

    def __init__(self, name: str) -> None:
        self.store = SessionStore(now=lambda: 1000)
        self.invariants = SessionInvariants(self.store)
        self.invariants.install()
        self.session = self.store.create(name)
        self.turn = 0
        self.calls = 0

    def open_turn(self, text: str) -> None:
        self.turn += 1
        self.session.append("turn/start", {"turn": self.turn})
        self.session.append("user/message", user_message(text), {"surfaceOp": "append"})

    def step(self, step: int, text: str, results: Sequence[str], order: Sequence[int], close: bool = True) -> None:
        session, turn = self.session, self.turn
        session.append("step/start", {"turn": turn, "step": step})
        if self.turn == 1 and step == 1:
            session.append("request/header", {"header": routed_header(), "reason": "initial"})
        ids = []
        for _ in results:
            self.calls += 1
            ids.append(f"call-{self.calls}")
        blocks: list[Any] = [text_block(text)] if text else []
        blocks += [tool_call_block(call_id, "read", "{}") for call_id in ids]
        if not blocks:
            blocks = [text_block("ok")]
        message = assistant_message(blocks, provider=MODEL, model=MODEL)
        session.append("assistant/message", {"turn": turn, "step": step, "message": message}, {"surfaceOp": "append"})
        for call_id in ids:
            session.append(
                "tool/call", {"turn": turn, "step": step, "callId": call_id, "name": "read", "arguments": "{}"}
            )
        for index in order:
            session.append(
                "tool/result",
                {"turn": turn, "step": step, "message": tool_result_message(ids[index], results[index])},
                {"surfaceOp": "append"},
            )
        if close:
            session.append("step/end", {"turn": turn, "step": step})

    def close_turn(self) -> None:
        self.session.append("turn/end", {"turn": self.turn, "reason": {"kind": "completed"}})


texts = st.integers(min_value=20, max_value=1500).map(lambda n: ("lorem ipsum " * (n // 12 + 1))[:n])
step_strategy = st.tuples(
    texts,
    st.lists(texts, min_size=0, max_size=3).flatmap(
        lambda results: st.tuples(st.just(results), st.permutations(list(range(len(results)))))
    ),
)
turn_strategy = st.tuples(texts, st.lists(step_strategy, min_size=1, max_size=3))
# between turns: 0 = nothing, 1 = prune, 2 = compact a random balanced region
action_strategy = st.sampled_from([0, 0, 1, 2])


def build_random_session(
    turns: Sequence[Any], actions: Sequence[int], picks: Sequence[int], engine: CompactionEngine
) -> SessionBuilder:
    """Replays the drawn turns; between turns, prunes or compacts an earlier balanced region."""
    builder = SessionBuilder("random")
    pruner = ToolResultPruner(200, 60, 20, meter=engine.meter)
    for index, (prompt, steps) in enumerate(turns):
        builder.open_turn(prompt)
        for number, (text, (results, order)) in enumerate(steps, start=1):
            builder.step(number, text, results, order)
        action = actions[index % len(actions)]
        if action == 1:
            pruner.prune_session(builder.session)
        elif action == 2:
            compact_random_region(engine, builder.session, picks[index % len(picks)])
        builder.close_turn()
    builder.turn += 1
    builder.session.append("turn/start", {"turn": builder.turn})
    return builder


def balanced_spans(session: Session) -> list[tuple[int, int]]:
    nodes = list(session.surface.nodes)
    return [
        (nodes[i], nodes[j])
        for i in range(len(nodes))
        for j in range(i, len(nodes))
        if balanced_before(session, nodes[i]) and balanced_after(session, nodes[j])
    ]


def compact_random_region(engine: CompactionEngine, session: Session, pick: int) -> CompactionResult | None:
    spans = balanced_spans(session)
    if not spans:
        return None
    start, end = spans[pick % len(spans)]
    try:
        return run(engine.compact_region(session, start, end))
    except SummaryNotSmallerError:
        return None


def assert_replay_identical(session: Session, meter: TokenMeter) -> None:
    replay = Session.create("replay", seed=list(session.events))
    assert list(replay.surface.nodes) == list(session.surface.nodes)
    assert replay.surface.replace_generation == session.surface.replace_generation
    assert replay.derive_messages() == session.derive_messages()
    assert TokenMeter().measure(replay).nodes == meter.measure(session).nodes


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    turns=st.lists(turn_strategy, min_size=1, max_size=5),
    actions=st.lists(action_strategy, min_size=1, max_size=5),
    picks=st.lists(st.integers(min_value=0, max_value=10_000), min_size=1, max_size=5),
    final_pick=st.integers(min_value=0, max_value=10_000),
)
def test_property_any_successful_region_compaction_keeps_tool_pairing_and_replays_identically(
    turns: list[Any], actions: list[int], picks: list[int], final_pick: int
) -> None:
    """Over random valid sessions (parallel calls with results in any order, earlier prunes and
    compactions, under the real invariants), every successful ``compact_region`` leaves derived messages
    with no call lacking its result and no result lacking its call, and a from-scratch replay of the log
    gives the same surface, messages and prices. A failed attempt leaves the surface as it was."""
    engine, _ = make_engine()
    builder = build_random_session(turns, actions, picks, engine)
    session = builder.session
    assert pairing_problems(session.derive_messages()) == ([], [])
    nodes_before = list(session.surface.nodes)
    spans = balanced_spans(session)
    assert spans  # the first user message alone is always a balanced span
    start, end = spans[final_pick % len(spans)]
    try:
        result = run(engine.compact_region(session, start, end))
    except SummaryNotSmallerError:
        assert list(session.surface.nodes) == nodes_before
        assert "error" in last_event(session, "compaction/end")["data"]
    else:
        first = nodes_before.index(start)
        last = nodes_before.index(end)
        assert list(result.shadowed_seqs) == nodes_before[first : last + 1]
        assert list(session.surface.nodes) == [*nodes_before[:first], result.summary_seq + 1, *nodes_before[last + 1 :]]
        assert is_checkpoint_source(session.events[result.summary_seq + 1]["data"]["source"])
    assert pairing_problems(session.derive_messages()) == ([], [])
    assert_replay_identical(session, engine.meter)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    turns=st.lists(turn_strategy, min_size=1, max_size=4),
    actions=st.lists(action_strategy, min_size=1, max_size=4),
    picks=st.lists(st.integers(min_value=0, max_value=10_000), min_size=1, max_size=4),
    pending=st.lists(texts, min_size=1, max_size=3),
    answered=st.integers(min_value=0, max_value=2),
)
def test_property_selection_and_compaction_never_split_an_open_step(
    turns: list[Any], actions: list[int], picks: list[int], pending: list[str], answered: int
) -> None:
    """With a step still open (parallel calls, only some answered), pressure-style selection and the
    region it compacts never swallow a pending call: the unanswered calls after compaction are exactly
    those before, no result is orphaned, and replay is identical."""
    engine, _ = make_engine()
    builder = build_random_session(turns, actions, picks, engine)
    session = builder.session
    session.append("user/message", user_message("continue"), {"surfaceOp": "append"})
    answered = min(answered, len(pending) - 1)
    builder.step(1, "working", pending, list(range(answered)), close=False)
    unanswered_before, orphans_before = pairing_problems(session.derive_messages())
    assert orphans_before == [] and len(unanswered_before) == len(pending) - answered

    for retain in (0, 50, 400):
        span = select_compactable_range(session, engine.meter.measure(session), retain)
        if span is None:
            continue
        assert balanced_before(session, span.start) and balanced_after(session, span.end)
        try:
            run(engine.compact_region(session, span.start, span.end))
        except SummaryNotSmallerError:
            pass
        except CompactionError as err:  # nothing else may refuse a selected span
            raise AssertionError(f"selected span refused: {err}") from err
        unanswered, orphans = pairing_problems(session.derive_messages())
        assert unanswered == unanswered_before
        assert orphans == []
    assert_replay_identical(session, engine.meter)


def test_a_manual_failure_the_summarizer_raises_keeps_its_own_cause() -> None:
    """A ManualCompactionError raised inside a manual transaction is re-raised as is (not its own cause)."""
    import asyncio

    import agentlog as al
    from agentlog.compaction import RegionOptions, TokenMeter, compact_surface_region
    from agentlog.errors import ManualCompactionError
    from agentlog.kernel.messages import user_message

    session = al.SessionStore().create("manual-cause")
    first = session.append("user/message", user_message("first " * 50), {"surfaceOp": "append"}).seq
    last = session.append("user/message", user_message("second " * 50), {"surfaceOp": "append"}).seq
    root = ValueError("root cause")

    class Raising:
        async def summarize(self, summary_input: object) -> object:
            err = ManualCompactionError("changed", "changed elsewhere")
            err.__cause__ = root
            raise err

    async def run() -> None:
        await compact_surface_region(
            session,
            first,
            last,
            meter=TokenMeter(),
            summarize=Raising().summarize,  # type: ignore[arg-type]
            options=RegionOptions(owner=None, stability="selected-span"),
        )

    try:
        asyncio.run(run())
    except ManualCompactionError as err:
        assert err.kind == "changed"
        assert err.__cause__ is root
    else:
        raise AssertionError("the summarizer's failure must be raised")
    assert session.events[-1]["type"] == "compaction/end" and "changed elsewhere" in session.events[-1]["data"]["error"]
