"""The token meter's projection units (runtime spec §2.5) against the original's two spec files.

One test per case of ``packages/llm/token-meter/tests/token-usage-projection.spec.ts`` and
``context-breakdown-projection.spec.ts``, named after the case. The original drives the units through its
projection registry; the registry is a later issue here, so each test folds the unit over the log a real
``Session`` committed and reads the view the registry would serve. "Pushes a change" is the registry's
``is not`` test on the reducer's result, checked here directly. The "unregisters with the token-meter
fiber" half of the checkpoint cases is registry behaviour and not covered; the checkpoint half (a
JSON-round-tripped state read back through the unit's state schema) is.

The original prices a replaced span with ``tokenMeter.measure(session).nodes``; the meter service is
another module, so :func:`surface_tokens` reprices the live surface from scratch with the same estimator —
by definition what ``measure().surfaceTokens`` answers.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentlog.compaction.estimate import (
    estimate_content,
    estimate_header,
    estimate_message,
    estimate_system_tokens,
    estimate_tools_tokens,
)
from agentlog.errors import CompactionStateError
from agentlog.kernel.events import Event, TokenUsage
from agentlog.kernel.messages import assistant_message, text_delta, token_usage, user_message
from agentlog.kernel.session import Session, derive_event_message
from agentlog.projection.units import (
    CONTEXT_BREAKDOWN_UNIT,
    CONTEXT_PRESSURE_UNIT,
    TOKEN_METER_UNITS,
    TOKEN_USAGE_UNIT,
    ContextBreakdownState,
    ProjectionUnit,
)

S = TypeVar("S")
V = TypeVar("V")

ZERO = {"uncachedInputTokens": 0, "outputTokens": 0, "cacheReadTokens": 0, "cacheWriteTokens": 0}
CONFIG = {"provider": "test", "model": "test-model"}
TOOLS = [{"name": "bash", "description": "run a command", "parameters": {"type": "object", "properties": {}}}]
PLUGIN = {"kind": "plugin", "plugin": "test"}


# --- log builders (real appends) ------------------------------------------------------------------


def new_session() -> Session:
    return Session.create("token-meter-units", now=lambda: 1000)


def usage(
    input_tokens: int,
    output_tokens: int,
    *,
    cache_read: int | None = None,
    cache_write: int | None = None,
    reasoning: int | None = None,
) -> TokenUsage:
    return token_usage(
        input_tokens,
        output_tokens,
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
        reasoning_tokens=reasoning,
    )


def start_step(session: Session, turn: int, step: int) -> None:
    session.append("step/start", {"turn": turn, "step": step})


def usage_chunk(session: Session, sample: TokenUsage, turn: int, step: int) -> int:
    return session.append(
        "assistant/chunk", {"turn": turn, "step": step, "chunk": {"type": "usage", "usage": sample}}
    ).seq


def final_usage(session: Session, sample: TokenUsage, turn: int, step: int, sources: list[int]) -> None:
    """An empty-content final assistant message carrying ``sample``, then the step's end."""
    session.append(
        "assistant/message",
        {
            "turn": turn,
            "step": step,
            "message": assistant_message([], provider="mock", model="mock"),
            "usage": sample,
        },
        {"surfaceOp": "append", "sourceEventSeqs": sources},
    )
    session.append("step/end", {"turn": turn, "step": step})


def append_user(session: Session, text: str, source: dict[str, Any] | None = None) -> int:
    return session.append("user/message", user_message(text, source=source), {"surfaceOp": "append"}).seq


def append_assistant(session: Session, text: str, sample: TokenUsage, turn: int, step: int) -> int:
    return session.append(
        "assistant/message",
        {
            "turn": turn,
            "step": step,
            "message": assistant_message(text, provider="mock", model="mock"),
            "usage": sample,
        },
        {"surfaceOp": "append", "sourceEventSeqs": []},
    ).seq


def record_context(session: Session, model: str, context_window: int | None = None) -> None:
    data: dict[str, Any] = {"provider": "mock", "model": model}
    if context_window is not None:
        data["contextWindow"] = context_window
    session.append("request/context", data)


def node_price(event: Event) -> int:
    message = derive_event_message(event)
    return 0 if message is None else estimate_message(message)


def surface_tokens(session: Session) -> int:
    """The live surface repriced from scratch (what the meter service's ``surfaceTokens`` answers)."""
    events = session.events
    return sum(node_price(events[seq]) for seq in session.surface.nodes)


def append_summary_meter(session: Session, start: int, end: int) -> list[int]:
    """Meter an upcoming replacement as compaction-basic does: log the exact span's price right before it."""
    nodes = list(session.surface.nodes)
    shadowed = nodes[nodes.index(start) : nodes.index(end) + 1]
    session.append(
        "compaction/summary",
        {
            "compactionId": "token-usage-summary",
            "summary": [{"type": "text", "text": "summary"}],
            "shadowedRange": {"start": start, "end": end},
            "shadowedSeqs": shadowed,
            "shadowedTokenCount": sum(node_price(session.events[seq]) for seq in shadowed),
            "provider": "mock",
            "model": "mock",
        },
    )
    return shadowed


