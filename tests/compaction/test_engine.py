"""CompactionEngine: when pressure and overflow compaction run, and how much they compact (spec §5.6).

One test per engine/trigger case of the original's ``compaction-basic.spec.ts`` ("pressure measurement
and retention", "optional model-free tool-result pruning", "automatic listener"), on real sessions and a
real :class:`~agentlog.agent.loop.Agent` whose hooks the engine installed; the summarizer records its
inputs so a test can tell whether (and on what) the model would have been asked. The original's
plugin-lifecycle cases (Cordis fibers, service disposal) have no counterpart: an engine is installed by
``Agent(compaction=...)`` and lives with that agent.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentlog.agent.loop import AgentOptions, RetryPolicy
from agentlog.compaction import (
    PRUNE_MARKER,
    CompactableRange,
    CompactionBusyError,
    CompactionResult,
    CompactionStateError,
    CompactionThresholdError,
    ManualCompactionError,
    SummaryNotSmallerError,
    TargetPressureConfigError,
    TokenMeter,
    ToolResultPruner,
    balanced_after,
    balanced_before,
    select_compactable_range,
)
from agentlog.compaction.engine import CompactionEngine
from agentlog.kernel.invariants import check_tool_pairing
from agentlog.kernel.session import Session
from agentlog.testing import failure_reply
from agentlog.testing.builders import intent, tool_result_msg, user_msg
from compaction._engine_support import (
    MODEL,
    RecordingSummarizer,
    agent_for,
    conversation,
    engine,
    header_data,
    overflow_failure,
    oversized_tool_result,
    pre_step,
    recover,
    small_pruner,
    summarized_text,
    tool_conversation,
    tool_step,
    types_of,
)

PRESSURE = {"auto": False, "thresholdRatio": 0.5, "retainTokens": 180}
AUTO = {"thresholdRatio": 0.5, "retainTokens": 180}


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def tool_results_have_calls(session: Session) -> bool:
    calls: set[str] = set()
    for message in session.derive_messages():
        for block in message["content"]:
            if block["type"] == "tool-call":
                calls.add(block["id"])
            if block["type"] == "tool-result" and block["toolCallId"] not in calls:
                return False
    return True


def single_tool_pair() -> Session:
    session = Session.create("single-tool-pair")
    session.append("turn/start", {"turn": 1})
    session.append("step/start", {"turn": 1, "step": 1})
    session.append("request/header", header_data())
    tool_step(session, 1, "single-call", "result")
    session.append("step/end", {"turn": 1, "step": 1})
    return session


# --- pressure measurement and retention -------------------------------------------------------------


def test_pressure_skips_when_no_durable_routed_model_exists_instead_of_using_agent_options() -> None:
    """The capacity and policy come from the latest routed request; AgentOptions alone never trigger it."""
    compact, recorder = engine(PRESSURE)
    session = Session.create("headerless")
    session.append("turn/start", {"turn": 1})
    agent = agent_for(session, compact)
    assert run(compact.compact_if_needed(agent, "pressure")) is None
    assert recorder.calls == [] and types_of(session) == []


def test_pressure_meters_an_unlisted_model_when_its_provider_supplies_the_context_window() -> None:
    """A model nobody configured is metered with the window its own provider reports."""
    compact, _ = engine(PRESSURE)
    session = conversation()
    session.append("request/header", header_data("unlisted-provider", "unlisted-model", reason="resume"))
    agent = agent_for(session, compact, provider_name="unlisted-provider", window=1_000)
    assert run(compact.compact_if_needed(agent, "pressure")) is not None


def test_pressure_forwards_the_turn_cancellation_signal_to_the_summarizer() -> None:
    """The model call the engine makes can be cancelled with the turn (the agent's abort signal)."""
    compact, recorder = engine(PRESSURE)
    agent = agent_for(conversation(), compact)
    assert run(compact.compact_if_needed(agent, "pressure")) is not None
    assert recorder.calls[0].signal is agent.abort_signal
    assert recorder.calls[0].provider is agent.provider


def test_pressure_re_resolves_capacity_after_a_same_model_id_provider_switch() -> None:
    """Capacity is looked up per routed provider/model each time, not cached by model id."""
    compact, _ = engine({"auto": False, "thresholdRatio": 0.5, "retainRatio": 0.1})
    session = conversation(4)
    session.append("request/header", header_data("large", "shared-id", reason="resume"))
    # "large" is the agent's provider (window 10,000); "small" is known only through AgentOptions (1,000).
    agent = agent_for(session, compact, provider_name="large", window=10_000, context_window=1_000)
    assert run(compact.compact_if_needed(agent, "pressure")) is None
    session.append("request/header", header_data("small", "shared-id", reason="change"))
    assert run(compact.compact_if_needed(agent, "pressure")) is not None


def test_pressure_requires_capacity_but_provider_confirmed_overflow_does_not() -> None:
    """Without a context window pressure refuses (typed, the original's text); overflow still compacts."""
    compact, _ = engine(PRESSURE)
    session = conversation(4)
    session.append("request/header", header_data("unknown-context", "model", reason="resume"))
    agent = agent_for(session, compact, provider_name="unknown-context", window=None)
    with pytest.raises(TargetPressureConfigError, match="no context capacity for unknown-context/model") as caught:
        run(compact.compact_if_needed(agent, "pressure"))
    assert caught.value.target_key == "unknown-context/model"
    assert run(compact.compact_if_needed(agent, "context-overflow")) is not None


def test_overflow_declines_when_the_whole_surface_is_one_indivisible_tool_pair() -> None:
    """Forced compaction never splits a call from its result: nothing is written at all."""
    compact, recorder = engine(PRESSURE)
    session = single_tool_pair()
    generation = session.surface.replace_generation
    agent = agent_for(session, compact)
    assert run(compact.compact_if_needed(agent, "context-overflow")) is None
    assert session.surface.replace_generation == generation
    assert types_of(session) == [] and recorder.calls == []


def test_pressure_does_nothing_below_threshold_and_compacts_a_priced_head_above_it() -> None:
    """Two turns (~360 tokens) stay; four (~724 >= 500) lose their head to one checkpoint."""
    compact, _ = engine(PRESSURE)
    small = conversation(2)
    assert run(compact.compact_if_needed(agent_for(small, compact), "pressure")) is None
    assert types_of(small) == []

    session = conversation(4)
    result = run(compact.compact_if_needed(agent_for(session, compact), "pressure"))
    assert isinstance(result, CompactionResult)
    assert len(result.shadowed_seqs) > 2
    assert len(session.surface.nodes) < 8
    assert types_of(session) == ["compaction/start", "compaction/summary", "compaction/end"]


def test_pressure_counts_the_routed_request_envelope_without_putting_it_on_the_surface() -> None:
    """A large system prompt in the latest header adds pressure although it is not a surface node."""
    compact, _ = engine({"auto": False, "thresholdRatio": 0.9, "retainTokens": 50})
    session = conversation(2, "x" * 600)
    agent = agent_for(session, compact)
    assert run(compact.compact_if_needed(agent, "pressure")) is None
    nodes = len(session.surface.nodes)
    session.append("request/header", header_data(reason="resume", system="s" * 2_000))
    assert len(session.surface.nodes) == nodes
    assert run(compact.compact_if_needed(agent, "pressure")) is not None


def test_pressure_uses_the_latest_logged_request_envelope_without_an_agent_options_override() -> None:
    """The routed pair of the log wins over AgentOptions, and the meter is asked about the session alone."""
    meter = TokenMeter()
    compact, _ = engine(PRESSURE, meter=meter)
    session = conversation(4)
    session.append("request/header", header_data("actual", "actual"))
    agent = agent_for(session, compact, provider_name="actual", options_model="fallback")
    measured: list[tuple[Any, ...]] = []
    original = meter.measure

    def spy(*args: Any, **kwargs: Any) -> Any:
        measured.append(args + tuple(kwargs.values()))
        return original(*args, **kwargs)

    meter.measure = spy  # type: ignore[method-assign]
    assert run(compact.compact_if_needed(agent, "pressure")) is not None
    assert session.request_header()["config"]["model"] == "actual"
    assert measured[0] == (session,)


def test_pressure_declines_when_envelope_pressure_is_high_but_nothing_is_compactable() -> None:
    """An empty surface, or one the retained tail covers, gives None even far above the threshold."""
    compact, recorder = engine(PRESSURE)
    empty = Session.create("empty")
    empty.append("turn/start", {"turn": 1})
    empty.append("request/header", header_data(system="x" * 100_000))
    assert run(compact.compact_if_needed(agent_for(empty, compact), "pressure")) is None

    retained = conversation(1)
    retained.append("request/header", header_data(reason="resume", system="x" * 100_000))
    assert run(compact.compact_if_needed(agent_for(retained, compact), "pressure")) is None
    assert recorder.calls == [] and types_of(empty) == types_of(retained) == []


def test_pressure_uses_one_measurement_for_the_pressure_and_retention_decision(monkeypatch: pytest.MonkeyPatch) -> None:
    """The threshold check and the range selection price the same measurement (one measure call)."""
    meter = TokenMeter()
    compact, _ = engine(PRESSURE, meter=meter)
    calls = 0
    original = meter.measure

    def counting(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        return original(*args, **kwargs)

    stop = RuntimeError("stop after first decision")

    async def refuse(*args: Any, **kwargs: Any) -> Any:
        raise stop

    meter.measure = counting  # type: ignore[method-assign]
    monkeypatch.setattr(compact, "compact_region", refuse)
    with pytest.raises(RuntimeError) as caught:
        run(compact.compact_if_needed(agent_for(conversation(4), compact), "pressure"))
    assert caught.value is stop
    assert calls == 1


def test_pressure_bounds_retries_when_a_shrinking_checkpoint_remains_above_threshold() -> None:
    """compactionRetries 0: one attempt, then the original's 'still above threshold' error."""
    summary = [{"type": "text", "text": f"summary {index}"} for index in range(7)]
    compact, _ = engine(
        {"auto": False, "compactionRetries": 0, "thresholdRatio": 0.3, "retainTokens": 180},
        summarizer=RecordingSummarizer(summary=summary),
    )
    session = conversation(4)
    with pytest.raises(CompactionThresholdError, match=r"still above threshold after 1 compaction attempts \("):
        run(compact.compact_if_needed(agent_for(session, compact), "pressure"))
    assert types_of(session) == ["compaction/start", "compaction/summary", "compaction/end"]


def test_pressure_summarizes_a_region_that_fits_the_window_in_one_request_whatever_the_output_cap() -> None:
    """maxTokens (default 8,192) above the window must not shrink the input budget to nothing.

    Regression: the split budget was ``window - maxTokens`` (here 1), so every message of a region that
    fits the window easily (~1,000 of 4,000 tokens with the instruction) became its own summarization call.
    """
    compact, recorder = engine({"auto": False, "thresholdRatio": 0.1, "retainTokens": 180})
    session = conversation(4)
    assert run(compact.compact_if_needed(agent_for(session, compact, window=4_000), "pressure")) is not None
    assert len(recorder.calls) == 1
    assert recorder.calls[0].max_tokens == 8192


def test_pressure_rounds_a_retention_cut_head_ward_to_preserve_tool_pairing() -> None:
    """The retained tail starts at a balanced cut: every derived tool result still follows its call."""
    compact, _ = engine({"auto": False, "thresholdRatio": 0.8, "retainTokens": 80})
    session = tool_conversation()
    assert run(compact.compact_if_needed(agent_for(session, compact, window=4_000), "pressure")) is not None
    assert tool_results_have_calls(session)
    first_kept = session.surface.nodes[1]
    assert balanced_before(session, first_kept)


def test_selection_rejects_a_priced_surface_that_is_not_the_current_positional_surface() -> None:
    """A measurement of another surface cannot pick a range (typed, 'does not match')."""
    session = conversation(2)
    priced = TokenMeter().measure(session)

    class Shifted:
        nodes = list(priced.nodes)[1:]

    with pytest.raises(CompactionStateError, match="does not match"):
        select_compactable_range(session, Shifted(), 1)  # type: ignore[arg-type]


def test_selection_declines_when_rounding_a_cut_would_consume_the_only_tool_pair() -> None:
    """Retaining anything of a lone call/result pair means retaining all of it: None."""
    session = single_tool_pair()
    assert select_compactable_range(session, TokenMeter().measure(session), 1) is None


# --- optional model-free tool-result pruning -------------------------------------------------------


def test_pruning_does_not_prune_a_below_pressure_session_opportunistically(monkeypatch: pytest.MonkeyPatch) -> None:
    """Below the threshold nothing runs, not even the free pruner."""
    meter = TokenMeter()
    pruner = small_pruner(meter)
    compact, recorder = engine({"auto": False, "thresholdRatio": 0.8, "retainTokens": 100}, pruner=pruner, meter=meter)
    session = oversized_tool_result()
    pruned: list[Any] = []
    monkeypatch.setattr(ToolResultPruner, "prune_session", lambda self, s: pruned.append(s))
    assert run(compact.compact_if_needed(agent_for(session, compact, window=10_000), "pressure")) is None
    assert pruned == [] and recorder.calls == []
    assert session.surface.replace_generation == 0


def test_pruning_alone_clearing_pressure_skips_summarization() -> None:
    """A 3,000-character result pruned to 20 + marker + 10 brings the request under 500 tokens: no model call."""
    meter = TokenMeter()
    compact, recorder = engine(
        {"auto": False, "thresholdRatio": 0.5, "retainTokens": 50}, pruner=small_pruner(meter), meter=meter
    )
    session = oversized_tool_result()
    assert meter.measure(session).total_tokens >= 500
    assert run(compact.compact_if_needed(agent_for(session, compact, window=1_000), "pressure")) is None
    assert meter.measure(session).total_tokens < 500
    assert recorder.calls == []
    assert session.surface.replace_generation == 1
    assert types_of(session) == ["compaction/prune"]


def test_pruning_insufficient_summarizes_the_pruned_surface() -> None:
    """The summarizer sees the pruned results (the marker), not the original 300-word results."""
    meter = TokenMeter()
    compact, recorder = engine(
        {"auto": False, "thresholdRatio": 0.5, "retainTokens": 50}, pruner=small_pruner(meter), meter=meter
    )
    session = tool_conversation()
    assert run(compact.compact_if_needed(agent_for(session, compact, window=2_000), "pressure")) is not None
    assert recorder.calls and types_of(session).count("compaction/summary") == 1
    text = "\n".join(summarized_text(call) for call in recorder.calls)
    assert PRUNE_MARKER.strip() in text
    assert "result 1 " * 300 not in text


def test_without_a_pruner_the_original_results_are_summarized_and_never_rewritten() -> None:
    """pruner=None is the original compaction-basic: the log's tool result is untouched, no prune replace."""
    compact, recorder = engine({"auto": False, "thresholdRatio": 0.5, "retainTokens": 50})
    session = oversized_tool_result(3_000, True)
    assert run(compact.compact_if_needed(agent_for(session, compact, window=2_000), "pressure")) is not None
    assert len(recorder.calls) == 1
    original = next(e for e in session.events if e["type"] == "tool/result")
    assert original["data"]["message"]["content"][0]["content"][0] == {"type": "text", "text": "X" * 3_000}
    assert [e for e in session.events if e["type"] == "tool/result" and e.get("surfaceOp") != "append"] == []
    assert "compaction/prune" not in types_of(session)


def test_the_default_engine_prunes_with_the_original_budgets() -> None:
    """CompactionEngine() includes the pruner (8192/4096/1024) unless pruner=None."""
    assert CompactionEngine().pruner is not None
    assert CompactionEngine().pruner.config == {"thresholdChars": 8192, "headChars": 4096, "tailChars": 1024}  # type: ignore[union-attr]
    assert CompactionEngine(pruner=None).pruner is None


# --- the automatic hooks ------------------------------------------------------------------------------


def test_auto_compacts_before_a_step_above_threshold_with_the_routed_model_and_stays_idle_below() -> None:
    """The pre-step hook compacts with the log's route (not the agent's fallback options); below, nothing."""
    compact, recorder = engine(AUTO)
    pressured = conversation(4)
    run(pre_step(agent_for(pressured, compact, options_model="unconfigured-agent-fallback")))
    assert "compaction/summary" in types_of(pressured)
    assert recorder.calls[0].target is not None and recorder.calls[0].target.model == MODEL

    asked = len(recorder.calls)
    small = conversation(1)
    run(pre_step(agent_for(small, compact)))
    assert types_of(small) == []
    assert len(recorder.calls) == asked


def test_auto_skips_pre_step_pressure_when_the_step_is_already_aborted(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cancelled turn does not start a summarization."""
    compact, recorder = engine(AUTO)
    session = conversation(4)
    agent = agent_for(session, compact)
    called: list[Any] = []
    monkeypatch.setattr(compact, "compact_if_needed", lambda *a: called.append(a))
    agent.cancel()
    run(pre_step(agent))
    assert called == [] and recorder.calls == []
    assert types_of(session) == []


def test_auto_warns_and_continues_after_operational_failures(caplog: pytest.LogCaptureFixture) -> None:
    """A failing summarizer is a warning; the turn goes on and the attempt is one error bracket."""
    compact, _ = engine(AUTO, summarizer=RecordingSummarizer(error=RuntimeError("temporary failure")))
    session = conversation(4)
    nodes = list(session.surface.nodes)
    with caplog.at_level(logging.WARNING, logger="agentlog"):
        run(pre_step(agent_for(session, compact)))
    assert any("step compaction failed" in r.message and "temporary failure" in r.message for r in caplog.records)
    assert types_of(session) == ["compaction/start", "compaction/end"]
    assert "temporary failure" in session.events[-1]["data"]["error"]
    assert list(session.surface.nodes) == nodes


def test_auto_warns_once_per_routed_target_when_pressure_has_no_context_window(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Missing capacity is a configuration fact: one warning per provider/model, not one per step."""
    compact, _ = engine(AUTO)
    session = conversation(4)
    agent = agent_for(session, compact, window=None)
    with caplog.at_level(logging.WARNING, logger="agentlog"):
        run(pre_step(agent))
        run(pre_step(agent))
    warnings = [r.message for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert f"no context capacity for {MODEL}/{MODEL}" in warnings[0]


def test_auto_warns_once_per_routed_target_when_absolute_retention_exceeds_its_threshold(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """retainTokens 500 against a 500-token threshold is refused once per target, with the original's text."""
    compact, _ = engine({"thresholdRatio": 0.5, "retainTokens": 500})
    session = conversation(4)
    agent = agent_for(session, compact)
    with caplog.at_level(logging.WARNING, logger="agentlog"):
        run(pre_step(agent))
        run(pre_step(agent))
    warnings = [r.message for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "retainTokens (500) must be less than threshold tokens 500" in warnings[0]
    assert types_of(session) == []


def test_overflow_force_compacts_below_normal_pressure_and_retries_only_after_a_replacement() -> None:
    """A canonical overflow compacts whatever the meter says, keeps the newest node, and asks for a retry."""
    meter = TokenMeter()
    compact, _ = engine({"thresholdRatio": 1, "retainTokens": 900}, meter=meter)
    session = conversation(3)
    generation = session.surface.replace_generation
    retained = session.surface.nodes[-1]
    assert meter.measure(session).total_tokens < 10_000
    agent = agent_for(session, compact, window=10_000, options_model="unconfigured-agent-fallback")
    assert run(recover(agent)) is True
    assert session.surface.replace_generation == generation + 1
    assert "compaction/summary" in types_of(session)
    assert retained in session.surface.nodes


def test_overflow_retry_is_authorized_when_pruning_alone_advances_an_indivisible_surface() -> None:
    """One tool pair cannot be summarized, but pruning it is a durable reduction: retry."""
    meter = TokenMeter()
    compact, recorder = engine({"thresholdRatio": 1, "retainTokens": 900}, pruner=small_pruner(meter), meter=meter)
    session = oversized_tool_result()
    assert run(recover(agent_for(session, compact, window=10_000))) is True
    assert session.surface.replace_generation == 1
    assert "compaction/summary" not in types_of(session)
    assert recorder.calls == []


def test_overflow_recovery_continues_with_summarization_on_the_pruned_surface() -> None:
    """After pruning, the overflow summary is made from the pruned results."""
    meter = TokenMeter()
    compact, recorder = engine({"thresholdRatio": 1, "retainTokens": 900}, pruner=small_pruner(meter), meter=meter)
    session = tool_conversation()
    assert run(recover(agent_for(session, compact, window=10_000))) is True
    assert types_of(session).count("compaction/summary") == 1
    assert len(recorder.calls) == 1  # a 10,000-token window takes the pruned region in one request
    assert PRUNE_MARKER.strip() in summarized_text(recorder.calls[0])


def test_overflow_retries_from_a_durable_prune_when_the_later_summarization_raises(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The prune already shrank the request, so the retry is worth it even though the summary failed."""
    meter = TokenMeter()
    compact, _ = engine(
        {"thresholdRatio": 1, "retainTokens": 900},
        pruner=small_pruner(meter),
        meter=meter,
        summarizer=RecordingSummarizer(error=RuntimeError("summary unavailable after prune")),
    )
    session = oversized_tool_result(3_000, True)
    with caplog.at_level(logging.WARNING, logger="agentlog"):
        assert run(recover(agent_for(session, compact, window=10_000))) is True
    assert session.surface.replace_generation == 1
    assert len([e for e in session.events if e["type"] == "tool/result"]) == 2
    end = [e for e in session.events if e["type"] == "compaction/end"][-1]
    assert end["data"]["error"] == "summary unavailable after prune"
    assert any("retrying from the replacement surface" in r.message for r in caplog.records)


def test_overflow_lets_cancellation_win_when_the_summary_raises_after_a_durable_prune() -> None:
    """A cancelled turn is never retried, even when the prune landed."""
    meter = TokenMeter()
    recorder = RecordingSummarizer(error=RuntimeError("summary cancelled after prune"))
    compact, _ = engine(
        {"thresholdRatio": 1, "retainTokens": 900}, pruner=small_pruner(meter), meter=meter, summarizer=recorder
    )
    session = oversized_tool_result(3_000, True)
    agent = agent_for(session, compact, window=10_000)
    recorder.during = agent.cancel
    assert run(recover(agent)) is False
    assert session.surface.replace_generation == 1


def test_overflow_preserves_the_newest_whole_tool_call_and_result_pair() -> None:
    """Forced compaction keeps the newest call and its result together, both cuts balanced."""
    compact, _ = engine({"thresholdRatio": 1, "retainTokens": 90})
    session = tool_conversation()
    newest_assistant, newest_result = session.surface.nodes[-2], session.surface.nodes[-1]
    assert run(recover(agent_for(session, compact))) is True
    nodes = list(session.surface.nodes)
    assert newest_assistant in nodes and newest_result in nodes
    assert balanced_before(session, newest_assistant)
    assert balanced_after(session, newest_result)


def test_overflow_does_not_retry_when_a_backend_reports_success_without_replacing_the_surface(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The retry is authorized by the surface's replace generation, not by a result object."""
    compact, _ = engine()
    session = conversation(2)
    fake = CompactionResult(
        compaction_id="fake-compaction",
        start_seq=1,
        summary_seq=2,
        end_seq=3,
        summary=({"type": "text", "text": "fake"},),
        shadowed_range=CompactableRange(1, 2),
        shadowed_seqs=(1, 2),
        shadowed_token_count=10,
    )

    async def claim(*args: Any) -> CompactionResult:
        return fake

    monkeypatch.setattr(compact, "compact_if_needed", claim)
    assert run(recover(agent_for(session, compact))) is False
    assert session.surface.replace_generation == 0


def test_overflow_delegates_downstream_exactly_once_when_no_replacement_is_available(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With nothing to compact the loop's own retry decision runs once and the original error ends the turn."""
    compact, _ = engine()

    async def nothing(*args: Any) -> None:
        return None

    monkeypatch.setattr(compact, "compact_if_needed", nothing)
    session = closed_session_for_loop()
    agent = agent_for(session, compact, script=[failure_reply("CONTEXT_WINDOW_EXCEEDED", "too long")])
    decisions: list[Any] = []
    original = agent._retry

    async def downstream(*args: Any) -> bool:
        decisions.append(args)
        return await original(*args)

    monkeypatch.setattr(agent, "_retry", downstream)
    agent.followup("hello")
    outcomes = run(agent.run())
    assert len(decisions) == 1
    assert outcomes[-1].reason == {"kind": "error", "error": {"message": "too long", "code": "CONTEXT_WINDOW_EXCEEDED"}}
    assert len(agent.provider.requests) == 1  # type: ignore[attr-defined]


def closed_session_for_loop() -> Session:
    """A routed, closed two-turn history the real loop can continue (turn 3 next)."""
    session = conversation(2)
    session.append("turn/end", {"turn": 3, "reason": {"kind": "completed"}})
    return session


def test_overflow_preserves_the_original_provider_error_when_recovery_raises(caplog: pytest.LogCaptureFixture) -> None:
    """The turn ends with the provider's own failure, and the warning says it was preserved."""
    compact, _ = engine(summarizer=RecordingSummarizer(error=RuntimeError("summary unavailable")))
    session = closed_session_for_loop()
    agent = agent_for(session, compact, script=[failure_reply("CONTEXT_WINDOW_EXCEEDED", "original provider overflow")])
    agent.followup("hello")
    with caplog.at_level(logging.WARNING, logger="agentlog"):
        outcomes = run(agent.run())
    assert outcomes[-1].reason["error"] == {"message": "original provider overflow", "code": "CONTEXT_WINDOW_EXCEEDED"}
    assert any("preserving the original request error" in r.message for r in caplog.records)


def test_overflow_delegates_once_when_recovery_raises_a_foreign_exception(caplog: pytest.LogCaptureFixture) -> None:
    """Any exception type (the original: a non-Error value) is logged with its text and changes nothing."""
    compact, _ = engine(summarizer=RecordingSummarizer(error=KeyError("non-error recovery failure")))
    session = conversation(3)
    generation = session.surface.replace_generation
    failure = overflow_failure("original provider failure")
    with caplog.at_level(logging.WARNING, logger="agentlog"):
        assert run(recover(agent_for(session, compact), failure)) is False
    assert session.surface.replace_generation == generation
    assert failure == {"message": "original provider failure", "code": "CONTEXT_WINDOW_EXCEEDED"}
    assert any("non-error recovery failure" in r.message for r in caplog.records)


def test_overflow_recovers_for_an_unlisted_routed_model() -> None:
    """Overflow needs no capacity: a model no provider knows is still compacted and retried."""
    compact, _ = engine()
    session = conversation(2)
    session.append("request/header", header_data("unknown-routed-provider", "unknown-routed-model", reason="resume"))
    assert run(recover(agent_for(session, compact, window=None), overflow_failure("unlisted-model overflow"))) is True


def test_overflow_delegates_when_no_durable_routed_target_exists() -> None:
    """No request header: nothing to compact for, the failure goes on."""
    compact, _ = engine()
    session = Session.create("headerless-overflow")
    session.append("turn/start", {"turn": 1})
    assert run(recover(agent_for(session, compact))) is False


def test_overflow_honors_the_retry_cap_and_ignores_non_context_failures(monkeypatch: pytest.MonkeyPatch) -> None:
    """A rate limit is not an overflow; the second overflow without a model reply in between is refused."""
    compact, _ = engine({"maxOverflowRetries": 1})
    agent = agent_for(conversation(3), compact)
    assert run(recover(agent, {"message": "rate limit", "code": "RATE_LIMIT"})) is False
    assert run(recover(agent)) is True
    calls: list[Any] = []
    monkeypatch.setattr(compact, "compact_if_needed", lambda *a: calls.append(a))
    assert run(recover(agent)) is False
    assert calls == []


def test_overflow_applies_the_routed_model_override_to_the_retry_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    """modelPolicies' maxOverflowRetries for the routed target beats the default."""
    compact, _ = engine(
        {"maxOverflowRetries": 2, "modelPolicies": [{"provider": MODEL, "model": MODEL, "maxOverflowRetries": 1}]}
    )
    agent = agent_for(conversation(3), compact)
    assert run(recover(agent)) is True
    calls: list[Any] = []
    monkeypatch.setattr(compact, "compact_if_needed", lambda *a: calls.append(a))
    assert run(recover(agent)) is False
    assert calls == []


def test_overflow_retry_counter_resets_on_a_model_reply_and_when_the_agent_goes_idle() -> None:
    """The budget is per overflow episode: an assistant message or an idle agent starts it afresh."""
    compact, _ = engine({"maxOverflowRetries": 1})
    session = conversation(6)
    agent = agent_for(session, compact)
    assert run(recover(agent, turn=7)) is True
    assert run(recover(agent, turn=7)) is False
    session.append("user/message", user_msg("more history " * 100), intent())
    session.append("step/start", {"turn": 7, "step": 1})
    session.append("assistant/message", {"turn": 7, "step": 1, "message": _assistant("reply " * 100)}, intent())
    session.append("step/end", {"turn": 7, "step": 1})
    assert run(recover(agent, turn=7)) is True
    session.append("user/message", user_msg("yet more history " * 100), intent())
    assert run(recover(agent, turn=7)) is False
    for hook in agent.idle_hooks:
        hook(agent)
    assert run(recover(agent, turn=7)) is True


def _assistant(text: str) -> dict[str, Any]:
    from agentlog.testing.builders import assistant_msg

    return assistant_msg(text, provider=MODEL, model=MODEL)


def test_overflow_does_not_retry_when_cancellation_lands_during_the_awaited_compaction() -> None:
    """The summary commits (it is valid), but a cancelled turn is not resent."""
    recorder = RecordingSummarizer()
    compact, _ = engine(summarizer=recorder)
    session = conversation(3)
    generation = session.surface.replace_generation
    agent = agent_for(session, compact)
    recorder.during = agent.cancel
    assert run(recover(agent)) is False
    assert session.surface.replace_generation == generation + 1


def test_max_overflow_retries_zero_disables_recovery_but_not_pressure() -> None:
    """maxOverflowRetries 0 turns off only the overflow hook."""
    compact, _ = engine({"maxOverflowRetries": 0, **AUTO})
    session = conversation(4)
    agent = agent_for(session, compact)
    run(pre_step(agent))
    summaries = types_of(session).count("compaction/summary")
    assert summaries == 1
    assert run(recover(agent)) is False
    assert types_of(session).count("compaction/summary") == summaries


def test_auto_false_installs_neither_hook() -> None:
    """auto: false leaves the loop untouched; compaction is then manual or explicit only."""
    compact, _ = engine({"auto": False, "thresholdRatio": 0.5, "retainTokens": 180})
    session = conversation(4)
    agent = agent_for(session, compact)
    assert agent.pre_step_hooks == [] and agent.request_error_hooks == [] and agent.idle_hooks == []
    run(pre_step(agent))
    assert types_of(session) == []
    assert run(recover(agent)) is False


def test_the_loop_retry_policy_still_handles_transient_codes_with_an_engine_installed() -> None:
    """Non-overflow failures pass through the engine's hook to the loop's retry policy unchanged."""
    compact, _ = engine()
    session = closed_session_for_loop()
    from agentlog.testing import text_reply

    agent = agent_for(session, compact, script=[failure_reply("SERVER"), text_reply("fine")])
    agent.options = AgentOptions(provider=MODEL, model=MODEL, retry=RetryPolicy(initial_delay_ms=1, max_delay_ms=1))
    agent.followup("hello")
    outcomes = run(agent.run())
    assert outcomes[-1].reason == {"kind": "completed"}
    assert [e["data"]["retry"] for e in session.events if e["type"] == "llm/retry"] == [1]
    assert types_of(session) == []


def test_pressure_makes_the_lock_durable_before_the_summary_is_awaited() -> None:
    """The agent flushes once with compaction/start as the newest event, before the summarizer runs."""
    recorder = RecordingSummarizer()
    compact, _ = engine(PRESSURE, summarizer=recorder)
    session = conversation(4)
    agent = agent_for(session, compact)
    flushed: list[str] = []
    seen_at_summary: list[list[str]] = []

    async def aflush() -> None:
        flushed.append(session.events[-1]["type"])

    agent.aflush = aflush  # type: ignore[method-assign]
    recorder.during = lambda: seen_at_summary.append(list(flushed))
    assert run(compact.compact_if_needed(agent, "pressure")) is not None
    assert flushed == ["compaction/start"]
    assert seen_at_summary and all(seen == ["compaction/start"] for seen in seen_at_summary)  # once, even split


# --- property: whatever the engine compacts, the model still gets a well-paired request ----------------

TURN_SHAPES = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=3),  # parallel tool calls in the turn's step (0: a text answer)
        st.integers(min_value=1, max_value=1_500),  # characters of each tool result
        st.integers(min_value=1, max_value=800),  # characters of the prompt
    ),
    min_size=1,
    max_size=8,
)


def shaped_session(shapes: list[tuple[int, int, int]]) -> Session:
    session = Session.create("shaped")
    for turn, (calls, result_chars, prompt_chars) in enumerate(shapes, start=1):
        session.append("turn/start", {"turn": turn})
        session.append("user/message", user_msg("p" * prompt_chars), intent())
        session.append("step/start", {"turn": turn, "step": 1})
        if turn == 1:
            session.append("request/header", header_data())
        blocks: list[Any] = [{"type": "text", "text": f"turn {turn}"}]
        ids = [f"call-{turn}-{index}" for index in range(calls)]
        blocks += [{"type": "tool-call", "id": call_id, "name": "read", "arguments": "{}"} for call_id in ids]
        session.append("assistant/message", {"turn": turn, "step": 1, "message": _assistant_blocks(blocks)}, intent())
        for call_id in ids:
            call = session.append(
                "tool/call", {"turn": turn, "step": 1, "callId": call_id, "name": "read", "arguments": "{}"}
            )
            session.append(
                "tool/result",
                {"turn": turn, "step": 1, "message": tool_result_msg(call_id, "r" * result_chars)},
                intent("append", [call.seq]),
            )
        session.append("step/end", {"turn": turn, "step": 1})
        session.append("turn/end", {"turn": turn, "reason": {"kind": "completed"}})
    session.append("turn/start", {"turn": len(shapes) + 1})
    return session


def _assistant_blocks(blocks: list[Any]) -> dict[str, Any]:
    from agentlog.testing.builders import assistant_msg

    return assistant_msg(blocks, provider=MODEL, model=MODEL)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    shapes=TURN_SHAPES,
    window=st.integers(min_value=300, max_value=6_000),
    rounds=st.lists(st.sampled_from(["pressure", "context-overflow"]), min_size=1, max_size=3),
)
def test_property_compaction_keeps_calls_paired_and_the_log_replays_to_the_same_surface(
    shapes: list[tuple[int, int, int]], window: int, rounds: list[str]
) -> None:
    """Random sessions (parallel calls, big results, repeated pressure/overflow rounds over earlier
    checkpoints): every derived request pairs each call with its result, and a replay of the log from
    scratch gives the same surface and messages."""
    meter = TokenMeter()
    compact, _ = engine(
        {"auto": False, "thresholdRatio": 0.5, "retainRatio": 0.1}, pruner=small_pruner(meter), meter=meter
    )
    session = shaped_session(shapes)
    agent = agent_for(session, compact, window=window)
    for trigger in rounds:
        try:
            run(compact.compact_if_needed(agent, trigger))  # type: ignore[arg-type]
        except (CompactionThresholdError, SummaryNotSmallerError):
            pass  # a refusal leaves a well-formed session too
        check_tool_pairing(session.derive_messages())
        assert tool_results_have_calls(session)
    replayed = Session.create("replayed", [dict(e) for e in session.events])
    assert list(replayed.surface.nodes) == list(session.surface.nodes)
    assert replayed.derive_messages().to_list() == session.derive_messages().to_list()


def test_a_held_lock_is_the_manual_busy_error_on_every_path() -> None:
    """As in the original, a compaction that finds the lock held raises ManualCompactionError kind busy
    whichever path asked (pressure, overflow, an explicit region, compact_now): one except catches all."""
    compact, recorder = engine(PRESSURE)
    session = conversation(4)
    session.append("compaction/start", {"compactionId": "orphan", "turn": 5})
    agent = agent_for(session, compact)
    nodes = list(session.surface.nodes)
    attempts = {
        "pressure": lambda: compact.compact_if_needed(agent, "pressure"),
        "context-overflow": lambda: compact.compact_if_needed(agent, "context-overflow"),
        "region": lambda: compact.compact_region(session, nodes[0], nodes[1], agent=agent),
    }
    length = len(session.events)
    for name, attempt in attempts.items():
        with pytest.raises(ManualCompactionError) as caught:
            run(attempt())
        assert caught.value.kind == "busy" and caught.value.code == "COMPACTION_BUSY", name
        assert isinstance(caught.value, CompactionBusyError), name
        assert "compaction lock is already active" in str(caught.value), name
    assert len(session.events) == length and recorder.calls == []


def test_pressure_is_blocked_by_a_live_orphan_but_not_by_one_before_the_newest_end_seed() -> None:
    """The lock rule holds for automatic compaction too: busy while a start is live, free after a reload."""
    compact, recorder = engine(PRESSURE)
    live = conversation(4)
    live.append("compaction/start", {"compactionId": "orphan", "turn": 5})
    with pytest.raises(CompactionBusyError, match="compaction lock is already active"):
        run(compact.compact_if_needed(agent_for(live, compact), "pressure"))
    assert recorder.calls == []

    reloaded = Session.create("reloaded", [dict(e) for e in live.events])
    assert run(compact.compact_if_needed(agent_for(reloaded, compact), "pressure")) is not None
