"""Range selection and the pressure decision (runtime spec §5.6–§5.7) against ``compaction-basic.spec.ts``.

One test per case of the original's ``pressure measurement and retention`` block, named after the case,
plus direct vectors of :func:`select_compactable_range` and hypothesis properties: selection never
returns an unbalanced range, always keeps at least the retained budget, and cuts at the first balanced
boundary head-ward of the retention point (checked against an independent model of the rule).

The original reads a routed model's window from its LLM adapter (``resolveModelInfo``); here it comes
from the agent's provider (``context_window_for``, when the provider is the routed one) or
``AgentOptions.context_window`` — the tests give one or the other, as each case needs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentlog.compaction import (
    CompactableRange,
    CompactionEngine,
    TokenMeasurement,
    TokenMeter,
    balanced_after,
    balanced_before,
    select_compactable_range,
)
from agentlog.errors import CompactionStateError, CompactionThresholdError, TargetPressureConfigError
from agentlog.kernel.messages import assistant_message, text_block, tool_call_block, tool_result_message
from agentlog.kernel.session import Session
from agentlog.testing.provider import ScriptedProvider

from .test_region import (
    MODEL,
    SessionBuilder,
    build_random_session,
    conversation,
    make_agent,
    make_engine,
    pairing_problems,
    routed_header,
    run,
    texts,
    tool_conversation,
    turn_strategy,
)

COMPACT_CONFIG = {"auto": False, "thresholdRatio": 0.5, "retainTokens": 180}


class WindowProvider(ScriptedProvider):
    """The scripted provider with model metadata: a per-model context window (``None`` = unknown)."""

    def __init__(self, name: str, window: int | None) -> None:
        super().__init__([], name=name)
        self.window = window
        self.lookups: list[str] = []

    def context_window_for(self, model: str) -> int | None:
        self.lookups.append(model)
        return self.window


class RecordingMeter(TokenMeter):
    """A real meter that records its ``measure`` calls (the original's ``vi.spyOn(tokenMeter, 'measure')``)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[Any, Any]] = []

    def measure(self, session: Any, request_header: Mapping[str, Any] | None = None) -> TokenMeasurement:
        self.calls.append((session, request_header))
        return super().measure(session, request_header)


def single_tool_pair(name: str, *, header: bool) -> Session:
    session = Session.create(name)
    session.append("turn/start", {"turn": 1})
    session.append("step/start", {"turn": 1, "step": 1})
    if header:
        session.append("request/header", {"header": routed_header(), "reason": "initial"})
    message = assistant_message([tool_call_block("single-call", "read", "{}")], provider=MODEL, model=MODEL)
    session.append("assistant/message", {"turn": 1, "step": 1, "message": message}, {"surfaceOp": "append"})
    session.append("tool/call", {"turn": 1, "step": 1, "callId": "single-call", "name": "read", "arguments": "{}"})
    session.append(
        "tool/result",
        {"turn": 1, "step": 1, "message": tool_result_message("single-call", "result", is_error=False)},
        {"surfaceOp": "append"},
    )
    session.append("step/end", {"turn": 1, "step": 1})
    return session


# --- pressure measurement and retention -------------------------------------------------------------


def test_skips_when_no_durable_routed_model_exists_instead_of_using_agent_options_fallback() -> None:
    """Pressure needs a routed request header; the agent's own provider/model is never a substitute."""
    engine, recorder = make_engine(COMPACT_CONFIG)
    session = Session.create("headerless")
    session.append("turn/start", {"turn": 1})
    assert run(engine.compact_if_needed(make_agent(session, MODEL), "pressure")) is None
    assert recorder.calls == []
    assert len(session.events) == 1


def test_meters_an_unlisted_model_when_its_provider_adapter_supplies_context_metadata() -> None:
    """Any routed model compacts when the routed provider knows its window (no model catalog needed)."""
    engine, _ = make_engine(COMPACT_CONFIG)
    session = conversation()
    session.append(
        "request/header", {"header": routed_header("unlisted-provider", "unlisted-model"), "reason": "resume"}
    )
    provider = WindowProvider("unlisted-provider", 1000)
    agent = make_agent(session, MODEL, window=None, provider=provider)
    assert run(engine.compact_if_needed(agent, "pressure")) is not None
    assert provider.lookups[0] == "unlisted-model"


def test_forwards_turn_cancellation_to_proactive_model_metadata_resolution() -> None:
    """The capacity is asked of the routed model, and the turn's cancellation signal reaches the
    summarization the pressure decision starts (the lookup itself is synchronous here, so the signal
    has nothing else to be forwarded to)."""
    engine, recorder = make_engine(COMPACT_CONFIG)
    session = conversation()
    provider = WindowProvider(MODEL, 1000)
    agent = make_agent(session, MODEL, window=None, provider=provider)
    assert run(engine.compact_if_needed(agent, "pressure")) is not None
    assert provider.lookups[0] == MODEL
    assert recorder.calls[0].signal is agent.abort_signal


def test_re_resolves_capacity_after_a_same_model_id_provider_switch_in_one_session() -> None:
    """The window is resolved per routed provider/model at each decision, never cached per model id."""
    engine, _ = make_engine({"auto": False, "thresholdRatio": 0.5, "retainRatio": 0.1})
    session = conversation(4)
    session.append("request/header", {"header": routed_header("large", "shared-id"), "reason": "resume"})
    agent = make_agent(session, MODEL, window=None, provider=WindowProvider("large", 10_000))
    assert run(engine.compact_if_needed(agent, "pressure")) is None

    session.append("request/header", {"header": routed_header("small", "shared-id"), "reason": "change"})
    agent.provider = WindowProvider("small", 1000)
    assert run(engine.compact_if_needed(agent, "pressure")) is not None


def test_requires_capacity_only_for_proactive_pressure_not_provider_confirmed_overflow() -> None:
    """Without a window, pressure refuses (typed, keyed by target); a confirmed overflow still compacts."""
    engine, _ = make_engine(COMPACT_CONFIG)
    session = conversation(4)
    session.append("request/header", {"header": routed_header("unknown-context", "model"), "reason": "resume"})
    agent = make_agent(session, MODEL, window=None, provider=WindowProvider("unknown-context", None))

    with pytest.raises(TargetPressureConfigError, match=r"no context capacity for unknown-context/model") as raised:
        run(engine.compact_if_needed(agent, "pressure"))
    assert str(raised.value) == (
        "compaction-basic: no context capacity for unknown-context/model; configure contextWindow on that adapter model"
    )
    assert raised.value.target_key == "unknown-context/model"
    assert run(engine.compact_if_needed(agent, "context-overflow")) is not None


def test_declines_forced_overflow_when_the_whole_surface_is_one_indivisible_tool_pair() -> None:
    """Overflow keeps the newest balanced tail; one call/result pair cannot be split, so nothing happens."""
    engine, _ = make_engine(COMPACT_CONFIG)
    session = single_tool_pair("single-tool-pair", header=True)
    generation = session.surface.replace_generation

    assert run(engine.compact_if_needed(make_agent(session), "context-overflow")) is None
    assert session.surface.replace_generation == generation
    assert not any(event["type"] == "compaction/start" for event in session.events)


def test_does_nothing_below_threshold_and_compacts_a_priced_head_above_threshold() -> None:
    """Two turns stay under 500 of a 1,000 window; four turns compact a head of more than two nodes."""
    engine, _ = make_engine(COMPACT_CONFIG)
    assert run(engine.compact_if_needed(make_agent(conversation(2)), "pressure")) is None

    session = conversation(4)
    result = run(engine.compact_if_needed(make_agent(session), "pressure"))
    assert result is not None
    assert len(result.shadowed_seqs) > 2
    assert len(session.surface.nodes) < 8
    assert engine.meter.measure(session).total_tokens < 500


def test_counts_the_durable_routed_request_envelope_without_putting_it_on_the_surface() -> None:
    """The request header's system prompt is priced into pressure, though it is not a surface node."""
    engine, _ = make_engine({"auto": False, "thresholdRatio": 0.9, "retainTokens": 50})
    session = conversation(2, "x" * 600)
    assert run(engine.compact_if_needed(make_agent(session), "pressure")) is None

    nodes = list(session.surface.nodes)
    session.append("request/header", {"header": routed_header(system="s" * 2000), "reason": "resume"})
    assert list(session.surface.nodes) == nodes
    assert run(engine.compact_if_needed(make_agent(session), "pressure")) is not None


def test_uses_the_latest_logged_request_envelope_without_an_agent_options_override() -> None:
    """The decision measures the session's own latest header (``measure(session)``, no override header),
    whatever model the agent's options name."""
    meter = RecordingMeter()
    engine, _ = make_engine({"auto": False, "thresholdRatio": 0.5, "retainTokens": 180}, meter=meter)
    session = conversation(4)
    session.append("request/header", {"header": routed_header("actual", "actual"), "reason": "initial"})

    result = run(engine.compact_if_needed(make_agent(session, "fallback"), "pressure"))
    assert result is not None
    header = session.request_header()
    assert header is not None and header["config"]["model"] == "actual"
    assert meter.calls[0] == (session, None)


def test_declines_when_envelope_pressure_is_high_but_the_surface_has_no_compactable_range() -> None:
    """A huge system prompt alone, or a surface whose whole content is the retained tail, yields ``None``."""
    engine, _ = make_engine(COMPACT_CONFIG)
    empty = Session.create("empty")
    empty.append("turn/start", {"turn": 1})
    empty.append("request/header", {"header": routed_header(system="x" * 100_000), "reason": "initial"})
    assert run(engine.compact_if_needed(make_agent(empty), "pressure")) is None

    retained = conversation(1)
    retained.append("request/header", {"header": routed_header(system="x" * 100_000), "reason": "resume"})
    assert run(engine.compact_if_needed(make_agent(retained), "pressure")) is None
    assert not any(event["type"] == "compaction/start" for event in retained.events)


def test_uses_one_unified_measurement_for_each_pressure_and_retention_decision() -> None:
    """Threshold and range come from one measurement: the meter is asked once before the first region."""
    meter = RecordingMeter()
    engine, _ = make_engine(COMPACT_CONFIG, meter=meter)
    stop = RuntimeError("stop after first decision")

    async def refuse(*args: Any, **kwargs: Any) -> Any:
        raise stop

    engine.compact_region = refuse  # type: ignore[method-assign]
    with pytest.raises(RuntimeError) as raised:
        run(engine.compact_if_needed(make_agent(conversation(4)), "pressure"))
    assert raised.value is stop
    assert len(meter.calls) == 1


def test_bounds_retries_when_a_shrinking_checkpoint_remains_above_threshold() -> None:
    """``compactionRetries: 0`` allows one region; still above the threshold is a typed refusal."""
    engine, recorder = make_engine({"auto": False, "compactionRetries": 0, "thresholdRatio": 0.3, "retainTokens": 180})
    recorder.summary = [text_block(f"summary {index}") for index in range(7)]
    session = conversation(4)

    with pytest.raises(
        CompactionThresholdError,
        match=r"^compaction still above threshold after 1 compaction attempts "
        r"\(\d+ estimated tokens >= threshold 300\)$",
    ):
        run(engine.compact_if_needed(make_agent(session), "pressure"))
    assert len([event for event in session.events if event["type"] == "compaction/summary"]) == 1


def test_rounds_a_retention_cut_head_ward_to_preserve_tool_call_result_pairing() -> None:
    """A retention point inside a call/result pair moves head-ward; no result loses its call."""
    engine, _ = make_engine({"auto": False, "thresholdRatio": 0.8, "retainTokens": 80})
    session = tool_conversation()
    result = run(engine.compact_if_needed(make_agent(session, window=4000), "pressure"))
    assert result is not None

    calls: set[str] = set()
    for message in session.derive_messages():
        for block in message["content"]:
            if block["type"] == "tool-call":
                calls.add(block["id"])
            if block["type"] == "tool-result":
                assert block["toolCallId"] in calls
    assert pairing_problems(session.derive_messages()) == ([], [])


def test_rejects_a_priced_surface_that_is_not_the_current_positional_surface() -> None:
    """A measurement whose nodes are not the session's surface is refused with the original's text."""
    meter = TokenMeter()
    session = conversation(2)
    priced = meter.measure(session)
    stale = TokenMeasurement(
        priced.log_revision,
        priced.baseline,
        priced.surface_delta_tokens,
        priced.total_tokens,
        priced.surface_tokens,
        list(priced.nodes)[1:],
    )
    with pytest.raises(
        CompactionStateError,
        match=r"^compaction: token-meter surface does not match the current session surface$",
    ):
        select_compactable_range(session, stale, 1)


def test_declines_when_rounding_a_cut_would_consume_the_only_tool_pair() -> None:
    """Rounding head-ward through the only pair reaches the head: ``None``, not an empty range."""
    session = single_tool_pair("one-tool-pair", header=False)
    assert select_compactable_range(session, TokenMeter().measure(session), 1) is None


# --- direct vectors ----------------------------------------------------------------------------------


def test_retain_zero_keeps_only_the_newest_node_and_the_range_is_head_anchored() -> None:
    """With ``retain_tokens = 0`` the last node alone is kept; the range always starts at the surface head."""
    session = conversation(3)
    nodes = list(session.surface.nodes)
    span = select_compactable_range(session, TokenMeter().measure(session), 0)
    assert span == CompactableRange(nodes[0], nodes[-2])
    assert span is not None and span.to_json() == {"start": nodes[0], "end": nodes[-2]}


def test_an_empty_surface_or_a_tail_covering_everything_selects_nothing() -> None:
    """No nodes, or a retention budget the whole surface does not reach, gives ``None``."""
    empty = Session.create("empty-surface")
    assert select_compactable_range(empty, TokenMeter().measure(empty), 0) is None
    session = conversation(2)
    measured = TokenMeter().measure(session)
    head = measured.nodes[0]
    assert select_compactable_range(session, measured, measured.surface_tokens - head.tokens) == CompactableRange(
        head.seq, head.seq
    )
    assert select_compactable_range(session, measured, measured.surface_tokens) is None
    assert select_compactable_range(session, measured, measured.surface_tokens + 1) is None


def test_retention_accumulates_from_the_tail_until_the_budget_is_reached() -> None:
    """The cut falls at the first node (from the tail) where the accumulated price reaches the budget."""
    session = conversation(3)
    measured = TokenMeter().measure(session)
    nodes = list(measured.nodes)
    tail_two = nodes[-1].tokens + nodes[-2].tokens
    assert select_compactable_range(session, measured, tail_two) == CompactableRange(nodes[0].seq, nodes[-3].seq)
    assert select_compactable_range(session, measured, tail_two + 1) == CompactableRange(nodes[0].seq, nodes[-4].seq)


# --- properties --------------------------------------------------------------------------------------


def reference_selection(session: Session, measured: TokenMeasurement, retain: int) -> tuple[int, int] | None:
    """An independent model of §5.7 over the derived surface content (pending tool calls per cut)."""
    nodes = list(measured.nodes)
    if not nodes:
        return None
    pending = 0
    balanced = [True]
    for node in nodes:
        event = session.events[node.seq]
        if event["type"] == "assistant/message":
            pending += sum(1 for b in event["data"]["message"]["content"] if b["type"] == "tool-call")
        elif event["type"] == "tool/result":
            pending -= 1
        balanced.append(pending == 0)
    keep, total = len(nodes), 0
    for index in range(len(nodes) - 1, -1, -1):
        total += nodes[index].tokens
        keep = index
        if total >= retain:
            break
    while keep > 0 and not balanced[keep]:
        keep -= 1
    if keep == 0:
        return None
    return nodes[0].seq, nodes[keep - 1].seq


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    turns=st.lists(turn_strategy, min_size=1, max_size=4),
    actions=st.lists(st.sampled_from([0, 1, 2]), min_size=1, max_size=4),
    picks=st.lists(st.integers(min_value=0, max_value=10_000), min_size=1, max_size=4),
    pending=st.lists(texts, min_size=0, max_size=3),
    answered=st.integers(min_value=0, max_value=3),
    retains=st.lists(st.integers(min_value=0, max_value=6000), min_size=1, max_size=6),
)
def test_property_selection_never_returns_an_unbalanced_range(
    turns: list[Any],
    actions: list[int],
    picks: list[int],
    pending: list[str],
    answered: int,
    retains: list[int],
) -> None:
    """For random sessions (earlier prunes and compactions, possibly an open step with parallel calls
    partly answered), every selected range is head-anchored, balanced on both sides, leaves at least
    ``retain_tokens`` in the tail, and equals an independent model of the rule."""
    engine: CompactionEngine
    engine, _ = make_engine()
    builder: SessionBuilder = build_random_session(turns, actions, picks, engine)
    session = builder.session
    if pending:
        builder.step(1, "working", pending, list(range(min(answered, len(pending) - 1))), close=False)
    measured = engine.meter.measure(session)
    nodes = list(measured.nodes)
    for retain in retains:
        span = select_compactable_range(session, measured, retain)
        expected = reference_selection(session, measured, retain)
        assert (None if span is None else (span.start, span.end)) == expected
        if span is None:
            continue
        assert span.start == nodes[0].seq
        assert balanced_before(session, span.start)
        assert balanced_after(session, span.end)
        cut = [node.seq for node in nodes].index(span.end) + 1
        assert 0 < cut < len(nodes)
        assert sum(node.tokens for node in nodes[cut:]) >= retain