def replace_with(session: Session, text: str, start: int, end: int, sources: list[int]) -> None:
    session.append(
        "user/message",
        user_message(text, source=PLUGIN),
        {"surfaceOp": {"op": "replace", "start": start, "end": end}, "sourceEventSeqs": sources},
    )


def view(unit: ProjectionUnit[Any, V], session: Session) -> V:
    """The value the registry would serve for ``unit`` after the session's whole log."""
    return unit.view(unit.fold(session.events))


def changed_views(unit: ProjectionUnit[S, V], state: S, events: Sequence[Event]) -> list[V]:
    """The registry's change feed: a view for every event whose reducer result is a new object."""
    pushed: list[V] = []
    for event in events:
        nxt = unit.reduce(state, event)
        if nxt is not state:
            pushed.append(unit.view(nxt))
        state = nxt
    return pushed


def checkpoint_round_trip(unit: ProjectionUnit[S, Any], state: S) -> S:
    """A persisted checkpoint row's state as a reader gets it back: JSON text, parsed by the unit's schema."""
    return unit.parse_state(json.loads(json.dumps(state)))


# --- tokenUsage -----------------------------------------------------------------------------------


def test_token_usage__serves_zero_buckets_for_an_empty_log() -> None:
    """Before any usage the view is four zero buckets, never absent."""
    assert view(TOKEN_USAGE_UNIT, new_session()) == ZERO


def test_token_usage__does_not_count_a_usage_chunk_and_identical_final_usage_twice() -> None:
    """The final message restating the chunk's sample is a no-op: one change, the buckets counted once."""
    session = new_session()
    sample = usage(10, 4, cache_read=7, cache_write=2, reasoning=3)
    start_step(session, 1, 1)
    source = usage_chunk(session, sample, 1, 1)
    final_usage(session, sample, 1, 1, [source])

    expected = {"uncachedInputTokens": 10, "outputTokens": 4, "cacheReadTokens": 7, "cacheWriteTokens": 2}
    assert view(TOKEN_USAGE_UNIT, session) == expected
    assert changed_views(TOKEN_USAGE_UNIT, TOKEN_USAGE_UNIT.initial(), session.events) == [expected]


def test_token_usage__replaces_an_earlier_same_step_chunk_sample_with_the_final_usage() -> None:
    """A corrected final sample for the same step replaces the chunk's numbers instead of adding to them."""
    session = new_session()
    start_step(session, 1, 1)
    source = usage_chunk(session, usage(10, 2, cache_read=3), 1, 1)
    final_usage(session, usage(14, 5, cache_read=8, cache_write=1), 1, 1, [source])

    assert view(TOKEN_USAGE_UNIT, session) == {
        "uncachedInputTokens": 14,
        "outputTokens": 5,
        "cacheReadTokens": 8,
        "cacheWriteTokens": 1,
    }


def test_token_usage__accumulates_disjoint_buckets_across_steps_without_adding_reasoning_twice() -> None:
    """Steps add up; reasoning tokens are inside outputTokens already and are not counted again."""
    session = new_session()
    start_step(session, 1, 1)
    first_sample = usage(10, 6, reasoning=5, cache_read=2)
    first = usage_chunk(session, first_sample, 1, 1)
    final_usage(session, first_sample, 1, 1, [first])
    start_step(session, 1, 2)
    second_sample = usage(20, 9, reasoning=7, cache_write=4)
    second = usage_chunk(session, second_sample, 1, 2)
    final_usage(session, second_sample, 1, 2, [second])

    assert view(TOKEN_USAGE_UNIT, session) == {
        "uncachedInputTokens": 30,
        "outputTokens": 15,
        "cacheReadTokens": 2,
        "cacheWriteTokens": 4,
    }


def test_token_usage__retains_a_usage_chunk_when_the_request_produces_no_final_assistant_message() -> None:
    """A request that failed after reporting usage was still billed: the chunk's sample stays counted."""
    session = new_session()
    start_step(session, 1, 1)
    usage_chunk(session, usage(9, 1), 1, 1)
    session.append("step/end", {"turn": 1, "step": 1})

    assert view(TOKEN_USAGE_UNIT, session) == {
        "uncachedInputTokens": 9,
        "outputTokens": 1,
        "cacheReadTokens": 0,
        "cacheWriteTokens": 0,
    }


def test_token_usage__does_not_erase_historical_billing_when_the_visible_surface_is_replaced() -> None:
    """A compaction shrinks what the model sees, not what was billed."""
    session = new_session()
    start_step(session, 1, 1)
    source = usage_chunk(session, usage(12, 3), 1, 1)
    final_usage(session, usage(12, 3), 1, 1, [source])
    before = append_user(session, "before compaction")
    append_summary_meter(session, before, before)
    replace_with(session, "compacted", before, before, [before])

    assert view(TOKEN_USAGE_UNIT, session) == {
        "uncachedInputTokens": 12,
        "outputTokens": 3,
        "cacheReadTokens": 0,
        "cacheWriteTokens": 0,
    }


def test_token_usage__restores_from_a_json_checkpoint() -> None:
    """The state survives a JSON checkpoint row at stateVersion 1 and serves the same view from it."""
    session = new_session()
    start_step(session, 1, 1)
    usage_chunk(session, usage(8, 2, cache_read=5), 1, 1)
    state = TOKEN_USAGE_UNIT.fold(session.events)

    restored = checkpoint_round_trip(TOKEN_USAGE_UNIT, state)
    assert TOKEN_USAGE_UNIT.state_version == 1
    assert restored == state
    assert TOKEN_USAGE_UNIT.view(restored) == {
        "uncachedInputTokens": 8,
        "outputTokens": 2,
        "cacheReadTokens": 5,
        "cacheWriteTokens": 0,
    }
    # The restored `last` slot still recognises the step: its final restatement adds nothing.
    final_usage(session, usage(8, 2, cache_read=5), 1, 1, [1])
    assert TOKEN_USAGE_UNIT.fold_from(restored, session.events[len(session.events) - 2 :]) is restored


# --- contextPressure ------------------------------------------------------------------------------


def test_context_pressure__serves_no_pressure_or_capacity_for_an_empty_log() -> None:
    """Nothing is known yet, so the view is empty rather than zeros."""
    assert view(CONTEXT_PRESSURE_UNIT, new_session()) == {}


def test_context_pressure__does_not_synthesize_zero_pressure_before_a_provider_usage_sample() -> None:
    """A capacity alone shows no pressure figure (no fake 0 before the provider reports)."""
    session = new_session()
    start_step(session, 1, 1)
    record_context(session, "small", 64_000)
    assert view(CONTEXT_PRESSURE_UNIT, session) == {"contextWindow": 64_000}


def test_context_pressure__sums_prompt_side_buckets_and_excludes_response_output() -> None:
    """Pressure is the prompt that was sent (input + cache read + cache write), so output never moves it."""
    session = new_session()
    start_step(session, 1, 1)
    usage_chunk(session, usage(100, 4_000, cache_read=20, cache_write=5), 1, 1)
    assert view(CONTEXT_PRESSURE_UNIT, session).get("pressureTokens") == 125


def test_context_pressure__replaces_pressure_with_the_newest_request_rather_than_accumulating() -> None:
    """Occupancy is the newest request's size, not a sum over requests."""
    session = new_session()
    start_step(session, 1, 1)
    first = usage_chunk(session, usage(100, 10), 1, 1)
    final_usage(session, usage(100, 10), 1, 1, [first])
    start_step(session, 2, 1)
    usage_chunk(session, usage(250, 10), 2, 1)
    assert view(CONTEXT_PRESSURE_UNIT, session).get("pressureTokens") == 250


def test_context_pressure__carries_the_newest_recorded_capacity_and_replaces_it_on_a_model_switch() -> None:
    """The capacity is last-wins and independent of the pressure sample (a switch keeps the old sample)."""
    session = new_session()
    start_step(session, 1, 1)
    record_context(session, "small", 64_000)
    usage_chunk(session, usage(100, 10), 1, 1)
    assert view(CONTEXT_PRESSURE_UNIT, session) == {
        "pressureTokens": 100,
        "projectedTokens": 100,
        "contextWindow": 64_000,
    }
    record_context(session, "large", 256_000)
    assert view(CONTEXT_PRESSURE_UNIT, session) == {
        "pressureTokens": 100,
        "projectedTokens": 100,
        "contextWindow": 256_000,
    }


def test_context_pressure__removes_an_older_capacity_when_the_newest_route_advertises_none() -> None:
    """A route without a capacity clears the previous route's, instead of showing a stale denominator."""
    session = new_session()
    start_step(session, 1, 1)
    record_context(session, "small", 64_000)
    usage_chunk(session, usage(100, 10), 1, 1)
    record_context(session, "unknown")
    served = view(CONTEXT_PRESSURE_UNIT, session)
    assert served == {"pressureTokens": 100, "projectedTokens": 100}
    assert list(served) == ["pressureTokens", "projectedTokens"]


def test_context_pressure__pushes_no_change_for_unrelated_events_or_a_restated_capacity() -> None:
    """The registry gates its feed on identity: unrelated events and a restated capacity return the state itself."""
    session = new_session()
    start_step(session, 1, 1)
    record_context(session, "small", 64_000)
    usage_chunk(session, usage(100, 10), 1, 1)
    state = CONTEXT_PRESSURE_UNIT.fold(session.events)

    todo = session.append("todo/write", {"todos": []})
    assert CONTEXT_PRESSURE_UNIT.reduce(state, todo) is state
    record_context(session, "small", 64_000)
    assert CONTEXT_PRESSURE_UNIT.reduce(state, session.events[-1]) is state
    record_context(session, "large", 256_000)
    changed = CONTEXT_PRESSURE_UNIT.reduce(state, session.events[-1])
    assert changed is not state
    assert CONTEXT_PRESSURE_UNIT.view(changed)["contextWindow"] == 256_000


def test_context_pressure__restores_from_a_json_checkpoint() -> None:
    """The state survives a JSON checkpoint row at stateVersion 4 and serves the same view from it."""
    session = new_session()
    start_step(session, 1, 1)
    record_context(session, "small", 64_000)
    usage_chunk(session, usage(42, 2), 1, 1)
    state = CONTEXT_PRESSURE_UNIT.fold(session.events)

    restored = checkpoint_round_trip(CONTEXT_PRESSURE_UNIT, state)
    assert CONTEXT_PRESSURE_UNIT.state_version == 4
    assert CONTEXT_PRESSURE_UNIT.view(restored) == {
        "pressureTokens": 42,
        "projectedTokens": 42,
        "contextWindow": 64_000,
    }


def test_context_pressure__carries_the_sample_forward_over_surface_growth_and_a_compaction() -> None:
    """projectedTokens follows the surface after the sample: it grows with appends and shrinks on compaction."""
    session = new_session()
    record_context(session, "large", 128_000)
    question = append_user(session, "a first question worth a few tokens")
    start_step(session, 1, 1)
    # The sample anchors against the surface its request saw, before the assistant message joins it.
    answer = append_assistant(session, "an answer of some length", usage(900, 20), 1, 1)
    session.append("step/end", {"turn": 1, "step": 1})
    after_turn = view(CONTEXT_PRESSURE_UNIT, session)
    assert after_turn["pressureTokens"] == 900
    assert after_turn["projectedTokens"] == 900 + node_price(session.events[answer])

    grown = append_user(session, "a follow-up question that grows the surface further")
    before_compaction = view(CONTEXT_PRESSURE_UNIT, session)["projectedTokens"]
    assert before_compaction > after_turn["projectedTokens"]

    # Compaction reports no usage, so pressureTokens holds; the projected figure must shrink anyway.
    append_summary_meter(session, question, grown)
    replace_with(session, "summary", question, grown, [question, answer, grown])
    compacted = view(CONTEXT_PRESSURE_UNIT, session)
    assert compacted["pressureTokens"] == 900
    assert compacted["projectedTokens"] < before_compaction


def test_context_pressure__re_anchors_a_same_sized_sample_on_the_surface_its_request_saw() -> None:
    """Beyond the original's cases: a new request that reports the same pressure after the surface grew is a
    new anchor, so the growth it already paid for is not projected on top of it a second time."""
    session = new_session()
    start_step(session, 1, 1)
    usage_chunk(session, usage(500, 1), 1, 1)
    session.append("step/end", {"turn": 1, "step": 1})
    append_user(session, "the surface grows between the two requests")
    assert view(CONTEXT_PRESSURE_UNIT, session)["projectedTokens"] > 500
    start_step(session, 2, 1)
    usage_chunk(session, usage(500, 1), 2, 1)
    assert view(CONTEXT_PRESSURE_UNIT, session) == {"pressureTokens": 500, "projectedTokens": 500}


def test_context_pressure__folds_a_replacement_without_a_claim_at_zero() -> None:
    """A replace with no shadow price before it (an older log) leaves the view exactly as it was."""
    session = new_session()
    question = append_user(session, "a question from an unmetered log")
    start_step(session, 1, 1)
    usage_chunk(session, usage(100, 1), 1, 1)
    session.append("step/end", {"turn": 1, "step": 1})
    before = view(CONTEXT_PRESSURE_UNIT, session)

    replace_with(session, "summary without a preceding claim", question, question, [question])
    assert view(CONTEXT_PRESSURE_UNIT, session) == before


def test_context_pressure__clamps_a_projection_that_heuristic_error_drove_below_zero() -> None:
    """A provider sample below the heuristic price of what a compaction removed projects 0, never negative."""
    session = new_session()
    record_context(session, "large", 128_000)
    question = append_user(session, "a question long enough to outprice the sample" * 4)
    start_step(session, 1, 1)
    append_assistant(session, "ok", usage(3, 1), 1, 1)
    session.append("step/end", {"turn": 1, "step": 1})
    append_summary_meter(session, question, question)
    replace_with(session, ".", question, question, [question])
    assert view(CONTEXT_PRESSURE_UNIT, session)["projectedTokens"] == 0


# --- contextBreakdown -----------------------------------------------------------------------------


def append_header(session: Session, header: dict[str, Any], reason: str) -> None:
    session.append("request/header", {"header": header, "reason": reason})


def test_context_breakdown__serves_zeros_for_an_empty_log() -> None:
    """Before any request or message all three figures are 0."""
    assert view(CONTEXT_BREAKDOWN_UNIT, new_session()) == {"systemTokens": 0, "toolsTokens": 0, "messageTokens": 0}


def test_context_breakdown__prices_the_newest_envelope_last_wins_and_pushes_no_change_for_a_restated_one() -> None:
    """System and tools come from the newest request/header; restating it (or a todo) changes nothing."""
    session = new_session()
    append_header(session, {"config": CONFIG, "system": "You are terse.", "tools": TOOLS}, "initial")
    assert view(CONTEXT_BREAKDOWN_UNIT, session) == {
        "systemTokens": estimate_system_tokens({"config": CONFIG, "system": "You are terse."}),
        "toolsTokens": estimate_tools_tokens({"config": CONFIG, "tools": TOOLS}),
        "messageTokens": 0,
    }

    state = CONTEXT_BREAKDOWN_UNIT.fold(session.events)
    append_header(session, {"config": CONFIG, "system": "You are terse.", "tools": TOOLS}, "change")
    session.append("todo/write", {"todos": []})
    assert changed_views(CONTEXT_BREAKDOWN_UNIT, state, session.events[-2:]) == []

    # A system-less, tool-less envelope prices back to zero.
    append_header(session, {"config": CONFIG}, "change")
    assert view(CONTEXT_BREAKDOWN_UNIT, session) == {"systemTokens": 0, "toolsTokens": 0, "messageTokens": 0}


def test_context_breakdown__prices_an_envelope_through_its_canonical_form() -> None:
    """Beyond the original's cases: an empty system prompt and an empty tool list are no parts at all
    (canonical header), so they price to 0, not to a bare role or block overhead."""
    session = new_session()
    append_header(session, {"config": CONFIG, "system": "", "tools": []}, "initial")
    assert view(CONTEXT_BREAKDOWN_UNIT, session) == {"systemTokens": 0, "toolsTokens": 0, "messageTokens": 0}


def test_context_breakdown__sums_surface_appends_and_skips_an_empty_content_assistant_message() -> None:
    """'abcd' prices to 9 (1 text + 4 block + 4 role); a usage-only assistant message derives to nothing."""
    session = new_session()
    append_user(session, "abcd")
    start_step(session, 1, 1)
    final_usage(session, usage(9, 0), 1, 1, [])
    assert view(CONTEXT_BREAKDOWN_UNIT, session)["messageTokens"] == 9


def test_context_breakdown__shrinks_the_message_figure_when_a_metered_replacement_compacts_the_surface() -> None:
    """After a metered replace of the whole surface the figure is exactly the summary's price."""
    session = new_session()
    first = append_user(session, "before compaction, a longer message")
    second = append_user(session, "and a second entry")
    append_summary_meter(session, first, second)
    replace_with(session, "summary", first, second, [first, second])
    summary = derive_event_message(session.events[-1])
    assert view(CONTEXT_BREAKDOWN_UNIT, session)["messageTokens"] == estimate_message(summary)


def test_context_breakdown__keeps_the_message_figure_equal_to_the_service_result_across_appends_and_a_compaction() -> (
    None
):
    """The composition figure and the meter's surface total agree at every step, compaction included."""
    session = new_session()

    def agree() -> int:
        message_tokens = view(CONTEXT_BREAKDOWN_UNIT, session)["messageTokens"]
        assert message_tokens == surface_tokens(session)
        return message_tokens

    append_header(session, {"config": CONFIG, "system": "You are terse.", "tools": TOOLS}, "initial")
    assert agree() == 0

    question = append_user(session, "a first question, long enough to price above zero")
    start_step(session, 1, 1)
    answer = append_assistant(session, "a considered answer", usage(40, 7), 1, 1)
    session.append("step/end", {"turn": 1, "step": 1})
    grown = agree()
    assert grown > 0

    append_summary_meter(session, question, answer)
    # The armed shadow price alone must not move the published figure.
    assert agree() == grown
    replace_with(session, "summary", question, answer, [question, answer])
    assert agree() < grown


def test_context_breakdown__folds_a_replacement_without_a_claim_at_zero_and_fails_on_a_mismatched_claim() -> None:
    """No claim: delta 0. A claim for another range: refused. An expired claim: 0. The exact claim: priced."""
    message = user_message("x")

    def replace(start: int, end: int) -> Event:
        return Event(
            type="user/message",
            seq=9,
            time=0,
            data=message,
            surfaceOp={"op": "replace", "start": start, "end": end},
            sourceEventSeqs=[start, end],
        )

    def append(seq: int) -> Event:
        return Event(type="user/message", seq=seq, time=0, data=message, surfaceOp="append")

    def meter(start: int, end: int, seq: int) -> Event:
        data = {"shadowedRange": {"start": start, "end": end}, "shadowedSeqs": [start, end], "shadowedTokenCount": 5}
        return Event(type="compaction/prune", seq=seq, time=0, data=data)

    unit = CONTEXT_BREAKDOWN_UNIT
    state = unit.fold([append(1), append(3)])
    base = unit.view(state)["messageTokens"]
    # No metering event: the replacement contributes zero instead of failing.
    assert unit.view(unit.reduce(state, replace(1, 3)))["messageTokens"] == base
    # An adjacent claim for another range contradicts the replacement.
    mismatched = unit.reduce(state, meter(1, 1, 8))
    with pytest.raises(CompactionStateError, match=r"^token surface: replace at seq 9 over range 1-3 has no adjacent"):
        unit.reduce(mismatched, replace(1, 3))
    # A claim expires after one intervening event, so the replacement's delta is zero.
    expired = unit.fold_from(state, [meter(1, 3, 8), Event(type="todo/write", seq=9, time=0, data={"todos": []})])
    assert unit.view(unit.reduce(expired, replace(1, 3)))["messageTokens"] == base
    # The armed claim prices exactly the next event's matching replacement.
    armed = unit.reduce(state, meter(1, 3, 8))
    assert unit.view(unit.reduce(armed, replace(1, 3)))["messageTokens"] == base - 5 + estimate_message(message)


def test_context_breakdown__keeps_the_persisted_checkpoint_o1_as_the_surface_grows_and_compacts() -> None:
    """The state is three numbers however long the surface gets, and again after a compaction."""
    session = new_session()

    def state_keys() -> list[str]:
        state: ContextBreakdownState = checkpoint_round_trip(
            CONTEXT_BREAKDOWN_UNIT, CONTEXT_BREAKDOWN_UNIT.fold(session.events)
        )
        return sorted(state)

    first = append_user(session, "the first of many messages")
    for index in range(24):
        append_user(session, f"message number {index} with some text")
    last = append_user(session, "the last message before compaction")
    assert state_keys() == ["messageTokens", "systemTokens", "toolsTokens"]

    shadowed = append_summary_meter(session, first, last)
    replace_with(session, "summary", first, last, shadowed)
    assert state_keys() == ["messageTokens", "systemTokens", "toolsTokens"]
    assert view(CONTEXT_BREAKDOWN_UNIT, session)["messageTokens"] == surface_tokens(session)


def test_context_breakdown__restores_from_a_json_checkpoint() -> None:
    """The state survives a JSON checkpoint row at stateVersion 2 and serves the same view from it."""
    session = new_session()
    append_header(session, {"config": CONFIG, "system": "You are terse."}, "initial")
    append_user(session, "abcd")
    restored = checkpoint_round_trip(CONTEXT_BREAKDOWN_UNIT, CONTEXT_BREAKDOWN_UNIT.fold(session.events))
    assert CONTEXT_BREAKDOWN_UNIT.state_version == 2
    assert CONTEXT_BREAKDOWN_UNIT.view(restored) == {
        "systemTokens": estimate_system_tokens({"config": CONFIG, "system": "You are terse."}),
        "toolsTokens": 0,
        "messageTokens": 9,
    }


# --- shared estimator (the same spec file's second describe block) ------------------------------------


def test_shared_estimator__prices_every_content_block_shape_under_the_fixed_heuristic() -> None:
    """text, reasoning, tool-call, tool-result and an unknown block, each at the original's price."""
    assert estimate_content([{"type": "text", "text": "abcd"}]) == 5
    assert estimate_content([{"type": "reasoning", "text": "abcdefgh"}]) == 6
    assert estimate_content([{"type": "tool-call", "id": "c", "name": "bash", "arguments": '{"a":1}'}]) == 7
    assert (
        estimate_content([{"type": "tool-result", "toolCallId": "c", "content": [{"type": "text", "text": "abcd"}]}])
        == 9
    )
    unknown = {"type": "mystery", "payload": "abc"}
    assert estimate_content([unknown]) == 4 + -(-len('{"type":"mystery","payload":"abc"}') // 4)


def test_shared_estimator__prices_envelope_parts_independently_and_absent_parts_to_zero() -> None:
    """System and tools are priced separately; a missing part costs nothing."""
    tools_json = '[{"name":"bash","description":"run a command","parameters":{"type":"object","properties":{}}}]'
    tools_price = -(-len(tools_json) // 4) + 4
    assert estimate_system_tokens(None) == 0
    assert estimate_system_tokens({"config": CONFIG}) == 0
    assert estimate_system_tokens({"config": CONFIG, "system": "abcdefgh"}) == 6
    assert estimate_tools_tokens(None) == 0
    assert estimate_tools_tokens({"config": CONFIG, "tools": []}) == 0
    assert estimate_tools_tokens({"config": CONFIG, "tools": TOOLS}) == tools_price
    assert estimate_header(None) == 0
    assert estimate_header({"config": CONFIG, "system": "abcdefgh", "tools": TOOLS}) == 6 + tools_price


# --- beyond the original: the state schemas -------------------------------------------------------


@pytest.mark.parametrize(
    ("unit", "row"),
    [
        (TOKEN_USAGE_UNIT, {"totals": ZERO}),
        (TOKEN_USAGE_UNIT, {"totals": {**ZERO, "outputTokens": -1}, "last": None}),
        (TOKEN_USAGE_UNIT, {"totals": ZERO, "last": None, "extra": 1}),
        (CONTEXT_PRESSURE_UNIT, {"surfaceTokens": 0, "contextWindow": 0}),
        (CONTEXT_PRESSURE_UNIT, {"surfaceTokens": True}),
        (CONTEXT_PRESSURE_UNIT, {"surfaceTokens": 0, "pressureTokens": None}),
        (CONTEXT_BREAKDOWN_UNIT, {"systemTokens": 0, "toolsTokens": 0, "messageTokens": 1.5}),
        (CONTEXT_BREAKDOWN_UNIT, {"systemTokens": 0, "toolsTokens": 0, "messageTokens": 0, "claim": {"start": 1}}),
    ],
)
def test_state_schema__refuses_a_checkpoint_row_the_reducer_could_not_continue_from(
    unit: ProjectionUnit[Any, Any], row: dict[str, Any]
) -> None:
    """Rows are shortcuts, never authorities: a malformed one is refused, not folded on."""
    with pytest.raises(CompactionStateError, match=f'^projection "{unit.key}" checkpoint state is malformed'):
        unit.parse_state(row)


def test_units__keys_versions_and_visibility_are_the_originals() -> None:
    """Keys, state versions and the client-visible flag (every token-meter unit has a wire view)."""
    assert [(u.key, u.state_version, u.client_visible) for u in TOKEN_METER_UNITS] == [
        ("tokenUsage", 1, True),
        ("contextPressure", 4, True),
        ("contextBreakdown", 2, True),
    ]


# --- property: random valid logs -------------------------------------------------------------------

_text = st.text(alphabet=st.characters(codec="utf-8"), max_size=40)
_count = st.integers(min_value=0, max_value=5_000)
_optional_count = st.none() | _count

_op = st.one_of(
    st.tuples(st.just("user"), _text),
    st.tuples(
        st.just("step"),
        _text,
        st.tuples(_count, _count, _optional_count, _optional_count),
        st.booleans(),  # a usage chunk
        st.sampled_from(["final", "restated", "none"]),  # the final message's usage
        st.booleans(),  # a new turn
    ),
    st.tuples(st.just("context"), st.none() | st.integers(min_value=1, max_value=10**6)),
    st.tuples(st.just("header"), st.none() | _text, st.booleans()),
    st.tuples(st.just("todo")),
    st.tuples(
        st.just("compact"),
        st.integers(min_value=0),
        st.integers(min_value=0),
        st.sampled_from(["summary", "prune", "unmetered"]),
        _text,
    ),
)


def build_log(ops: list[tuple[Any, ...]]) -> tuple[Session, bool]:
    """Append the ops to a fresh session; also say whether every replacement was metered."""
    session = new_session()
    turn, step, metered = 0, 0, True
    for op in ops:
        kind = op[0]
        if kind == "user":
            append_user(session, op[1])
        elif kind == "step":
            _, text, (inp, out, read, write), chunk, final, new_turn = op
            turn, step = (turn + 1, 1) if new_turn or turn == 0 else (turn, step + 1)
            sample = usage(inp, out, cache_read=read, cache_write=write)
            start_step(session, turn, step)
            if text:  # a streamed token chunk, which no token-meter unit reads
                session.append("assistant/chunk", {"turn": turn, "step": step, "chunk": text_delta(0, text)})
            if chunk:
                usage_chunk(session, sample, turn, step)
            if final != "none":
                final_sample = sample if final == "restated" else usage(inp + 1, out, cache_read=read)
                append_assistant(session, text, final_sample, turn, step)
            session.append("step/end", {"turn": turn, "step": step})
        elif kind == "context":
            record_context(session, "model", op[1])
        elif kind == "header":
            header: dict[str, Any] = {"config": CONFIG}
            if op[1] is not None:
                header["system"] = op[1]
            if op[2]:
                header["tools"] = TOOLS
            append_header(session, header, "change")
        elif kind == "todo":
            session.append("todo/write", {"todos": []})
        else:
            nodes = list(session.surface.nodes)
            if not nodes:
                continue
            i, j = sorted((op[1] % len(nodes), op[2] % len(nodes)))
            start, end, shadowed = nodes[i], nodes[j], nodes[i : j + 1]
            if op[3] == "unmetered":
                metered = False
            else:
                price = sum(node_price(session.events[seq]) for seq in shadowed)
                data = {"shadowedRange": {"start": start, "end": end}, "shadowedSeqs": shadowed}
                if op[3] == "prune":
                    session.append("compaction/prune", {**data, "shadowedTokenCount": price})
                else:
                    append_summary_meter(session, start, end)
            replace_with(session, op[4] or "summary", start, end, shadowed)
    return session, metered


def _concerns(unit: ProjectionUnit[Any, Any], state: Any, event: Event) -> bool:
    """Whether ``event`` can change ``unit``'s state (everything else must return the state itself)."""
    etype = event.type
    is_sample = etype == "assistant/message" or (etype == "assistant/chunk" and event.data["chunk"]["type"] == "usage")
    if unit is TOKEN_USAGE_UNIT:
        return is_sample
    on_surface = etype in ("user/message", "assistant/message", "tool/result")
    shadow_price = etype in ("compaction/summary", "compaction/prune")
    own = "request/context" if unit is CONTEXT_PRESSURE_UNIT else "request/header"
    return "claim" in state or on_surface or shadow_price or is_sample or etype == own


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(_op, max_size=25), split=st.integers(min_value=0))
def test_property__folding_event_by_event_equals_one_fold_and_ignored_events_keep_the_identical_state(
    ops: list[tuple[Any, ...]], split: int
) -> None:
    """For random valid logs: stepwise = whole fold = fold resumed from a JSON checkpoint at any point;
    an event that does not concern a unit returns the very same state object; on fully metered logs the
    surface figures equal a from-scratch repricing of the surface at every event boundary.
    """
    session, metered = build_log(ops)
    events = session.events
    cut = split % (len(events) + 1)
    for unit in TOKEN_METER_UNITS:
        generic: ProjectionUnit[Any, Any] = unit
        state = generic.initial()
        for event in events:
            nxt = generic.reduce(state, event)
            if not _concerns(generic, state, event):
                assert nxt is state, (unit.key, dict(event))
            state = nxt
        assert state == generic.fold(events)
        resumed = generic.fold_from(checkpoint_round_trip(generic, generic.fold(events[:cut])), events[cut:])
        assert resumed == state
        assert generic.view(resumed) == generic.view(state)
        json.dumps(generic.view(state))

    if metered:
        breakdown = CONTEXT_BREAKDOWN_UNIT.initial()
        pressure = CONTEXT_PRESSURE_UNIT.initial()
        sample: tuple[int, int] | None = None  # (prompt-side pressure, surface before the sampling event)
        window: int | None = None
        for event in events:
            if event.type == "request/context":
                window = event.data.get("contextWindow")
            reported = event.data.get("usage") if event.type == "assistant/message" else None
            if event.type == "assistant/chunk" and event.data["chunk"]["type"] == "usage":
                reported = event.data["chunk"]["usage"]
            if reported is not None:
                before = session.at(event.seq - 1).surface.nodes if event.seq else []
                prompt = reported["inputTokens"] + reported.get("cacheReadTokens", 0)
                sample = (prompt + reported.get("cacheWriteTokens", 0), sum(node_price(events[n]) for n in before))
            breakdown = CONTEXT_BREAKDOWN_UNIT.reduce(breakdown, event)
            pressure = CONTEXT_PRESSURE_UNIT.reduce(pressure, event)
            at = session.at(event.seq)
            expected = sum(node_price(events[seq]) for seq in at.surface.nodes)
            assert breakdown["messageTokens"] == expected
            assert pressure["surfaceTokens"] == expected
            served = CONTEXT_PRESSURE_UNIT.view(pressure)
            assert served.get("contextWindow") == window
            if sample is None:
                assert "pressureTokens" not in served and "projectedTokens" not in served
            else:
                assert served["pressureTokens"] == sample[0]
                assert served["projectedTokens"] == max(0, sample[0] + expected - sample[1])
            header = at.request_header()
            assert breakdown["systemTokens"] == estimate_system_tokens(header)
            assert breakdown["toolsTokens"] == estimate_tools_tokens(header)


@settings(max_examples=100, deadline=None)
@given(ops=st.lists(_op, max_size=25))
def test_property__token_usage_totals_are_the_sum_of_each_steps_newest_sample(ops: list[tuple[Any, ...]]) -> None:
    """Independently of the reducer: per (turn, step) the newest sample wins, and the totals are their sum."""
    session, _ = build_log(ops)
    newest: dict[tuple[int, int], dict[str, int]] = {}
    for event in session.events:
        data = event.data
        sample: Any = None
        if event.type == "assistant/chunk" and data["chunk"]["type"] == "usage":
            sample = data["chunk"]["usage"]
        elif event.type == "assistant/message":
            sample = data.get("usage")
        if sample is not None:
            newest[(data["turn"], data["step"])] = {
                "uncachedInputTokens": sample["inputTokens"],
                "outputTokens": sample["outputTokens"],
                "cacheReadTokens": sample.get("cacheReadTokens", 0),
                "cacheWriteTokens": sample.get("cacheWriteTokens", 0),
            }
    expected = {key: sum(buckets[key] for buckets in newest.values()) for key in ZERO}
    assert view(TOKEN_USAGE_UNIT, session) == expected
